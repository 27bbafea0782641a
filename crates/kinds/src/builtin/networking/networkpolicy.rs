//! Network policies (`networking.k8s.io/v1`): upstream's v1 default (`policyTypes`:
//! `Ingress`, plus `Egress` when the policy has egress rules), printer (NAME POD-SELECTOR
//! AGE), and the peers' `ipBlock` rules (pkg/apis/networking/validation `ValidateIPBlock`:
//! `cidr` required and a valid CIDR, each `except` a valid CIDR strictly inside it).
//!
//! Invariant: validation is one pass over the rules' peers; a CIDR is parsed by the standard
//! library's address parser after a bounded split, never by hand-indexing.

use std::net::IpAddr;

use serde_json::{Value, json};

use crate::KindSpec;
use crate::builtin::print;
use crate::strategy::{KindStrategy, TableColumn};

/// `networking.k8s.io/v1` network policies.
pub fn spec(base: KindSpec) -> KindSpec {
    base.strategy(NetworkPolicyStrategy)
}

/// The network policy strategy.
#[derive(Debug, Clone, Copy, Default)]
pub struct NetworkPolicyStrategy;

/// Upstream's v1 defaulting, on create and on update (Go defaults every decoded body).
fn defaults(obj: &mut Value) {
    let unset = obj["spec"]["policyTypes"]
        .as_array()
        .is_none_or(Vec::is_empty);
    if unset && obj["spec"].is_object() {
        let egress = obj["spec"]["egress"]
            .as_array()
            .is_some_and(|e| !e.is_empty());
        obj["spec"]["policyTypes"] = if egress {
            json!(["Ingress", "Egress"])
        } else {
            json!(["Ingress"])
        };
    }
}

impl KindStrategy for NetworkPolicyStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        defaults(obj);
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        defaults(new);
    }

    fn validate_create(&self, obj: &Value) -> Vec<crate::FieldError> {
        ip_blocks(&obj["spec"])
    }

    fn validate_update(&self, new: &Value, _old: &Value) -> Vec<crate::FieldError> {
        ip_blocks(&new["spec"])
    }

    fn table_columns(&self) -> Option<Vec<TableColumn>> {
        Some(vec![
            print::name_column(),
            print::col(
                "Pod-Selector",
                "string",
                "Selects the pods to which this NetworkPolicy object applies.",
            ),
            print::age_column(),
        ])
    }

    fn table_cells(&self, obj: &Value, name: &str, age: &str) -> Option<Vec<Value>> {
        Some(vec![
            Value::String(name.into()),
            Value::String(print::format_label_selector(&obj["spec"]["podSelector"])),
            Value::String(age.into()),
        ])
    }
}

/// Upstream's `IsValidCIDR` detail.
const NOT_CIDR: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

/// A CIDR as Go's `ParseCIDR` reads it: the address and its prefix length (`None` when it
/// does not parse or the length exceeds the family's bits).
fn parse_cidr(s: &str) -> Option<(IpAddr, u8)> {
    let (ip, bits) = s.split_once('/')?;
    if bits.is_empty() || bits.len() > 3 || !bits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let bits: u8 = bits.parse().ok()?;
    let ip: IpAddr = ip.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

/// The address's bits as a 128-bit number, its family's width, and the network of `len`.
fn network(ip: IpAddr, len: u8) -> (u128, u32) {
    let (v, width) = match ip {
        IpAddr::V4(a) => (u128::from(u32::from(a)), 32u32),
        IpAddr::V6(a) => (u128::from(a), 128u32),
    };
    let host_bits = width - u32::from(len);
    let mask = u128::MAX.checked_shl(host_bits).unwrap_or(0);
    (v & mask, width)
}

/// Whether `inner` is strictly inside `outer` (same family, a longer prefix, its address in
/// `outer`'s network).
fn strict_subset(outer: (IpAddr, u8), inner: (IpAddr, u8)) -> bool {
    if outer.0.is_ipv4() != inner.0.is_ipv4() || inner.1 <= outer.1 {
        return false;
    }
    network(inner.0, outer.1) == network(outer.0, outer.1)
}

/// The `ipBlock` rules of every ingress and egress peer.
fn ip_blocks(spec: &Value) -> Vec<crate::FieldError> {
    let mut out = Vec::new();
    for (rules, peers) in [("ingress", "from"), ("egress", "to")] {
        for (i, rule) in spec[rules].as_array().into_iter().flatten().enumerate() {
            for (j, peer) in rule[peers].as_array().into_iter().flatten().enumerate() {
                let block = &peer["ipBlock"];
                if block.is_object() {
                    ip_block(
                        block,
                        &format!("spec.{rules}[{i}].{peers}[{j}].ipBlock"),
                        &mut out,
                    );
                }
            }
        }
    }
    out
}

/// One `ipBlock`'s rules at `at`.
fn ip_block(block: &Value, at: &str, out: &mut Vec<crate::FieldError>) {
    let cidr = block["cidr"].as_str().unwrap_or("");
    if cidr.is_empty() {
        out.push(crate::FieldError::required(&format!("{at}.cidr"), ""));
        return;
    }
    let Some(outer) = parse_cidr(cidr) else {
        out.push(crate::FieldError::invalid_str(
            &format!("{at}.cidr"),
            cidr,
            NOT_CIDR,
        ));
        return;
    };
    for (k, except) in block["except"].as_array().into_iter().flatten().enumerate() {
        let field = format!("{at}.except[{k}]");
        let text = except.as_str().unwrap_or("");
        match parse_cidr(text) {
            None => out.push(crate::FieldError::invalid_str(&field, text, NOT_CIDR)),
            Some(inner) if !strict_subset(outer, inner) => out.push(
                crate::FieldError::invalid_str(&field, text, "must be a strict subset of `cidr`"),
            ),
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_blocks_are_cidrs_and_excepts_inside_them() {
        let np = |from: Value| {
            json!({"spec": {"podSelector": {}, "ingress": [{"from": from}],
            "egress": [{"to": [{"ipBlock": {"cidr": "2001:db8::/32", "except": ["2001:db8:1::/48"]}}]}]}})
        };
        let ok = np(
            json!([{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}, {"podSelector": {}}]),
        );
        assert_eq!(NetworkPolicyStrategy.validate_create(&ok), []);
        let bad = np(json!([
            {"ipBlock": {"cidr": "10.0.0.0/33"}},
            {"ipBlock": {"cidr": ""}},
            {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8", "11.0.0.0/16", "x", "::/64"]}},
        ]));
        let errs: Vec<String> = NetworkPolicyStrategy
            .validate_update(&bad, &ok)
            .iter()
            .map(ToString::to_string)
            .collect();
        let at = "spec.ingress[0].from";
        assert_eq!(
            errs,
            [
                format!("{at}[0].ipBlock.cidr: Invalid value: \"10.0.0.0/33\": {NOT_CIDR}"),
                format!("{at}[1].ipBlock.cidr: Required value"),
                format!(
                    "{at}[2].ipBlock.except[0]: Invalid value: \"10.0.0.0/8\": must be a strict subset of `cidr`"
                ),
                format!(
                    "{at}[2].ipBlock.except[1]: Invalid value: \"11.0.0.0/16\": must be a strict subset of `cidr`"
                ),
                format!("{at}[2].ipBlock.except[2]: Invalid value: \"x\": {NOT_CIDR}"),
                format!(
                    "{at}[2].ipBlock.except[3]: Invalid value: \"::/64\": must be a strict subset of `cidr`"
                ),
            ]
        );
    }

    #[test]
    fn create_defaults_policy_types() {
        let mut np = json!({"spec": {"podSelector": {}, "egress": [{}]}});
        NetworkPolicyStrategy.prepare_for_create(&mut np);
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        let c = NetworkPolicyStrategy.table_cells(&np, "n", "1s").unwrap();
        assert_eq!(c[1], json!("<none>"));
    }
}
