//! Escalation through RBAC writes, through the real binary with bearer tokens and
//! `--authorization-mode RBAC` (issue 23): an `aggregationRule` needs full authority on
//! every write path (POST, PUT, PUT-create, every PATCH type, server-side apply, dry run),
//! for the new and for the stored version; a member role's labels only move rules its
//! writer holds; `escalate` and `system:masters` may do either. And `AlwaysAllow`
//! anywhere in the authorization modes turns anonymous requests off.
//!
//! This module holds the server harness (`Cluster`) and the helpers; `aggregation` the
//! aggregationRule and member-label tests, `bindings` the rest (bindings, garbage
//! collector fields, `AlwaysAllow`, namespace lists).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod aggregation;
mod bindings;

use crate::common;

use std::time::Instant;

use common::{PATIENCE, Response, Server, http};
use serde_json::{Value, json};

const TOKENS: &str = "root-token,root,uid-root,system:masters\n\
mallory-token,mallory,uid-mallory\n\
pat-token,pat,uid-pat\n\
erin-token,erin,uid-erin\n\
lisa-token,lisa,uid-lisa\n\
eve-token,eve,uid-eve\n";

const CR: &str = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
const CRB: &str = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
const AGG_MESSAGE: &str = "must have cluster-admin privileges to use the aggregationRule";

struct Cluster {
    server: Server,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn start(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tokens = dir.path().join("tokens.csv");
        std::fs::write(&tokens, TOKENS).unwrap();
        let mut flags = vec!["--token-auth-file", tokens.to_str().unwrap()];
        flags.extend_from_slice(extra);
        let server = Server::start(&flags);
        Self { server, _dir: dir }
    }

    /// One request as the holder of `token` (`None`: anonymous).
    fn req(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        content_type: &str,
        body: &str,
    ) -> Response {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![
            ("Content-Type", content_type),
            ("Accept", "application/json"),
        ];
        if let Some(b) = &bearer {
            headers.push(("Authorization", b));
        }
        http(&self.server.addr, method, path, &headers, body.as_bytes())
    }

    fn json(&self, token: Option<&str>, method: &str, path: &str, body: &Value) -> Response {
        self.req(token, method, path, "application/json", &body.to_string())
    }

    fn root(&self, method: &str, path: &str, body: &Value) -> Value {
        let r = self.json(Some("root-token"), method, path, body);
        assert!(r.status < 300, "{method} {path}: {} {}", r.status, r.json());
        r.json()
    }

    fn get(&self, path: &str) -> Value {
        self.root("GET", path, &Value::Null)
    }

    /// A ClusterRole granting `rules`, bound to user `user`, both named `name`.
    fn grant(&self, name: &str, user: &str, rules: Value) {
        self.root("POST", CR, &cluster_role(name, rules, None, None));
        self.root(
            "POST",
            CRB,
            &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            }),
        );
    }

    /// POSTs `body` until it is created (deadline [`PATIENCE`]): a binding's check reads
    /// the role it refers to from the informers, which may not have seen a just-created
    /// role yet.
    fn until_created(&self, token: Option<&str>, path: &str, body: &Value) -> Response {
        let start = Instant::now();
        loop {
            let r = self.json(token, "POST", path, body);
            if r.status == 201 || start.elapsed() > PATIENCE {
                return r;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Waits (deadline [`PATIENCE`]) until `user` is allowed `verb` on `path`, as the
    /// authorizer's informers catch up with a binding.
    fn until_allowed(&self, token: &str, path: &str) {
        let start = Instant::now();
        loop {
            let r = self.json(Some(token), "GET", path, &Value::Null);
            if r.status == 200 {
                return;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "{path}: {} {}",
                r.status,
                r.json()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

fn cluster_role(name: &str, rules: Value, labels: Option<Value>, agg: Option<Value>) -> Value {
    let mut v = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": rules,
    });
    if let Some(l) = labels {
        v["metadata"]["labels"] = l;
    }
    if let Some(a) = agg {
        v["aggregationRule"] = a;
    }
    v
}

fn assert_refused(r: &Response, what: &str, message: &str) {
    assert_eq!(r.status, 403, "{what}: {}", r.json());
    let body = r.json();
    assert_eq!(body["reason"], "Forbidden", "{what}: {body}");
    let got = body["message"].as_str().unwrap_or("");
    assert!(got.contains(message), "{what}: {got}");
}
