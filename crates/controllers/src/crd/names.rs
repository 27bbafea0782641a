//! Whether a CRD's names may be served (upstream's naming controller,
//! apiextensions-apiserver `pkg/controller/status/naming_controller.go`): each name of
//! `spec.names` must be free in the CRD's group — not taken by another CRD's accepted names
//! nor by a kind the server serves otherwise.

use listwatch_kinds::crd::Names;

/// The names taken in one group by something other than the CRD being named.
#[derive(Debug, Default)]
pub(crate) struct Taken {
    /// Resource names: plurals, singulars and short names.
    resources: Vec<String>,
    /// Kinds and list kinds.
    kinds: Vec<String>,
}

impl Taken {
    /// Marks the names of a served kind or another CRD as taken.
    pub(crate) fn add(
        &mut self,
        plural: &str,
        singular: &str,
        short_names: &[String],
        kind: &str,
        list_kind: &str,
    ) {
        self.resources.push(plural.to_owned());
        self.resources.push(singular.to_owned());
        self.resources.extend(short_names.iter().cloned());
        self.kinds.push(kind.to_owned());
        self.kinds.push(list_kind.to_owned());
    }

    /// Marks `names` (another CRD's accepted names) as taken.
    pub(crate) fn add_names(&mut self, names: &Names) {
        self.add(
            &names.plural,
            &names.singular,
            &names.short_names,
            &names.kind,
            &names.list_kind,
        );
    }

    /// The first conflict of `names`, as upstream's `NamesAccepted=False` reason and
    /// message; `None` when every name is free.
    pub(crate) fn conflict(&self, names: &Names) -> Option<(&'static str, String)> {
        let res = |n: &str| !n.is_empty() && self.resources.iter().any(|t| t == n);
        let kind = |n: &str| !n.is_empty() && self.kinds.iter().any(|t| t == n);
        let used = |n: &str| format!("{n:?} is already in use");
        if res(&names.plural) {
            return Some(("PluralConflict", used(&names.plural)));
        }
        if res(&names.singular) {
            return Some(("SingularConflict", used(&names.singular)));
        }
        if let Some(s) = names.short_names.iter().find(|s| res(s)) {
            return Some(("ShortNamesConflict", used(s)));
        }
        if kind(&names.kind) {
            return Some(("KindConflict", used(&names.kind)));
        }
        if kind(&names.list_kind) {
            return Some(("ListKindConflict", used(&names.list_kind)));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(plural: &str, kind: &str) -> Names {
        Names {
            plural: plural.into(),
            singular: kind.to_ascii_lowercase(),
            kind: kind.into(),
            list_kind: format!("{kind}List"),
            short_names: vec!["w".into()],
            categories: Vec::new(),
        }
    }

    #[test]
    fn the_first_taken_name_is_the_conflict() {
        let mut taken = Taken::default();
        assert_eq!(taken.conflict(&names("widgets", "Widget")), None);
        taken.add_names(&names("gadgets", "Gadget"));
        assert_eq!(
            taken.conflict(&names("widgets", "Widget")),
            Some(("ShortNamesConflict", "\"w\" is already in use".into()))
        );
        assert_eq!(
            taken.conflict(&names("gadgets", "Widget")).map(|c| c.0),
            Some("PluralConflict")
        );
        let mut other = names("things", "Gadget");
        other.short_names.clear();
        other.singular = "thing".into();
        assert_eq!(taken.conflict(&other).map(|c| c.0), Some("KindConflict"));
    }
}
