//! Value validation with kube-openapi's semantics and messages, as apiextensions turns them
//! into field errors (`kubeOpenAPIResultToFieldErrors`), then `x-kubernetes-list-type`'s
//! set and map checks (`listtype.ValidateListSetsAndMaps`).
//!
//! The checks of one node run in kube-openapi's order: type, junctors (`allOf`, `anyOf`,
//! `oneOf`, `not`), string, format, number, array, `enum`, object. A junctor's failure is
//! upstream's composite error, which apiextensions reports at the field `<nil>` with an
//! empty value (`<nil>: Invalid value: "": "spec.x" must validate at least one schema
//! (anyOf)`), followed by the errors of one failing alternative (here the one with the
//! fewest errors, upstream's "most checks passed").

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{ListType, MAX_DEPTH, MAX_ERRORS, Node, Ty, VALIDATION_BUDGET, format};
use crate::field::{ErrorType, FieldError, go_quote, shown};

struct Validator {
    budget: u64,
    over: bool,
    lists: Vec<FieldError>,
}

/// Validates `obj` against `root`; `name` is the path of `obj` itself (empty for a
/// resource).
pub(super) fn validate(root: &Node, obj: &Value, name: &str) -> Vec<FieldError> {
    let mut v = Validator::new();
    let mut out = Vec::new();
    v.check(root, obj, None, name, 0, &mut out);
    v.finish(out, true, name)
}

/// Validates an update with upstream's ratcheting (`CRDValidationRatcheting`, on by
/// default in v1.32): a value equal to the old one at the same place (map keys, and items of
/// `x-kubernetes-list-type: map` lists by their keys) is not validated again, and the
/// list-type checks apply only when the old object passed them.
pub(super) fn validate_update(root: &Node, new: &Value, old: &Value) -> Vec<FieldError> {
    let mut before = Validator::new();
    let mut ignored = Vec::new();
    before.check(root, old, None, "", 0, &mut ignored);
    let old_lists_valid = before.lists.is_empty() && !before.over;
    let mut v = Validator::new();
    let mut out = Vec::new();
    v.check(root, new, Some(old), "", 0, &mut out);
    v.finish(out, old_lists_valid, "")
}

impl Validator {
    fn new() -> Self {
        Validator {
            budget: VALIDATION_BUDGET,
            over: false,
            lists: Vec::new(),
        }
    }

    fn finish(mut self, mut out: Vec<FieldError>, lists: bool, name: &str) -> Vec<FieldError> {
        if lists {
            out.append(&mut self.lists);
        }
        out.truncate(MAX_ERRORS);
        if self.over {
            out.push(FieldError::new(
                ErrorType::Invalid,
                name,
                None,
                "the object is too costly to validate against its schema",
            ));
        }
        out
    }
}

fn child(path: &str, k: &str) -> String {
    super::build::join(path, k)
}

/// The JSON type of a value as kube-openapi names it (`integer` for a whole number
/// decoded as an integer, `number` for a float; an integer beyond int64 is a float, as Go's
/// unstructured decoder reads it).
fn actual(x: &Value) -> &'static str {
    match x {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Number(n) if n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn expected(n: &Node) -> Vec<&'static str> {
    if n.int_or_string {
        vec!["integer", "string"]
    } else {
        n.ty.map(Ty::name).into_iter().collect()
    }
}

/// Go's `%v` of a float64 (`5`, `0.5`, `1e+21`, `1e-05`).
fn go_float(f: f64) -> String {
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e21).contains(&a) {
        let s = format!("{f:e}");
        let Some((m, e)) = s.split_once('e') else {
            return s;
        };
        let (sign, digits) = match e.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', e),
        };
        let digits = if digits.len() < 2 {
            format!("0{digits}")
        } else {
            digits.to_owned()
        };
        return format!("{m}e{sign}{digits}");
    }
    format!("{f}")
}

/// A composite (junctor) error: upstream reports it at `<nil>` with an empty value.
fn composite(detail: String) -> FieldError {
    FieldError::new(ErrorType::Invalid, "<nil>", Some("\"\"".into()), detail)
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl Validator {
    fn spend(&mut self, cost: u64) -> bool {
        if self.over {
            return false;
        }
        match self.budget.checked_sub(cost) {
            Some(b) => {
                self.budget = b;
                true
            }
            None => {
                self.over = true;
                false
            }
        }
    }

    /// Checks `x` at `path` against `n`; `old` is the value at the same place before an
    /// update (ratcheting: an unchanged value is not checked again).
    fn check(
        &mut self,
        n: &Node,
        x: &Value,
        old: Option<&Value>,
        path: &str,
        depth: usize,
        out: &mut Vec<FieldError>,
    ) {
        if depth > MAX_DEPTH || out.len() >= MAX_ERRORS || !self.spend(1) {
            return;
        }
        if old.is_some_and(|o| o == x) {
            return;
        }
        let types = expected(n);
        if x.is_null() {
            if !types.is_empty() && !n.nullable {
                out.push(type_invalid(path, &types.join(","), "null"));
            }
            return;
        }
        let got = actual(x);
        if !types.is_empty() {
            // kube-openapi's IsFloat64AJSONInteger: integral and within ±(2^53 - 1).
            let whole_float = got == "number"
                && x.as_f64()
                    .and_then(crate::custom::numbers::integral)
                    .is_some();
            let ok = types.contains(&got)
                || (whole_float && types.contains(&"integer"))
                || (got == "integer" && types.contains(&"number"));
            if !ok {
                out.push(type_invalid(path, &types.join(","), got));
            }
        }
        self.junctors(n, x, old, path, depth, out);
        match x {
            Value::String(s) => self.string(n, s, path, out),
            Value::Number(_) => number(n, x, path, out),
            Value::Array(items) => self.array(n, items, old, path, depth, out),
            _ => {}
        }
        if let Some(e) = &n.enumeration
            && !e.contains(x)
        {
            let allowed: Vec<String> = e
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            out.push(FieldError::not_supported(path, x, &allowed));
        }
        if let Value::Object(m) = x {
            self.object(n, m, old, path, depth, out);
            if n.embedded {
                super::embedded::validate(path, m, out);
            }
        }
    }

    fn junctors(
        &mut self,
        n: &Node,
        x: &Value,
        old: Option<&Value>,
        path: &str,
        depth: usize,
        out: &mut Vec<FieldError>,
    ) {
        let q = go_quote(path);
        if !n.any_of.is_empty() {
            let mut best: Option<Vec<FieldError>> = None;
            let mut ok = false;
            for b in &n.any_of {
                let mut errs = Vec::new();
                self.check(b, x, old, path, depth + 1, &mut errs);
                if errs.is_empty() {
                    ok = true;
                    break;
                }
                if best.as_ref().is_none_or(|e| errs.len() < e.len()) {
                    best = Some(errs);
                }
            }
            if !ok {
                out.push(composite(format!(
                    "{q} must validate at least one schema (anyOf)"
                )));
                out.extend(best.unwrap_or_default());
            }
        }
        if !n.one_of.is_empty() {
            let mut best: Option<Vec<FieldError>> = None;
            let mut valid = 0usize;
            for b in &n.one_of {
                let mut errs = Vec::new();
                self.check(b, x, old, path, depth + 1, &mut errs);
                if errs.is_empty() {
                    valid += 1;
                } else if valid == 0 && best.as_ref().is_none_or(|e| errs.len() < e.len()) {
                    best = Some(errs);
                }
            }
            if valid != 1 {
                let more = if valid == 0 {
                    "Found none valid".to_owned()
                } else {
                    format!("Found {valid} valid alternatives")
                };
                out.push(composite(format!(
                    "{q} must validate one and only one schema (oneOf). {more}"
                )));
                if valid == 0 {
                    out.extend(best.unwrap_or_default());
                }
            }
        }
        if !n.all_of.is_empty() {
            let mut valid = 0usize;
            for b in &n.all_of {
                let mut errs = Vec::new();
                self.check(b, x, old, path, depth + 1, &mut errs);
                if errs.is_empty() {
                    valid += 1;
                }
                out.extend(errs);
            }
            if valid != n.all_of.len() {
                let more = if valid == 0 { ". None validated" } else { "" };
                out.push(composite(format!(
                    "{q} must validate all the schemas (allOf){more}"
                )));
            }
        }
        if let Some(b) = &n.not {
            let mut errs = Vec::new();
            self.check(b, x, old, path, depth + 1, &mut errs);
            if errs.is_empty() {
                out.push(composite(format!("{q} must not validate the schema (not)")));
            }
        }
    }

    fn string(&mut self, n: &Node, s: &str, path: &str, out: &mut Vec<FieldError>) {
        if n.max_length.is_some() || n.min_length.is_some() {
            let chars = s.chars().count() as u64;
            let bound = Count::new(chars, path);
            out.extend(bound.over(n.max_length, ErrorType::TooLong, || None, ("byte", "bytes")));
            out.extend(bound.under(
                n.min_length,
                || Some(go_quote(s)),
                |min| format!("be at least {min} chars long"),
            ));
        }
        if let Some(p) = &n.pattern
            && self.spend(1 + (s.len() as u64).saturating_mul(p.weight))
            && !p.re.regex().is_match(s)
        {
            out.push(FieldError::new(
                ErrorType::Invalid,
                path,
                Some(go_quote(s)),
                format!("{path} in body should match '{}'", p.source),
            ));
        }
        if let Some(f) = &n.format
            && !format::valid(f, s)
        {
            out.push(FieldError::new(
                ErrorType::TypeInvalid,
                path,
                Some(go_quote(s)),
                format!("{path} in body must be of type {f}: {}", go_quote(s)),
            ));
        }
    }

    fn array(
        &mut self,
        n: &Node,
        items: &[Value],
        old: Option<&Value>,
        path: &str,
        depth: usize,
        out: &mut Vec<FieldError>,
    ) {
        let len = items.len() as u64;
        let bound = Count::new(len, path);
        out.extend(bound.under(
            n.min_items,
            || Some(len.to_string()),
            |min| format!("have at least {min} items"),
        ));
        out.extend(bound.over(
            n.max_items,
            ErrorType::TooMany,
            || Some(len.to_string()),
            ("item", "items"),
        ));
        if let Some(s) = &n.items {
            // Upstream correlates the items of a map list by their keys, no other items.
            let old_items: HashMap<String, &Value> = match (&n.list_type, old) {
                (Some(ListType::Map(keys)), Some(Value::Array(before))) => before
                    .iter()
                    .map(|o| (canonical(&map_key(n, o, keys)), o))
                    .collect(),
                _ => HashMap::new(),
            };
            for (i, v) in items.iter().enumerate() {
                if out.len() >= MAX_ERRORS || self.over {
                    break;
                }
                let before = match &n.list_type {
                    Some(ListType::Map(keys)) if !old_items.is_empty() => {
                        old_items.get(&canonical(&map_key(n, v, keys))).copied()
                    }
                    _ => None,
                };
                self.check(s, v, before, &format!("{path}[{i}]"), depth + 1, out);
            }
        }
        match &n.list_type {
            Some(ListType::Set) => self.set(items, path),
            Some(ListType::Map(keys)) => self.map(n, items, keys, path),
            _ => {}
        }
    }

    /// `x-kubernetes-list-type: set`: every later copy of an item is a duplicate.
    fn set(&mut self, items: &[Value], path: &str) {
        let mut seen = HashSet::new();
        for (i, v) in items.iter().enumerate() {
            if !self.spend(1) {
                return;
            }
            if !seen.insert(canonical(v)) && self.lists.len() < MAX_ERRORS {
                self.lists.push(FieldError::new(
                    ErrorType::Duplicate,
                    &format!("{path}[{i}]"),
                    Some(shown(v)),
                    "",
                ));
            }
        }
    }

    /// `x-kubernetes-list-type: map`: no two items with the same key values (a missing key
    /// reads as its default).
    fn map(&mut self, n: &Node, items: &[Value], keys: &[String], path: &str) {
        let mut seen = HashSet::new();
        for (i, v) in items.iter().enumerate() {
            if !self.spend(1) || self.lists.len() >= MAX_ERRORS {
                return;
            }
            if !v.is_object() {
                // The item's type error is reported by the value validation.
                continue;
            }
            let id = map_key(n, v, keys);
            if !seen.insert(canonical(&id)) {
                self.lists.push(FieldError::new(
                    ErrorType::Duplicate,
                    &format!("{path}[{i}]"),
                    Some(shown(&id)),
                    "",
                ));
            }
        }
    }

    fn object(
        &mut self,
        n: &Node,
        m: &serde_json::Map<String, Value>,
        old: Option<&Value>,
        path: &str,
        depth: usize,
        out: &mut Vec<FieldError>,
    ) {
        let size = m.len() as u64;
        let bound = Count::new(size, path);
        out.extend(bound.over(
            n.max_properties,
            ErrorType::TooMany,
            || Some(size.to_string()),
            ("item", "items"),
        ));
        out.extend(bound.under(
            n.min_properties,
            || Some(size.to_string()),
            |min| format!("have at least {min} properties"),
        ));
        if let Some(a) = &n.additional {
            for (k, v) in m {
                if out.len() >= MAX_ERRORS || self.over {
                    return;
                }
                if !n.properties.contains_key(k) {
                    self.check(
                        a,
                        v,
                        old.and_then(|o| o.get(k)),
                        &child(path, k),
                        depth + 1,
                        out,
                    );
                }
            }
        }
        for (k, s) in &n.properties {
            if out.len() >= MAX_ERRORS || self.over {
                return;
            }
            if let Some(v) = m.get(k) {
                self.check(
                    s,
                    v,
                    old.and_then(|o| o.get(k)),
                    &child(path, k),
                    depth + 1,
                    out,
                );
            }
        }
        for k in &n.required {
            if !m.contains_key(k) && out.len() < MAX_ERRORS {
                out.push(FieldError::required(&child(path, k), ""));
            }
        }
    }
}

/// kube-openapi's `InvalidType` as apiextensions reports it (`FieldValueTypeInvalid`, the
/// value being the actual type's name).
fn type_invalid(path: &str, types: &str, got: &str) -> FieldError {
    FieldError::new(
        ErrorType::TypeInvalid,
        path,
        Some(go_quote(got)),
        format!("{path} in body must be of type {types}: {}", go_quote(got)),
    )
}

fn number(n: &Node, x: &Value, path: &str, out: &mut Vec<FieldError>) {
    let Some(f) = x.as_f64() else { return };
    let shown_v = x.to_string();
    if let Some(m) = n.multiple_of {
        let ok = match (x.as_i64(), m.fract() == 0.0 && m.abs() < 9.0e18) {
            (Some(i), true) => i.checked_rem(m as i64).is_none_or(|r| r == 0),
            _ => {
                let q = f / m;
                q.is_finite() && q.fract() == 0.0
            }
        };
        if !ok {
            out.push(FieldError::new(
                ErrorType::Invalid,
                path,
                Some(shown_v.clone()),
                format!("{path} in body should be a multiple of {}", go_float(m)),
            ));
        }
    }
    let limits = [
        (
            n.maximum,
            n.exclusive_maximum,
            Ordering::Greater,
            "less than",
        ),
        (
            n.minimum,
            n.exclusive_minimum,
            Ordering::Less,
            "greater than",
        ),
    ];
    for (bound, exclusive, beyond, how) in limits {
        let Some(bound) = bound else { continue };
        // Beyond the bound, or on it when it is exclusive (NaN compares as neither).
        let bad = match f.partial_cmp(&bound) {
            Some(o) if o == beyond => true,
            Some(Ordering::Equal) => exclusive,
            _ => false,
        };
        if bad {
            let how = if exclusive {
                how.to_owned()
            } else {
                format!("{how} or equal to")
            };
            out.push(FieldError::new(
                ErrorType::Invalid,
                path,
                Some(shown_v.clone()),
                format!("{path} in body should be {how} {}", go_float(bound)),
            ));
        }
    }
}

/// A count (a string's characters, an array's items, an object's properties) checked
/// against its schema's `max*` and `min*` bounds, each failure as apiextensions reports it.
struct Count<'a> {
    count: u64,
    path: &'a str,
}

impl<'a> Count<'a> {
    fn new(count: u64, path: &'a str) -> Self {
        Self { count, path }
    }

    /// Over `max`: `kind` (`TooLong`, `TooMany`), "must have at most N <unit>".
    fn over(
        &self,
        max: Option<u64>,
        kind: ErrorType,
        value: impl FnOnce() -> Option<String>,
        (one, many): (&str, &str),
    ) -> Option<FieldError> {
        let max = max.filter(|max| self.count > *max)?;
        Some(FieldError::new(
            kind,
            self.path,
            value(),
            format!("must have at most {}", plural(max, one, many)),
        ))
    }

    /// Under `min`: `Invalid`, kube-openapi's "<path> in body should <what(min)>".
    fn under(
        &self,
        min: Option<u64>,
        value: impl FnOnce() -> Option<String>,
        what: impl FnOnce(u64) -> String,
    ) -> Option<FieldError> {
        let min = min.filter(|min| self.count < *min)?;
        Some(FieldError::new(
            ErrorType::Invalid,
            self.path,
            value(),
            format!("{} in body should {}", self.path, what(min)),
        ))
    }
}

/// The key values of a map list's item (a missing key reads as its default), as an object.
fn map_key(n: &Node, item: &Value, keys: &[String]) -> Value {
    let mut id = serde_json::Map::new();
    for k in keys {
        let val = item.get(k).cloned().or_else(|| {
            n.items
                .as_ref()
                .and_then(|s| s.properties.get(k))
                .and_then(|p| p.default.clone())
        });
        if let Some(val) = val {
            id.insert(k.clone(), val);
        }
    }
    Value::Object(id)
}

/// A value's JSON with object keys sorted, for equality of list items whatever the key
/// order (the decoder bounds the depth).
fn canonical(v: &Value) -> String {
    fn write(v: &Value, out: &mut String, depth: usize) {
        match v {
            Value::Object(m) if depth < 256 => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    if let Some(c) = m.get(k) {
                        write(c, out, depth + 1);
                    }
                }
                out.push('}');
            }
            Value::Array(a) if depth < 256 => {
                out.push('[');
                for (i, c) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(c, out, depth + 1);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut s = String::new();
    write(v, &mut s, 0);
    s
}

#[cfg(test)]
mod tests {
    use super::go_float;

    #[test]
    fn floats_print_as_go_prints_them() {
        assert_eq!(go_float(5.0), "5");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(0.00001), "1e-05");
    }
}
