//! The `rbac.authorization.k8s.io/v1` types the authorizer reads: `Role` (also the shape of
//! `ClusterRole`), `RoleBinding` (also `ClusterRoleBinding`), `PolicyRule`, `Subject`,
//! `RoleRef`. Unknown fields are ignored; `null` lists read as empty.

use listwatch_api::ObjectMeta;
use listwatch_runtime::HasMetadata;
use serde::{Deserialize, Deserializer, Serialize};

/// The API group of the RBAC resources.
pub const GROUP: &str = "rbac.authorization.k8s.io";

fn null_as_empty<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// One rule of a role: verbs on resources, or verbs on non-resource paths.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    /// Verbs, or `*`.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub verbs: Vec<String>,
    /// API groups (`""` is the core group), or `*`.
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub api_groups: Vec<String>,
    /// Resources (`pods`, `pods/status`, `*/scale`), or `*`.
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resources: Vec<String>,
    /// Object names the rule is limited to; empty means all.
    #[serde(
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resource_names: Vec<String>,
    /// Non-resource paths (`/healthz`, `/apis/*`), or `*`.
    #[serde(
        rename = "nonResourceURLs",
        default,
        deserialize_with = "null_as_empty",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

fn strings<I: IntoIterator<Item = S>, S: Into<String>>(i: I) -> Vec<String> {
    i.into_iter().map(Into::into).collect()
}

impl PolicyRule {
    /// A rule on resources.
    pub fn resources<A, B, C, S1, S2, S3>(verbs: A, api_groups: B, resources: C) -> Self
    where
        A: IntoIterator<Item = S1>,
        B: IntoIterator<Item = S2>,
        C: IntoIterator<Item = S3>,
        S1: Into<String>,
        S2: Into<String>,
        S3: Into<String>,
    {
        Self {
            verbs: strings(verbs),
            api_groups: strings(api_groups),
            resources: strings(resources),
            ..Self::default()
        }
    }

    /// A rule on non-resource paths.
    pub fn non_resource<A, B, S1, S2>(verbs: A, urls: B) -> Self
    where
        A: IntoIterator<Item = S1>,
        B: IntoIterator<Item = S2>,
        S1: Into<String>,
        S2: Into<String>,
    {
        Self {
            verbs: strings(verbs),
            non_resource_urls: strings(urls),
            ..Self::default()
        }
    }

    /// Limits the rule to these names.
    #[must_use]
    pub fn names<A: IntoIterator<Item = S>, S: Into<String>>(mut self, names: A) -> Self {
        self.resource_names = strings(names);
        self
    }
}

impl std::fmt::Display for PolicyRule {
    /// Upstream's compact form, e.g. `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[String]| {
            v.iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut parts = Vec::new();
        if !self.api_groups.is_empty() {
            parts.push(format!("APIGroups:[{}]", list(&self.api_groups)));
        }
        if !self.resources.is_empty() {
            parts.push(format!("Resources:[{}]", list(&self.resources)));
        }
        if !self.resource_names.is_empty() {
            parts.push(format!("ResourceNames:[{}]", list(&self.resource_names)));
        }
        if !self.non_resource_urls.is_empty() {
            parts.push(format!(
                "NonResourceURLs:[{}]",
                list(&self.non_resource_urls)
            ));
        }
        parts.push(format!("Verbs:[{}]", list(&self.verbs)));
        write!(f, "{{{}}}", parts.join(", "))
    }
}

/// A `Role` or `ClusterRole`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Role {
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The rules.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub rules: Vec<PolicyRule>,
    /// ClusterRoles only: the selectors whose roles' rules this role aggregates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregation_rule: Option<AggregationRule>,
}

/// A ClusterRole's aggregation rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AggregationRule {
    /// A ClusterRole matching any of these label selectors contributes its rules.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub cluster_role_selectors: Vec<LabelSelector>,
}

/// A structured label selector (`matchLabels` and `matchExpressions`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must be equal.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub match_labels: std::collections::BTreeMap<String, String>,
    /// Expressions that must hold.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One expression of a [`LabelSelector`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LabelSelectorRequirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`.
    pub operator: String,
    /// Values for `In` / `NotIn`.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` match. An empty selector matches everything (as upstream's
    /// `LabelSelectorAsSelector`); an unknown operator matches nothing.
    pub fn matches(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let got = labels.get(&e.key);
                match e.operator.as_str() {
                    "In" => got.is_some_and(|v| e.values.contains(v)),
                    "NotIn" => got.is_none_or(|v| !e.values.contains(v)),
                    "Exists" => got.is_some(),
                    "DoesNotExist" => got.is_none(),
                    _ => false,
                }
            })
    }
}

impl HasMetadata for Role {
    type Metadata = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

/// Who a binding grants to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    /// `rbac.authorization.k8s.io` for users and groups, `""` for ServiceAccounts.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// The name.
    pub name: String,
    /// ServiceAccounts: their namespace (defaults to the binding's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

impl Subject {
    /// A `User` subject.
    pub fn user(name: &str) -> Self {
        Self {
            kind: "User".into(),
            api_group: GROUP.into(),
            name: name.into(),
            namespace: String::new(),
        }
    }

    /// A `Group` subject.
    pub fn group(name: &str) -> Self {
        Self {
            kind: "Group".into(),
            api_group: GROUP.into(),
            name: name.into(),
            namespace: String::new(),
        }
    }

    /// A `ServiceAccount` subject.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            kind: "ServiceAccount".into(),
            api_group: String::new(),
            name: name.into(),
            namespace: namespace.into(),
        }
    }
}

/// The role a binding refers to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleRef {
    /// `rbac.authorization.k8s.io`.
    #[serde(default)]
    pub api_group: String,
    /// `Role` or `ClusterRole`.
    pub kind: String,
    /// The role's name.
    pub name: String,
}

impl RoleRef {
    /// A reference to a ClusterRole.
    pub fn cluster_role(name: &str) -> Self {
        Self {
            api_group: GROUP.into(),
            kind: "ClusterRole".into(),
            name: name.into(),
        }
    }

    /// A reference to a Role in the binding's namespace.
    pub fn role(name: &str) -> Self {
        Self {
            api_group: GROUP.into(),
            kind: "Role".into(),
            name: name.into(),
        }
    }
}

/// A `RoleBinding` or `ClusterRoleBinding`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleBinding {
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Who is granted.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub subjects: Vec<Subject>,
    /// What is granted.
    #[serde(default)]
    pub role_ref: RoleRef,
}

impl HasMetadata for RoleBinding {
    type Metadata = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_read_null_lists_and_unknown_fields() {
        let r: Role = serde_json::from_str(
            r#"{"kind":"ClusterRole","metadata":{"name":"admin"},"rules":null,
                "aggregationRule":{"clusterRoleSelectors":[{"matchLabels":{"a":"b"}}]},"x":1}"#,
        )
        .unwrap();
        assert!(r.rules.is_empty());
        assert_eq!(
            r.aggregation_rule.unwrap().cluster_role_selectors[0].match_labels["a"],
            "b"
        );
        let b: RoleBinding = serde_json::from_str(
            r#"{"metadata":{"name":"b","namespace":"x"},"subjects":null,"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"r"}}"#,
        )
        .unwrap();
        assert!(b.subjects.is_empty());
        assert_eq!(b.role_ref, RoleRef::role("r"));
    }

    #[test]
    fn rules_print_like_upstream() {
        let r = PolicyRule::resources(["get"], [""], ["pods"]);
        assert_eq!(
            r.to_string(),
            r#"{APIGroups:[""], Resources:["pods"], Verbs:["get"]}"#
        );
    }

    #[test]
    fn label_selectors_match() {
        let labels = [("a".to_owned(), "1".to_owned())].into_iter().collect();
        let sel = |json: &str| serde_json::from_str::<LabelSelector>(json).unwrap();
        assert!(sel(r#"{"matchLabels":{"a":"1"}}"#).matches(&labels));
        assert!(!sel(r#"{"matchLabels":{"a":"2"}}"#).matches(&labels));
        assert!(
            sel(r#"{"matchExpressions":[{"key":"a","operator":"In","values":["1","2"]}]}"#)
                .matches(&labels)
        );
        assert!(
            sel(r#"{"matchExpressions":[{"key":"b","operator":"DoesNotExist"}]}"#).matches(&labels)
        );
        assert!(!sel(r#"{"matchExpressions":[{"key":"a","operator":"Bogus"}]}"#).matches(&labels));
        assert!(sel("{}").matches(&labels));
    }
}
