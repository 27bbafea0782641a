//! Service defaults and allocations through the binary (issue 28 item 3): kube-rs creates
//! typed Services and reads upstream's defaults back (type, session affinity, port protocol
//! and target port, IP families, a cluster IP from `--service-cluster-ip-range`, node ports,
//! `status.loadBalancer`); an explicit address is honoured when free and refused with
//! upstream's 422 when taken or out of range; headless stays `None`; concurrent creates
//! never share an address; a delete releases; allocations survive a restart (`--data-dir`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;

use common::{Server, http};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

async fn client(server: &Server) -> Client {
    Client::try_from(kube::Config::new(server.url.parse().unwrap())).unwrap()
}

fn service(name: &str, spec: Value) -> Service {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn in_range(ip: &str, prefix: &str) -> bool {
    ip.starts_with(prefix) && ip != format!("{prefix}1") && ip != format!("{prefix}0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_creates_services_with_upstreams_defaults_and_allocations() {
    let server = Server::start(&["--service-cluster-ip-range", "10.96.0.0/24"]);
    let svcs: Api<Service> = Api::namespaced(client(&server).await, "default");

    let web = svcs
        .create(
            &PostParams::default(),
            &service(
                "web",
                json!({"selector": {"app": "web"}, "ports": [{"port": 80}]}),
            ),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&web).unwrap();
    let spec = &v["spec"];
    assert_eq!(spec["type"], "ClusterIP");
    assert_eq!(spec["sessionAffinity"], "None");
    assert_eq!(spec["internalTrafficPolicy"], "Cluster");
    assert_eq!(spec["ports"][0]["protocol"], "TCP");
    assert_eq!(spec["ports"][0]["targetPort"], 80);
    assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
    assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
    let ip = spec["clusterIP"].as_str().unwrap();
    assert!(in_range(ip, "10.96.0."), "{ip}");
    assert_eq!(spec["clusterIPs"], json!([ip]));
    assert_eq!(v["status"], json!({"loadBalancer": {}}));

    // The `kubernetes` Service holds the range's first address.
    let k8s = svcs.get("kubernetes").await.unwrap();
    assert_eq!(k8s.spec.unwrap().cluster_ip.as_deref(), Some("10.96.0.1"));

    // NodePort: a node port in 30000-32767, and externalTrafficPolicy defaulted.
    let np = svcs
        .create(
            &PostParams::default(),
            &service("np", json!({"type": "NodePort", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81, "nodePort": 31000}]})),
        )
        .await
        .unwrap();
    let np = serde_json::to_value(&np).unwrap();
    let n = np["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
    assert!((30000..=32767).contains(&n), "{n}");
    assert_eq!(np["spec"]["ports"][1]["nodePort"], 31000);
    assert_eq!(np["spec"]["externalTrafficPolicy"], "Cluster");
    let taken_port = svcs
        .create(
            &PostParams::default(),
            &service(
                "np2",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 31000}]}),
            ),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(e) = taken_port else {
        panic!("{taken_port}")
    };
    assert_eq!(e.code, 422);
    assert_eq!(
        e.message,
        "Service \"np2\" is invalid: spec.ports[0].nodePort: Invalid value: 31000: provided port is already allocated"
    );

    // An explicit free address is honoured; a taken or out-of-range one is refused.
    let fixed = svcs
        .create(
            &PostParams::default(),
            &service(
                "fixed",
                json!({"clusterIP": "10.96.0.5", "ports": [{"port": 80}]}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(fixed.spec.unwrap().cluster_ip.as_deref(), Some("10.96.0.5"));
    for (name, asked, message) in [
        (
            "taken",
            "10.96.0.5",
            "Service \"taken\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.96.0.5\"}: failed to allocate IP 10.96.0.5: provided IP is already allocated",
        ),
        (
            "apiserver",
            "10.96.0.1",
            "Service \"apiserver\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.96.0.1\"}: failed to allocate IP 10.96.0.1: provided IP is already allocated",
        ),
        (
            "outside",
            "10.0.0.5",
            "Service \"outside\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.0.0.5\"}: failed to allocate IP 10.0.0.5: the provided IP (10.0.0.5) is not in the valid range. The range of valid IPs is 10.96.0.0/24",
        ),
    ] {
        let err = svcs
            .create(
                &PostParams::default(),
                &service(name, json!({"clusterIP": asked, "ports": [{"port": 80}]})),
            )
            .await
            .unwrap_err();
        let kube::Error::Api(e) = err else {
            panic!("{err}")
        };
        assert_eq!((e.code, e.message.as_str()), (422, message));
    }
    // A dry run reserves nothing.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    svcs.create(
        &dry,
        &service(
            "dry",
            json!({"clusterIP": "10.96.0.6", "ports": [{"port": 80}]}),
        ),
    )
    .await
    .unwrap();
    svcs.create(
        &PostParams::default(),
        &service(
            "real",
            json!({"clusterIP": "10.96.0.6", "ports": [{"port": 80}]}),
        ),
    )
    .await
    .unwrap();
    // A create that fails (the name exists) keeps no address: the one it asked for is
    // free for the next.
    let err = svcs
        .create(
            &PostParams::default(),
            &service(
                "real",
                json!({"clusterIP": "10.96.0.8", "ports": [{"port": 80}]}),
            ),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(e) = err else {
        panic!("{err}")
    };
    assert_eq!(e.code, 409);
    svcs.create(
        &PostParams::default(),
        &service(
            "eight",
            json!({"clusterIP": "10.96.0.8", "ports": [{"port": 80}]}),
        ),
    )
    .await
    .unwrap();
    // Headless stays headless.
    let headless = svcs
        .create(
            &PostParams::default(),
            &service(
                "headless",
                json!({"clusterIP": "None", "ports": [{"port": 80}]}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        headless.spec.unwrap().cluster_ips,
        Some(vec!["None".to_owned()])
    );
    // A delete releases the address at once.
    svcs.delete("fixed", &DeleteParams::default())
        .await
        .unwrap();
    let again = svcs
        .create(
            &PostParams::default(),
            &service(
                "again",
                json!({"clusterIP": "10.96.0.5", "ports": [{"port": 80}]}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(again.name_any(), "again");
    // An update keeps the address; changing it is refused.
    let mut moved = svcs.get("again").await.unwrap();
    moved.spec.as_mut().unwrap().cluster_ip = Some("10.96.0.7".into());
    moved.spec.as_mut().unwrap().cluster_ips = Some(vec!["10.96.0.7".into()]);
    let err = svcs
        .replace("again", &PostParams::default(), &moved)
        .await
        .unwrap_err();
    let kube::Error::Api(e) = err else {
        panic!("{err}")
    };
    assert!(
        e.message.contains("may not change once set"),
        "{}",
        e.message
    );
}

/// POSTs a Service without an address; its clusterIP.
fn create_raw(addr: &str, name: &str) -> String {
    let body = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"ports": [{"port": 80}]}});
    let r = http(
        addr,
        "POST",
        "/api/v1/namespaces/default/services",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    r.json()["spec"]["clusterIP"].as_str().unwrap().to_owned()
}

#[test]
fn concurrent_creates_never_share_an_address_and_a_restart_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let flags = [
        "--data-dir",
        data.to_str().unwrap(),
        "--service-cluster-ip-range",
        "10.1.0.0/26",
    ];
    let server = Server::start(&flags);
    let addr = server.addr.clone();
    // 61 addresses beside the kubernetes Service's: 48 concurrent creates, then more.
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                (0..6)
                    .map(|i| create_raw(&addr, &format!("s{t}-{i}")))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let ips: Vec<String> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let distinct: BTreeSet<&String> = ips.iter().collect();
    assert_eq!(
        distinct.len(),
        ips.len(),
        "an address was handed out twice: {ips:?}"
    );
    assert!(ips.iter().all(|ip| in_range(ip, "10.1.0.")), "{ips:?}");
    let kept = ips[0].clone();
    drop(server);

    // Restarted over the same data: the stored Services hold their addresses.
    let server = Server::start(&flags);
    let body = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dup"},
        "spec": {"clusterIP": kept, "ports": [{"port": 80}]}});
    let r = http(
        &server.addr,
        "POST",
        "/api/v1/namespaces/default/services",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("provided IP is already allocated"));
    // The rest of the range is handed out, then it is full (500, as upstream).
    let mut more = BTreeSet::new();
    for i in 0..13 {
        more.insert(create_raw(&server.addr, &format!("m{i}")));
    }
    assert!(more.iter().all(|ip| !distinct.contains(ip)), "{more:?}");
    let body = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "full"},
        "spec": {"ports": [{"port": 80}]}});
    let r = http(
        &server.addr,
        "POST",
        "/api/v1/namespaces/default/services",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
    assert!(String::from_utf8_lossy(&r.body).contains("range is full"));
}
