//! PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386), strategic merge patch
//! (Kubernetes' list-aware merge, as `kubectl apply` sends it), and server-side apply bodies.
//!
//! Strategic merge reads each field's patch strategy and merge key from the kind's schema
//! (the `x-kubernetes-patch-*` extensions, upstream's Go struct tags), walking the schema
//! alongside the object; its semantics and directives are the private `strategic`
//! module's. Custom resources have no strategic merge (415, as upstream): the handler
//! refuses it before a patch is parsed.
//!
//! Server-side apply bodies (`application/apply-patch+yaml`) are parsed here
//! ([`Patch::Apply`]); the apply itself, with field ownership and conflicts, is
//! the `fieldmanager` module's (`listwatch-apply`). Only an apply to `/scale` is still
//! served as a merge of the Scale (documented difference from upstream).
//!
//! Limits (see [`crate::decode`] and the endpoints' `limits` table): a JSON patch has at most 10 000 operations, its `copy`
//! operations copy at most [`PatchLimits::max_copy_bytes`] together (charged before each
//! copy), its adds and removes shift at most [`limits::MAX_JSON_PATCH_SHIFTS`] array
//! elements together (charged before each operation; a run of identical removes is one
//! drain, so removing k items from the front of a list costs one shift of the rest), bodies and results nest at most [`limits::MAX_DEPTH`] levels, and apply bodies in
//! YAML expand at most linearly. The patched object's encoded size is checked by the caller
//! against the storage's object limit before it is written.
//!
//! Invariant: a patch never fails half-applied — every function works on the caller's copy
//! and the caller discards it on error.

use listwatch_api::echo::echo;
use listwatch_schema::Node;
use serde_json::Value;

use crate::decode::{self as limits, DecodeError};
use crate::error::ApiError;

/// The patch formats accepted, by Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// `application/json-patch+json`
    Json,
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json`
    StrategicMerge,
    /// `application/apply-patch+yaml` (YAML or JSON)
    Apply,
}

impl PatchType {
    /// The patch types a resource accepts, as upstream lists them in a 415: every type
    /// for a built-in resource, no strategic merge for a custom resource (upstream's CRD
    /// handler has no Go struct to read patch strategies from).
    pub fn accepted(custom_resource: bool) -> &'static [&'static str] {
        if custom_resource {
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ]
        } else {
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/apply-patch+yaml",
            ]
        }
    }

    /// The patch type of a Content-Type (parameters ignored).
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let essence = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "application/json-patch+json" => Some(Self::Json),
            "application/merge-patch+json" => Some(Self::Merge),
            "application/strategic-merge-patch+json" => Some(Self::StrategicMerge),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Why a patch could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The body does not parse.
    #[error("invalid patch body: {0}")]
    Body(String),
    /// A JSON patch with more operations than upstream's `maxJSONPatchOperations`.
    #[error(
        "The allowed maximum operations in a JSON patch is {}, got {got}",
        limits::MAX_JSON_PATCH_OPERATIONS
    )]
    TooManyOperations {
        /// How many the body has.
        got: usize,
    },
    /// The body, or the patched object, is over a decode limit (depth, YAML expansion).
    #[error(transparent)]
    Limit(#[from] DecodeError),
    /// The `copy` operations of a JSON patch together copy more than their limit
    /// (json-patch's `AccumulatedCopySizeError`, in its words).
    #[error(
        "Unable to complete the copy, the accumulated size increase of copy is {accumulated}, exceeding the limit {limit}"
    )]
    CopyTooLarge {
        /// Bytes copied so far, this copy included.
        accumulated: usize,
        /// The limit.
        limit: usize,
    },
    /// The operations of a JSON patch together shift more array elements than
    /// [`limits::MAX_JSON_PATCH_SHIFTS`] (charged before each operation runs).
    #[error(
        "Unable to complete the patch, its operations shift {shifted} array elements, exceeding the limit {limit}"
    )]
    TooMuchWork {
        /// Elements shifted so far, this operation included.
        shifted: usize,
        /// The limit.
        limit: usize,
    },
    /// A JSON patch operation failed (missing path, failed test).
    #[error("json patch failed: {0}")]
    JsonPatch(String),
    /// A strategic merge patch that cannot be applied (a malformed directive, a list item
    /// without its merge key, ...), in upstream's words.
    #[error(transparent)]
    Strategic(#[from] crate::strategic::StrategicError),
}

impl PatchError {
    /// The Status for this failure, as upstream's patch handler answers: a body that does
    /// not parse is 400, too many operations 413, a patch that cannot be applied 422.
    pub fn to_api_error(&self) -> ApiError {
        match self {
            PatchError::Body(_) => ApiError::bad_request(self.to_string()),
            PatchError::TooManyOperations { .. } => ApiError::too_large_message(&self.to_string()),
            PatchError::Limit(e) => e.clone().into_api_error("patch"),
            PatchError::Strategic(crate::strategic::StrategicError::BadFormat(m)) => {
                ApiError::bad_request(*m)
            }
            PatchError::CopyTooLarge { .. }
            | PatchError::TooMuchWork { .. }
            | PatchError::JsonPatch(_)
            | PatchError::Strategic(_) => ApiError::unprocessable(self.to_string()),
        }
    }
}

/// What one patch may do besides its own size (which the body limit bounds).
#[derive(Debug, Clone, Copy)]
pub struct PatchLimits {
    /// Bytes the `copy` operations of one JSON patch may copy together (upstream's
    /// `JSONPatchMaxCopyBytes`; the server uses its request body limit).
    pub max_copy_bytes: usize,
}

/// A parsed patch body.
#[derive(Debug, Clone)]
pub enum Patch {
    /// RFC 6902 operations.
    Json(json_patch::Patch),
    /// RFC 7386 document.
    Merge(Value),
    /// Strategic merge document.
    Strategic(Value),
    /// Server-side apply configuration (an object).
    Apply(Value),
}

impl Patch {
    /// The patch as the JSON value it was parsed from (what the audit log records).
    pub fn to_value(&self) -> Value {
        match self {
            Patch::Json(ops) => serde_json::to_value(ops).unwrap_or(Value::Null),
            Patch::Merge(v) | Patch::Strategic(v) | Patch::Apply(v) => v.clone(),
        }
    }

    /// Parses a body of the given type, within the decode limits of [`limits`]: at most
    /// [`limits::MAX_JSON_PATCH_OPERATIONS`] operations, nesting at most
    /// [`limits::MAX_DEPTH`], YAML expanding at most [`limits::yaml_budget`].
    pub fn parse(kind: PatchType, body: &[u8]) -> Result<Self, PatchError> {
        Self::parse_keys(kind, body).map(|(p, _)| p)
    }

    /// [`Patch::parse`], also returning the keys the body repeated in one object (for
    /// field validation).
    pub fn parse_keys(kind: PatchType, body: &[u8]) -> Result<(Self, Vec<String>), PatchError> {
        let decoded = match kind {
            PatchType::Apply => limits::decode_yaml_keys(body),
            _ => limits::decode_json_keys(body),
        };
        let (v, duplicates) = decoded.map_err(|e| match e {
            DecodeError::Syntax(m) => PatchError::Body(m),
            other => PatchError::Limit(other),
        })?;
        match kind {
            PatchType::Json => {
                if let Value::Array(ops) = &v
                    && ops.len() > limits::MAX_JSON_PATCH_OPERATIONS
                {
                    return Err(PatchError::TooManyOperations { got: ops.len() });
                }
                serde_json::from_value(v)
                    .map(|p| (Patch::Json(p), duplicates))
                    .map_err(|e| PatchError::Body(echo(&e.to_string()).into_owned()))
            }
            PatchType::Merge | PatchType::StrategicMerge => {
                if !v.is_object() {
                    return Err(PatchError::Body(
                        "a merge patch must be a JSON object".into(),
                    ));
                }
                let p = if kind == PatchType::Merge {
                    Patch::Merge(v)
                } else {
                    Patch::Strategic(v)
                };
                Ok((p, duplicates))
            }
            PatchType::Apply => {
                if !v.is_object() {
                    return Err(PatchError::Body(
                        "an apply configuration must be an object".into(),
                    ));
                }
                Ok((Patch::Apply(v), duplicates))
            }
        }
    }

    /// Applies the patch to a copy of `original`, within `limits`; the result nests at
    /// most [`limits::MAX_DEPTH`] levels. `schema` is the schema of `original`'s kind
    /// (e.g. `Catalog::kind`): strategic merge reads list semantics from it; `None`
    /// merges untyped (objects key by key, every list replaced).
    pub fn apply(
        &self,
        original: &Value,
        schema: Option<Node<'_>>,
        limits: PatchLimits,
    ) -> Result<Value, PatchError> {
        let doc = match self {
            Patch::Json(p) => {
                let mut doc = original.clone();
                apply_json_patch(&mut doc, p, limits)?;
                doc
            }
            Patch::Merge(p) => {
                let mut doc = original.clone();
                json_patch::merge(&mut doc, p);
                doc
            }
            // An apply reaches here only for `/scale` (see the module doc).
            Patch::Strategic(p) | Patch::Apply(p) => crate::strategic::apply(original, p, schema)?,
        };
        if limits::depth(&doc) > limits::MAX_DEPTH {
            return Err(DecodeError::TooDeep {
                limit: limits::MAX_DEPTH,
            }
            .into());
        }
        Ok(doc)
    }
}

/// How deep a document may get between the operations of one JSON patch. The final
/// document must fit [`limits::MAX_DEPTH`]; in between, an upper bound of the depth is
/// tracked per operation (without walking the document), and this looser bound keeps every
/// clone, compare and drop the operations do shallow enough for any thread's stack.
const INTERMEDIATE_DEPTH: usize = 4 * limits::MAX_DEPTH;

/// The number of reference tokens of a JSON pointer (`""` is 0, `/a/b` is 2).
fn tokens(p: &str) -> usize {
    p.bytes().filter(|b| *b == b'/').count()
}

/// The array an operation's `path` points into, and the index it names (`-`: the end).
fn array_slot<'d>(doc: &'d Value, path: &str) -> Option<(&'d Vec<Value>, usize)> {
    let (parent, last) = path.rsplit_once('/')?;
    let Value::Array(a) = doc.pointer(parent)? else {
        return None;
    };
    let canonical = !last.is_empty()
        && last.bytes().all(|b| b.is_ascii_digit())
        && (last == "0" || !last.starts_with('0'));
    let i = if last == "-" {
        a.len()
    } else if canonical {
        last.parse::<usize>().ok()?
    } else {
        return None;
    };
    Some((a, i))
}

/// Array elements an add (`adding`) or remove at `path` moves: those after the index (an
/// insert or removal in the middle of a `Vec` shifts the rest).
fn shifts(doc: &Value, path: &str, adding: bool) -> usize {
    match array_slot(doc, path) {
        Some((a, i)) if adding => a.len().saturating_sub(i),
        Some((a, i)) => a.len().saturating_sub(i.saturating_add(1)),
        None => 0,
    }
}

/// How many operations from `ops[0]` are the same `remove` of an array element that the
/// array has enough elements for (`(1, _)` for anything else): such a run is one drain.
fn remove_run(doc: &Value, ops: &[json_patch::PatchOperation]) -> usize {
    use json_patch::PatchOperation as Op;
    let Some(Op::Remove(first)) = ops.first() else {
        return 1;
    };
    let path = first.path.as_str();
    let run = ops
        .iter()
        .take_while(|op| matches!(op, Op::Remove(r) if r.path.as_str() == path))
        .count();
    match array_slot(doc, path) {
        Some((a, i)) if i.saturating_add(run) <= a.len() => run,
        _ => 1,
    }
}

/// Applies RFC 6902 operations in order (the caller's copy is thrown away on error, so
/// nothing needs undoing), charging `copy` operations to the copy budget before they
/// copy, adds and removes to the shift budget before they shift, and refusing any
/// operation that could take the document past [`INTERMEDIATE_DEPTH`].
fn apply_json_patch(
    doc: &mut Value,
    ops: &[json_patch::PatchOperation],
    limits: PatchLimits,
) -> Result<(), PatchError> {
    use json_patch::PatchOperation as Op;
    let mut bound = limits::depth(doc);
    let mut copied = 0usize;
    let mut shifted = 0usize;
    let mut rest = ops;
    while let Some(op) = rest.first() {
        // A run of identical removes (`remove /x/0` k times): one drain of k elements.
        let run = remove_run(doc, rest);
        if run > 1 {
            let path = match op {
                Op::Remove(r) => r.path.as_str(),
                _ => "",
            };
            shifted = shifted.saturating_add(shifts(doc, path, false).saturating_sub(run - 1));
            charge_shifts(shifted)?;
            // `remove_run` found the array and its index (canonical, in range).
            if let Some((a_len, i)) = array_slot(doc, path).map(|(a, i)| (a.len(), i))
                && let Some(end) = i.checked_add(run).filter(|e| *e <= a_len)
                && let Some((parent, _)) = path.rsplit_once('/')
                && let Some(Value::Array(a)) = doc.pointer_mut(parent)
            {
                a.drain(i..end);
            }
            rest = rest.get(run..).unwrap_or(&[]);
            continue;
        }
        rest = rest.get(1..).unwrap_or(&[]);
        let moved = match op {
            Op::Add(o) => shifts(doc, o.path.as_str(), true),
            Op::Remove(o) => shifts(doc, o.path.as_str(), false),
            Op::Move(o) => shifts(doc, o.from.as_str(), false).saturating_add(shifts(
                doc,
                o.path.as_str(),
                true,
            )),
            Op::Copy(o) => shifts(doc, o.path.as_str(), true),
            Op::Replace(_) | Op::Test(_) => 0,
        };
        shifted = shifted.saturating_add(moved);
        charge_shifts(shifted)?;
        let reach = match op {
            Op::Add(o) => tokens(o.path.as_str()) + limits::depth(&o.value),
            Op::Replace(o) => tokens(o.path.as_str()) + limits::depth(&o.value),
            Op::Remove(_) | Op::Test(_) => 0,
            Op::Move(o) => tokens(o.path.as_str()) + bound.saturating_sub(tokens(o.from.as_str())),
            Op::Copy(o) => match doc.pointer(o.from.as_str()) {
                // A missing source: the operation itself reports it.
                None => 0,
                Some(src) => {
                    let left = limits.max_copy_bytes.saturating_sub(copied);
                    match limits::encoded_len_capped(src, left) {
                        Some(n) => copied += n,
                        None => {
                            let n = limits::encoded_len_capped(src, usize::MAX).unwrap_or(left);
                            return Err(PatchError::CopyTooLarge {
                                accumulated: copied.saturating_add(n),
                                limit: limits.max_copy_bytes,
                            });
                        }
                    }
                    tokens(o.path.as_str()) + limits::depth(src)
                }
            },
        };
        // Upstream's json-patch takes a missing member of an existing object as equal to null
        // in `test` (kube-rs's finalizer helper adds the first finalizer that way).
        if let Op::Test(t) = op
            && t.value.is_null()
            && doc.pointer(t.path.as_str()).is_none()
            && t.path
                .as_str()
                .rsplit_once('/')
                .is_some_and(|(parent, _)| doc.pointer(parent).is_some_and(Value::is_object))
        {
            continue;
        }
        bound = bound.max(reach);
        if bound > INTERMEDIATE_DEPTH {
            return Err(DecodeError::TooDeep {
                limit: limits::MAX_DEPTH,
            }
            .into());
        }
        json_patch::patch_unsafe(doc, std::slice::from_ref(op)).map_err(|e| {
            // json-patch's own words, with the operation's path cut by `echo`.
            PatchError::JsonPatch(format!(
                "operation '/{}' failed at path '{}': {}",
                e.operation,
                echo(e.path.as_str()),
                e.kind
            ))
        })?;
    }
    Ok(())
}

/// Refuses a patch once its operations have shifted more than the limit.
fn charge_shifts(shifted: usize) -> Result<(), PatchError> {
    if shifted > limits::MAX_JSON_PATCH_SHIFTS {
        return Err(PatchError::TooMuchWork {
            shifted,
            limit: limits::MAX_JSON_PATCH_SHIFTS,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LIMITS: PatchLimits = PatchLimits {
        max_copy_bytes: 3 * 1024 * 1024,
    };

    /// A strategic merge on an object of core/v1 `kind`, with its real schema.
    fn smp_kind(kind: &str, doc: Value, patch: Value) -> Value {
        let catalog = listwatch_schema::Catalog::builtin();
        Patch::Strategic(patch)
            .apply(&doc, catalog.kind("", "v1", kind), LIMITS)
            .unwrap()
    }

    fn smp(doc: Value, patch: Value) -> Value {
        smp_kind("Pod", doc, patch)
    }

    #[test]
    fn kubectl_apply_patch_merges_containers_by_name() {
        let pod = json!({"metadata":{"name":"nginx","annotations":{"a":"1"}},"spec":{"containers":[
            {"name":"nginx","image":"nginx:1.26","ports":[{"containerPort":80,"protocol":"TCP"}]},
            {"name":"sidecar","image":"busybox"}]}});
        let patch = json!({"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"}},
            "spec":{"$setElementOrder/containers":[{"name":"sidecar"},{"name":"nginx"}],
            "containers":[{"image":"nginx:1.27","name":"nginx"}]}});
        let out = smp(pod, patch);
        assert_eq!(out["spec"]["containers"][0]["name"], "sidecar");
        assert_eq!(out["spec"]["containers"][1]["image"], "nginx:1.27");
        assert_eq!(
            out["spec"]["containers"][1]["ports"][0]["containerPort"],
            80
        );
        assert_eq!(out["metadata"]["annotations"]["a"], "1");
    }

    #[test]
    fn delete_directives_remove_list_items_and_maps() {
        let doc = json!({"spec":{"containers":[{"name":"a","env":[{"name":"X","value":"1"},{"name":"Y","value":"2"}]}]},
            "metadata":{"labels":{"k":"v","gone":"x"}}});
        let patch = json!({"spec":{"containers":[{"name":"a","env":[{"name":"X","$patch":"delete"}]}]},
            "metadata":{"labels":{"gone":null}}});
        let out = smp(doc, patch);
        assert_eq!(
            out["spec"]["containers"][0]["env"],
            json!([{"name":"Y","value":"2"}])
        );
        assert_eq!(out["metadata"]["labels"], json!({"k":"v"}));
    }

    #[test]
    fn service_ports_merge_by_port_and_lists_without_keys_are_replaced() {
        let doc = json!({"spec":{"ports":[{"port":80,"name":"http"}],"tolerations":[{"key":"a"}]}});
        let patch =
            json!({"spec":{"ports":[{"port":443,"name":"https"}],"tolerations":[{"key":"b"}]}});
        let out = smp_kind("Service", doc, patch);
        assert_eq!(out["spec"]["ports"].as_array().unwrap().len(), 2);
        assert_eq!(out["spec"]["tolerations"], json!([{"key":"b"}]));
    }

    #[test]
    fn replace_directive_and_primitive_list_deletes() {
        let doc =
            json!({"spec":{"selector":{"a":"1","b":"2"}},"metadata":{"finalizers":["x","y"]}});
        let patch = json!({"spec":{"selector":{"$patch":"replace","c":"3"}},
            "metadata":{"$deleteFromPrimitiveList/finalizers":["x"],"finalizers":["z"]}});
        let out = smp_kind("Service", doc, patch);
        assert_eq!(out["spec"]["selector"], json!({"c":"3"}));
        // Upstream's order: the patch's new value before the live ones (kubectl sends a
        // `$setElementOrder` when the order matters).
        assert_eq!(out["metadata"]["finalizers"], json!(["z", "y"]));
    }

    #[test]
    fn json_and_merge_patches_follow_their_rfcs() {
        let doc = json!({"metadata":{"labels":{"a":"1"}},"spec":{"x":[1,2]}});
        let jp = Patch::parse(
            PatchType::Json,
            br#"[{"op":"add","path":"/metadata/labels/b","value":"2"}]"#,
        )
        .unwrap();
        assert_eq!(
            jp.apply(&doc, None, LIMITS).unwrap()["metadata"]["labels"]["b"],
            "2"
        );
        let bad = Patch::parse(PatchType::Json, br#"[{"op":"remove","path":"/nope"}]"#).unwrap();
        assert!(bad.apply(&doc, None, LIMITS).is_err());
        let mp = Patch::parse(
            PatchType::Merge,
            br#"{"spec":{"x":[3]},"metadata":{"labels":{"a":null}}}"#,
        )
        .unwrap();
        let out = mp.apply(&doc, None, LIMITS).unwrap();
        assert_eq!(out["spec"]["x"], json!([3]));
        assert_eq!(out["metadata"]["labels"], json!({}));
        assert!(Patch::parse(PatchType::Merge, b"[1]").is_err());
    }

    fn json_patch(doc: &Value, ops: Value) -> Result<Value, PatchError> {
        let p = Patch::parse(PatchType::Json, &serde_json::to_vec(&ops).unwrap()).unwrap();
        p.apply(doc, None, LIMITS)
    }

    #[test]
    fn a_run_of_identical_removes_is_one_drain_with_the_same_result() {
        let doc = json!({"x": (0..10).collect::<Vec<i32>>(), "o": {"a": 1}});
        let ops: Vec<Value> = (0..4)
            .map(|_| json!({"op": "remove", "path": "/x/2"}))
            .collect();
        let out = json_patch(&doc, Value::Array(ops)).unwrap();
        assert_eq!(out["x"], json!([0, 1, 6, 7, 8, 9]));
        // Past the end: the operation that runs out fails, as one by one.
        let ops: Vec<Value> = (0..9)
            .map(|_| json!({"op": "remove", "path": "/x/2"}))
            .collect();
        assert!(matches!(
            json_patch(&doc, Value::Array(ops)),
            Err(PatchError::JsonPatch(_))
        ));
        // A non-canonical index is json-patch's to refuse, not a drain.
        let ops = json!([{"op": "remove", "path": "/x/01"}, {"op": "remove", "path": "/x/01"}]);
        assert!(matches!(
            json_patch(&doc, ops),
            Err(PatchError::JsonPatch(_))
        ));
        // Removes of object members are not drained.
        let ops = json!([{"op": "remove", "path": "/o/a"}, {"op": "remove", "path": "/o/a"}]);
        assert!(matches!(
            json_patch(&doc, ops),
            Err(PatchError::JsonPatch(_))
        ));
    }

    #[test]
    fn shifting_array_elements_is_budgeted() {
        let n = 1_000_000;
        let doc = json!({"x": vec![0; n]});
        let ops: Vec<Value> = (0..20)
            .map(|i| json!({"op": "remove", "path": format!("/x/{}", i % 2)}))
            .collect();
        match json_patch(&doc, Value::Array(ops)) {
            Err(e @ PatchError::TooMuchWork { .. }) => {
                assert_eq!(e.to_api_error().code(), 422);
            }
            other => panic!("{other:?}"),
        }
        // Adds at the end and removes of the last element shift nothing.
        let ops: Vec<Value> = (0..10_000)
            .map(|i| {
                if i % 2 == 0 {
                    json!({"op": "add", "path": "/x/-", "value": 1})
                } else {
                    json!({"op": "remove", "path": format!("/x/{n}")})
                }
            })
            .collect();
        assert_eq!(
            json_patch(&doc, Value::Array(ops)).unwrap()["x"]
                .as_array()
                .unwrap()
                .len(),
            n
        );
    }

    #[test]
    fn apply_bodies_may_be_yaml() {
        let p = Patch::parse(PatchType::Apply, b"metadata:\n  labels:\n    app: web\n").unwrap();
        let out = p
            .apply(&json!({"metadata":{"name":"a"}}), None, LIMITS)
            .unwrap();
        assert_eq!(out["metadata"], json!({"name":"a","labels":{"app":"web"}}));
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml; charset=utf-8"),
            Some(PatchType::Apply)
        );
        assert_eq!(PatchType::from_content_type("text/plain"), None);
    }

    #[test]
    fn json_patches_over_ten_thousand_operations_are_413() {
        let op = r#"{"op":"test","path":"/a","value":1}"#;
        let body = |n: usize| format!("[{}]", vec![op; n].join(","));
        assert!(Patch::parse(PatchType::Json, body(10_000).as_bytes()).is_ok());
        let e = Patch::parse(PatchType::Json, body(10_001).as_bytes()).unwrap_err();
        assert!(matches!(e, PatchError::TooManyOperations { got: 10_001 }));
        let s = e.to_api_error();
        assert_eq!(s.code(), 413);
        assert_eq!(
            s.0.message,
            "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
    }

    #[test]
    fn doubling_copies_stop_at_the_copy_budget() {
        // The attack of issue 11: each copy doubles /x; 18 of them would be 2^18 times /x.
        let ops = vec![r#"{"op":"copy","from":"/x","path":"/x/-"}"#; 18].join(",");
        let p = Patch::parse(PatchType::Json, format!("[{ops}]").as_bytes()).unwrap();
        let doc = json!({"x": ["0123456789abcdef0123456789abcdef"]});
        let limits = PatchLimits {
            max_copy_bytes: 1024 * 1024,
        };
        let e = p.apply(&doc, None, limits).unwrap_err();
        let PatchError::CopyTooLarge { accumulated, limit } = e else {
            panic!("{e}")
        };
        assert_eq!(limit, 1024 * 1024);
        assert!(accumulated > limit);
        assert_eq!(e_code(&p, &doc, limits), 422);
        // A copy within the budget works.
        let one = Patch::parse(
            PatchType::Json,
            br#"[{"op":"copy","from":"/x","path":"/y"}]"#,
        )
        .unwrap();
        assert_eq!(one.apply(&doc, None, limits).unwrap()["y"], doc["x"]);
    }

    fn e_code(p: &Patch, doc: &Value, limits: PatchLimits) -> u16 {
        p.apply(doc, None, limits)
            .unwrap_err()
            .to_api_error()
            .code()
    }

    #[test]
    fn json_patches_cannot_build_documents_past_the_depth_limit() {
        // Adds that each nest 60 more levels under the last: the pointers stay short.
        let deep = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
        let path = |n: usize| "/a".repeat(n);
        let ops = format!(
            r#"[{{"op":"add","path":"/d","value":{}}},{{"op":"add","path":"/d{}","value":{}}}]"#,
            deep(60),
            path(59),
            deep(60)
        );
        let p = Patch::parse(PatchType::Json, ops.as_bytes()).unwrap();
        let e = p.apply(&json!({}), None, LIMITS).unwrap_err();
        assert!(
            matches!(e, PatchError::Limit(DecodeError::TooDeep { .. })),
            "{e}"
        );
        assert_eq!(e.to_api_error().code(), 400);
        // Moves that push a subtree deeper and deeper are refused long before the stack
        // is at risk, however many there are.
        let mut moves = vec![format!(
            r#"{{"op":"add","path":"/m","value":{}}}"#,
            deep(50)
        )];
        for _ in 0..3_000 {
            moves.push(r#"{"op":"add","path":"/n","value":{}}"#.into());
            moves.push(r#"{"op":"move","from":"/m","path":"/n/m"}"#.into());
            moves.push(r#"{"op":"move","from":"/n","path":"/m"}"#.into());
        }
        let p = Patch::parse(PatchType::Json, format!("[{}]", moves.join(",")).as_bytes());
        let p = p.unwrap();
        assert!(matches!(
            p.apply(&json!({}), None, LIMITS),
            Err(PatchError::Limit(DecodeError::TooDeep { .. }))
        ));
    }

    #[test]
    fn apply_bodies_in_yaml_cannot_expand_without_bound() {
        let mut y = String::from("metadata:\n  name: a\nl0: &l0 [\"lol\"]\n");
        for i in 1..=9 {
            let refs = vec![format!("*l{}", i - 1); 9].join(", ");
            y.push_str(&format!("l{i}: &l{i} [{refs}]\n"));
        }
        let e = Patch::parse(PatchType::Apply, y.as_bytes()).unwrap_err();
        assert_eq!(e.to_api_error().code(), 413, "{e}");
    }

    fn named(items: &[(u8, u8)]) -> Value {
        Value::Array(
            items
                .iter()
                .map(|(n, v)| json!({"name": format!("c{n}"), "v": v}))
                .collect(),
        )
    }

    proptest::proptest! {
        /// Naive model of a keyed list merge (upstream's order, by linear scans): items take
        /// the patch's fields; the patch's keys come in the patch's order, each current
        /// item the patch does not name goes before the first patch item that follows it
        /// in the current list (so a new key goes before the current items after it).
        #[test]
        fn keyed_list_merge_agrees_with_a_naive_model(
            current in proptest::collection::btree_map(0u8..8, 0u8..4, 0..6),
            patch in proptest::collection::vec((0u8..8, 4u8..8), 0..6),
        ) {
            let current: Vec<(u8, u8)> = current.into_iter().collect();
            let mut keys: Vec<u8> = Vec::new();
            for (n, _) in &patch {
                if !keys.contains(n) {
                    keys.push(*n);
                }
            }
            let value = |n: u8| patch.iter().rev().find(|(m, _)| *m == n).map(|(_, v)| *v);
            let pos = |n: u8| current.iter().position(|(m, _)| *m == n);
            let server: Vec<(u8, u8)> = current.iter().filter(|(n, _)| !keys.contains(n)).copied().collect();
            let (mut i, mut j, mut model) = (0, 0, Vec::new());
            while i < server.len() || j < keys.len() {
                let left = j == keys.len()
                    || (i < server.len()
                        && matches!((pos(server[i].0), pos(keys[j])), (Some(a), Some(b)) if a < b));
                if left {
                    model.push(server[i]);
                    i += 1;
                } else {
                    model.push((keys[j], value(keys[j]).unwrap_or_default()));
                    j += 1;
                }
            }
            let out = smp(json!({"spec":{"containers": named(&current)}}), json!({"spec":{"containers": named(&patch)}}));
            proptest::prop_assert_eq!(&out["spec"]["containers"], &named(&model));
        }

        #[test]
        fn arbitrary_patches_never_panic(doc in "[ -~]{0,40}", patch in "[ -~]{0,40}") {
            for kind in [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge, PatchType::Apply] {
                if let (Ok(p), Ok(d)) = (Patch::parse(kind, patch.as_bytes()), serde_json::from_str::<Value>(&doc)) {
                    let _ = p.apply(&d, None, LIMITS);
                }
            }
        }
    }
}
