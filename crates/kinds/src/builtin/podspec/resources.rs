//! Upstream's `ValidateResourceRequirements` (pkg/apis/core/validation) of a container's
//! `resources`: each name a resource a container may ask for (`cpu`, `memory`,
//! `ephemeral-storage`, `hugepages-<size>`, or a domain-qualified extended resource), each
//! quantity not negative (and whole for extended resources), each request at most its limit
//! — equal to it, and with a limit set, for the resources that may not be overcommitted
//! (huge pages and extended resources) —, huge pages in whole pages and only beside cpu or
//! memory.
//!
//! Messages and paths are upstream's: `…resources.limits[cpu]: Invalid value: "-1": must be
//! greater than or equal to 0`, `…resources.requests: Invalid value: "2": must be less than
//! or equal to cpu limit of 1`. A quantity is shown as its text, which the decoder has
//! already made upstream's canonical string where it could.
//!
//! Invariants: those of the parent module; quantities are compared exactly through
//! [`Amount`] (linear in their digits, never expanded), so `1e2147483647` costs what its
//! text costs; a quantity that does not parse is left to the decoder (which refused it).

use std::cmp::Ordering;

use listwatch_api::labels::qualified_name_errors;
use serde_json::{Map, Value};

use crate::FieldError;
use crate::builtin::amount::Amount;
use crate::builtin::quantity::quantity_nanos;

/// Upstream's `isNegativeErrorMsg`.
pub const NEGATIVE: &str = "must be greater than or equal to 0";
/// Upstream's `isNotIntegerErrorMsg`.
pub const NOT_INTEGER: &str = "must be an integer";

/// Single-segment resource names upstream's `IsStandardResourceName` knows (besides
/// `hugepages-*` and `requests.hugepages-*`).
const STANDARD: &[&str] = &[
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "persistentvolumeclaims",
    "configmaps",
    "services.nodeports",
    "services.loadbalancers",
    "requests.storage",
];

/// The resources a QoS class counts (`supportedQoSComputeResources`).
const QOS: &[&str] = &["cpu", "memory"];

/// The prefix of huge page resources.
const HUGEPAGES: &str = "hugepages-";

/// The errors of the container resources `res` at `path` (`spec.containers[0].resources`).
pub fn requirements(res: &Value, path: &str) -> Vec<FieldError> {
    let mut out = Vec::new();
    let empty = Map::new();
    let limits = res["limits"].as_object().unwrap_or(&empty);
    let requests = res["requests"].as_object().unwrap_or(&empty);
    let lim_path = format!("{path}.limits");
    let req_path = format!("{path}.requests");
    let mut cpu_or_memory = false;
    let mut huge = false;
    for (name, q) in limits {
        let at = format!("{lim_path}[{name}]");
        container_resource_name(name, &at, &mut out);
        let amount = Amount::of(q);
        if let Some(a) = &amount {
            quantity_value(name, q, a, &at, &mut out);
        }
        if is_hugepages(name) {
            huge = true;
            if let Some(a) = &amount {
                hugepage_value(name, q, a, &at, &mut out);
            }
        }
        cpu_or_memory |= QOS.contains(&name.as_str());
    }
    for (name, q) in requests {
        let at = format!("{req_path}[{name}]");
        container_resource_name(name, &at, &mut out);
        let amount = Amount::of(q);
        if let Some(a) = &amount {
            quantity_value(name, q, a, &at, &mut out);
        }
        match limits.get(name) {
            Some(limit) => {
                if let (Some(a), Some(l)) = (&amount, Amount::of(limit)) {
                    let order = a.cmp_value(&l);
                    if order != Ordering::Equal && !overcommit_allowed(name) {
                        out.push(FieldError::invalid_str(
                            &req_path,
                            &text(q),
                            format!("must be equal to {name} limit of {}", text(limit)),
                        ));
                    } else if order == Ordering::Greater {
                        out.push(FieldError::invalid_str(
                            &req_path,
                            &text(q),
                            format!(
                                "must be less than or equal to {name} limit of {}",
                                text(limit)
                            ),
                        ));
                    }
                }
            }
            None if !overcommit_allowed(name) => out.push(FieldError::required(
                &lim_path,
                "Limit must be set for non overcommitable resources",
            )),
            None => {}
        }
        if is_hugepages(name) {
            huge = true;
            if let Some(a) = &amount {
                hugepage_value(name, q, a, &at, &mut out);
            }
        }
        cpu_or_memory |= QOS.contains(&name.as_str());
    }
    if huge && !cpu_or_memory {
        out.push(FieldError::forbidden(
            path,
            "HugePages require cpu or memory",
        ));
    }
    out
}

/// A quantity's text as its error shows it (`quantity.String()`).
fn text(q: &Value) -> String {
    match q {
        Value::String(s) => s.trim().to_owned(),
        other => other.to_string(),
    }
}

/// `ValidateResourceQuantityValue`: not negative, and whole for integer resources.
fn quantity_value(name: &str, q: &Value, a: &Amount, at: &str, out: &mut Vec<FieldError>) {
    if a.is_negative() {
        out.push(FieldError::invalid_str(at, &text(q), NEGATIVE));
    }
    if is_integer_resource(name) && !a.is_whole_at_milli() {
        out.push(FieldError::invalid_str(at, &text(q), NOT_INTEGER));
    }
}

/// `validateResourceQuantityHugePageValue`: a whole number of pages of the name's size
/// (`HugePageSizeFromResourceName`: the name's suffix is a positive whole quantity).
fn hugepage_value(name: &str, q: &Value, a: &Amount, at: &str, out: &mut Vec<FieldError>) {
    let divisible = name
        .strip_prefix(HUGEPAGES)
        .and_then(|size| quantity_nanos(&Value::String(size.to_owned())))
        .filter(|n| *n > 0 && n % 1_000_000_000 == 0)
        .and_then(|n| u64::try_from(n / 1_000_000_000).ok())
        .is_some_and(|page| a.ceil_rem(page) == 0);
    if !divisible {
        out.push(FieldError::invalid_str(
            at,
            &text(q),
            format!("{} is not positive integer multiple of {name}", text(q)),
        ));
    }
}

/// Whether `name` is a huge page resource (`hugepages-<size>`).
fn is_hugepages(name: &str) -> bool {
    name.starts_with(HUGEPAGES)
}

/// Upstream's `IsNativeResource`: no domain, or a `kubernetes.io/` one.
fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// Upstream's `IsExtendedResourceName`: not native, not `requests.`-prefixed, and a
/// qualified name once prefixed with `requests.` (as a quota names it).
fn is_extended(name: &str) -> bool {
    !is_native(name)
        && !name.starts_with("requests.")
        && qualified_name_errors(&format!("requests.{name}")).is_empty()
}

/// Upstream's `IsOvercommitAllowed`: native resources but huge pages.
fn overcommit_allowed(name: &str) -> bool {
    is_native(name) && !is_hugepages(name)
}

/// Upstream's `IsIntegerResourceName`: object counts and extended resources.
fn is_integer_resource(name: &str) -> bool {
    matches!(
        name,
        "pods"
            | "resourcequotas"
            | "services"
            | "replicationcontrollers"
            | "secrets"
            | "configmaps"
            | "persistentvolumeclaims"
            | "services.nodeports"
            | "services.loadbalancers"
    ) || is_extended(name)
}

/// `validateContainerResourceName`: a qualified name; without a domain a standard resource
/// a container may ask for; with one, native or an extended resource name.
fn container_resource_name(name: &str, at: &str, out: &mut Vec<FieldError>) {
    let qualified = qualified_name_errors(name);
    let invalid_name = !qualified.is_empty();
    for msg in qualified {
        out.push(FieldError::invalid_str(at, name, msg));
    }
    let bare = !name.contains('/');
    if !invalid_name
        && bare
        && !(STANDARD.contains(&name)
            || name.starts_with(HUGEPAGES)
            || name.starts_with("requests.hugepages-"))
    {
        out.push(FieldError::invalid_str(
            at,
            name,
            "must be a standard resource type or fully qualified",
        ));
    }
    if bare {
        if !matches!(name, "cpu" | "memory" | "ephemeral-storage") && !is_hugepages(name) {
            out.push(FieldError::invalid_str(
                at,
                name,
                "must be a standard resource for containers",
            ));
        }
    } else if !is_native(name) && !is_extended(name) {
        out.push(FieldError::invalid_str(
            at,
            name,
            "doesn't follow extended resource name standard",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(res: Value) -> Vec<String> {
        requirements(&res, "spec.containers[0].resources")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn quantities_are_not_negative_and_requests_at_most_limits() {
        assert_eq!(
            messages(json!({"requests": {"cpu": "-1"}, "limits": {"memory": "-1Gi"}})),
            [
                "spec.containers[0].resources.limits[memory]: Invalid value: \"-1Gi\": must be greater than or equal to 0",
                "spec.containers[0].resources.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0",
            ]
        );
        assert_eq!(
            messages(json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}})),
            [
                "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1"
            ]
        );
        assert_eq!(
            messages(
                json!({"requests": {"memory": "1e1000000"}, "limits": {"memory": "1e999999"}})
            ),
            [
                "spec.containers[0].resources.requests: Invalid value: \"1e1000000\": must be less than or equal to memory limit of 1e999999"
            ]
        );
        // What kubectl's generators and `kubectl set resources` send.
        assert!(
            messages(json!({"requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi"}}))
            .is_empty()
        );
        assert!(
            messages(json!({"requests": {"cpu": "1e2147483647"},
            "limits": {"cpu": "1e2147483647"}}))
            .is_empty()
        );
        assert!(messages(json!({})).is_empty());
        assert!(messages(json!({"limits": null, "requests": {"cpu": 1.5}})).is_empty());
    }

    #[test]
    fn names_must_be_container_resources() {
        assert_eq!(
            messages(json!({"limits": {"pods": "1", "gpu": "1", "example.com/-x": "1"}})),
            [
                "spec.containers[0].resources.limits[example.com/-x]: Invalid value: \"example.com/-x\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                "spec.containers[0].resources.limits[example.com/-x]: Invalid value: \"example.com/-x\": doesn't follow extended resource name standard",
                "spec.containers[0].resources.limits[gpu]: Invalid value: \"gpu\": must be a standard resource type or fully qualified",
                "spec.containers[0].resources.limits[gpu]: Invalid value: \"gpu\": must be a standard resource for containers",
                "spec.containers[0].resources.limits[pods]: Invalid value: \"pods\": must be a standard resource for containers",
            ]
        );
    }

    #[test]
    fn extended_resources_and_huge_pages_are_not_overcommitted() {
        assert_eq!(
            messages(json!({"requests": {"example.com/gpu": "1", "cpu": "1"}})),
            [
                "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"
            ]
        );
        assert_eq!(
            messages(
                json!({"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "2"}})
            ),
            [
                "spec.containers[0].resources.requests: Invalid value: \"1\": must be equal to example.com/gpu limit of 2"
            ]
        );
        assert_eq!(
            messages(json!({"limits": {"example.com/gpu": "500m"}})),
            [
                "spec.containers[0].resources.limits[example.com/gpu]: Invalid value: \"500m\": must be an integer"
            ]
        );
        assert!(
            messages(json!({"limits": {"hugepages-2Mi": "4Mi", "memory": "1Gi"},
            "requests": {"hugepages-2Mi": "4Mi"}}))
            .is_empty()
        );
        assert_eq!(
            messages(json!({"limits": {"hugepages-2Mi": "3Mi"}})),
            [
                "spec.containers[0].resources.limits[hugepages-2Mi]: Invalid value: \"3Mi\": 3Mi is not positive integer multiple of hugepages-2Mi",
                "spec.containers[0].resources: Forbidden: HugePages require cpu or memory",
            ]
        );
    }
}
