//! ClusterRole aggregation (upstream's clusterrole-aggregation controller): a ClusterRole
//! with an `aggregationRule` holds the union of the rules of every other ClusterRole whose
//! labels match one of its selectors, in name order, each rule once.

use std::sync::Arc;

use crate::rbac::{PolicyRule, Role};

/// The rules `role` should hold given every ClusterRole, or `None` when it has no
/// aggregation rule or already holds exactly them.
pub fn aggregated_rules(role: &Role, all: &[Arc<Role>]) -> Option<Vec<PolicyRule>> {
    let agg = role.aggregation_rule.as_ref()?;
    let mut sources: Vec<&Arc<Role>> = all
        .iter()
        .filter(|r| r.metadata.name != role.metadata.name)
        .filter(|r| {
            let empty = std::collections::BTreeMap::new();
            let labels = r.metadata.labels.as_ref().unwrap_or(&empty);
            agg.cluster_role_selectors.iter().any(|s| s.matches(labels))
        })
        .collect();
    sources.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut rules: Vec<PolicyRule> = Vec::new();
    for r in sources {
        for rule in &r.rules {
            if !rules.contains(rule) {
                rules.push(rule.clone());
            }
        }
    }
    (rules != role.rules).then_some(rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::{AggregationRule, LabelSelector};

    fn labelled(name: &str, label: &str, rules: Vec<PolicyRule>) -> Arc<Role> {
        let mut r = crate::rbac::testing::role(None, name, rules);
        r.metadata.labels = Some(
            [(label.to_owned(), "true".to_owned())]
                .into_iter()
                .collect(),
        );
        Arc::new(r)
    }

    #[test]
    fn aggregates_matching_roles_in_name_order_once() {
        let get = PolicyRule::resources(["get"], [""], ["pods"]);
        let list = PolicyRule::resources(["list"], [""], ["pods"]);
        let mut admin = crate::rbac::testing::role(None, "admin", vec![]);
        admin.aggregation_rule = Some(AggregationRule {
            cluster_role_selectors: vec![LabelSelector {
                match_labels: [("agg".to_owned(), "true".to_owned())]
                    .into_iter()
                    .collect(),
                ..LabelSelector::default()
            }],
        });
        let all = vec![
            labelled("b", "agg", vec![list.clone(), get.clone()]),
            labelled("a", "agg", vec![get.clone()]),
            labelled(
                "c",
                "other",
                vec![PolicyRule::resources(["*"], ["*"], ["*"])],
            ),
        ];
        let rules = aggregated_rules(&admin, &all).unwrap();
        assert_eq!(rules, vec![get, list]);
        admin.rules = rules;
        assert_eq!(aggregated_rules(&admin, &all), None);
        let plain = crate::rbac::testing::role(None, "plain", vec![]);
        assert_eq!(aggregated_rules(&plain, &all), None);
    }
}
