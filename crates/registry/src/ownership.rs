//! Validation of the metadata the garbage collector acts on, on every create and update, as
//! upstream's `ValidateOwnerReferences` and `ValidateFinalizers` do it: every owner
//! reference names an owner completely (`apiVersion` with a version, `kind`, `name`, `uid`;
//! an Event cannot own), at most one is the controller, every finalizer is a qualified name,
//! and `orphan` and `foregroundDeletion` are never set together.
//!
//! Invariant: a stored object's owner references all identify an owner by uid, so the
//! collector never has to guess (it still reads leniently what was stored before this rule).

use serde_json::Value;

use crate::error::FieldError;

const OWNERS: &str = "metadata.ownerReferences";
const FINALIZERS: &str = "metadata.finalizers";

/// Appends to `errs` what is wrong with `metadata.ownerReferences` and `metadata.finalizers`
/// of `meta`.
pub fn validate(meta: &serde_json::Map<String, Value>, errs: &mut Vec<FieldError>) {
    owner_references(meta.get("ownerReferences"), errs);
    finalizers(meta.get("finalizers"), errs);
}

fn owner_references(refs: Option<&Value>, errs: &mut Vec<FieldError>) {
    let refs = match refs {
        None | Some(Value::Null) => return,
        Some(Value::Array(a)) => a,
        Some(other) => {
            errs.push(FieldError::invalid_raw(
                OWNERS,
                &other.to_string(),
                "must be a list",
            ));
            return;
        }
    };
    let mut controller: Option<String> = None;
    for r in refs {
        let Some(r) = r.as_object() else {
            errs.push(FieldError::invalid_raw(
                OWNERS,
                &r.to_string(),
                "must be an object",
            ));
            continue;
        };
        let field = |k: &str| -> Result<&str, ()> {
            match r.get(k) {
                None | Some(Value::Null) => Ok(""),
                Some(Value::String(s)) => Ok(s),
                Some(_) => Err(()),
            }
        };
        let mut text = |k: &str| match field(k) {
            Ok(s) => s.to_owned(),
            Err(()) => {
                errs.push(FieldError::invalid_raw(
                    &format!("{OWNERS}.{k}"),
                    &r.get(k).map(Value::to_string).unwrap_or_default(),
                    "must be a string",
                ));
                String::new()
            }
        };
        let (api_version, kind, name, uid) =
            (text("apiVersion"), text("kind"), text("name"), text("uid"));
        // `schema.FromAPIVersionAndKind`: "group/version" or "version".
        let version = api_version
            .split_once('/')
            .map_or(api_version.as_str(), |(_, v)| v);
        if version.is_empty() {
            errs.push(FieldError::invalid(
                &format!("{OWNERS}.apiVersion"),
                &api_version,
                "version must not be empty",
            ));
        }
        for (k, v) in [("kind", &kind), ("name", &name), ("uid", &uid)] {
            if v.is_empty() {
                errs.push(FieldError::invalid(
                    &format!("{OWNERS}.{k}"),
                    "",
                    format!("{k} must not be empty"),
                ));
            }
        }
        if api_version == "v1" && kind == "Event" {
            errs.push(FieldError::invalid_raw(
                OWNERS,
                &Value::Object(r.clone()).to_string(),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        match r.get("controller") {
            None | Some(Value::Null | Value::Bool(false)) => {}
            Some(Value::Bool(true)) => {
                let this = format!("{kind}/{name}");
                match &controller {
                    Some(first) => errs.push(FieldError::invalid_raw(
                        OWNERS,
                        &Value::Array(refs.clone()).to_string(),
                        format!(
                            "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"
                        ),
                    )),
                    None => controller = Some(this),
                }
            }
            Some(other) => errs.push(FieldError::invalid_raw(
                &format!("{OWNERS}.controller"),
                &other.to_string(),
                "must be a boolean",
            )),
        }
        if let Some(b) = r.get("blockOwnerDeletion")
            && !matches!(b, Value::Null | Value::Bool(_))
        {
            errs.push(FieldError::invalid_raw(
                &format!("{OWNERS}.blockOwnerDeletion"),
                &b.to_string(),
                "must be a boolean",
            ));
        }
    }
}

fn finalizers(list: Option<&Value>, errs: &mut Vec<FieldError>) {
    let list = match list {
        None | Some(Value::Null) => return,
        Some(Value::Array(a)) => a,
        Some(other) => {
            errs.push(FieldError::invalid_raw(
                FINALIZERS,
                &other.to_string(),
                "must be a list",
            ));
            return;
        }
    };
    let (mut orphan, mut foreground) = (false, false);
    for f in list {
        let Some(f) = f.as_str() else {
            errs.push(FieldError::invalid_raw(
                FINALIZERS,
                &f.to_string(),
                "must be a string",
            ));
            continue;
        };
        for m in listwatch_api::labels::qualified_name_errors(f) {
            errs.push(FieldError::invalid(FINALIZERS, f, m));
        }
        orphan |= f == crate::lifecycle::FINALIZER_ORPHAN;
        foreground |= f == crate::lifecycle::FINALIZER_FOREGROUND;
    }
    if orphan && foreground {
        let shown = list
            .iter()
            .map(|f| format!("{:?}", f.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(", ");
        errs.push(FieldError::invalid_raw(
            FINALIZERS,
            &format!("[]string{{{shown}}}"),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(meta: Value) -> Vec<String> {
        let mut errs = Vec::new();
        validate(meta.as_object().unwrap(), &mut errs);
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn owner_references_must_name_an_owner_and_one_controller() {
        let ok = json!({"ownerReferences":[
            {"apiVersion":"apps/v1","kind":"Deployment","name":"d","uid":"u1","controller":true,"blockOwnerDeletion":true},
            {"apiVersion":"v1","kind":"ConfigMap","name":"c","uid":"u2"}
        ],"finalizers":["example.com/x","orphan"]});
        assert!(errors(ok).is_empty());
        let e = errors(json!({"ownerReferences":[{"apiVersion":"apps/","kind":"","name":"d"}]}));
        assert_eq!(
            e,
            [
                "metadata.ownerReferences.apiVersion: Invalid value: \"apps/\": version must not be empty",
                "metadata.ownerReferences.kind: Invalid value: \"\": kind must not be empty",
                "metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty",
            ]
        );
        let e = errors(json!({"ownerReferences":[
            {"apiVersion":"v1","kind":"A","name":"a","uid":"1","controller":true},
            {"apiVersion":"v1","kind":"B","name":"b","uid":"2","controller":true}]}));
        assert_eq!(e.len(), 1);
        assert!(
            e[0].contains("Only one reference can have Controller set to true. Found \"true\" in references for A/a and B/b"),
            "{e:?}"
        );
        let e = errors(
            json!({"ownerReferences":[{"apiVersion":"v1","kind":"Event","name":"e","uid":"1"}]}),
        );
        assert!(
            e[0].contains("/v1, Kind=Event is disallowed from being an owner"),
            "{e:?}"
        );
        for junk in [
            json!("x"),
            json!([1]),
            json!([{"uid": 5, "apiVersion":"v1","kind":"K","name":"n"}]),
            json!([{"apiVersion":"v1","kind":"K","name":"n","uid":"u","controller":"yes"}]),
        ] {
            assert!(
                !errors(json!({"ownerReferences": junk})).is_empty(),
                "{junk}"
            );
        }
    }

    #[test]
    fn finalizers_are_qualified_names_and_not_both_collector_ones() {
        let e = errors(json!({"finalizers":["orphan","foregroundDeletion"]}));
        assert_eq!(
            e,
            [
                "metadata.finalizers: Invalid value: []string{\"orphan\", \"foregroundDeletion\"}: finalizer orphan and foregroundDeletion cannot be both set"
            ]
        );
        let e = errors(json!({"finalizers":["not a name", 3, "ö/x"]}));
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(!errors(json!({"finalizers":"x"})).is_empty());
        assert!(errors(json!({"finalizers":["kubernetes", "a.io/b"]})).is_empty());
    }
}
