//! ClusterRole aggregation (upstream's clusterrole-aggregation controller): a ClusterRole
//! with an `aggregationRule` holds the union of the rules of every other ClusterRole whose
//! labels match one of its selectors, in name order, each rule once.
//!
//! Who may *write* an aggregation rule is not this module's business: a selector needs
//! full authority (`escalation`), and a member's labels and rules are checked like any
//! role write, so what a pass gathers was written by somebody allowed to grant it.

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

/// One pass of the aggregation reconciler over every ClusterRole: each aggregating role
/// whose rules change, with its new rules, in name order. Each role is computed from the
/// roles as already updated by this pass, not from the snapshot alone, so two aggregates
/// that select each other settle (after one more pass) instead of swapping their rules
/// on every pass forever.
pub fn aggregation_pass(all: &[Arc<Role>]) -> Vec<Role> {
    let mut view = all.to_vec();
    view.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut changed = Vec::new();
    for i in 0..view.len() {
        let Some(role) = view.get(i) else { break };
        if let Some(rules) = aggregated_rules(role, &view) {
            let mut new = Role::clone(role);
            new.rules = rules;
            if let Some(slot) = view.get_mut(i) {
                *slot = Arc::new(new.clone());
            }
            changed.push(new);
        }
    }
    changed
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

    /// Two aggregates selecting each other: computed from one snapshot they would swap
    /// their rules on every pass (and the reconciler write forever); a pass that sees
    /// its own updates settles.
    #[test]
    fn aggregates_that_select_each_other_settle() {
        let selecting = |name: &str, label: &str, selects: &str, rule: &str| {
            let mut r = (*labelled(
                name,
                label,
                vec![PolicyRule::resources(["get"], [""], [rule])],
            ))
            .clone();
            r.aggregation_rule = Some(AggregationRule {
                cluster_role_selectors: vec![LabelSelector {
                    match_labels: [(selects.to_owned(), "true".to_owned())]
                        .into_iter()
                        .collect(),
                    ..LabelSelector::default()
                }],
            });
            Arc::new(r)
        };
        let mut all = vec![
            selecting("a", "is-a", "is-b", "pods"),
            selecting("b", "is-b", "is-a", "secrets"),
        ];
        let mut passes = 0;
        loop {
            let changed = aggregation_pass(&all);
            if changed.is_empty() {
                break;
            }
            for new in changed {
                let at = all
                    .iter()
                    .position(|r| r.metadata.name == new.metadata.name)
                    .unwrap();
                all[at] = Arc::new(new);
            }
            passes += 1;
            assert!(passes < 3, "never settles: {all:?}");
        }
        assert_eq!(all[0].rules, all[1].rules);
    }
}
