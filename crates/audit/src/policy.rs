//! The audit policy (`audit.k8s.io/v1` `Policy`): ordered rules, the first that matches a
//! request decides its level and the stages left out.

use std::path::Path;

use listwatch_auth::{Attributes, UserInfo};
use serde::Deserialize;

use crate::event::Stage;

/// How much of a request is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Default)]
pub enum Level {
    /// Nothing.
    #[default]
    None,
    /// User, verb, object reference, response status, timestamps.
    Metadata,
    /// Metadata and the request body.
    Request,
    /// Upstream also records the response body; this server does not, and records such a
    /// request at `Request` level (its events say `"level": "Request"`, see
    /// [`Level::applied`]).
    RequestResponse,
}

impl Level {
    /// The level an event is actually recorded at: `RequestResponse` is recorded as
    /// `Request` (no response bodies here), every other level as itself.
    pub fn applied(self) -> Self {
        match self {
            Level::RequestResponse => Level::Request,
            other => other,
        }
    }

    /// Upstream's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// Why a policy file is unusable.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// Unreadable.
    #[error("reading audit policy {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not a policy.
    #[error("audit policy: {0}")]
    Parse(String),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupResources {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    level: Level,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyDoc {
    #[serde(default)]
    kind: String,
    #[serde(default)]
    rules: Vec<Rule>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
}

/// An audit policy.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Vec<Rule>,
    omit_stages: Vec<Stage>,
}

impl Default for Policy {
    /// Everything at `Metadata` (this server's default when `--audit-log-path` is given
    /// without `--audit-policy-file`).
    fn default() -> Self {
        Self::everything(Level::Metadata)
    }
}

impl Policy {
    /// One level for every request.
    pub fn everything(level: Level) -> Self {
        Self {
            rules: vec![Rule {
                level,
                users: vec![],
                user_groups: vec![],
                verbs: vec![],
                resources: vec![],
                namespaces: vec![],
                non_resource_urls: vec![],
                omit_stages: vec![],
            }],
            omit_stages: vec![],
        }
    }

    /// Loads a policy file (YAML or JSON).
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let data = std::fs::read(path).map_err(|source| PolicyError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_yaml(&data)
    }

    /// Parses a policy document.
    pub fn from_yaml(data: &[u8]) -> Result<Self, PolicyError> {
        let doc: PolicyDoc =
            serde_yaml::from_slice(data).map_err(|e| PolicyError::Parse(e.to_string()))?;
        if !doc.kind.is_empty() && doc.kind != "Policy" {
            return Err(PolicyError::Parse(format!(
                "kind {:?} is not a Policy",
                doc.kind
            )));
        }
        if doc.rules.is_empty() {
            return Err(PolicyError::Parse("the policy has no rules".into()));
        }
        Ok(Self {
            rules: doc.rules,
            omit_stages: doc.omit_stages,
        })
    }

    /// The level of a request and the stages not to record.
    pub fn level(&self, user: &UserInfo, attrs: &Attributes) -> (Level, Vec<Stage>) {
        for r in &self.rules {
            if rule_matches(r, user, attrs) {
                let mut omit = self.omit_stages.clone();
                omit.extend(r.omit_stages.iter().copied());
                return (r.level, omit);
            }
        }
        (Level::None, Vec::new())
    }
}

fn rule_matches(r: &Rule, user: &UserInfo, a: &Attributes) -> bool {
    if !r.users.is_empty() && !r.users.contains(&user.name) {
        return false;
    }
    if !r.user_groups.is_empty() && !r.user_groups.iter().any(|g| user.in_group(g)) {
        return false;
    }
    if !r.verbs.is_empty() && !r.verbs.contains(&a.verb) {
        return false;
    }
    if !r.namespaces.is_empty() || !r.resources.is_empty() {
        return a.resource_request && resource_matches(r, a);
    }
    if !r.non_resource_urls.is_empty() {
        return !a.resource_request
            && r.non_resource_urls.iter().any(|u| {
                u == &a.path || (u.ends_with('*') && a.path.starts_with(u.trim_end_matches('*')))
            });
    }
    true
}

fn resource_matches(r: &Rule, a: &Attributes) -> bool {
    if !r.namespaces.is_empty() && !r.namespaces.contains(&a.namespace) {
        return false;
    }
    if r.resources.is_empty() {
        return true;
    }
    let combined = a.combined_resource();
    r.resources.iter().any(|gr| {
        gr.group == a.api_group
            && (gr.resources.is_empty()
                || gr.resources.iter().any(|res| {
                    (gr.resource_names.is_empty() || gr.resource_names.contains(&a.name))
                        && (res == &combined
                            || res == "*"
                            || (!a.subresource.is_empty()
                                && res.strip_prefix("*/") == Some(a.subresource.as_str()))
                            || res.strip_suffix("/*") == Some(a.resource.as_str()))
                }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
- level: None
  nonResourceURLs: ["/healthz*", "/version"]
- level: Request
  verbs: [create, update, patch]
  resources:
  - group: ""
    resources: ["configmaps", "pods/*"]
- level: Metadata
  namespaces: [kube-system]
- level: RequestResponse
  userGroups: [admins]
"#;

    #[test]
    fn first_matching_rule_decides() {
        let p = Policy::from_yaml(POLICY.as_bytes()).unwrap();
        let alice = UserInfo::new("alice", ["system:authenticated"]);
        let admin = UserInfo::new("bob", ["admins"]);
        let proxy = UserInfo::new("system:kube-proxy", [""; 0]);
        let cm = Attributes::resource("create", "", "configmaps", "demo");
        assert_eq!(p.level(&alice, &cm).0, Level::Request);
        assert_eq!(p.level(&alice, &cm).1, [Stage::RequestReceived]);
        assert_eq!(p.level(&proxy, &cm).0, Level::None);
        let status = Attributes::resource("update", "", "pods", "demo").with_subresource("status");
        assert_eq!(p.level(&alice, &status).0, Level::Request);
        let get = Attributes::resource("get", "", "configmaps", "kube-system");
        assert_eq!(p.level(&alice, &get).0, Level::Metadata);
        assert_eq!(
            p.level(&alice, &Attributes::resource("get", "", "pods", "x"))
                .0,
            Level::None
        );
        assert_eq!(
            p.level(&admin, &Attributes::non_resource("get", "/healthz/ping"))
                .0,
            Level::None
        );
        assert_eq!(
            p.level(&admin, &Attributes::non_resource("get", "/metrics"))
                .0,
            Level::RequestResponse
        );
    }

    #[test]
    fn bad_policies_are_refused() {
        assert!(Policy::from_yaml(b"kind: Pod\nrules: [{level: None}]").is_err());
        assert!(Policy::from_yaml(b"kind: Policy\nrules: []").is_err());
        assert!(Policy::from_yaml(b"kind: Policy\nrules: [{level: Loud}]").is_err());
        assert!(Policy::from_yaml(b"[1, 2").is_err());
    }
}
