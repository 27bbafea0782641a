//! Label selectors with Kubernetes' grammar.
//!
//! ```text
//! selector    := "" | requirement ("," requirement)*
//! requirement := "!" key | key | key ("=" | "==" | "!=") value
//!              | key ("in" | "notin") "(" value ("," value)* ")"
//! ```
//!
//! Keys are qualified names (`[dns-subdomain "/"] name`, name ≤ 63 characters of
//! `[A-Za-z0-9._-]` starting and ending alphanumeric); values are empty or ≤ 63 characters of
//! the same alphabet. Invariant kept by [`LabelSelector`]: requirements are sorted by key
//! (stable, as Kubernetes does) and every set is sorted and free of duplicates, so
//! `parse(display(s)) == s` for every selector.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use thiserror::Error;

/// Why a label selector was rejected, and where.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "unable to parse label selector {:?} at position {position}: {}",
    crate::echo::echo(.input),
    crate::echo::echo(.reason)
)]
pub struct LabelSelectorError {
    /// The selector as given.
    pub input: String,
    /// Byte offset of the offending token.
    pub position: usize,
    /// What is wrong.
    pub reason: String,
}

/// Anything that can be asked for a label's value.
pub trait Labels {
    /// The value of label `key`, if present.
    fn get_label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<S: std::hash::BuildHasher> Labels for HashMap<String, String, S> {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl Labels for [(&str, &str)] {
    fn get_label(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// The operator of one requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `key=value`
    Equals,
    /// `key==value`
    DoubleEquals,
    /// `key!=value`
    NotEquals,
    /// `key in (a,b)`
    In,
    /// `key notin (a,b)`
    NotIn,
    /// `key`
    Exists,
    /// `!key`
    DoesNotExist,
}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    operator: Operator,
    /// Sorted, without duplicates; one value for the equality operators, none for existence.
    values: Vec<String>,
}

impl Requirement {
    /// Builds a requirement, validating the key, the values and their count for the operator.
    pub fn new(
        key: &str,
        operator: Operator,
        values: impl IntoIterator<Item = String>,
    ) -> Result<Self, String> {
        validate_key(key)?;
        let set: BTreeSet<String> = values.into_iter().collect();
        for v in &set {
            validate_value(v)?;
        }
        match operator {
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals if set.len() != 1 => {
                return Err("exact-match operators need exactly one value".into());
            }
            Operator::In | Operator::NotIn if set.is_empty() => {
                return Err("'in' and 'notin' need at least one value".into());
            }
            Operator::Exists | Operator::DoesNotExist if !set.is_empty() => {
                return Err("existence operators take no value".into());
            }
            _ => {}
        }
        Ok(Self {
            key: key.to_owned(),
            operator,
            values: set.into_iter().collect(),
        })
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, sorted.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn contains(&self, v: &str) -> bool {
        self.values.binary_search_by(|x| x.as_str().cmp(v)).is_ok()
    }

    /// Whether `labels` satisfy this requirement.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        let value = labels.get_label(&self.key);
        match self.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In => {
                value.is_some_and(|v| self.contains(v))
            }
            Operator::NotEquals | Operator::NotIn => value.is_none_or(|v| !self.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let one = || self.values.first().map(String::as_str).unwrap_or("");
        match self.operator {
            Operator::Equals => write!(f, "{}={}", self.key, one()),
            Operator::DoubleEquals => write!(f, "{}=={}", self.key, one()),
            Operator::NotEquals => write!(f, "{}!={}", self.key, one()),
            Operator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

/// A parsed label selector: the conjunction of its requirements. Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Builds a selector from requirements (sorted by key, stably).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Self { requirements }
    }

    /// Parses Kubernetes' selector syntax.
    ///
    /// ```
    /// use listwatch_api::labels::LabelSelector;
    /// let s = LabelSelector::parse("app=web,tier in (a,b),!canary").unwrap();
    /// let labels = [("app", "web"), ("tier", "b")];
    /// assert!(s.matches(&labels[..]));
    /// assert!(LabelSelector::parse("app in a").is_err());
    /// ```
    pub fn parse(input: &str) -> Result<Self, LabelSelectorError> {
        Parser::new(input).parse()
    }

    /// Whether the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// The value `key` must equal for anything to match (`key=v`, `key==v`, `key in (v)`).
    pub fn exact_match(&self, key: &str) -> Option<&str> {
        self.requirements.iter().find_map(|r| match r.operator {
            Operator::Equals | Operator::DoubleEquals | Operator::In
                if r.key == key && r.values.len() == 1 =>
            {
                r.values.first().map(String::as_str)
            }
            _ => None,
        })
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = LabelSelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token<'a> {
    Ident(&'a str),
    Comma,
    Open,
    Close,
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    End,
}

impl Token<'_> {
    fn describe(&self) -> String {
        match self {
            Token::Ident(s) => format!("{s:?}"),
            Token::Comma => "','".into(),
            Token::Open => "'('".into(),
            Token::Close => "')'".into(),
            Token::Eq => "'='".into(),
            Token::DoubleEq => "'=='".into(),
            Token::NotEq => "'!='".into(),
            Token::Bang => "'!'".into(),
            Token::End => "end of input".into(),
        }
    }
}

struct Parser<'a> {
    input: &'a str,
    pos: usize,
}

fn is_special(c: char) -> bool {
    matches!(c, ',' | '(' | ')' | '=' | '!') || c.is_whitespace()
}

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        Self { input, pos: 0 }
    }

    fn err(&self, position: usize, reason: impl Into<String>) -> LabelSelectorError {
        LabelSelectorError {
            input: self.input.to_owned(),
            position,
            reason: reason.into(),
        }
    }

    /// Returns the next token and the offset it starts at, without consuming it.
    fn peek(&self) -> (Token<'a>, usize, usize) {
        let rest = &self.input[self.pos..];
        let trimmed = rest.trim_start();
        let start = self.pos + (rest.len() - trimmed.len());
        let mut chars = trimmed.chars();
        let Some(c) = chars.next() else {
            return (Token::End, start, start);
        };
        let (tok, len) = match c {
            ',' => (Token::Comma, 1),
            '(' => (Token::Open, 1),
            ')' => (Token::Close, 1),
            '=' if trimmed.starts_with("==") => (Token::DoubleEq, 2),
            '=' => (Token::Eq, 1),
            '!' if trimmed.starts_with("!=") => (Token::NotEq, 2),
            '!' => (Token::Bang, 1),
            _ => {
                let len = trimmed.find(is_special).unwrap_or(trimmed.len());
                (Token::Ident(&trimmed[..len]), len)
            }
        };
        (tok, start, start + len)
    }

    fn next(&mut self) -> (Token<'a>, usize) {
        let (tok, start, end) = self.peek();
        self.pos = end;
        (tok, start)
    }

    fn parse(mut self) -> Result<LabelSelector, LabelSelectorError> {
        let mut reqs = Vec::new();
        if self.peek().0 == Token::End {
            return Ok(LabelSelector::default());
        }
        loop {
            reqs.push(self.requirement()?);
            match self.next() {
                (Token::End, _) => break,
                (Token::Comma, _) => {}
                (t, at) => {
                    return Err(self.err(at, format!("found {}, expected ','", t.describe())));
                }
            }
        }
        Ok(LabelSelector::from_requirements(reqs))
    }

    fn requirement(&mut self) -> Result<Requirement, LabelSelectorError> {
        let (tok, at) = self.next();
        let (negated, (tok, at)) = match tok {
            Token::Bang => (true, self.next()),
            t => (false, (t, at)),
        };
        let key = match tok {
            Token::Ident(k) => k,
            t => {
                return Err(self.err(at, format!("found {}, expected a label key", t.describe())));
            }
        };
        if let Err(reason) = validate_key(key) {
            return Err(self.err(at, reason));
        }
        if negated {
            return self.build(at, key, Operator::DoesNotExist, Vec::new());
        }
        let (op_tok, op_at, _) = self.peek();
        let op = match op_tok {
            Token::End | Token::Comma => return self.build(at, key, Operator::Exists, Vec::new()),
            Token::Eq => Operator::Equals,
            Token::DoubleEq => Operator::DoubleEquals,
            Token::NotEq => Operator::NotEquals,
            Token::Ident("in") => Operator::In,
            Token::Ident("notin") => Operator::NotIn,
            t => {
                return Err(self.err(
                    op_at,
                    format!(
                        "found {}, expected one of '=', '==', '!=', 'in', 'notin'",
                        t.describe()
                    ),
                ));
            }
        };
        self.next();
        let values = match op {
            Operator::In | Operator::NotIn => self.value_set()?,
            _ => {
                // An empty value is allowed: `key=` selects labels whose value is "".
                match self.peek() {
                    (Token::Ident(v), v_at, end) => {
                        self.pos = end;
                        if let Err(reason) = validate_value(v) {
                            return Err(self.err(v_at, reason));
                        }
                        vec![v.to_owned()]
                    }
                    (Token::End | Token::Comma, _, _) => vec![String::new()],
                    (t, v_at, _) => {
                        return Err(
                            self.err(v_at, format!("found {}, expected a value", t.describe()))
                        );
                    }
                }
            }
        };
        self.build(at, key, op, values)
    }

    fn value_set(&mut self) -> Result<Vec<String>, LabelSelectorError> {
        match self.next() {
            (Token::Open, _) => {}
            (t, at) => return Err(self.err(at, format!("found {}, expected '('", t.describe()))),
        }
        let mut values = Vec::new();
        loop {
            // Values may be empty strings: `in (a,)` holds "a" and "", and `in ()` holds ""
            // alone, as upstream parses them.
            let value = match self.peek() {
                (Token::Ident(v), at, end) => {
                    self.pos = end;
                    if let Err(reason) = validate_value(v) {
                        return Err(self.err(at, reason));
                    }
                    v.to_owned()
                }
                (Token::Comma | Token::Close, _, _) => String::new(),
                (t, at, _) => {
                    return Err(self.err(at, format!("found {}, expected a value", t.describe())));
                }
            };
            values.push(value);
            match self.next() {
                (Token::Comma, _) => {}
                (Token::Close, _) => break,
                (t, at) => {
                    return Err(
                        self.err(at, format!("found {}, expected ',' or ')'", t.describe()))
                    );
                }
            }
        }
        Ok(values)
    }

    fn build(
        &self,
        at: usize,
        key: &str,
        op: Operator,
        values: Vec<String>,
    ) -> Result<Requirement, LabelSelectorError> {
        Requirement::new(key, op, values).map_err(|reason| self.err(at, reason))
    }
}

const NAME_MAX: usize = 63;
const PREFIX_MAX: usize = 253;

fn is_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

/// Checks a label value: empty, or ≤ 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends.
pub fn validate_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    validate_name_part(v).map_err(|e| format!("invalid label value {v:?}: {e}"))
}

fn validate_name_part(v: &str) -> Result<(), String> {
    let b = v.as_bytes();
    if b.len() > NAME_MAX {
        return Err(format!("must be no more than {NAME_MAX} characters"));
    }
    let ends_ok = b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric);
    if !ends_ok || !b.iter().all(|&c| is_name_char(c)) {
        return Err(
            "must consist of alphanumeric characters, '-', '_' or '.', and must start \
                    and end with an alphanumeric character"
                .into(),
        );
    }
    Ok(())
}

/// Checks a DNS-1123 subdomain: ≤ 253 of `[a-z0-9.-]`, alphanumeric at both ends of each label.
pub fn validate_dns_subdomain(v: &str) -> Result<(), String> {
    if v.is_empty() || v.len() > PREFIX_MAX {
        return Err(format!(
            "must be a DNS subdomain of 1 to {PREFIX_MAX} characters"
        ));
    }
    for part in v.split('.') {
        let b = part.as_bytes();
        let ok = b
            .first()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && b.last()
                .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && b.iter()
                .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
        if !ok {
            return Err(
                "must consist of lower case alphanumeric characters, '-' or '.', and must \
                 start and end with an alphanumeric character"
                    .into(),
            );
        }
    }
    Ok(())
}

/// Checks a label key: a qualified name with an optional DNS-subdomain prefix.
pub fn validate_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix {
        validate_dns_subdomain(p).map_err(|e| format!("invalid label key {k:?}: prefix {e}"))?;
    }
    if name.is_empty() {
        return Err(format!(
            "invalid label key {k:?}: name part must be non-empty"
        ));
    }
    validate_name_part(name).map_err(|e| format!("invalid label key {k:?}: name part {e}"))
}

// Upstream's validation messages (k8s.io/apimachinery/pkg/util/validation, v1.32), for the
// 422 causes of metadata: each function returns every message upstream would, in order.

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// Upstream's `RegexError`: the message, examples and the regular expression.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn is_qualified_name_part(v: &str) -> bool {
    let b = v.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter().all(|&c| is_name_char(c))
}

/// Upstream's `IsDNS1123Subdomain`: every problem with `v` as a DNS-1123 subdomain.
pub fn dns1123_subdomain_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > PREFIX_MAX {
        errs.push(max_len_error(PREFIX_MAX));
    }
    if validate_dns_subdomain_chars(v).is_err() {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

fn validate_dns_subdomain_chars(v: &str) -> Result<(), ()> {
    if v.is_empty() {
        return Err(());
    }
    for part in v.split('.') {
        let b = part.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        if !(b.first().is_some_and(alnum)
            && b.last().is_some_and(alnum)
            && b.iter().all(|c| alnum(c) || *c == b'-'))
        {
            return Err(());
        }
    }
    Ok(())
}

/// Upstream's `IsQualifiedName` (label and annotation keys): every problem with `k`.
///
/// ```
/// use listwatch_api::labels::qualified_name_errors;
/// assert!(qualified_name_errors("example.com/MyName").is_empty());
/// assert_eq!(qualified_name_errors("a/").len(), 2); // empty name part, and the regex
/// ```
pub fn qualified_name_errors(k: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = k.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > NAME_MAX {
        errs.push(format!("name part {}", max_len_error(NAME_MAX)));
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Upstream's `IsValidLabelValue`: every problem with `v` as a label value.
pub fn label_value_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > NAME_MAX {
        errs.push(max_len_error(NAME_MAX));
    }
    if !v.is_empty() && !is_qualified_name_part(v) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            &format!("({QUALIFIED_NAME_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn parses_every_operator() {
        let s = LabelSelector::parse("a=1,b==2,c!=3,d in (x,y),e notin (z),f,!g").unwrap();
        let ops: Vec<_> = s.requirements().iter().map(|r| r.operator()).collect();
        assert_eq!(
            ops,
            [
                Operator::Equals,
                Operator::DoubleEquals,
                Operator::NotEquals,
                Operator::In,
                Operator::NotIn,
                Operator::Exists,
                Operator::DoesNotExist
            ]
        );
        assert_eq!(s.to_string(), "a=1,b==2,c!=3,d in (x,y),e notin (z),f,!g");
    }

    #[test]
    fn tolerates_whitespace_and_sorts_by_key() {
        let s = LabelSelector::parse("  z = 1 ,  a in ( b , a ) ").unwrap();
        assert_eq!(s.to_string(), "a in (a,b),z=1");
    }

    #[test]
    fn empty_values_are_allowed() {
        assert_eq!(
            LabelSelector::parse("a in ()").unwrap().requirements()[0].values(),
            [""]
        );
        let s = LabelSelector::parse("a=,b in (,x)").unwrap();
        assert!(s.matches(&labels(&[("a", ""), ("b", "")])));
        assert!(!s.matches(&labels(&[("a", "1"), ("b", "")])));
    }

    #[test]
    fn not_equals_matches_missing_labels() {
        let s = LabelSelector::parse("a!=1,b notin (2)").unwrap();
        assert!(s.matches(&labels(&[])));
        assert!(!s.matches(&labels(&[("a", "1")])));
    }

    #[test]
    fn rejects_bad_input_with_a_position() {
        for (bad, pos) in [
            ("a in b", 5),
            ("a in (b", 7),
            ("a in (b c)", 8),
            ("=a", 0),
            ("a=b c", 4),
            ("a,", 2),
            ("a=b=c", 3),
            ("-a=b", 0),
            ("a=-b", 2),
            ("A_/b=c", 0),
            ("a b", 2),
        ] {
            let e = LabelSelector::parse(bad).unwrap_err();
            assert_eq!(e.position, pos, "{bad:?}: {e}");
        }
        let long = "x".repeat(64);
        assert!(LabelSelector::parse(&long).is_err());
        assert!(LabelSelector::parse(&format!("a={long}")).is_err());
        assert!(LabelSelector::parse("example.com/app=web").is_ok());
        assert!(LabelSelector::parse("Example.com/app=web").is_err());
    }

    #[test]
    fn exact_match_reports_single_value_equalities() {
        let s = LabelSelector::parse("a=1,b in (2),c in (3,4)").unwrap();
        assert_eq!(s.exact_match("a"), Some("1"));
        assert_eq!(s.exact_match("b"), Some("2"));
        assert_eq!(s.exact_match("c"), None);
    }

    fn key_strategy() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z]([a-z0-9._-]{0,5}[a-z0-9])?",
            "[a-z]{1,4}\\.[a-z]{2,3}/[A-Za-z0-9]([A-Za-z0-9_.-]{0,4}[A-Za-z0-9])?",
        ]
    }

    fn value_strategy() -> impl Strategy<Value = String> {
        prop_oneof!["", "[A-Za-z0-9]([A-Za-z0-9_.-]{0,4}[A-Za-z0-9])?"]
    }

    fn requirement_strategy() -> impl Strategy<Value = Requirement> {
        (
            key_strategy(),
            0..7usize,
            prop::collection::vec(value_strategy(), 1..4),
        )
            .prop_map(|(k, op, vals)| {
                let op = [
                    Operator::Equals,
                    Operator::DoubleEquals,
                    Operator::NotEquals,
                    Operator::In,
                    Operator::NotIn,
                    Operator::Exists,
                    Operator::DoesNotExist,
                ][op];
                let vals = match op {
                    Operator::Exists | Operator::DoesNotExist => vec![],
                    Operator::In | Operator::NotIn => vals,
                    _ => vals.into_iter().take(1).collect(),
                };
                Requirement::new(&k, op, vals).unwrap()
            })
    }

    fn selector_strategy() -> impl Strategy<Value = LabelSelector> {
        prop::collection::vec(requirement_strategy(), 0..5)
            .prop_map(LabelSelector::from_requirements)
    }

    /// The obvious reading of each operator, written independently of `matches`.
    fn naive_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
        sel.requirements().iter().all(|r| {
            let got = labels.get(r.key());
            let in_set = got.map(|v| r.values().iter().any(|x| x == v));
            match r.operator() {
                Operator::Equals | Operator::DoubleEquals | Operator::In => in_set == Some(true),
                Operator::NotEquals | Operator::NotIn => in_set != Some(true),
                Operator::Exists => got.is_some(),
                Operator::DoesNotExist => got.is_none(),
            }
        })
    }

    proptest! {
        #[test]
        fn display_then_parse_round_trips(sel in selector_strategy()) {
            let text = sel.to_string();
            let back = LabelSelector::parse(&text).unwrap();
            prop_assert_eq!(back, sel);
        }

        #[test]
        fn matcher_agrees_with_naive_reference(
            sel in selector_strategy(),
            pairs in prop::collection::btree_map(key_strategy(), value_strategy(), 0..6),
        ) {
            prop_assert_eq!(sel.matches(&pairs), naive_matches(&sel, &pairs));
        }

        #[test]
        fn arbitrary_input_never_panics(s in "\\PC{0,40}") {
            let _ = LabelSelector::parse(&s);
        }

        #[test]
        fn arbitrary_selector_like_input_never_panics(s in "[a-z!=,() in]{0,30}") {
            if let Ok(sel) = LabelSelector::parse(&s) {
                // Whatever parses must survive its own display.
                prop_assert_eq!(LabelSelector::parse(&sel.to_string()).unwrap(), sel);
            }
        }
    }
}
