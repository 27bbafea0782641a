//! CertificateSigningRequests as upstream's strategy and certificate admission keep them,
//! through the real binary with bearer tokens and RBAC: the requestor in `spec` is the user
//! who created the request, whatever the body claimed (an approver, or an auto-approver
//! trusting `system:node:*` requestors, reads it); no update changes the spec; and an
//! `/approval` write changes only the conditions, so approving cannot issue a certificate
//! without `sign` on the signer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Response, Server, http};
use serde_json::{Value, json};

const TOKENS: &str = "root-token,root,uid-root,system:masters\n\
mallory-token,mallory,uid-mallory,dev-team\n\
carol-token,carol,uid-carol\n";

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const CR: &str = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
const CRB: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";

/// A PKCS#10 request for `CN=system:node:n1, O=system:nodes` (the strategy does not parse
/// it; a real one keeps the scenario honest).
const REQUEST: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIcU1JR1NBZ0VBTURBeEZ6QVZCZ05WQkFNTURuTjVjM1JsYlRwdWIyUmxPbTR4TVJVd0V3WURWUVFLREF4egplWE4wWlcwNmJtOWtaWE13V1RBVEJnY3Foa2pPUFFJQkJnZ3Foa2pPUFFNQkJ3TkNBQVRQRDhIWUU0cDI5V25LCmN1dDBBRi95QXo4WTA3MzZOTC9RMTRxN0xHMVkrMjhyaVVmL3V6UkVRSHlmTTRKU1JVSmxCR2s0UlhrS2QwOFoKNkVIdkh2eUdvQUF3Q2dZSUtvWkl6ajBFQXdJRFJ3QXdSQUlnU3pzQ0RZUVFyZDlBQzZQRHAxeXhVOGRZVlNKYgpFMFNXYXNZbUdEelJuS2NDSUgvUjlsdmp0Wm5NVTZudXJva2R6U3NrMHQxRlJsK2hVNzJ2QXVOL3Rzc1cKLS0tLS1FTkQgQ0VSVElGSUNBVEUgUkVRVUVTVC0tLS0tCg==";

fn req(server: &Server, token: &str, method: &str, path: &str, body: &Value) -> Response {
    let bearer = format!("Bearer {token}");
    let headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json"),
        ("Authorization", bearer.as_str()),
    ];
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    http(&server.addr, method, path, &headers, body.as_bytes())
}

fn ok(r: Response, what: &str) -> Value {
    assert!(r.status < 300, "{what}: {} {}", r.status, r.json());
    r.json()
}

/// A ClusterRole granting `rules` bound to `user`, both named `name`.
fn grant(server: &Server, name: &str, user: &str, rules: Value) {
    ok(
        req(
            server,
            "root-token",
            "POST",
            CR,
            &json!({"metadata": {"name": name}, "rules": rules}),
        ),
        "role",
    );
    let binding = json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
    });
    ok(req(server, "root-token", "POST", CRB, &binding), "binding");
}

#[test]
fn the_requestor_is_the_creator_and_approval_changes_only_the_conditions() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let server = Server::start(&["--token-auth-file", tokens.to_str().unwrap()]);
    grant(
        &server,
        "csr-requester",
        "mallory",
        json!([{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
            "verbs": ["create", "get", "update"]}]),
    );
    grant(
        &server,
        "csr-approver",
        "carol",
        json!([
            {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
             "verbs": ["get"]},
            {"apiGroups": ["certificates.k8s.io"],
             "resources": ["certificatesigningrequests/approval"], "verbs": ["update"]},
            {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"],
             "resourceNames": ["kubernetes.io/kube-apiserver-client-kubelet"],
             "verbs": ["approve"]},
        ]),
    );

    // Mallory claims to be a node.
    let forged = json!({
        "metadata": {"name": "node-n1"},
        "spec": {
            "request": REQUEST,
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"],
            "username": "system:node:n1",
            "uid": "node-uid",
            "groups": ["system:nodes", "system:authenticated"],
            "extra": {"k": ["v"]},
        },
    });
    let created = ok(
        req(&server, "mallory-token", "POST", CSRS, &forged),
        "create",
    );
    let stored = ok(
        req(
            &server,
            "root-token",
            "GET",
            &format!("{CSRS}/node-n1"),
            &Value::Null,
        ),
        "get",
    );
    for v in [&created, &stored] {
        assert_eq!(v["spec"]["username"], "mallory", "{v}");
        assert_eq!(v["spec"]["uid"], "uid-mallory", "{v}");
        assert_eq!(
            v["spec"]["groups"],
            json!(["dev-team", "system:authenticated"]),
            "{v}"
        );
        assert_eq!(v["spec"].get("extra"), None, "{v}");
    }

    // Nor can an update rewrite the requestor afterwards.
    let mut edited = stored.clone();
    edited["spec"]["username"] = json!("system:node:n1");
    edited["spec"]["groups"] = json!(["system:nodes"]);
    let updated = ok(
        req(
            &server,
            "mallory-token",
            "PUT",
            &format!("{CSRS}/node-n1"),
            &edited,
        ),
        "update",
    );
    assert_eq!(updated["spec"]["username"], "mallory", "{updated}");
    assert_eq!(updated["spec"]["groups"], stored["spec"]["groups"]);

    // Carol may approve for the signer but not sign: her approval carries a certificate,
    // which is not stored.
    let mut approval = updated.clone();
    approval["status"] = json!({
        "conditions": [{"type": "Approved", "status": "True", "reason": "AutoApproved",
            "message": "approved"}],
        "certificate": "Zm9yZ2Vk",
    });
    let approved = ok(
        req(
            &server,
            "carol-token",
            "PUT",
            &format!("{CSRS}/node-n1/approval"),
            &approval,
        ),
        "approval",
    );
    let stored = ok(
        req(
            &server,
            "root-token",
            "GET",
            &format!("{CSRS}/node-n1"),
            &Value::Null,
        ),
        "get after approval",
    );
    for v in [&approved, &stored] {
        assert_eq!(v["status"]["conditions"][0]["type"], "Approved", "{v}");
        assert_eq!(v["status"].get("certificate"), None, "{v}");
        assert_eq!(v["spec"]["username"], "mallory", "{v}");
    }
}

/// A self-signed certificate (`CN=fixcsr`), PEM, base64 as JSON carries bytes.
const CERT: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJkakNDQVIyZ0F3SUJBZ0lVWS9yRm5TRDJNWG1tMXEwRDJnVjgrT2I1c1I0d0NnWUlLb1pJemowRUF3SXcKRVRFUE1BMEdBMVVFQXd3R1ptbDRZM055TUI0WERUSTJNVEl3TnpBek1qQTBNVm9YRFRNMk1USXdOREF6TWpBMApNVm93RVRFUE1BMEdBMVVFQXd3R1ptbDRZM055TUZrd0V3WUhLb1pJemowQ0FRWUlLb1pJemowREFRY0RRZ0FFCm9qNHh0ZG9GTTN2S3dGanFFcGZIZUVBU2c1elYvaGJzZUN3MG9WeVY0NFVDM3hJdDZsVnFzSGd1c2pzSWVTcFcKQjdoSk9UTE52dHJqNkU2aFV6OXlscU5UTUZFd0hRWURWUjBPQkJZRUZFN2ZHRjNpMEpjOUZLVkVYbmF2eHcxOAp0Qi9oTUI4R0ExVWRJd1FZTUJhQUZFN2ZHRjNpMEpjOUZLVkVYbmF2eHcxOHRCL2hNQThHQTFVZEV3RUIvd1FGCk1BTUJBZjh3Q2dZSUtvWkl6ajBFQXdJRFJ3QXdSQUlnQXZrbnhpZ2x1ZFQrRGJoVytZLyt0dVJQZ01pUUhITXAKODF0cXlOT0NKdGNDSUhRdW80Wnh5Um94TUpEa0YvZDc0TzhFRjM4UHZhV1ZwMWM0S2VmM3V6RkYKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=";

/// `base64("garbage")` and `base64("other")`: bytes that are no PEM at all.
const GARBAGE: &str = "Z2FyYmFnZQ==";
const OTHER: &str = "b3RoZXI=";

fn status_of(r: &Response) -> (u16, String) {
    (r.status, r.json().to_string())
}

/// Every write here is an admin's, and upstream refuses each with 422
/// (pkg/apis/certificates/validation): the CSR rules are the kind's, not RBAC's.
#[test]
fn csr_validation_refuses_what_upstream_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).unwrap();
    let server = Server::start(&["--token-auth-file", tokens.to_str().unwrap()]);
    let root =
        |method: &str, path: &str, body: &Value| req(&server, "root-token", method, path, body);
    let csr = |name: &str, request: &str, signer: &str, usages: Value| {
        json!({"metadata": {"name": name},
            "spec": {"request": request, "signerName": signer, "usages": usages}})
    };

    // Create: the request's PEM block, the signer name's form, the usages.
    for (what, body, field) in [
        (
            "non-PEM request",
            csr("bad-req", GARBAGE, "example.com/s", json!(["client auth"])),
            "spec.request",
        ),
        (
            "signer name",
            csr(
                "bad-signer",
                REQUEST,
                "Evil Signer!!",
                json!(["client auth"]),
            ),
            "spec.signerName",
        ),
        (
            "usage",
            csr(
                "bad-usage",
                REQUEST,
                "example.com/s",
                json!(["bogus usage"]),
            ),
            "spec.usages[0]",
        ),
        (
            "duplicate usage",
            csr(
                "dup-usage",
                REQUEST,
                "example.com/s",
                json!(["client auth", "client auth"]),
            ),
            "spec.usages[1]",
        ),
    ] {
        let r = root("POST", CSRS, &body);
        let (code, text) = status_of(&r);
        assert_eq!(code, 422, "{what}: {text}");
        assert!(text.contains(field), "{what}: {text}");
    }

    let good = csr("good", REQUEST, "example.com/s", json!(["client auth"]));
    ok(root("POST", CSRS, &good), "a valid request");
    let merge = |sub: &str, body: Value| {
        let bearer = "Bearer root-token";
        let headers = [
            ("Content-Type", "application/merge-patch+json"),
            ("Accept", "application/json"),
            ("Authorization", bearer),
        ];
        http(
            &server.addr,
            "PATCH",
            &format!("{CSRS}/good/{sub}"),
            &headers,
            body.to_string().as_bytes(),
        )
    };
    let conds = |c: Value| json!({"status": {"conditions": c}});
    let approved = json!({"type": "Approved", "status": "True", "reason": "R", "message": "m"});
    let denied = json!({"type": "Denied", "status": "True", "reason": "R", "message": "m"});

    // Conditions through /approval: never Approved and Denied, no duplicate types.
    for (what, c, needle) in [
        (
            "approved and denied",
            json!([approved, denied]),
            "mutually exclusive",
        ),
        (
            "duplicate type",
            json!([approved, approved]),
            "Duplicate value",
        ),
        (
            "approved not true",
            json!([{"type": "Approved", "status": "False", "reason": "R"}]),
            "Unsupported value",
        ),
    ] {
        let (code, text) = status_of(&merge("approval", conds(c)));
        assert_eq!(code, 422, "{what}: {text}");
        assert!(text.contains(needle), "{what}: {text}");
    }
    ok(merge("approval", conds(json!([approved]))), "approve");
    // Once set, Approved cannot be removed (nor turned into Denied).
    for (what, c) in [("emptied", json!([])), ("replaced", json!([denied]))] {
        let (code, text) = status_of(&merge("approval", conds(c)));
        assert_eq!(code, 422, "{what}: {text}");
        assert!(
            text.contains("may not remove a condition"),
            "{what}: {text}"
        );
    }

    // The certificate through /status: PEM CERTIFICATE blocks, then immutable.
    let cert = |c: Value| json!({"status": {"certificate": c}});
    for (what, c) in [("garbage", json!(GARBAGE)), ("a number", json!(5))] {
        let (code, text) = status_of(&merge("status", cert(c)));
        assert_eq!(code, 422, "{what} as the certificate: {text}");
        assert!(text.contains("status.certificate"), "{what}: {text}");
    }
    ok(
        merge("status", cert(json!(CERT))),
        "issue a PEM certificate",
    );
    for (what, c) in [("changed", json!(OTHER)), ("nulled", Value::Null)] {
        let (code, text) = status_of(&merge("status", cert(c)));
        assert_eq!(code, 422, "certificate {what}: {text}");
        assert!(
            text.contains("may not modify existing certificate"),
            "{what}: {text}"
        );
    }
    let stored = ok(root("GET", &format!("{CSRS}/good"), &Value::Null), "get");
    assert_eq!(stored["status"]["certificate"], CERT, "{stored}");
    assert_eq!(
        stored["status"]["conditions"][0]["type"], "Approved",
        "{stored}"
    );
    assert_eq!(
        stored["status"]["conditions"].as_array().map(Vec::len),
        Some(1)
    );
}
