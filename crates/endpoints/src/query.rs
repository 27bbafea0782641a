//! Query parameters: parsing and upstream's validation, before anything reaches storage.
//!
//! Invariants:
//! - a parameter that is present but malformed is a 400, never silently ignored;
//! - unknown parameters are ignored, as upstream does (`pretty`, kubectl's `timeout`);
//! - like Go's `url.Values.Get`, the first occurrence of a repeated parameter wins;
//! - what reaches storage has passed [`ListOptions::validate_list`] (lists) or the watch
//!   rules below (watches).

use std::collections::HashMap;
use std::time::Duration;

use listwatch_api::echo::echo;
use listwatch_api::fields::{FieldOperator, FieldTerm};
use listwatch_api::{FieldSelector, LabelSelector, ShardSelector, rv};
use listwatch_storage::{ListOptions, Preconditions, ResourceVersionMatch, SelectionPredicate};

use crate::error::{ApiError, ApiResult, FieldError};
use crate::resource::KindSpec;
pub use listwatch_registry::options::{DeleteRequest, Propagation};

/// The decoded query string.
#[derive(Debug, Default, Clone)]
pub struct Query {
    values: HashMap<String, String>,
}

/// Upstream's `FieldManagerMaxLength`, in bytes.
const FIELD_MANAGER_MAX_BYTES: usize = 128;

impl Query {
    /// Decodes `a=1&b=2` (tolerating empty pairs, as kube-rs sends `?&limit=500`).
    pub fn parse(raw: Option<&str>) -> Self {
        let mut values = HashMap::new();
        if let Some(raw) = raw {
            for (k, v) in form_urlencoded::parse(raw.as_bytes()) {
                if k.is_empty() {
                    continue;
                }
                values
                    .entry(k.into_owned())
                    .or_insert_with(|| v.into_owned());
            }
        }
        Self { values }
    }

    /// A parameter's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// A boolean parameter with Go's `strconv.ParseBool` spellings; absent is `None`.
    pub fn bool(&self, name: &str) -> ApiResult<Option<bool>> {
        match self.get(name) {
            None => Ok(None),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(Some(true)),
            Some("" | "0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(Some(false)),
            Some(v) => Err(ApiError::bad_request(format!(
                "invalid value {v:?} for boolean parameter {name:?}",
                v = echo(v)
            ))),
        }
    }

    /// A non-negative integer parameter; absent or empty is `None`.
    pub fn uint(&self, name: &str) -> ApiResult<Option<u64>> {
        match self.get(name) {
            None | Some("") => Ok(None),
            Some(v) => v
                .parse::<i64>()
                .ok()
                .and_then(|n| u64::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "invalid value {v:?} for parameter {name:?}: must be a non-negative integer",
                        v = echo(v)
                    ))
                }),
        }
    }

    /// The deadline of a non-watch request: the `timeout` parameter (a Go duration such as
    /// `32s`, as kubectl sends), capped by the server's `limit`. As upstream, a zero or
    /// negative `timeout` asks for no deadline of its own: the server's `limit` applies.
    pub fn timeout(&self, limit: Duration) -> ApiResult<Duration> {
        match self.get("timeout").filter(|t| !t.is_empty()) {
            None => Ok(limit),
            Some(t) => parse_go_duration(t.strip_prefix('-').unwrap_or(t))
                .map(|d| {
                    if d.is_zero() || t.starts_with('-') {
                        limit
                    } else {
                        d.min(limit)
                    }
                })
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "invalid timeout specified in the request URL: {t:?}",
                        t = echo(t)
                    ))
                }),
        }
    }

    /// Whether the request is a watch (`watch=1`/`true`).
    pub fn is_watch(&self) -> ApiResult<bool> {
        Ok(self.bool("watch")?.unwrap_or(false))
    }

    /// Whether `dryRun=All` was asked; any other value is a 400.
    pub fn dry_run(&self) -> ApiResult<bool> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(v) => Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: {v:?}: supported values: \"All\"",
                v = echo(v)
            ))),
        }
    }

    /// Checks the write parameters (`fieldManager`, `fieldValidation`) upstream validates.
    ///
    /// `fieldManager` as upstream's `ValidateFieldManager` (k8s.io/apimachinery
    /// `pkg/apis/meta/v1/validation`): at most 128 bytes, every character printable as Go's
    /// `unicode.IsPrint`; refused with 422 on `options_kind` (`CreateOptions`,
    /// `UpdateOptions`, `PatchOptions`), each offending character named by code point and
    /// byte position.
    pub fn validate_write(&self, options_kind: &str) -> ApiResult<()> {
        if let Some(m) = self.get("fieldManager") {
            let mut errs = Vec::new();
            if m.len() > FIELD_MANAGER_MAX_BYTES {
                errs.push(FieldError::too_long(
                    "fieldManager",
                    FIELD_MANAGER_MAX_BYTES,
                ));
            }
            for (i, c) in m.char_indices() {
                if !crate::fieldmanager::is_printable(c) {
                    errs.push(FieldError::invalid(
                        "fieldManager",
                        m,
                        format!("invalid character U+{:04X} (at position {i})", u32::from(c)),
                    ));
                }
            }
            if !errs.is_empty() {
                return Err(ApiError::invalid_options(options_kind, &errs));
            }
        }
        match self.get("fieldValidation") {
            None | Some("" | "Ignore" | "Warn" | "Strict") => Ok(()),
            Some(v) => Err(ApiError::bad_request(format!(
                "fieldValidation: Unsupported value: {v:?}: supported values: \"Ignore\", \"Warn\", \"Strict\"",
                v = echo(v)
            ))),
        }
    }

    /// The `resourceVersion` of a get.
    pub fn get_resource_version(&self) -> ApiResult<Option<u64>> {
        rv::parse_optional(self.get("resourceVersion"))
            .map_err(|e| ApiError::bad_request(e.to_string()))
    }

    /// `includeObject` for Table output.
    pub fn include_object(&self) -> ApiResult<IncludeObject> {
        match self.get("includeObject") {
            None | Some("" | "Metadata") => Ok(IncludeObject::Metadata),
            Some("None") => Ok(IncludeObject::None),
            Some("Object") => Ok(IncludeObject::Object),
            Some(v) => Err(ApiError::bad_request(format!(
                "includeObject: Unsupported value: {v:?}: supported values: \"None\", \"Metadata\", \"Object\"",
                v = echo(v)
            ))),
        }
    }

    /// Parses and validates the list/watch parameters.
    ///
    /// `path_name` is the object name from the path of a single-object watch; it becomes a
    /// `metadata.name` field selector (a conflicting one is a 400).
    pub fn list_options(
        &self,
        info: &KindSpec,
        watch: bool,
        path_name: Option<&str>,
    ) -> ApiResult<ListRequest> {
        let resource_version = rv::parse_optional(self.get("resourceVersion"))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let resource_version_match = match self.get("resourceVersionMatch") {
            None | Some("") => None,
            Some("NotOlderThan") => Some(ResourceVersionMatch::NotOlderThan),
            Some("Exact") => Some(ResourceVersionMatch::Exact),
            Some(v) => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersionMatch: Unsupported value: {v:?}: supported values: \"Exact\", \"NotOlderThan\"",
                    v = echo(v)
                )));
            }
        };
        let label = match self.get("labelSelector") {
            None => LabelSelector::everything(),
            Some(s) => LabelSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?,
        };
        check_selector_size("labelSelector", label.requirements().len())?;
        let mut field = match self.get("fieldSelector") {
            None => FieldSelector::everything(),
            Some(s) => FieldSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?,
        };
        check_selector_size("fieldSelector", field.terms().len())?;
        for f in field.fields() {
            if info.field_label_error(f).is_some() {
                // The same message about the label as it may be echoed (bounded, escaped).
                let shown = echo(f);
                let message = info
                    .field_label_error(&shown)
                    .unwrap_or_else(|| format!("field label not supported: {shown}"));
                return Err(ApiError::bad_request(message));
            }
        }
        if let Some(name) = path_name {
            match field.exact_match("metadata.name") {
                Some(n) if n != name => {
                    return Err(ApiError::bad_request(format!(
                        "fieldSelector metadata.name={n} conflicts with the name {name:?} in the path",
                        n = echo(n),
                        name = echo(name)
                    )));
                }
                Some(_) => {}
                None => {
                    field = field.and(FieldTerm {
                        field: "metadata.name".into(),
                        operator: FieldOperator::Equals,
                        value: name.into(),
                    });
                }
            }
        }
        // Upstream's `shardSelector` (KEP-5866): an invalid one is a 400 "invalid shard
        // selector: ..." as its ListOptions conversion answers.
        let shard = match self.get("shardSelector") {
            None => ShardSelector::everything(),
            Some(s) => ShardSelector::parse(s)
                .map_err(|e| ApiError::bad_request(format!("invalid shard selector: {e}")))?,
        };
        let limit = self.uint("limit")?;
        let continue_token = self
            .get("continue")
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        let allow_watch_bookmarks = self.bool("allowWatchBookmarks")?.unwrap_or(false);
        let send_initial_events = self.bool("sendInitialEvents")?;
        let timeout = self
            .uint("timeoutSeconds")?
            .filter(|s| *s > 0)
            .map(Duration::from_secs);
        let opts = ListOptions {
            resource_version,
            resource_version_match,
            predicate: SelectionPredicate {
                label,
                field,
                shard,
            },
            limit,
            continue_token,
            recursive: true,
            allow_watch_bookmarks: watch && allow_watch_bookmarks,
            send_initial_events: if watch { send_initial_events } else { None },
            progress_notify: watch && allow_watch_bookmarks,
            // The watch handler sets it once it has chosen the watch's timeout.
            deadline: None,
        };
        if watch {
            validate_watch(&opts, send_initial_events)?;
        } else {
            if send_initial_events.is_some() {
                return Err(ApiError::bad_request(
                    "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
                ));
            }
            opts.validate_list().map_err(ApiError::from)?;
        }
        Ok(ListRequest { opts, timeout })
    }

    /// The options of a delete: the `DeleteOptions` body when there is one, else the query
    /// (upstream reads the query only for a request without a body), then upstream's
    /// `ValidateDeleteOptions` (422). A malformed parameter or body is a 400.
    pub fn delete_options(&self, body: &[u8]) -> ApiResult<DeleteRequest> {
        let mut d = DeleteRequest::default();
        let propagation;
        if body.iter().all(u8::is_ascii_whitespace) {
            d.dry_run = self.dry_run()?;
            if let Some(g) = self.get("gracePeriodSeconds").filter(|g| !g.is_empty()) {
                d.grace_period_seconds = Some(g.parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!(
                        "invalid value {g:?} for parameter \"gracePeriodSeconds\"",
                        g = echo(g)
                    ))
                })?);
            }
            propagation = self.get("propagationPolicy").map(str::to_owned);
            d.orphan_dependents = self.bool("orphanDependents")?;
        } else {
            let v = crate::limits::decode_json(body).map_err(|e| match e {
                crate::limits::DecodeError::Syntax(e) => {
                    ApiError::bad_request(format!("invalid DeleteOptions: {e}"))
                }
                other => other.into_api_error("JSON"),
            })?;
            let Some(m) = v.as_object() else {
                return Err(ApiError::bad_request(
                    "invalid DeleteOptions: must be an object",
                ));
            };
            let wrong = |field: &str, want: &str| {
                ApiError::bad_request(format!("invalid DeleteOptions: {field}: expected {want}"))
            };
            let present = |k: &str| m.get(k).filter(|x| !x.is_null());
            if let Some(p) = present("preconditions") {
                let p = p
                    .as_object()
                    .ok_or_else(|| wrong("preconditions", "an object"))?;
                let uid = match p.get("uid").filter(|u| !u.is_null()) {
                    None => None,
                    Some(u) => Some(
                        u.as_str()
                            .ok_or_else(|| wrong("preconditions.uid", "a string"))?
                            .to_owned(),
                    ),
                };
                let resource_version = match p.get("resourceVersion").filter(|r| !r.is_null()) {
                    None => None,
                    Some(r) => {
                        let r = r
                            .as_str()
                            .ok_or_else(|| wrong("preconditions.resourceVersion", "a string"))?;
                        Some(rv::parse(r).map_err(|e| ApiError::bad_request(e.to_string()))?)
                    }
                };
                d.preconditions = Some(Preconditions {
                    uid,
                    resource_version,
                });
            }
            if let Some(dr) = present("dryRun") {
                let dr = dr.as_array().ok_or_else(|| wrong("dryRun", "an array"))?;
                for x in dr {
                    match x.as_str() {
                        Some("All") => d.dry_run = true,
                        _ => {
                            return Err(ApiError::bad_request(format!(
                                "dryRun: Unsupported value: {x}",
                                x = echo(&x.to_string())
                            )));
                        }
                    }
                }
            }
            if let Some(g) = present("gracePeriodSeconds") {
                d.grace_period_seconds = Some(
                    g.as_i64()
                        .ok_or_else(|| wrong("gracePeriodSeconds", "an integer"))?,
                );
            }
            if let Some(o) = present("orphanDependents") {
                d.orphan_dependents = Some(
                    o.as_bool()
                        .ok_or_else(|| wrong("orphanDependents", "a boolean"))?,
                );
            }
            propagation = match present("propagationPolicy") {
                None => None,
                Some(p) => Some(
                    p.as_str()
                        .ok_or_else(|| wrong("propagationPolicy", "a string"))?
                        .to_owned(),
                ),
            };
        }
        let mut errs = Vec::new();
        if let (Some(p), Some(_)) = (&propagation, d.orphan_dependents) {
            errs.push(FieldError::invalid(
                "propagationPolicy",
                p,
                "orphanDependents and deletionPropagation cannot be both set",
            ));
        }
        match propagation.as_deref() {
            None => {}
            Some("Orphan") => d.propagation = Some(Propagation::Orphan),
            Some("Background") => d.propagation = Some(Propagation::Background),
            Some("Foreground") => d.propagation = Some(Propagation::Foreground),
            Some(other) => errs.push(FieldError::not_supported(
                "propagationPolicy",
                other,
                &["Foreground", "Background", "Orphan", "nil"],
            )),
        }
        if !errs.is_empty() {
            return Err(ApiError::invalid_options("DeleteOptions", &errs));
        }
        Ok(d)
    }
}

/// Parses Go's `time.ParseDuration` syntax for non-negative values: `300ms`, `1.5s`,
/// `2m30s`, `1h`; units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * seconds;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// Upstream's watch-specific rules (`ValidateListOptions` with `isWatchListFeatureEnabled`).
fn validate_watch(opts: &ListOptions, send_initial_events: Option<bool>) -> ApiResult<()> {
    match send_initial_events {
        Some(_) => {
            if opts.resource_version_match != Some(ResourceVersionMatch::NotOlderThan) {
                return Err(ApiError::bad_request(
                    "resourceVersionMatch: Forbidden: sendInitialEvents is supported only with resourceVersionMatch=NotOlderThan",
                ));
            }
            if !opts.allow_watch_bookmarks {
                return Err(ApiError::bad_request(
                    "allowWatchBookmarks: Required value: allowWatchBookmarks must be set to true when sendInitialEvents is set",
                ));
            }
            // No resourceVersion is allowed here: client-go's first streaming list sends
            // none and means a consistent read of the initial state.
        }
        None => {
            if opts.resource_version_match.is_some() {
                return Err(ApiError::bad_request(
                    "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
        }
    }
    if opts.continue_token.is_some() {
        return Err(ApiError::bad_request(
            "continue: Forbidden: continue is forbidden for watch",
        ));
    }
    Ok(())
}

/// Validated list or watch options.
#[derive(Debug, Clone)]
pub struct ListRequest {
    /// For storage.
    pub opts: ListOptions,
    /// `timeoutSeconds`, when given and positive.
    pub timeout: Option<Duration>,
}

/// What a Table row's `object` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// Nothing.
    None,
    /// A `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

/// Most requirements a label selector, and most terms a field selector, may have.
///
/// Every object a list reads, and every event of every watch, is tested against each of
/// them — in a watch's case on the cacher's one dispatcher task, which every watcher of the
/// resource waits for — so their number bounds the CPU a single request can demand per
/// object. Upstream has no count (its only bound is the request line, 1 MiB with Go's
/// `MaxHeaderBytes`); selectors that real clients send (matchLabels of a workload, kubectl
/// `-l`) have a handful. 100 leaves a wide margin for those and keeps the worst watch to
/// 100 comparisons per event.
pub const MAX_SELECTOR_REQUIREMENTS: usize = 100;

/// 400 when a selector has more than [`MAX_SELECTOR_REQUIREMENTS`] requirements.
fn check_selector_size(param: &str, n: usize) -> ApiResult<()> {
    if n > MAX_SELECTOR_REQUIREMENTS {
        return Err(ApiError::bad_request(format!(
            "{param}: too many requirements: {n}, at most {MAX_SELECTOR_REQUIREMENTS} are allowed"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy as _;

    fn pods() -> KindSpec {
        KindSpec::new("", "v1", "pods", "Pod").selectable_fields(["spec.nodeName"])
    }

    fn list(q: &str, watch: bool) -> ApiResult<ListRequest> {
        Query::parse(Some(q)).list_options(&pods(), watch, None)
    }

    #[test]
    fn go_durations_parse_like_time_parse_duration() {
        assert_eq!(parse_go_duration("32s"), Some(Duration::from_secs(32)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "5", "s", "-1s", "1x", "1s2"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
        let q = Query::parse(Some("timeout=32s"));
        assert_eq!(
            q.timeout(Duration::from_secs(60)).unwrap(),
            Duration::from_secs(32)
        );
        assert_eq!(
            q.timeout(Duration::from_secs(10)).unwrap(),
            Duration::from_secs(10)
        );
        for none in ["0s", "0", "-5s"] {
            assert_eq!(
                Query::parse(Some(&format!("timeout={none}")))
                    .timeout(Duration::from_secs(60))
                    .unwrap(),
                Duration::from_secs(60),
                "{none}: no deadline of its own, not an immediate timeout"
            );
        }
        assert_eq!(
            Query::parse(Some("timeout=soon"))
                .timeout(Duration::from_secs(1))
                .unwrap_err()
                .code(),
            400
        );
    }

    #[test]
    fn kube_rs_leading_ampersand_is_tolerated() {
        let q = Query::parse(Some(
            "&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion=100",
        ));
        assert!(q.is_watch().unwrap());
        let r = q.list_options(&pods(), true, None).unwrap();
        assert_eq!(r.opts.resource_version, Some(100));
        assert_eq!(r.timeout, Some(Duration::from_secs(290)));
        assert!(r.opts.allow_watch_bookmarks);
    }

    #[test]
    fn malformed_parameters_are_bad_requests() {
        for q in [
            "resourceVersion=abc",
            "resourceVersionMatch=Sometimes&resourceVersion=1",
            "labelSelector=a%20in",
            "fieldSelector=spec.nodeName",
            "fieldSelector=spec.unknown%3Dx",
            "limit=-1",
            "limit=x",
            "resourceVersionMatch=Exact",
            "resourceVersionMatch=Exact&resourceVersion=0",
            "continue=abc&resourceVersion=5",
            "sendInitialEvents=true",
            "timeoutSeconds=soon",
            "allowWatchBookmarks=maybe",
        ] {
            let e = list(q, false).unwrap_err();
            assert_eq!(e.code(), 400, "{q}");
        }
    }

    #[test]
    fn watch_rules_follow_upstream() {
        assert!(list("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true", true).is_ok());
        assert!(
            list(
                "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
                true
            )
            .is_ok(),
            "client-go's first streaming list carries no resourceVersion"
        );
        for q in [
            "sendInitialEvents=true&allowWatchBookmarks=true",
            "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0",
            "resourceVersionMatch=NotOlderThan&resourceVersion=5",
            "continue=x",
        ] {
            assert_eq!(list(q, true).unwrap_err().code(), 400, "{q}");
        }
    }

    #[test]
    fn a_name_in_the_path_becomes_a_field_selector() {
        let r = Query::parse(None)
            .list_options(&pods(), true, Some("web"))
            .unwrap();
        assert_eq!(
            r.opts.predicate.field.exact_match("metadata.name"),
            Some("web")
        );
        let q = Query::parse(Some("fieldSelector=metadata.name%3Dother"));
        assert_eq!(
            q.list_options(&pods(), true, Some("web"))
                .unwrap_err()
                .code(),
            400
        );
        let q = Query::parse(Some("fieldSelector=metadata.name%3Dweb"));
        assert!(q.list_options(&pods(), true, Some("web")).is_ok());
    }

    #[test]
    fn delete_options_read_preconditions_from_the_body() {
        let q = Query::parse(None);
        let d = q
            .delete_options(
                br#"{"kind":"DeleteOptions","preconditions":{"uid":"u1","resourceVersion":"7"}}"#,
            )
            .unwrap();
        let p = d.preconditions.unwrap();
        assert_eq!(
            (p.uid.as_deref(), p.resource_version),
            (Some("u1"), Some(7))
        );
        assert!(
            q.delete_options(br#"{"preconditions":{"resourceVersion":"x"}}"#)
                .is_err()
        );
        assert!(q.delete_options(br#"{"dryRun":["All"]}"#).unwrap().dry_run);
        let e = Query::parse(Some("propagationPolicy=Sideways"))
            .delete_options(b"")
            .unwrap_err();
        assert_eq!(e.code(), 422);
        assert_eq!(
            e.0.message,
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
        );
        let e = q
            .delete_options(br#"{"orphanDependents":true,"propagationPolicy":"Foreground"}"#)
            .unwrap_err();
        assert_eq!(
            e.0.message,
            "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Invalid value: \"Foreground\": orphanDependents and deletionPropagation cannot be both set"
        );
        assert_eq!(e.0.details.as_ref().unwrap().kind, "DeleteOptions");
        assert_eq!(e.0.details.as_ref().unwrap().group, "meta.k8s.io");
        // Options from the query without a body, from the body alone with one.
        let q = Query::parse(Some(
            "gracePeriodSeconds=5&propagationPolicy=Orphan&dryRun=All",
        ));
        let d = q.delete_options(b"").unwrap();
        assert_eq!(
            (d.grace_period_seconds, d.propagation, d.dry_run),
            (Some(5), Some(Propagation::Orphan), true)
        );
        let d = q
            .delete_options(br#"{"gracePeriodSeconds":0,"propagationPolicy":"Foreground"}"#)
            .unwrap();
        assert_eq!(
            (d.grace_period_seconds, d.propagation, d.dry_run),
            (Some(0), Some(Propagation::Foreground), false)
        );
        let d = Query::parse(Some("orphanDependents=false"))
            .delete_options(b"")
            .unwrap();
        assert_eq!(d.orphan_dependents, Some(false));
        for bad in [
            &br#"{"gracePeriodSeconds":"5"}"#[..],
            br#"{"gracePeriodSeconds":1.5}"#,
            br#"{"orphanDependents":"yes"}"#,
            br#"{"propagationPolicy":7}"#,
            br#"{"preconditions":[]}"#,
            br#"{"preconditions":{"uid":5}}"#,
            br#"{"dryRun":"All"}"#,
        ] {
            assert_eq!(q.delete_options(bad).unwrap_err().code(), 400, "{bad:?}");
        }
        assert!(
            Query::parse(Some("dryRun=Some"))
                .delete_options(b"")
                .is_err()
        );
    }

    proptest::proptest! {
        #[test]
        fn go_durations_never_panic_and_round_trip_whole_seconds(junk in "\\PC{0,12}", secs in 0u64..100_000) {
            let _ = parse_go_duration(&junk);
            proptest::prop_assert_eq!(parse_go_duration(&format!("{secs}s")), Some(Duration::from_secs(secs)));
        }

        #[test]
        fn arbitrary_queries_are_accepted_or_400(q in "[a-zA-Z=&%0-9,!.()_ -]{0,60}") {
            let q = Query::parse(Some(&q));
            for watch in [false, true] {
                if let Err(e) = q.list_options(&pods(), watch, Some("n")) {
                    proptest::prop_assert_eq!(e.code(), 400);
                }
            }
            if let Err(e) = q.delete_options(b"") {
                proptest::prop_assert!(e.code() == 400 || e.code() == 422, "{}", e.code());
            }
        }

        #[test]
        fn arbitrary_delete_option_bodies_are_accepted_or_refused(
            grace in proptest::option::of(proptest::prop_oneof![
                proptest::num::i64::ANY.prop_map(serde_json::Value::from),
                proptest::num::f64::ANY.prop_map(|f| serde_json::json!(f)),
                "\\PC{0,6}".prop_map(serde_json::Value::from),
            ]),
            policy in proptest::option::of("\\PC{0,12}"),
            orphan in proptest::option::of(proptest::bool::ANY),
            junk in "\\PC{0,40}",
        ) {
            let mut v = serde_json::json!({"kind": "DeleteOptions"});
            if let Some(g) = grace { v["gracePeriodSeconds"] = g; }
            if let Some(p) = &policy { v["propagationPolicy"] = serde_json::json!(p); }
            if let Some(o) = orphan { v["orphanDependents"] = serde_json::json!(o); }
            let q = Query::parse(None);
            match q.delete_options(v.to_string().as_bytes()) {
                Ok(d) => {
                    proptest::prop_assert!(d.propagation.is_none() || d.orphan_dependents.is_none());
                }
                Err(e) => proptest::prop_assert!(e.code() == 400 || e.code() == 422),
            }
            if let Err(e) = q.delete_options(junk.as_bytes()) {
                proptest::prop_assert!(e.code() == 400 || e.code() == 413 || e.code() == 422, "{}", e.code());
            }
        }
    }
}
