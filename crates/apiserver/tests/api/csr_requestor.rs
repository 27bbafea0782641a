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
