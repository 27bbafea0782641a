//! [`FieldError`]: one invalid field as a kind's own checks find it (upstream's
//! `field.Error`), for the registry to answer as a 422 cause.
//!
//! It lives here, below the registry, so that a [`KindStrategy`](crate::KindStrategy) and
//! the custom resource schema ([`crate::custom::schema`]) can report errors without depending
//! on the registry. The value is kept already rendered as upstream's `ErrorBody` prints it
//! (a Go-quoted string, a bare number, JSON for objects), cut to [`MAX_SHOWN_BYTES`].
//!
//! Invariants: [`FieldError::body`] and the `Display` text are upstream's
//! (`spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer:
//! "string"`); a shown value never exceeds [`MAX_SHOWN_BYTES`] plus the cut marker.

use serde_json::Value;

/// The longest rendered value kept in an error (a longer one is cut at a character
/// boundary and ends with `...`).
pub const MAX_SHOWN_BYTES: usize = 1024;

/// Upstream's `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// `FieldValueInvalid`: `Invalid value`.
    Invalid,
    /// `FieldValueTypeInvalid`: `Invalid value` (a value of the wrong type).
    TypeInvalid,
    /// `FieldValueNotSupported`: `Unsupported value`.
    NotSupported,
    /// `FieldValueRequired`: `Required value`.
    Required,
    /// `FieldValueForbidden`: `Forbidden`.
    Forbidden,
    /// `FieldValueTooLong`: `Too long` (the value is not shown).
    TooLong,
    /// `FieldValueTooMany`: `Too many`.
    TooMany,
    /// `FieldValueDuplicate`: `Duplicate value`.
    Duplicate,
}

impl ErrorType {
    /// The cause's `reason`, e.g. `FieldValueInvalid`.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::Duplicate => "FieldValueDuplicate",
        }
    }

    /// The text that starts the message, e.g. `Invalid value`.
    pub fn text(self) -> &'static str {
        match self {
            ErrorType::Invalid | ErrorType::TypeInvalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Required => "Required value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
            ErrorType::Duplicate => "Duplicate value",
        }
    }
}

/// One invalid field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {}", self.body())]
pub struct FieldError {
    /// What is wrong.
    pub kind: ErrorType,
    /// The field path, e.g. `spec.replicas` or `properties[spec].type`.
    pub field: String,
    /// The value as upstream shows it (already rendered), when it is shown.
    pub value: Option<String>,
    /// The detail after the value (may be empty).
    pub detail: String,
}

impl FieldError {
    /// An error of `kind` at `field` with a rendered value.
    pub fn new(
        kind: ErrorType,
        field: &str,
        value: Option<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            kind,
            field: field.into(),
            value: value.map(cut),
            detail: detail.into(),
        }
    }

    /// `Invalid value: <value>: detail`.
    pub fn invalid(field: &str, value: &Value, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Invalid, field, Some(shown(value)), detail)
    }

    /// `Required value[: detail]`.
    pub fn required(field: &str, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Required, field, None, detail)
    }

    /// `Forbidden: detail`.
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Forbidden, field, None, detail)
    }

    /// `Unsupported value: "v": supported values: "a", "b"`.
    pub fn not_supported(field: &str, value: &Value, supported: &[String]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        let detail = if list.is_empty() {
            String::new()
        } else {
            format!("supported values: {}", list.join(", "))
        };
        Self::new(ErrorType::NotSupported, field, Some(shown(value)), detail)
    }

    /// [`invalid`](Self::invalid) of a string value.
    pub fn invalid_str(field: &str, value: &str, detail: impl Into<String>) -> Self {
        Self::invalid(field, &Value::String(value.to_owned()), detail)
    }

    /// [`not_supported`](Self::not_supported) of a string value among fixed strings.
    pub fn not_supported_str(field: &str, value: &str, supported: &[&str]) -> Self {
        let supported: Vec<String> = supported.iter().map(|s| (*s).to_owned()).collect();
        Self::not_supported(field, &Value::String(value.to_owned()), &supported)
    }

    /// `Duplicate value: "v"`.
    pub fn duplicate(field: &str, value: &str) -> Self {
        Self::new(
            ErrorType::Duplicate,
            field,
            Some(shown(&Value::String(value.to_owned()))),
            "",
        )
    }

    /// The message without the field (upstream's `ErrorBody`), e.g.
    /// `Invalid value: "string": must be ...`.
    pub fn body(&self) -> String {
        let mut s = self.kind.text().to_owned();
        if let Some(v) = &self.value {
            s.push_str(": ");
            s.push_str(v);
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }

    /// The same error with `prefix` put in front of its field (`prefix.field`).
    #[must_use]
    pub fn prefixed(mut self, prefix: &str) -> Self {
        if !prefix.is_empty() {
            self.field = if self.field.is_empty() {
                prefix.to_owned()
            } else if self.field.starts_with('[') {
                format!("{prefix}{}", self.field)
            } else {
                format!("{prefix}.{}", self.field)
            };
        }
        self
    }
}

/// A value as upstream's `ErrorBody` prints it: strings Go-quoted, numbers and booleans bare,
/// `null`, anything else as JSON; cut to [`MAX_SHOWN_BYTES`].
pub fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => cut(go_quote(s)),
        Value::Null => "null".into(),
        Value::Bool(_) | Value::Number(_) => v.to_string(),
        _ => cut(v.to_string()),
    }
}

/// Go's `%q` of a string: `"` and `\` escaped, control characters as escapes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_SHOWN_BYTES) + 2);
    out.push('"');
    for c in s.chars() {
        if out.len() > MAX_SHOWN_BYTES + 16 {
            break;
        }
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `s` cut to [`MAX_SHOWN_BYTES`] at a character boundary, with `...` when cut.
fn cut(s: String) -> String {
    if s.len() <= MAX_SHOWN_BYTES {
        return s;
    }
    let mut end = MAX_SHOWN_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = s.get(..end).unwrap_or_default().to_owned();
    out.push_str("...");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bodies_are_upstreams() {
        let e = FieldError::new(
            ErrorType::TypeInvalid,
            "spec.replicas",
            Some(go_quote("string")),
            "spec.replicas in body must be of type integer: \"string\"",
        );
        assert_eq!(
            e.to_string(),
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        );
        assert_eq!(
            FieldError::required("spec.a", "").to_string(),
            "spec.a: Required value"
        );
        let e = FieldError::not_supported("spec.c", &json!("x"), &["a".into(), "1".into()]);
        assert_eq!(
            e.body(),
            "Unsupported value: \"x\": supported values: \"a\", \"1\""
        );
        assert_eq!(shown(&json!({"a": 1})), "{\"a\":1}");
        assert_eq!(shown(&json!(1.5)), "1.5");
        let long = shown(&json!("é".repeat(4000)));
        assert!(long.len() <= MAX_SHOWN_BYTES + 3, "{}", long.len());
        assert_eq!(FieldError::required("b", "").prefixed("a").field, "a.b");
    }
}
