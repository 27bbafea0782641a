//! Issue 17 items 2 and 5 with real clients: `kubectl explain` on built-in and custom
//! resources (the OpenAPI v3 documents), strategic merge refused on a custom resource,
//! `kubectl replace` creating where upstream allows it, `kubectl version`'s platform, and
//! YAML responses fetched with curl.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;

use common::{Server, run_err, run_ok};

const RESOURCES: &str = "resources:
- group: example.com
  version: v1
  kind: Widget
  shortNames: [wd]
  openAPIV3Schema:
    type: object
    description: A widget of the tests.
    properties:
      spec:
        type: object
        description: What the widget should be.
        properties:
          color:
            type: string
            description: The widget's colour, as people see it.
          sizes:
            type: array
            items: {type: integer}
";

fn server(dir: &std::path::Path) -> Server {
    let decl = dir.join("resources.yaml");
    std::fs::write(&decl, RESOURCES).unwrap();
    Server::start(&["--resources", decl.to_str().unwrap()])
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_explain_shows_upstreams_schemas_and_the_declared_custom_one() {
    common::require("kubectl");
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path());
    let k = || server.kubectl(dir.path());

    // Before: the stub documents had no fields, and explain found no schema for the kind.
    let out = run_ok(k().args(["explain", "pods.spec.containers"]));
    assert!(out.contains("KIND:       Pod"), "{out}");
    assert!(out.contains("VERSION:    v1"), "{out}");
    assert!(out.contains("FIELD: containers <[]Container>"), "{out}");
    assert!(
        out.contains("List of containers belonging to the pod."),
        "{out}"
    );
    for field in [
        "image\t<string>",
        "ports\t<[]ContainerPort>",
        "name\t<string> -required-",
    ] {
        assert!(out.contains(field), "no {field:?} in\n{out}");
    }
    let image = run_ok(k().args(["explain", "pods.spec.containers.image"]));
    assert!(image.contains("Container image name."), "{image}");
    let apps = run_ok(k().args(["explain", "deployments.spec.strategy"]));
    assert!(
        apps.contains("GROUP:      apps") && apps.contains("rollingUpdate"),
        "{apps}"
    );
    // kubectl's HTTP cache keeps the document: immutable under its hash.
    let cached = std::fs::read_dir(dir.path().join("http"))
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .find(|t| t.contains("io.k8s.api.core.v1.PodSpec"))
        .expect("the core/v1 document in kubectl's HTTP cache");
    assert!(
        cached.contains("Cache-Control: public, immutable"),
        "{}",
        &cached[..400]
    );
    assert_eq!(run_ok(k().args(["explain", "pods.spec.containers"])), out);
    let missing = run_err(k().args(["explain", "pods.spec.nope"]));
    assert!(
        missing.contains("field \"nope\" does not exist"),
        "{missing}"
    );

    let widget = run_ok(k().args(["explain", "widgets.spec"]));
    assert!(widget.contains("GROUP:      example.com"), "{widget}");
    assert!(widget.contains("KIND:       Widget"), "{widget}");
    assert!(widget.contains("What the widget should be."), "{widget}");
    assert!(widget.contains("color\t<string>"), "{widget}");
    assert!(widget.contains("sizes\t<[]integer>"), "{widget}");
    let color = run_ok(k().args(["explain", "wd.spec.color"]));
    assert!(
        color.contains("The widget's colour, as people see it."),
        "{color}"
    );
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_patch_strategic_on_a_custom_resource_is_415_and_merge_works() {
    common::require("kubectl");
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path());
    let k = || server.kubectl(dir.path());
    let w = dir.path().join("w.yaml");
    std::fs::write(
        &w,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: default\nspec:\n  color: blue\n",
    )
    .unwrap();
    run_ok(k().arg("create").arg("-f").arg(&w));
    let err = run_err(k().args([
        "patch",
        "widget",
        "w1",
        "-n",
        "default",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"color":"red"}}"#,
    ]));
    assert!(
        err.contains(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        ),
        "{err}"
    );
    // kubectl words a 415 (reason UnsupportedMediaType) this way.
    assert!(
        err.contains(
            "application/strategic-merge-patch+json is not supported by example.com/v1, Kind=Widget"
        ),
        "{err}"
    );
    run_ok(k().args([
        "patch",
        "widget",
        "w1",
        "-n",
        "default",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"color":"red"}}"#,
    ]));
    let got = run_ok(k().args([
        "get",
        "widget",
        "w1",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.color}",
    ]));
    assert_eq!(got, "red");
    // A built-in resource takes it, reading the schema (containers merged by name).
    let pod = dir.path().join("p.yaml");
    // `y` is quoted: unquoted, YAML 1.1 (kubectl's go-yaml) reads it as `true`, which
    // upstream's decoder (and this server's typed validation) refuses for a string field.
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: default\nspec:\n  containers:\n  \
         - {name: a, image: x}\n  - {name: b, image: \"y\"}\n",
    )
    .unwrap();
    run_ok(k().arg("create").arg("-f").arg(&pod));
    run_ok(k().args([
        "patch",
        "pod",
        "p",
        "-n",
        "default",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"containers":[{"name":"b","image":"z"}]}}"#,
    ]));
    let images = run_ok(k().args([
        "get",
        "pod",
        "p",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.containers[*].image}",
    ]));
    assert_eq!(images, "x z");
}

#[test]
#[ignore = "needs kubectl"]
fn kubectl_replace_creates_where_upstream_allows_and_version_names_the_platform() {
    common::require("kubectl");
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path());
    let k = || server.kubectl(dir.path());
    let lease = dir.path().join("lease.yaml");
    std::fs::write(
        &lease,
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: l\n  namespace: default\n\
         spec:\n  holderIdentity: me\n",
    )
    .unwrap();
    // Before: 404 (no create on update for any resource).
    let out = run_ok(k().arg("replace").arg("-f").arg(&lease));
    assert!(
        out.contains("lease.coordination.k8s.io/l replaced"),
        "{out}"
    );
    let holder = run_ok(k().args([
        "get",
        "lease",
        "l",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]));
    assert_eq!(holder, "me");
    let cm = dir.path().join("cm.yaml");
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: default\n",
    )
    .unwrap();
    let err = run_err(k().arg("replace").arg("-f").arg(&cm));
    assert!(
        err.contains("NotFound") && err.contains("configmaps \"c\" not found"),
        "{err}"
    );

    let version: serde_json::Value =
        serde_json::from_str(&run_ok(k().args(["version", "-o", "json"]))).unwrap();
    let platform = version["serverVersion"]["platform"].as_str().unwrap();
    let want = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    assert_eq!(platform, format!("{}/{want}", std::env::consts::OS));
}

fn curl(server: &Server, args: &[&str]) -> (u16, String, String) {
    let out = Command::new("curl")
        .args(["-sS", "-o", "-", "-w", "\n%{http_code} %{content_type}"])
        .args(args.iter().map(|a| a.replace("URL", &server.url)))
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, tail) = text.rsplit_once('\n').unwrap();
    let (code, ct) = tail.split_once(' ').unwrap();
    (code.parse().unwrap(), ct.to_owned(), body.to_owned())
}

#[test]
#[ignore = "needs curl"]
fn curl_gets_yaml_objects_lists_and_errors() {
    common::require("curl");
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path());
    let yaml = "Accept: application/yaml";
    let cm = r#"{"metadata":{"name":"c"},"data":{"script":"echo 'a: b'\nexit 0\n","n":"007"}}"#;
    let (code, ct, body) = curl(
        &server,
        &[
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "-H",
            yaml,
            "--data-binary",
            cm,
            "URL/api/v1/namespaces/default/configmaps",
        ],
    );
    assert_eq!((code, ct.as_str()), (201, "application/yaml"), "{body}");
    let created: serde_json::Value = serde_yaml::from_str(&body).unwrap();
    assert_eq!(created["data"]["script"], "echo 'a: b'\nexit 0\n");
    assert_eq!(created["data"]["n"], "007");

    let (code, ct, body) = curl(
        &server,
        &["-H", yaml, "URL/api/v1/namespaces/default/configmaps/c"],
    );
    assert_eq!((code, ct.as_str()), (200, "application/yaml"));
    let got: serde_json::Value = serde_yaml::from_str(&body).unwrap();
    let (_, _, json) = curl(&server, &["URL/api/v1/namespaces/default/configmaps/c"]);
    let want: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(got, want);

    let (code, ct, body) = curl(
        &server,
        &["-H", yaml, "URL/api/v1/namespaces/default/configmaps"],
    );
    assert_eq!((code, ct.as_str()), (200, "application/yaml"));
    let list: serde_json::Value = serde_yaml::from_str(&body).unwrap();
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["items"][0], want);

    let (code, ct, body) = curl(
        &server,
        &["-H", yaml, "URL/api/v1/namespaces/default/configmaps/nope"],
    );
    assert_eq!((code, ct.as_str()), (404, "application/yaml"));
    let status: serde_json::Value = serde_yaml::from_str(&body).unwrap();
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "NotFound");

    let (code, _, _) = curl(
        &server,
        &[
            "-H",
            yaml,
            "URL/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1",
        ],
    );
    assert_eq!(code, 406, "a watch has no YAML, as upstream");
}
