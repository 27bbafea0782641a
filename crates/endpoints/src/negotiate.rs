//! Content negotiation: which representation an `Accept` header asks for.
//!
//! JSON is the default (kube-rs sends no `Accept`). A request may also ask for the server-side
//! printed `Table` (kubectl `get`), for aggregated discovery (`APIGroupDiscoveryList` v2), or
//! for YAML (`application/yaml`: objects, lists and errors of resource requests; not
//! watches, which upstream cannot stream as YAML either).
//! Media ranges are tried in the client's order, highest `q` first; a range this server
//! cannot produce is skipped; when none remains the answer is 406. The range picked may also
//! ask for `metadata.managedFields` to be left out of the objects (`drop=`, upstream's
//! KEP-5958 opt-out: [`negotiate_dropping`]). `application/cbor` (KEP-4222) is served for
//! what JSON is served for on resources (objects, lists, watches, writes, errors), except
//! Tables and metadata-only forms: a CBOR range with `as=` is skipped (the `cbor` module).

use axum::http::HeaderMap;
use axum::http::header::ACCEPT;

use crate::error::{ApiError, ApiResult};

/// A representation of a response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Plain Kubernetes JSON.
    Json,
    /// `meta.k8s.io` Table (v1 or v1beta1 — the shapes are the same).
    Table {
        /// Whether `v1beta1` was asked (the response's apiVersion follows).
        beta: bool,
    },
    /// Aggregated discovery `apidiscovery.k8s.io/v2`.
    DiscoveryV2,
    /// `meta.k8s.io/v1` `PartialObjectMetadata` (objects, watch events) or
    /// `PartialObjectMetadataList` (lists): metadata only, as metadata informers ask.
    Metadata,
    /// `application/yaml`: the JSON representation, as YAML (the `yaml` module).
    Yaml,
    /// `application/cbor`: the JSON representation, as CBOR (the `cbor` module; a watch
    /// answers `application/cbor-seq`).
    Cbor,
}

impl Format {
    /// The response `Content-Type`: the serializer's media type, as upstream's
    /// `WriteObjectNegotiated` sends it (`application/json` for a Table or partial metadata
    /// too; only aggregated discovery names its kind, `listGVKInContentType`).
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json | Format::Table { .. } | Format::Metadata => "application/json",
            Format::DiscoveryV2 => {
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            }
            Format::Yaml => "application/yaml",
            Format::Cbor => crate::cbor::CONTENT_TYPE,
        }
    }
}

/// What an endpoint can produce besides JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// JSON only (discovery documents).
    Json,
    /// JSON or YAML (writes and their errors).
    Object,
    /// JSON, YAML, Table or metadata only (object reads, lists, watches; a watch refuses
    /// YAML).
    JsonOrTable,
    /// JSON or aggregated discovery (`/api`, `/apis`).
    JsonOrDiscovery,
}

/// Picks the representation for a request.
pub fn negotiate(headers: &HeaderMap, offer: Offer) -> ApiResult<Format> {
    negotiate_dropping(headers, offer).map(|(f, _)| f)
}

/// Picks the representation for a request, and whether the media range it picked asks for
/// `metadata.managedFields` to be left out (`drop=metadata.managedFields`, upstream's
/// KEP-5958; targets joined by `+`, unknown ones ignored as upstream ignores them).
pub fn negotiate_dropping(headers: &HeaderMap, offer: Offer) -> ApiResult<(Format, bool)> {
    pick(headers, Format::Json, supported(offer), |r| {
        match_range(r, offer)
    })
}

/// Whether a media range's `drop` parameter names `metadata.managedFields`.
fn drops_managed_fields(range: &str) -> bool {
    range.split(';').skip(1).any(|p| {
        p.split_once('=').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("drop")
                && v.trim()
                    .trim_matches('"')
                    .split('+')
                    .any(|t| t.trim() == "metadata.managedFields")
        })
    })
}

/// The representation of a write's answer (create, update, patch, delete), as upstream's
/// `transformResponseObject` gives it for writes too (k8s.io/apiserver
/// `pkg/endpoints/handlers/response.go`, and `RequestScope.AllowsMediaTypeTransform` in
/// `handlers/rest.go`, which allows Table and the partial metadata forms on every verb).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFormat {
    /// The object (or Status) as JSON.
    Json,
    /// The same, as YAML.
    Yaml,
    /// The same, as CBOR.
    Cbor,
    /// `meta.k8s.io` `v1` (or `v1beta1`) `Table` of the one object.
    Table {
        /// Whether `v1beta1` was asked.
        beta: bool,
    },
    /// `meta.k8s.io` `v1` (or `v1beta1`) `PartialObjectMetadata` of the object.
    Metadata {
        /// Whether `v1beta1` was asked.
        beta: bool,
    },
    /// `PartialObjectMetadataList`: a write's answer is never a list, so upstream answers
    /// 406 (`asPartialObjectMetadataList`).
    MetadataList,
}

/// Picks the representation of a write's answer (see [`WriteFormat`]).
pub fn negotiate_write(headers: &HeaderMap) -> ApiResult<WriteFormat> {
    negotiate_write_dropping(headers).map(|(f, _)| f)
}

/// [`negotiate_write`], and whether the picked range drops `metadata.managedFields` (see
/// [`negotiate_dropping`]).
pub fn negotiate_write_dropping(headers: &HeaderMap) -> ApiResult<(WriteFormat, bool)> {
    pick(
        headers,
        WriteFormat::Json,
        supported(Offer::Object),
        match_write_range,
    )
}

fn match_write_range(range: &str) -> Option<WriteFormat> {
    Some(match match_range(range, Offer::JsonOrTable)? {
        Format::Yaml => WriteFormat::Yaml,
        Format::Cbor => WriteFormat::Cbor,
        Format::Table { beta } => WriteFormat::Table { beta },
        Format::Metadata => match media_params(range) {
            (Some("PartialObjectMetadataList"), _, _) => WriteFormat::MetadataList,
            (_, _, v) => WriteFormat::Metadata {
                beta: v == Some("v1beta1"),
            },
        },
        Format::Json | Format::DiscoveryV2 => WriteFormat::Json,
    })
}

/// The first range of `Accept` (highest `q` first, then the client's order) that `matcher`
/// can produce; `default` without an `Accept`; 406 listing `supported` when none.
fn pick<T>(
    headers: &HeaderMap,
    default: T,
    supported: &str,
    matcher: impl Fn(&str) -> Option<T>,
) -> ApiResult<(T, bool)> {
    let Some(accept) = headers.get(ACCEPT) else {
        return Ok((default, false));
    };
    let accept = accept
        .to_str()
        .map_err(|_| ApiError::not_acceptable(supported))?;
    if accept.trim().is_empty() {
        return Ok((default, false));
    }
    let mut ranges: Vec<(f32, usize, &str)> = Vec::new();
    for (i, range) in accept.split(',').enumerate() {
        let q = range
            .split(';')
            .skip(1)
            .filter_map(|p| {
                let (k, v) = p.split_once('=')?;
                k.trim().eq_ignore_ascii_case("q").then_some(v)
            })
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if q > 0.0 {
            ranges.push((q, i, range));
        }
    }
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, _, range) in ranges {
        if let Some(f) = matcher(range) {
            return Ok((f, drops_managed_fields(range)));
        }
    }
    Err(ApiError::not_acceptable(supported))
}

/// A media range's `as`, `g` and `v` parameters (quotes trimmed).
fn media_params(range: &str) -> (Option<&str>, Option<&str>, Option<&str>) {
    let (mut as_, mut g, mut v) = (None, None, None);
    for p in range.split(';').skip(1) {
        let Some((k, val)) = p.split_once('=') else {
            continue;
        };
        let val = val.trim().trim_matches('"');
        // Parameter names are case-insensitive (RFC 9110 §5.6.6; Go's `mime.ParseMediaType`,
        // which upstream's Accept parsing uses, lowercases them).
        match k.trim().to_ascii_lowercase().as_str() {
            "as" => as_ = Some(val),
            "g" => g = Some(val),
            "v" => v = Some(val),
            _ => {}
        }
    }
    (as_, g, v)
}

fn supported(offer: Offer) -> &'static str {
    match offer {
        Offer::Json => "application/json",
        Offer::Object | Offer::JsonOrTable => {
            "application/json, application/yaml, application/cbor"
        }
        Offer::JsonOrDiscovery => {
            "application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
        }
    }
}

fn match_range(range: &str, offer: Offer) -> Option<Format> {
    let mut parts = range.split(';');
    let essence = parts.next()?.trim().to_ascii_lowercase();
    if essence == "application/yaml" {
        // Plain YAML only (no `as=`: tables and metadata are JSON here).
        let plain = media_params(range).0.is_none();
        return (plain && matches!(offer, Offer::Object | Offer::JsonOrTable))
            .then_some(Format::Yaml);
    }
    if essence == "application/cbor" {
        // Plain CBOR only: Tables and metadata-only forms are JSON here.
        let plain = media_params(range).0.is_none();
        return (plain && matches!(offer, Offer::Object | Offer::JsonOrTable))
            .then_some(Format::Cbor);
    }
    if !matches!(
        essence.as_str(),
        "application/json" | "application/*" | "*/*"
    ) {
        return None;
    }
    match media_params(range) {
        (None, _, _) => Some(Format::Json),
        (Some("Table"), Some("meta.k8s.io"), Some(ver @ ("v1" | "v1beta1")))
            if offer == Offer::JsonOrTable =>
        {
            Some(Format::Table {
                beta: ver == "v1beta1",
            })
        }
        (
            Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
            Some("meta.k8s.io"),
            Some("v1" | "v1beta1"),
        ) if offer == Offer::JsonOrTable => Some(Format::Metadata),
        (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2"))
            if offer == Offer::JsonOrDiscovery =>
        {
            Some(Format::DiscoveryV2)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(accept: Option<&str>, offer: Offer) -> ApiResult<Format> {
        let mut h = HeaderMap::new();
        if let Some(a) = accept {
            h.insert(ACCEPT, a.parse().unwrap());
        }
        negotiate(&h, offer)
    }

    #[test]
    fn json_is_the_default() {
        assert_eq!(pick(None, Offer::JsonOrTable).unwrap(), Format::Json);
        assert_eq!(pick(Some("*/*"), Offer::Json).unwrap(), Format::Json);
        assert_eq!(
            pick(Some("application/json, */*"), Offer::JsonOrDiscovery).unwrap(),
            Format::Json
        );
    }

    #[test]
    fn kubectl_get_receives_a_table() {
        let a = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            pick(Some(a), Offer::JsonOrTable).unwrap(),
            Format::Table { beta: false }
        );
        assert_eq!(pick(Some(a), Offer::Json).unwrap(), Format::Json);
    }

    #[test]
    fn kubectl_discovery_receives_aggregated_v2() {
        let a = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(
            pick(Some(a), Offer::JsonOrDiscovery).unwrap(),
            Format::DiscoveryV2
        );
        assert_eq!(pick(Some(a), Offer::JsonOrTable).unwrap(), Format::Json);
    }

    #[test]
    fn metadata_informers_receive_partial_object_metadata() {
        let a = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(pick(Some(a), Offer::JsonOrTable).unwrap(), Format::Metadata);
        assert_eq!(pick(Some(a), Offer::Json).unwrap_err().code(), 406);
    }

    #[test]
    fn yaml_is_served_for_resources_not_discovery() {
        assert_eq!(
            pick(Some("application/yaml"), Offer::Object).unwrap(),
            Format::Yaml
        );
        assert_eq!(
            pick(
                Some("application/yaml, application/json"),
                Offer::JsonOrTable
            )
            .unwrap(),
            Format::Yaml
        );
        assert_eq!(
            pick(
                Some("application/json;q=0.5, application/yaml"),
                Offer::Object
            )
            .unwrap(),
            Format::Yaml
        );
        assert_eq!(
            pick(Some("application/yaml"), Offer::Json)
                .unwrap_err()
                .code(),
            406
        );
        assert_eq!(
            pick(
                Some("application/yaml;as=Table;v=v1;g=meta.k8s.io"),
                Offer::JsonOrTable
            )
            .unwrap_err()
            .code(),
            406
        );
        assert_eq!(pick(Some("*/*"), Offer::Object).unwrap(), Format::Json);
    }

    #[test]
    fn cbor_is_served_for_resources_with_q_values_and_falls_back_otherwise() {
        assert_eq!(
            pick(Some("application/cbor"), Offer::JsonOrTable).unwrap(),
            Format::Cbor
        );
        assert_eq!(
            pick(Some("APPLICATION/CBOR"), Offer::Object).unwrap(),
            Format::Cbor
        );
        assert_eq!(
            pick(
                Some("application/json;q=0.5, application/cbor"),
                Offer::JsonOrTable
            )
            .unwrap(),
            Format::Cbor
        );
        assert_eq!(
            pick(
                Some("application/cbor;q=0.5, application/json"),
                Offer::JsonOrTable
            )
            .unwrap(),
            Format::Json
        );
        // Discovery is JSON only: a client listing JSON after CBOR gets JSON, alone 406.
        assert_eq!(
            pick(
                Some("application/cbor, application/json;q=0.9"),
                Offer::Json
            )
            .unwrap(),
            Format::Json
        );
        assert_eq!(
            pick(Some("application/cbor"), Offer::Json)
                .unwrap_err()
                .code(),
            406
        );
        // Tables and metadata-only forms are not served as CBOR: the range is skipped.
        let table = "application/cbor;as=Table;v=v1;g=meta.k8s.io, application/json";
        assert_eq!(pick(Some(table), Offer::JsonOrTable).unwrap(), Format::Json);
        // A watch stream's own media type is not an Accept for one object.
        assert_eq!(
            pick(Some("application/cbor-seq"), Offer::JsonOrTable)
                .unwrap_err()
                .code(),
            406
        );
        let mut h = HeaderMap::new();
        h.insert(ACCEPT, "application/cbor".parse().unwrap());
        assert_eq!(negotiate_write(&h).unwrap(), WriteFormat::Cbor);
    }

    #[test]
    fn unservable_accepts_are_406() {
        for a in [
            "application/vnd.kubernetes.protobuf",
            "application/yaml",
            "application/json;as=Table;v=v1;g=meta.k8s.io",
            "application/json;q=0",
        ] {
            assert_eq!(pick(Some(a), Offer::Json).unwrap_err().code(), 406, "{a}");
        }
        assert_eq!(
            pick(
                Some("application/vnd.kubernetes.protobuf, application/json;q=0.5"),
                Offer::Json
            )
            .unwrap(),
            Format::Json
        );
    }

    #[test]
    fn the_drop_parameter_of_the_picked_range_is_read() {
        let drop = |a: &str| {
            let mut h = HeaderMap::new();
            h.insert(ACCEPT, a.parse().unwrap());
            negotiate_dropping(&h, Offer::JsonOrTable).unwrap()
        };
        assert_eq!(
            drop("application/json;drop=metadata.managedFields"),
            (Format::Json, true)
        );
        assert_eq!(
            drop("application/json; drop=metadata.managedFields, */*; drop=metadata.managedFields"),
            (Format::Json, true)
        );
        assert_eq!(
            drop("application/json;drop=spec.someFutureField+metadata.managedFields"),
            (Format::Json, true)
        );
        assert_eq!(
            drop("application/json;drop=spec.someFutureField"),
            (Format::Json, false)
        );
        assert_eq!(drop("application/json"), (Format::Json, false));
        // Parameter names are case-insensitive (rt5's finding: `DROP=` was ignored).
        assert_eq!(
            drop("application/json;DROP=metadata.managedFields"),
            (Format::Json, true)
        );
        assert_eq!(
            drop("application/json;AS=PartialObjectMetadata;G=meta.k8s.io;V=v1"),
            (Format::Metadata, false)
        );
        assert_eq!(
            drop("application/yaml;Q=0, application/json;q=0.5"),
            (Format::Json, false)
        );
        assert_eq!(
            drop(
                "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;drop=metadata.managedFields"
            ),
            (Format::Metadata, true)
        );
        // The range picked decides: a drop on a range not picked is not applied.
        assert_eq!(
            drop(
                "application/vnd.kubernetes.protobuf;drop=metadata.managedFields, application/json"
            ),
            (Format::Json, false)
        );
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_accept_headers_never_panic(a in "[ -~]{0,80}") {
            if let Ok(v) = a.parse() {
                let mut h = HeaderMap::new();
                h.insert(ACCEPT, v);
                for offer in [Offer::Json, Offer::Object, Offer::JsonOrTable, Offer::JsonOrDiscovery] {
                    if let Err(e) = negotiate(&h, offer) {
                        proptest::prop_assert_eq!(e.code(), 406);
                    }
                }
            }
        }
    }
}
