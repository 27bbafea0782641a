//! Field selectors with Kubernetes' grammar.
//!
//! ```text
//! selector := "" | term ("," term)*
//! term     := field ("=" | "==" | "!=") value
//! ```
//!
//! In values, `\` escapes `\`, `,` and `=`; any other escape, and an unescaped `,` or `=` in
//! a value, is an error. A field an object does not have reads as `""`, as upstream's
//! `fields.Set` does. Invariant: terms keep their input order, and
//! `parse(display(s)) == s` for every selector.

use std::fmt;

use thiserror::Error;

/// Why a field selector was rejected, and where.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "invalid field selector {:?} at position {position}: {}",
    crate::echo::echo(.input),
    crate::echo::echo(.reason)
)]
pub struct FieldSelectorError {
    /// The selector as given.
    pub input: String,
    /// Byte offset of the offending term or character.
    pub position: usize,
    /// What is wrong.
    pub reason: String,
}

/// Anything that can be asked for a field's value.
pub trait Fields {
    /// The value of field `path` (e.g. `spec.nodeName`), `None` when absent.
    fn get_field(&self, path: &str) -> Option<&str>;

    /// The value a selector compares for `path`: the field's value, `""` when absent (as
    /// upstream's `fields.Set`). This is the one definition: selector matching, cache indexes
    /// and watcher triggers all read fields through it, so that they agree on every object.
    fn field_value(&self, path: &str) -> &str {
        self.get_field(path).unwrap_or("")
    }
}

impl Fields for [(&str, &str)] {
    fn get_field(&self, path: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == path).map(|(_, v)| *v)
    }
}

impl Fields for std::collections::BTreeMap<String, String> {
    fn get_field(&self, path: &str) -> Option<&str> {
        self.get(path).map(String::as_str)
    }
}

/// The operator of one term.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// `field=value`
    Equals,
    /// `field==value`
    DoubleEquals,
    /// `field!=value`
    NotEquals,
}

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldTerm {
    /// The field path.
    pub field: String,
    /// The operator.
    pub operator: FieldOperator,
    /// The value, unescaped.
    pub value: String,
}

impl FieldTerm {
    /// Whether `fields` satisfy this term.
    pub fn matches<F: Fields + ?Sized>(&self, fields: &F) -> bool {
        let got = fields.field_value(&self.field);
        match self.operator {
            FieldOperator::Equals | FieldOperator::DoubleEquals => got == self.value,
            FieldOperator::NotEquals => got != self.value,
        }
    }
}

impl fmt::Display for FieldTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            FieldOperator::Equals => "=",
            FieldOperator::DoubleEquals => "==",
            FieldOperator::NotEquals => "!=",
        };
        write!(f, "{}{op}{}", escape(&self.field), escape(&self.value))
    }
}

/// A parsed field selector: the conjunction of its terms. Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Builds a selector from terms, keeping their order.
    pub fn from_terms(terms: Vec<FieldTerm>) -> Self {
        Self { terms }
    }

    /// The selector `field=value`.
    pub fn equals(field: &str, value: &str) -> Self {
        Self::from_terms(vec![FieldTerm {
            field: field.to_owned(),
            operator: FieldOperator::Equals,
            value: value.to_owned(),
        }])
    }

    /// Parses Kubernetes' field selector syntax.
    ///
    /// ```
    /// use listwatch_api::fields::FieldSelector;
    /// let s = FieldSelector::parse(r"spec.nodeName=n1,metadata.name!=a\,b").unwrap();
    /// assert_eq!(s.exact_match("spec.nodeName"), Some("n1"));
    /// assert!(FieldSelector::parse("spec.nodeName").is_err());
    /// ```
    pub fn parse(input: &str) -> Result<Self, FieldSelectorError> {
        let err = |position, reason: String| FieldSelectorError {
            input: input.to_owned(),
            position,
            reason,
        };
        let mut terms = Vec::new();
        for (start, term) in split_unescaped(input, b',') {
            if term.is_empty() {
                continue;
            }
            let Some((op_at, op, op_len)) = find_operator(term) else {
                return Err(err(
                    start,
                    format!("{term:?} has no operator ('=', '==' or '!=')"),
                ));
            };
            let field = unescape(&term[..op_at]).map_err(|(i, r)| err(start + i, r))?;
            if field.is_empty() {
                return Err(err(start, "field name must be non-empty".into()));
            }
            let value_at = op_at + op_len;
            let value =
                unescape(&term[value_at..]).map_err(|(i, r)| err(start + value_at + i, r))?;
            terms.push(FieldTerm {
                field,
                operator: op,
                value,
            });
        }
        Ok(Self { terms })
    }

    /// Whether the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The terms, in input order.
    pub fn terms(&self) -> &[FieldTerm] {
        &self.terms
    }

    /// Whether `fields` satisfy every term.
    pub fn matches<F: Fields + ?Sized>(&self, fields: &F) -> bool {
        self.terms.iter().all(|t| t.matches(fields))
    }

    /// The value `field` must equal for anything to match, when an equality term fixes it.
    pub fn exact_match(&self, field: &str) -> Option<&str> {
        self.terms.iter().find_map(|t| match t.operator {
            FieldOperator::Equals | FieldOperator::DoubleEquals if t.field == field => {
                Some(t.value.as_str())
            }
            _ => None,
        })
    }

    /// The fields this selector reads.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|t| t.field.as_str())
    }

    /// Adds a term (used to turn a name in the path into `metadata.name=NAME`).
    pub fn and(mut self, term: FieldTerm) -> Self {
        self.terms.push(term);
        self
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for FieldSelector {
    type Err = FieldSelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Escapes `\`, `,` and `=` so a value survives the selector grammar.
pub fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Undoes [`escape`]; errors carry the byte offset of the bad character.
fn unescape(v: &str) -> Result<String, (usize, String)> {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some((_, e @ ('\\' | ',' | '='))) => out.push(e),
                Some((_, e)) => return Err((i, format!("invalid escape sequence '\\{e}'"))),
                None => return Err((i, "dangling '\\' at the end of a term".into())),
            },
            ',' | '=' => return Err((i, format!("unescaped '{c}' in a field selector term"))),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Splits at unescaped `sep`, yielding each part with its byte offset.
fn split_unescaped(s: &str, sep: u8) -> Vec<(usize, &str)> {
    let b = s.as_bytes();
    let mut parts = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < b.len() {
        if b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == sep {
            parts.push((start, &s[start..i]));
            start = i + 1;
        }
        i += 1;
    }
    parts.push((start, &s[start..]));
    parts
}

/// The first unescaped operator in a term: offset, operator, length.
fn find_operator(term: &str) -> Option<(usize, FieldOperator, usize)> {
    let b = term.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'!' if b.get(i + 1) == Some(&b'=') => return Some((i, FieldOperator::NotEquals, 2)),
            b'=' if b.get(i + 1) == Some(&b'=') => {
                return Some((i, FieldOperator::DoubleEquals, 2));
            }
            b'=' => return Some((i, FieldOperator::Equals, 1)),
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_operators_and_escapes() {
        let s = FieldSelector::parse(r"a=1,b==2,c!=x\,y\=z\\").unwrap();
        assert_eq!(s.terms().len(), 3);
        assert_eq!(s.terms()[2].value, r"x,y=z\");
        assert_eq!(s.to_string(), r"a=1,b==2,c!=x\,y\=z\\");
    }

    #[test]
    fn missing_fields_read_as_empty() {
        let s = FieldSelector::parse("spec.nodeName=").unwrap();
        assert!(s.matches(&[][..]));
        let s = FieldSelector::parse("spec.nodeName!=n1").unwrap();
        assert!(s.matches(&[][..]));
        assert!(!s.matches(&[("spec.nodeName", "n1")][..]));
    }

    #[test]
    fn rejects_bad_terms_with_positions() {
        for (bad, pos) in [
            ("a", 0),
            ("x=1,b", 4),
            (r"a=\q", 2),
            ("a=b=c", 3),
            ("=b", 0),
            (r"a=b\", 3),
        ] {
            let e = FieldSelector::parse(bad).unwrap_err();
            assert_eq!(e.position, pos, "{bad:?}: {e}");
        }
    }

    #[test]
    fn empty_terms_are_skipped() {
        assert_eq!(FieldSelector::parse(",a=1,").unwrap().terms().len(), 1);
        assert!(FieldSelector::parse("").unwrap().is_empty());
    }

    fn term_strategy() -> impl Strategy<Value = FieldTerm> {
        (
            "[a-z]{1,4}(\\.[a-zA-Z]{1,5}){0,2}",
            0..3usize,
            "[a-z0-9,=\\\\ ._-]{0,6}",
        )
            .prop_map(|(field, op, value)| FieldTerm {
                field,
                operator: [
                    FieldOperator::Equals,
                    FieldOperator::DoubleEquals,
                    FieldOperator::NotEquals,
                ][op],
                value,
            })
    }

    proptest! {
        #[test]
        fn display_then_parse_round_trips(terms in prop::collection::vec(term_strategy(), 0..4)) {
            let sel = FieldSelector::from_terms(terms);
            prop_assert_eq!(FieldSelector::parse(&sel.to_string()).unwrap(), sel);
        }

        #[test]
        fn matcher_agrees_with_naive_reference(
            terms in prop::collection::vec(term_strategy(), 0..4),
            fields in prop::collection::btree_map("[a-z]{1,4}", "[a-z0-9]{0,3}", 0..4),
        ) {
            let sel = FieldSelector::from_terms(terms.clone());
            let naive = terms.iter().all(|t| {
                let v = fields.get(&t.field).cloned().unwrap_or_default();
                (v == t.value) == (t.operator != FieldOperator::NotEquals)
            });
            prop_assert_eq!(sel.matches(&fields), naive);
        }

        #[test]
        fn arbitrary_input_never_panics(s in "\\PC{0,40}") {
            if let Ok(sel) = FieldSelector::parse(&s) {
                prop_assert_eq!(FieldSelector::parse(&sel.to_string()).unwrap(), sel);
            }
        }
    }
}
