//! The metadata-only projection of a stored object: its `meta.k8s.io` `PartialObjectMetadata`
//! (what metadata informers — the garbage collector's, kube-rs `metadata_watcher`, client-go's
//! metadata informers — ask for), cut from the stored bytes instead of decoded and re-encoded.
//!
//! An [`crate::Object`]'s stored JSON is canonical (`Object::from_value` writes it) and knows
//! where its `metadata` object opens (the resource-version splice point), so the projection
//! is the type header, `"metadata":{`, the resource version spliced in as the wire JSON has
//! it, the stored metadata members' bytes up to the object's closing brace, and `}`: one scan
//! of the metadata member (strings with their escapes, nested objects and arrays) and one copy
//! of it. The spec and the status are never read, parsed or copied.
//!
//! Who uses it: `Object::partial_metadata_json`, which on an object with a shared encoding
//! (one per dispatched event, see `Object::with_shared_encoding`) computes the projection at
//! most once and shares it with every clone — every HTTP `PartialObjectMetadata` watcher and
//! every in-process metadata informer (`listwatch-cacher`'s `MetadataListerWatcher`, the
//! garbage collector's) of that event get the same bytes.
//!
//! Invariants: the output is the object's metadata member byte for byte (member order and
//! `managedFields` FieldsV1 key order kept), with `resourceVersion` first as in the wire JSON;
//! the scan never indexes past the input and nests at most as deep as
//! [`crate::drop_fields`]' scanner; bytes it cannot follow (a damaged persisted body) are an
//! error, never a panic or a partial answer; each projection built is counted
//! ([`metadata_projection_count`]), so tests can prove N consumers of one event cost one.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::ObjectError;

/// Projections built by [`project`] since the process started.
static PROJECTIONS: AtomicU64 = AtomicU64::new(0);

/// How many metadata-only projections this process has built (tests prove with it that an
/// event fanned out to many metadata consumers is projected once).
pub fn metadata_projection_count() -> u64 {
    PROJECTIONS.load(Ordering::Relaxed)
}

/// The `PartialObjectMetadata` JSON of a stored body: `json` is its canonical stored JSON,
/// `rv_at` the offset just inside `"metadata":{`, `meta_has_members` whether members follow
/// it, `rv` the version to splice in (none when 0), `beta` for `meta.k8s.io/v1beta1`.
pub(crate) fn project(
    json: &[u8],
    rv_at: usize,
    meta_has_members: bool,
    rv: u64,
    beta: bool,
) -> Result<Bytes, ObjectError> {
    let damaged = || ObjectError::Shape("stored metadata cannot be followed".into());
    let open = rv_at.checked_sub(1).ok_or_else(damaged)?;
    if json.get(open) != Some(&b'{') {
        return Err(damaged());
    }
    let end = crate::drop_fields::skip_value(json, open, 0).ok_or_else(damaged)?;
    // The members and the closing brace of the metadata object.
    let members = json.get(rv_at..end).ok_or_else(damaged)?;
    PROJECTIONS.fetch_add(1, Ordering::Relaxed);
    let head: &[u8] = if beta {
        br#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1beta1","metadata":{"#
    } else {
        br#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"#
    };
    let mut out = Vec::with_capacity(head.len() + members.len() + 48);
    out.extend_from_slice(head);
    if rv != 0 {
        out.extend_from_slice(b"\"resourceVersion\":\"");
        out.extend_from_slice(rv.to_string().as_bytes());
        out.push(b'"');
        if meta_has_members {
            out.push(b',');
        }
    }
    out.extend_from_slice(members);
    out.push(b'}');
    Ok(Bytes::from(out.into_boxed_slice()))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::{Object, SelectableFields};

    fn pod() -> Object {
        Object::from_value(
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": "a\"}{", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                    "labels": {"app": "x"},
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u0"}],
                    "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {".": {}}}}]
                },
                "spec": {"containers": [{"name": "c", "image": "i", "args": ["}", "{"]}]},
                "status": {"phase": "Running"}
            }),
            &SelectableFields::none(),
        )
        .unwrap()
    }

    #[test]
    fn the_projection_is_the_metadata_of_the_wire_json_and_nothing_else() {
        let o = pod();
        let got: Value = serde_json::from_slice(&o.partial_metadata_json().unwrap()).unwrap();
        let wire: Value = serde_json::from_slice(&o.to_json_bytes()).unwrap();
        assert_eq!(
            got,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                   "metadata": wire["metadata"].clone()})
        );
        assert_eq!(got["metadata"]["resourceVersion"], "7");
        // Beta, and a never-stored object (no version to splice).
        let beta: Value =
            serde_json::from_slice(&o.partial_metadata_json_at(true).unwrap()).unwrap();
        assert_eq!(beta["apiVersion"], "meta.k8s.io/v1beta1");
        let fresh = o.with_resource_version(0);
        let v: Value = serde_json::from_slice(&fresh.partial_metadata_json().unwrap()).unwrap();
        assert!(v["metadata"].get("resourceVersion").is_none());
        assert_eq!(v["metadata"]["name"], "a\"}{");
        // Empty metadata.
        let bare = Object::from_value(json!({"kind": "X"}), &SelectableFields::none()).unwrap();
        let v: Value = serde_json::from_slice(&bare.partial_metadata_json().unwrap()).unwrap();
        assert_eq!(v["metadata"], json!({}));
        let v: Value = serde_json::from_slice(
            &bare
                .with_resource_version(3)
                .partial_metadata_json()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(v["metadata"], json!({"resourceVersion": "3"}));
    }

    #[test]
    fn a_shared_object_is_projected_once_for_all_its_clones() {
        let shared = pod().with_shared_encoding();
        assert!(!shared.has_partial_metadata());
        let first = shared.partial_metadata_json().unwrap();
        assert!(shared.has_partial_metadata());
        for _ in 0..10 {
            let again = shared.clone().partial_metadata_json().unwrap();
            assert_eq!(again.as_ptr(), first.as_ptr(), "the same bytes, not a copy");
        }
        // An unshared object projects on every call.
        let plain = pod();
        let a = plain.partial_metadata_json().unwrap();
        assert_eq!(a, first);
        assert_ne!(plain.partial_metadata_json().unwrap().as_ptr(), a.as_ptr());
        assert!(!plain.has_partial_metadata());
    }

    #[test]
    fn damaged_bodies_are_errors_not_panics() {
        for (json, rv_at) in [
            (&b"{\"metadata\":{\"name\":\"a"[..], 13),
            (b"{\"metadata\":{", 13),
            (b"", 0),
            (b"{\"metadata\":[1]}", 13),
            (b"{\"metadata\":{}}", 99),
        ] {
            assert!(
                super::project(json, rv_at, true, 5, false).is_err(),
                "{json:?}"
            );
        }
    }
}
