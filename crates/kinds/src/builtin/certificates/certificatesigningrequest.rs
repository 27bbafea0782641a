//! Certificate signing requests (`certificates.k8s.io/v1`): the status reset on create
//! (pkg/registry/certificates/certificates/strategy.go), `/status` and `/approval`
//! subresources (from the derived table), `spec.signerName` as a selectable field, and the
//! printer (NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION CONDITION).
//!
//! As upstream's strategy, a create clears `spec.username`/`uid`/`groups`/`extra` (the
//! server fills them from the requesting user: the apiserver's certificate admission, since
//! the strategy sees only the object) and every update keeps the stored `spec`: the
//! requestor an approver reads is the one who created the request, never a value its body
//! claimed. What an `/approval` write may change (only the conditions) is the registry's
//! `Subresource::Approval`, which knows the subresource.

use serde_json::{Value, json};

use crate::builtin::print;
use crate::strategy::{Invalid, KindStrategy, TableColumn, Times};
use crate::{FieldLabels, KindSpec};

/// `certificates.k8s.io/v1` certificate signing requests.
pub fn spec(base: KindSpec) -> KindSpec {
    // certificates/v1's field label function lists `metadata.name` and `spec.signerName`.
    base.selectable_fields(["spec.signerName"])
        .field_labels(FieldLabels::NOT_SUPPORTED_NO_NAMESPACE)
        .strategy(CertificateSigningRequestStrategy)
}

/// The certificate signing request strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct CertificateSigningRequestStrategy;

impl CertificateSigningRequestStrategy {
    /// The rules this kind's objects must keep, on create and update.
    fn broken(&self, obj: &Value) -> Vec<Invalid> {
        let spec = &obj["spec"];
        let mut out = Vec::new();
        for field in ["request", "signerName"] {
            if spec[field].as_str().is_none_or(str::is_empty) {
                out.push(Invalid::Required {
                    field: format!("spec.{field}"),
                });
            }
        }
        if spec["usages"].as_array().is_none_or(Vec::is_empty) {
            out.push(Invalid::Required {
                field: "spec.usages".into(),
            });
        }
        out
    }
}

impl KindStrategy for CertificateSigningRequestStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
            for k in ["username", "uid", "groups", "extra"] {
                spec.remove(k);
            }
        }
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({}));
        }
    }

    /// Upstream's `PrepareForUpdate` of every CSR write (main resource, `/status`,
    /// `/approval`): the spec is the stored one.
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        if let Some(m) = new.as_object_mut() {
            match old.get("spec") {
                Some(spec) => m.insert("spec".into(), spec.clone()),
                None => m.remove("spec"),
            };
        }
    }

    /// Upstream's required fields and spec rules (`super::csr_rules`): the request's PEM
    /// block, the signer name's form, the usages, the expiration.
    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        let mut out = crate::strategy::rules(self.broken(obj));
        out.extend(super::csr_rules::spec_errors(obj));
        out
    }

    /// The spec is the stored one (validated on create); the conditions and certificate
    /// follow `super::csr_rules::status_update_errors`.
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<crate::FieldError> {
        let mut out = crate::strategy::rules(self.broken(new));
        out.extend(super::csr_rules::status_update_errors(new, old));
        out
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(vec![
            print::name_column(),
            print::age_column(),
            print::col("SignerName", "string", "The name of the signer."),
            print::col(
                "Requestor",
                "string",
                "Name of the user who requested the certificate.",
            ),
            print::col(
                "RequestedDuration",
                "string",
                "The requested duration of the certificate.",
            ),
            print::col(
                "Condition",
                "string",
                "The approval and issuance state of the request.",
            ),
        ])
    }

    fn table_cells_at(
        &self,
        obj: &Value,
        name: &str,
        age: &str,
        times: &dyn Times,
    ) -> Option<Vec<Value>> {
        let (spec, status) = (&obj["spec"], &obj["status"]);
        let mut conditions: Vec<String> = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["type"].as_str().map(str::to_owned))
            .collect();
        if status["certificate"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
        {
            conditions.push("Issued".into());
        }
        let condition = if conditions.is_empty() {
            "Pending".to_owned()
        } else {
            conditions.join(",")
        };
        let duration = spec["expirationSeconds"]
            .as_u64()
            .map_or_else(|| "<none>".to_owned(), |s| times.human(s));
        Some(vec![
            Value::String(name.into()),
            Value::String(age.into()),
            Value::String(spec["signerName"].as_str().unwrap_or("").into()),
            Value::String(spec["username"].as_str().unwrap_or("").into()),
            Value::String(duration),
            Value::String(condition),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Secs;
    impl Times for Secs {
        fn since(&self, _: &str) -> String {
            String::new()
        }
        fn between(&self, _: &str, _: &str) -> Option<String> {
            None
        }
        fn human(&self, s: u64) -> String {
            format!("{s}s")
        }
    }

    #[test]
    fn rows_print_pending_then_approved_and_issued() {
        let mut csr = json!({"spec": {"signerName": "example.com/s", "username": "alice"},
            "status": {"certificate": "x"}});
        CertificateSigningRequestStrategy.prepare_for_create(&mut csr);
        assert_eq!(
            csr["spec"].get("username"),
            None,
            "the server fills the requestor"
        );
        csr["spec"]["username"] = json!("alice");
        let s = CertificateSigningRequestStrategy;
        let c = s.table_cells_at(&csr, "c", "1s", &Secs).unwrap();
        assert_eq!(
            c,
            [
                json!("c"),
                json!("1s"),
                json!("example.com/s"),
                json!("alice"),
                json!("<none>"),
                json!("Pending")
            ]
        );
        csr["status"] =
            json!({"conditions": [{"type": "Approved", "status": "True"}], "certificate": "x"});
        let c = s.table_cells_at(&csr, "c", "1s", &Secs).unwrap();
        assert_eq!(c[5], json!("Approved,Issued"));
    }
}
