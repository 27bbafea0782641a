//! The `rbac.authorization.k8s.io` group (served through the same cacher pipeline as every
//! other; the RBAC authorizer reads them through in-process informers). Upstream's RBAC
//! strategies allow create on PUT, keep no generation and validate names as path segments.
//! Printing as upstream's: roles and cluster roles through the default table convertor
//! (NAME CREATED AT), bindings through printers.go (NAME ROLE AGE, and USERS GROUPS
//! SERVICEACCOUNTS for `-o wide`).

use serde_json::Value;

use crate::builtin::print::{self, Printed};
use crate::strategy::TableColumn;
use crate::{Generation, KindSpec, NameValidation};

pub mod clusterrole;
pub mod clusterrolebinding;
pub mod role;
pub mod rolebinding;

/// The printer of roles and cluster roles (`rest.NewDefaultTableConvertor`).
const ROLE_PRINTER: Printed = Printed::new(print::created_at_columns, print::created_at_cells);

/// The printer of role bindings and cluster role bindings.
const BINDING_PRINTER: Printed = Printed::new(binding_columns, binding_cells);

fn binding_columns() -> Vec<TableColumn> {
    vec![
        print::name_column(),
        print::col(
            "Role",
            "string",
            "The role the binding grants, as Kind/name.",
        ),
        print::age_column(),
        print::wide("Users", "string", "Users in the binding."),
        print::wide("Groups", "string", "Groups in the binding."),
        print::wide(
            "ServiceAccounts",
            "string",
            "ServiceAccounts in the binding.",
        ),
    ]
}

/// `Kind/name` of the role reference, then the subjects by kind, each list joined by `, `
/// (service accounts as `namespace/name`), as upstream's `rbac.SubjectsStrings`.
fn binding_cells(obj: &Value, name: &str, age: &str) -> Vec<Value> {
    let role = &obj["roleRef"];
    let str_of = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for s in obj["subjects"].as_array().into_iter().flatten() {
        match s["kind"].as_str() {
            Some("User") => users.push(str_of(&s["name"])),
            Some("Group") => groups.push(str_of(&s["name"])),
            Some("ServiceAccount") => {
                sas.push(format!(
                    "{}/{}",
                    str_of(&s["namespace"]),
                    str_of(&s["name"])
                ));
            }
            _ => {}
        }
    }
    vec![
        Value::String(name.into()),
        Value::String(format!(
            "{}/{}",
            str_of(&role["kind"]),
            str_of(&role["name"])
        )),
        Value::String(age.into()),
        Value::String(users.join(", ")),
        Value::String(groups.join(", ")),
        Value::String(sas.join(", ")),
    ]
}

/// An `rbac.authorization.k8s.io/v1` kind.
fn rbac(plural: &str, kind: &str, namespaced: bool) -> KindSpec {
    KindSpec::new("rbac.authorization.k8s.io", "v1", plural, kind)
        .generation(Generation::None)
        .namespaced(namespaced)
        .name_validation(NameValidation::PathSegment)
        .allow_create_on_update(true)
        .strategy(if kind.ends_with("Binding") {
            BINDING_PRINTER.defaulting(subject_defaults)
        } else {
            ROLE_PRINTER
        })
}

/// Upstream's `SetDefaults_Subject` on every subject of a binding: a `User` or `Group`
/// without `apiGroup` gets `rbac.authorization.k8s.io`, a `ServiceAccount` `""` (hand-written
/// and charted bindings often leave it out; validation then requires exactly these).
fn subject_defaults(obj: &mut Value) {
    let Some(subjects) = obj.get_mut("subjects").and_then(Value::as_array_mut) else {
        return;
    };
    for s in subjects.iter_mut().filter_map(Value::as_object_mut) {
        if s.get("apiGroup").is_some_and(|g| g.as_str() != Some("")) {
            continue;
        }
        let group = match s.get("kind").and_then(Value::as_str) {
            Some("User" | "Group") => "rbac.authorization.k8s.io",
            Some("ServiceAccount") => "",
            _ => continue,
        };
        s.insert("apiGroup".into(), Value::String(group.into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subjects_without_an_api_group_get_upstreams() {
        let mut b = json!({"subjects": [
            {"kind": "User", "name": "jane"},
            {"kind": "Group", "name": "devs", "apiGroup": ""},
            {"kind": "ServiceAccount", "name": "default", "namespace": "a"},
            {"kind": "User", "name": "x", "apiGroup": "other.example.com"},
            {"kind": "Robot", "name": "r"},
            null
        ]});
        subject_defaults(&mut b);
        let groups: Vec<_> = b["subjects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.get("apiGroup").cloned())
            .collect();
        assert_eq!(
            groups,
            vec![
                Some(json!("rbac.authorization.k8s.io")),
                Some(json!("rbac.authorization.k8s.io")),
                Some(json!("")),
                Some(json!("other.example.com")),
                None,
                None
            ]
        );
    }

    #[test]
    fn bindings_print_the_role_and_subjects_by_kind() {
        let b = json!({"roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "User", "name": "bob"},
                {"kind": "Group", "name": "devs"},
                {"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]});
        let c = binding_cells(&b, "rb", "5m");
        assert_eq!(c.len(), binding_columns().len());
        assert_eq!(
            c,
            [
                "rb",
                "ClusterRole/view",
                "5m",
                "alice, bob",
                "devs",
                "ns/sa"
            ]
            .map(|s| json!(s))
        );
        let r = json!({"metadata": {"creationTimestamp": "2026-12-07T05:00:00Z"}});
        assert_eq!(
            print::created_at_cells(&r, "r", "1m"),
            [json!("r"), json!("2026-12-07T05:00:00Z")]
        );
    }
}
