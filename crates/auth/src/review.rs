//! The review APIs, as pure functions over request bodies: `SelfSubjectAccessReview` and
//! `SelfSubjectRulesReview` (`kubectl auth can-i`, `can-i --list`), `SubjectAccessReview`
//! and `LocalSubjectAccessReview` (for admins), `SelfSubjectReview` (`kubectl auth whoami`).
//!
//! Each takes the decoded body, answers with the same object plus its `status`, and never
//! stores anything (upstream's reviews are create-only virtual resources).

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::authz::{Attributes, Authorizer, Decision, Rules};
use crate::rbac::PolicyRule;
use crate::user::UserInfo;

/// A review body that cannot be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// 400: not a JSON object of the expected shape.
    #[error("{0}")]
    BadRequest(String),
    /// 422: the spec is invalid (the message names the field).
    #[error("{0}")]
    Invalid(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResourceAttributes {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    verb: String,
    #[serde(default)]
    group: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    name: String,
}

#[derive(Debug, Default, Deserialize)]
struct NonResourceAttributes {
    #[serde(default)]
    path: String,
    #[serde(default)]
    verb: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AccessSpec {
    #[serde(default)]
    resource_attributes: Option<ResourceAttributes>,
    #[serde(default)]
    non_resource_attributes: Option<NonResourceAttributes>,
    #[serde(default)]
    user: String,
    #[serde(default)]
    groups: Option<Vec<String>>,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    extra: Option<std::collections::BTreeMap<String, Vec<String>>>,
}

fn spec_of<T: for<'de> Deserialize<'de> + Default>(
    body: &Map<String, Value>,
) -> Result<T, ReviewError> {
    match body.get("spec") {
        None | Some(Value::Null) => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone())
            // serde quotes a mistyped string whole: cut it.
            .map_err(|e| {
                ReviewError::BadRequest(format!(
                    "spec: {}",
                    listwatch_api::echo::echo(&e.to_string())
                ))
            }),
    }
}

fn object(body: Value) -> Result<Map<String, Value>, ReviewError> {
    match body {
        Value::Object(m) => Ok(m),
        _ => Err(ReviewError::BadRequest(
            "the body of the request must be a JSON object".into(),
        )),
    }
}

fn answer(mut body: Map<String, Value>, kind: &str, api_version: &str, status: Value) -> Value {
    body.insert("kind".into(), json!(kind));
    body.insert("apiVersion".into(), json!(api_version));
    let meta = body.entry("metadata").or_insert_with(|| json!({}));
    if let Value::Object(m) = meta {
        m.entry("creationTimestamp").or_insert(Value::Null);
    }
    body.insert("status".into(), status);
    Value::Object(body)
}

fn attributes(spec: &AccessSpec, kind: &str) -> Result<Attributes, ReviewError> {
    match (&spec.resource_attributes, &spec.non_resource_attributes) {
        (Some(r), None) => Ok(Attributes {
            verb: r.verb.clone(),
            resource_request: true,
            namespace: r.namespace.clone(),
            api_group: r.group.clone(),
            api_version: r.version.clone(),
            resource: r.resource.clone(),
            subresource: r.subresource.clone(),
            name: r.name.clone(),
            path: String::new(),
        }),
        (None, Some(n)) => Ok(Attributes::non_resource(&n.verb, &n.path)),
        _ => Err(ReviewError::Invalid(format!(
            "{kind}.authorization.k8s.io \"\" is invalid: spec.resourceAttributes: Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified"
        ))),
    }
}

fn access_status(decision: &Decision) -> Value {
    let mut s = Map::new();
    s.insert("allowed".into(), json!(decision.allowed()));
    if matches!(decision, Decision::Deny(_)) {
        s.insert("denied".into(), json!(true));
    }
    if !decision.reason().is_empty() {
        s.insert("reason".into(), json!(decision.reason().to_string()));
    }
    Value::Object(s)
}

/// `SelfSubjectAccessReview`: may the requesting user do what the spec says?
pub fn self_subject_access_review(
    authz: &dyn Authorizer,
    user: &UserInfo,
    body: Value,
) -> Result<Value, ReviewError> {
    let body = object(body)?;
    let spec: AccessSpec = spec_of(&body)?;
    let attrs = attributes(&spec, "SelfSubjectAccessReview")?;
    let decision = authz.authorize(user, &attrs);
    Ok(answer(
        body,
        "SelfSubjectAccessReview",
        "authorization.k8s.io/v1",
        access_status(&decision),
    ))
}

/// `SubjectAccessReview` (`namespace` `None`) or `LocalSubjectAccessReview` (the
/// namespace of its path, which the spec must match): may the user of the spec do it?
pub fn subject_access_review(
    authz: &dyn Authorizer,
    body: Value,
    namespace: Option<&str>,
) -> Result<Value, ReviewError> {
    let kind = if namespace.is_some() {
        "LocalSubjectAccessReview"
    } else {
        "SubjectAccessReview"
    };
    let body = object(body)?;
    let spec: AccessSpec = spec_of(&body)?;
    let attrs = attributes(&spec, kind)?;
    let groups = spec.groups.clone().unwrap_or_default();
    if spec.user.is_empty() && groups.is_empty() {
        return Err(ReviewError::Invalid(format!(
            "{kind}.authorization.k8s.io \"\" is invalid: spec.user: Invalid value: \"\": at least one of user or group must be specified"
        )));
    }
    if let Some(ns) = namespace {
        if !attrs.resource_request || attrs.namespace != ns {
            return Err(ReviewError::Invalid(format!(
                "{kind}.authorization.k8s.io \"\" is invalid: spec.resourceAttributes.namespace: Invalid value: {:?}: must match metadata.namespace",
                attrs.namespace
            )));
        }
    }
    let user = UserInfo {
        name: spec.user.clone(),
        uid: spec.uid.clone(),
        groups,
        extra: spec.extra.clone().unwrap_or_default(),
    };
    let decision = authz.authorize(&user, &attrs);
    Ok(answer(
        body,
        kind,
        "authorization.k8s.io/v1",
        access_status(&decision),
    ))
}

fn rule_json(r: &PolicyRule) -> Value {
    let mut m = Map::new();
    m.insert("verbs".into(), json!(r.verbs));
    if r.non_resource_urls.is_empty() {
        m.insert("apiGroups".into(), json!(r.api_groups));
        m.insert("resources".into(), json!(r.resources));
        if !r.resource_names.is_empty() {
            m.insert("resourceNames".into(), json!(r.resource_names));
        }
    } else {
        m.insert("nonResourceURLs".into(), json!(r.non_resource_urls));
    }
    Value::Object(m)
}

/// `SelfSubjectRulesReview`: what may the requesting user do in the spec's namespace?
pub fn self_subject_rules_review(
    authz: &dyn Authorizer,
    user: &UserInfo,
    body: Value,
) -> Result<Value, ReviewError> {
    #[derive(Debug, Default, Deserialize)]
    struct Spec {
        #[serde(default)]
        namespace: String,
    }
    let body = object(body)?;
    let spec: Spec = spec_of(&body)?;
    if spec.namespace.is_empty() {
        return Err(ReviewError::Invalid(
            "SelfSubjectRulesReview.authorization.k8s.io \"\" is invalid: spec.namespace: Required value: no namespace on request".into(),
        ));
    }
    let Rules {
        resource_rules,
        non_resource_rules,
        incomplete,
        errors,
    } = authz.rules_for(user, &spec.namespace);
    let mut status = json!({
        "resourceRules": resource_rules.iter().map(rule_json).collect::<Vec<_>>(),
        "nonResourceRules": non_resource_rules.iter().map(rule_json).collect::<Vec<_>>(),
        "incomplete": incomplete,
    });
    if !errors.is_empty() {
        status["evaluationError"] = json!(errors.join(", "));
    }
    Ok(answer(
        body,
        "SelfSubjectRulesReview",
        "authorization.k8s.io/v1",
        status,
    ))
}

/// `SelfSubjectReview`: who is the requesting user?
pub fn self_subject_review(user: &UserInfo, body: Value) -> Result<Value, ReviewError> {
    let body = object(body)?;
    let info = serde_json::to_value(user).map_err(|e| ReviewError::BadRequest(e.to_string()))?;
    Ok(answer(
        body,
        "SelfSubjectReview",
        "authentication.k8s.io/v1",
        json!({ "userInfo": info }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authz::{AlwaysDeny, PrivilegedGroups};

    #[test]
    fn access_reviews_answer_with_status() {
        let admin = UserInfo::new("root", ["system:masters"]);
        let body = json!({"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview",
            "spec":{"resourceAttributes":{"namespace":"demo","verb":"list","resource":"pods"}}});
        let out =
            self_subject_access_review(&PrivilegedGroups::default(), &admin, body.clone()).unwrap();
        assert_eq!(out["status"]["allowed"], true);
        assert_eq!(out["metadata"]["creationTimestamp"], Value::Null);
        let alice = UserInfo::new("alice", [""; 0]);
        let out =
            self_subject_access_review(&PrivilegedGroups::default(), &alice, body.clone()).unwrap();
        assert_eq!(out["status"]["allowed"], false);
        assert!(out["status"].get("denied").is_none());
        let out = self_subject_access_review(&AlwaysDeny, &admin, body).unwrap();
        assert_eq!(out["status"]["denied"], true);
        let neither = json!({"spec":{}});
        assert!(matches!(
            self_subject_access_review(&AlwaysDeny, &admin, neither),
            Err(ReviewError::Invalid(_))
        ));
        assert!(matches!(
            self_subject_access_review(&AlwaysDeny, &admin, json!([1])),
            Err(ReviewError::BadRequest(_))
        ));
    }

    #[test]
    fn subject_access_review_needs_a_subject_and_a_matching_namespace() {
        let body = json!({"spec":{"user":"root","groups":["system:masters"],
            "resourceAttributes":{"namespace":"demo","verb":"get","resource":"pods"}}});
        let out = subject_access_review(&PrivilegedGroups::default(), body.clone(), None).unwrap();
        assert_eq!(out["status"]["allowed"], true);
        assert!(
            subject_access_review(&PrivilegedGroups::default(), body.clone(), Some("demo")).is_ok()
        );
        assert!(subject_access_review(&PrivilegedGroups::default(), body, Some("other")).is_err());
        let nobody = json!({"spec":{"nonResourceAttributes":{"path":"/x","verb":"get"}}});
        assert!(subject_access_review(&PrivilegedGroups::default(), nobody, None).is_err());
    }

    #[test]
    fn rules_and_self_reviews() {
        let admin = UserInfo::new("root", ["system:masters"]);
        let out = self_subject_rules_review(
            &PrivilegedGroups::default(),
            &admin,
            json!({"spec":{"namespace":"demo"}}),
        )
        .unwrap();
        assert_eq!(out["status"]["resourceRules"][0]["verbs"], json!(["*"]));
        assert_eq!(
            out["status"]["nonResourceRules"][0]["nonResourceURLs"],
            json!(["*"])
        );
        assert!(
            self_subject_rules_review(&PrivilegedGroups::default(), &admin, json!({})).is_err()
        );
        let out = self_subject_review(
            &admin,
            json!({"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}),
        )
        .unwrap();
        assert_eq!(out["status"]["userInfo"]["username"], "root");
        assert_eq!(
            out["status"]["userInfo"]["groups"],
            json!(["system:masters"])
        );
    }
}
