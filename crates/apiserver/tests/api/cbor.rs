//! Issue 33 item 3: CBOR (upstream's KEP-4222) through the built server with a CBOR client
//! made of raw HTTP and listwatch-cbor: GET, LIST and WATCH (`application/cbor-seq`) answer
//! the same objects as JSON, every object tagged 55799; creates, updates and server-side
//! applies with CBOR bodies store what the JSON path stores; failures are CBOR `Status`
//! objects; hostile CBOR bodies (deep nesting, 2^63 lengths, invalid UTF-8, NaN, duplicate
//! keys, epoch-time tags, trailing bytes) are 400s while the server keeps serving.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Server, http};
use serde_json::{Value, json};

const NS: &str = "cb";
const CMS: &str = "/api/v1/namespaces/cb/configmaps";
const ACCEPT_CBOR: (&str, &str) = ("Accept", "application/cbor");
const CBOR_BODY: (&str, &str) = ("Content-Type", "application/cbor");
const JSON_BODY: (&str, &str) = ("Content-Type", "application/json");

fn cbor_of(r: &common::Response) -> Value {
    assert!(
        listwatch_cbor::is_self_described(&r.body),
        "{}: {:?}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    listwatch_cbor::decode(&r.body).unwrap()
}

fn config_map(name: &str, value: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS, "labels": {"via": "cbor"}},
        "data": {"k": value, "n": "1"},
    })
}

#[test]
fn a_cbor_client_reads_watches_and_writes_the_objects_json_clients_see() {
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    let r = http(
        addr,
        "POST",
        "/api/v1/namespaces",
        &[JSON_BODY],
        ns.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201);
    let rv0 = http(addr, "GET", CMS, &[], b"").json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();

    // Create with a CBOR body, answer in CBOR.
    let r = http(
        addr,
        "POST",
        CMS,
        &[CBOR_BODY, ACCEPT_CBOR],
        &listwatch_cbor::encode(&config_map("a", "from-cbor")),
    );
    assert_eq!(r.status, 201, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("application/cbor"));
    let created = cbor_of(&r);
    assert_eq!(created["data"]["k"], "from-cbor");
    // A JSON client created the second one.
    let r = http(
        addr,
        "POST",
        CMS,
        &[JSON_BODY],
        config_map("b", "from-json").to_string().as_bytes(),
    );
    assert_eq!(r.status, 201);

    // GET: the JSON view and the CBOR view are one object.
    for name in ["a", "b"] {
        let path = format!("{CMS}/{name}");
        let json_view = http(addr, "GET", &path, &[], b"").json();
        let r = http(addr, "GET", &path, &[ACCEPT_CBOR], b"");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("application/cbor"));
        assert_eq!(cbor_of(&r), json_view, "{name}");
    }
    assert_eq!(
        created,
        http(addr, "GET", &format!("{CMS}/a"), &[], b"").json()
    );

    // Update with a CBOR body (the stored version as precondition), then a server-side
    // apply in CBOR.
    let mut a = created.clone();
    a["data"]["k"] = json!("updated-by-cbor");
    let r = http(
        addr,
        "PUT",
        &format!("{CMS}/a"),
        &[CBOR_BODY, ACCEPT_CBOR],
        &listwatch_cbor::encode(&a),
    );
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(cbor_of(&r)["data"]["k"], "updated-by-cbor");
    let apply = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"applied": "yes"}});
    let r = http(
        addr,
        "PATCH",
        &format!("{CMS}/b?fieldManager=cbor-client"),
        &[
            ("Content-Type", "application/apply-patch+cbor"),
            ACCEPT_CBOR,
        ],
        &listwatch_cbor::encode(&apply),
    );
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    let b = http(addr, "GET", &format!("{CMS}/b"), &[], b"").json();
    assert_eq!(b["data"]["applied"], "yes");
    assert!(
        b["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["manager"] == "cbor-client" && m["operation"] == "Apply"),
        "{b}"
    );
    // Other patch types are not read as CBOR (upstream: apply only).
    let r = http(
        addr,
        "PATCH",
        &format!("{CMS}/b"),
        &[("Content-Type", "application/merge-patch+cbor")],
        &listwatch_cbor::encode(&json!({"data": {"x": "y"}})),
    );
    assert_eq!(r.status, 415);

    // LIST: the same items, and the list's own members.
    let json_list = http(addr, "GET", CMS, &[], b"").json();
    let r = http(addr, "GET", CMS, &[ACCEPT_CBOR], b"");
    assert_eq!(r.header("content-type"), Some("application/cbor"));
    let cbor_list = cbor_of(&r);
    assert_eq!(cbor_list["kind"], "ConfigMapList");
    assert_eq!(cbor_list["apiVersion"], "v1");
    assert_eq!(cbor_list["items"], json_list["items"]);
    assert_eq!(
        cbor_list["metadata"]["resourceVersion"],
        json_list["metadata"]["resourceVersion"]
    );
    // A paginated list keeps its continue token.
    let r = http(addr, "GET", &format!("{CMS}?limit=1"), &[ACCEPT_CBOR], b"");
    let page = cbor_of(&r);
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert!(page["metadata"]["continue"].is_string(), "{page}");

    // WATCH from before the writes: a CBOR sequence of the JSON watch's events, ending at
    // the timeout.
    let watch = format!("{CMS}?watch=1&resourceVersion={rv0}&timeoutSeconds=1");
    let json_events = http(addr, "GET", &watch, &[], b"").lines();
    let r = http(addr, "GET", &watch, &[ACCEPT_CBOR], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/cbor-seq"));
    let events = listwatch_cbor::decode_sequence(&r.body, 100).unwrap();
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(events, json_events);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["ADDED", "ADDED", "MODIFIED", "MODIFIED"]);
    // Each item, and each object in it, carries the self-described tag.
    assert!(listwatch_cbor::is_self_described(&r.body));
    let prefix = listwatch_cbor::event_prefix("ADDED");
    assert!(r.body[prefix.len()..].starts_with(&listwatch_cbor::SELF_DESCRIBED));
    // Bookmarks are CBOR items too.
    let r = http(
        addr,
        "GET",
        &format!(
            "{CMS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1"
        ),
        &[ACCEPT_CBOR],
        b"",
    );
    let events = listwatch_cbor::decode_sequence(&r.body, 100).unwrap();
    let end = events.iter().find(|e| e["type"] == "BOOKMARK").unwrap();
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );

    // A failure is a CBOR Status.
    let r = http(addr, "GET", &format!("{CMS}/missing"), &[ACCEPT_CBOR], b"");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("application/cbor"));
    let status = cbor_of(&r);
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "NotFound");
    assert_eq!(status["code"], 404);

    // A client that prefers CBOR but takes JSON gets JSON where CBOR is not served.
    let r = http(
        addr,
        "GET",
        "/api",
        &[("Accept", "application/cbor, application/json;q=0.5")],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["kind"], "APIVersions");

    // DELETE with CBOR `DeleteOptions`: a wrong uid precondition is read (409), then the
    // delete is answered in CBOR (its Success Status, as upstream's for a ConfigMap).
    let wrong = json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-its-uid"}});
    let r = http(
        addr,
        "DELETE",
        &format!("{CMS}/a"),
        &[CBOR_BODY, ACCEPT_CBOR],
        &listwatch_cbor::encode(&wrong),
    );
    assert_eq!(r.status, 409, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(cbor_of(&r)["reason"], "Conflict");
    let r = http(
        addr,
        "DELETE",
        &format!("{CMS}/a"),
        &[CBOR_BODY, ACCEPT_CBOR],
        &[0x9f; 100],
    );
    assert_eq!(r.status, 400, "a malformed CBOR DeleteOptions body");
    let r = http(addr, "DELETE", &format!("{CMS}/a"), &[ACCEPT_CBOR], b"");
    assert_eq!(r.status, 200);
    let gone = cbor_of(&r);
    assert_eq!(gone["status"], "Success", "{gone}");
    assert_eq!(gone["details"]["name"], "a");
}

#[test]
fn hostile_cbor_bodies_are_400_and_the_server_keeps_serving() {
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    let r = http(
        addr,
        "POST",
        "/api/v1/namespaces",
        &[JSON_BODY],
        ns.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201);

    let mut deep = [0xa1, 0x41, b'k'].repeat(100_000);
    deep.push(0x00);
    let mut deep_arrays = vec![0x9f; 1_000_000];
    deep_arrays.push(0x00);
    let mut tag_chain = [0xd8, 0x64].repeat(500_000);
    tag_chain.push(0x00);
    let mut wide = vec![0xbf];
    for i in 0..2000u32 {
        wide.extend(listwatch_cbor::encode(&json!(format!("k{i}")))[3..].iter());
        wide.push(0x00);
    }
    wide.push(0xff);
    // A valid map whose `data` value declares 2^63 bytes (or elements) and holds none.
    let declared = |head: &[u8]| {
        let mut b = vec![0xd9, 0xd9, 0xf7, 0xa2];
        b.extend(listwatch_cbor::encode(&json!("metadata"))[3..].iter());
        b.extend(listwatch_cbor::encode(&json!({"name": "x"}))[3..].iter());
        b.extend(listwatch_cbor::encode(&json!("data"))[3..].iter());
        b.extend_from_slice(head);
        b
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("deep maps", deep),
        ("deep indefinite arrays", deep_arrays),
        ("a chain of tags", tag_chain),
        ("a map of 2000 pairs", wide),
        (
            "2^63 bytes declared",
            declared(&[0x5b, 0x80, 0, 0, 0, 0, 0, 0, 0]),
        ),
        (
            "2^63 elements declared",
            declared(&[0x9b, 0x80, 0, 0, 0, 0, 0, 0, 0]),
        ),
        (
            "2^63 pairs declared",
            declared(&[0xbb, 0x80, 0, 0, 0, 0, 0, 0, 0]),
        ),
        ("invalid UTF-8", declared(&[0x62, 0xc3, 0x28])),
        ("NaN", declared(&[0xf9, 0x7e, 0x00])),
        (
            "an infinity",
            declared(&[0xfb, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0]),
        ),
        ("an epoch-time tag", declared(&[0xc1, 0x00])),
        ("a bignum", declared(&[0xc2, 0x41, 0x01])),
        (
            "an integer over int64",
            declared(&[0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
        ),
        ("a duplicate key", {
            let mut b = vec![0xa2];
            b.extend(listwatch_cbor::encode(&json!("kind"))[3..].iter());
            b.extend(listwatch_cbor::encode(&json!("ConfigMap"))[3..].iter());
            b.extend(listwatch_cbor::encode(&json!("kind"))[3..].iter());
            b.extend(listwatch_cbor::encode(&json!("ConfigMap"))[3..].iter());
            b
        }),
        ("trailing bytes", {
            let mut b = listwatch_cbor::encode(&config_map("t", "v"));
            b.push(0x00);
            b
        }),
        ("not a map", listwatch_cbor::encode(&json!([1, 2]))),
        ("truncated", {
            let b = listwatch_cbor::encode(&config_map("t", "v"));
            b[..b.len() - 3].to_vec()
        }),
    ];
    for (what, body) in &cases {
        let r = http(addr, "POST", CMS, &[CBOR_BODY, ACCEPT_CBOR], body);
        assert_eq!(
            r.status,
            400,
            "{what}: {:?}",
            String::from_utf8_lossy(&r.body)
        );
        let status = cbor_of(&r);
        assert_eq!(status["kind"], "Status", "{what}");
        assert_eq!(status["code"], 400, "{what}");
        // The same as an update's body and as a server-side apply's.
        let r = http(addr, "PUT", &format!("{CMS}/x"), &[CBOR_BODY], body);
        assert_eq!(r.status, 400, "{what} (update)");
        let r = http(
            addr,
            "PATCH",
            &format!("{CMS}/x?fieldManager=m"),
            &[("Content-Type", "application/apply-patch+cbor")],
            body,
        );
        assert_eq!(r.status, 400, "{what} (apply)");
    }
    // Nothing was stored, and the server still answers.
    let list = http(addr, "GET", CMS, &[], b"").json();
    assert_eq!(list["items"], json!([]));
    let r = http(
        addr,
        "POST",
        CMS,
        &[CBOR_BODY],
        &listwatch_cbor::encode(&config_map("fine", "v")),
    );
    assert_eq!(r.status, 201);
}

/// The server's own create-only endpoints take CBOR bodies too (rt6 M2: a
/// SelfSubjectAccessReview, an Eviction and a Binding in CBOR were read as JSON and refused).
#[test]
fn reviews_evictions_and_bindings_take_cbor_bodies() {
    let server = Server::start(&[]);
    let addr = server.addr.as_str();
    let ssar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "default"}}});
    let r = http(
        addr,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        &[CBOR_BODY],
        &listwatch_cbor::encode(&ssar),
    );
    assert_eq!(r.status, 201, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["status"]["allowed"], true);
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let r = http(
        addr,
        "POST",
        "/api/v1/namespaces/default/pods",
        &[JSON_BODY],
        pod.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201);
    let binding = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "p", "namespace": "default"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}});
    let r = http(
        addr,
        "POST",
        "/api/v1/namespaces/default/pods/p/binding",
        &[CBOR_BODY],
        &listwatch_cbor::encode(&binding),
    );
    assert_eq!(r.status, 201, "{:?}", String::from_utf8_lossy(&r.body));
    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "p", "namespace": "default"}});
    let r = http(
        addr,
        "POST",
        "/api/v1/namespaces/default/pods/p/eviction",
        &[CBOR_BODY],
        &listwatch_cbor::encode(&eviction),
    );
    assert_eq!(r.status, 201, "{:?}", String::from_utf8_lossy(&r.body));
    // Hostile CBOR there is refused as on the resource handlers.
    let r = http(
        addr,
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        &[CBOR_BODY],
        &[0xd9, 0xd9, 0xf7, 0xbf],
    );
    assert_eq!(r.status, 400, "{:?}", String::from_utf8_lossy(&r.body));
}
