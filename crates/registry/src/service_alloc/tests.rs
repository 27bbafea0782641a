use std::sync::Arc;

use super::*;

fn alloc() -> ServiceAllocator {
    let a = ServiceAllocator::new("10.0.0.0/24".parse().unwrap(), PortRange::default());
    a.set_synced();
    a
}

fn info() -> KindSpec {
    listwatch_kinds::builtin::core::service::spec()
}

fn create(a: &ServiceAllocator, obj: &mut Value, dry_run: bool) -> ApiResult<()> {
    let info = info();
    a.mutate(
        &MutationRequest {
            operation: Operation::Create,
            info: &info,
            old: None,
            dry_run,
            extensions: &http::Extensions::new(),
        },
        obj,
    )
}

fn svc(name: &str, uid: &str, spec: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "uid": uid}, "spec": spec})
}

#[test]
fn a_create_gets_a_free_address_and_its_fields() {
    let a = alloc();
    let mut s = svc("a", "u1", json!({"type": "ClusterIP"}));
    create(&a, &mut s, false).unwrap();
    let ip = s["spec"]["clusterIP"].as_str().unwrap().to_owned();
    assert_eq!(s["spec"]["clusterIPs"], json!([ip]));
    assert_eq!(s["spec"]["ipFamilies"], json!(["IPv4"]));
    assert_eq!(s["spec"]["ipFamilyPolicy"], "SingleStack");
    assert_ne!(ip, "10.0.0.1", "the kubernetes Service's address");
    assert_eq!(a.held(), (1, 0));
}

#[test]
fn explicit_addresses_are_honoured_or_refused_with_upstreams_messages() {
    let a = alloc();
    let mut s = svc("a", "u1", json!({"clusterIP": "10.0.0.5"}));
    create(&a, &mut s, false).unwrap();
    assert_eq!(s["spec"]["clusterIPs"], json!(["10.0.0.5"]));
    let mut t = svc("b", "u2", json!({"clusterIP": "10.0.0.5"}));
    let e = create(&a, &mut t, false).unwrap_err();
    assert_eq!(e.code(), 422);
    assert_eq!(
        e.0.message,
        "Service \"b\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.0.0.5\"}: failed to allocate IP 10.0.0.5: provided IP is already allocated"
    );
    let mut out = svc("c", "u3", json!({"clusterIP": "10.1.0.5"}));
    let e = create(&a, &mut out, false).unwrap_err();
    assert!(
        e.0.message
            .contains("is not in the valid range. The range of valid IPs is 10.0.0.0/24"),
        "{}",
        e.0.message
    );
    let mut k = svc("d", "u4", json!({"clusterIP": "10.0.0.1"}));
    assert_eq!(create(&a, &mut k, false).unwrap_err().code(), 422);
    let mut none = svc("h", "u5", json!({"clusterIP": "None"}));
    create(&a, &mut none, false).unwrap();
    assert_eq!(none["spec"]["clusterIPs"], json!(["None"]));
}

#[test]
fn a_dry_run_reserves_nothing_and_a_delete_releases() {
    let a = alloc();
    let mut s = svc(
        "a",
        "u1",
        json!({"clusterIP": "10.0.0.5", "type": "NodePort", "ports": [{"port": 80}]}),
    );
    create(&a, &mut s, true).unwrap();
    assert_eq!(a.held(), (0, 0));
    create(&a, &mut s, false).unwrap();
    assert_eq!(a.held(), (1, 1));
    let n = s["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
    assert!((30000..=32767).contains(&n));
    a.forget("u1");
    assert_eq!(a.held(), (0, 0));
}

#[test]
fn unconfirmed_allocations_are_repaired_and_observed_ones_kept() {
    let a = alloc();
    let mut s = svc("a", "u1", json!({}));
    create(&a, &mut s, false).unwrap();
    let mut t = svc("b", "u2", json!({}));
    create(&a, &mut t, false).unwrap();
    a.observe(&s);
    assert_eq!(a.repair_older_than(Duration::ZERO), 1);
    assert_eq!(a.held(), (1, 0));
    // A restart: the stored Service is observed and holds its address again.
    let b = ServiceAllocator::new("10.0.0.0/24".parse().unwrap(), PortRange::default());
    b.observe(&s);
    b.set_synced();
    let mut same = svc("c", "u3", json!({"clusterIP": s["spec"]["clusterIP"]}));
    assert_eq!(create(&b, &mut same, false).unwrap_err().code(), 422);
}

#[test]
fn writes_wait_for_the_stored_services() {
    let a = ServiceAllocator::new("10.0.0.0/24".parse().unwrap(), PortRange::default());
    let mut s = svc("a", "u1", json!({}));
    assert_eq!(create(&a, &mut s, false).unwrap_err().code(), 429);
}

#[test]
fn concurrent_creates_never_share_an_address() {
    let a = Arc::new(ServiceAllocator::new(
        "10.0.0.0/26".parse().unwrap(),
        PortRange::default(),
    ));
    a.set_synced();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                (0..7)
                    .map(|i| {
                        let mut s = svc(&format!("s{t}-{i}"), &format!("u{t}-{i}"), json!({}));
                        create(&a, &mut s, false).unwrap();
                        s["spec"]["clusterIP"].as_str().unwrap().to_owned()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut all: Vec<String> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "an address was handed out twice");
    // 62 usable, one the kubernetes Service's: 56 taken, 5 left, then full.
    for i in 0..5 {
        create(
            &a,
            &mut svc(&format!("x{i}"), &format!("x{i}"), json!({})),
            false,
        )
        .unwrap();
    }
    let e = create(&a, &mut svc("full", "full", json!({})), false).unwrap_err();
    assert_eq!(e.code(), 500);
}

#[test]
fn an_update_keeps_its_allocations_and_may_not_change_its_address() {
    let a = alloc();
    let mut s = svc(
        "a",
        "u1",
        json!({"type": "NodePort", "ports": [{"port": 80}]}),
    );
    create(&a, &mut s, false).unwrap();
    a.observe(&s);
    let info = info();
    let mut new = svc(
        "a",
        "u1",
        json!({"type": "NodePort", "ports": [{"port": 80}, {"port": 81}]}),
    );
    a.mutate(
        &MutationRequest {
            operation: Operation::Update,
            info: &info,
            old: Some(&s),
            dry_run: false,
            extensions: &http::Extensions::new(),
        },
        &mut new,
    )
    .unwrap();
    assert_eq!(new["spec"]["clusterIP"], s["spec"]["clusterIP"]);
    assert_eq!(
        new["spec"]["ports"][0]["nodePort"],
        s["spec"]["ports"][0]["nodePort"]
    );
    assert!(new["spec"]["ports"][1]["nodePort"].is_u64());
    let mut moved = svc("a", "u1", json!({"clusterIP": "10.0.0.99"}));
    let e = a
        .mutate(
            &MutationRequest {
                operation: Operation::Update,
                info: &info,
                old: Some(&s),
                dry_run: false,
                extensions: &http::Extensions::new(),
            },
            &mut moved,
        )
        .unwrap_err();
    assert!(
        e.0.message.contains("may not change once set"),
        "{}",
        e.0.message
    );
    // Stored as ClusterIP: the node ports are released.
    a.observe(&new);
    let mut back = new.clone();
    back["spec"]["type"] = json!("ClusterIP");
    for p in back["spec"]["ports"].as_array_mut().unwrap() {
        p.as_object_mut().unwrap().remove("nodePort");
    }
    a.observe(&back);
    assert_eq!(a.held(), (1, 0));
}

#[test]
fn a_refused_request_keeps_nothing_it_took() {
    let a = ServiceAllocator::new(
        "10.0.0.0/24".parse().unwrap(),
        "30000-30002".parse().unwrap(),
    );
    a.set_synced();
    let four =
        json!({"type": "NodePort", "ports": [{"port": 1}, {"port": 2}, {"port": 3}, {"port": 4}]});
    let e = create(&a, &mut svc("i", "u1", four), false).unwrap_err();
    assert_eq!(e.code(), 500);
    assert_eq!(a.held(), (0, 0));
    let two = json!({"type": "NodePort", "ports": [{"port": 1}, {"port": 2}]});
    create(&a, &mut svc("j", "u2", two), false).unwrap();
    assert_eq!(a.held(), (1, 2));
}

#[test]
fn an_abandoned_create_releases_what_it_took() {
    let a = alloc();
    let mut s = svc("a", "u1", json!({"clusterIP": "10.0.0.8"}));
    create(&a, &mut s, false).unwrap();
    a.abandoned(&info(), "u1");
    assert_eq!(a.held(), (0, 0));
    create(
        &a,
        &mut svc("b", "u2", json!({"clusterIP": "10.0.0.8"})),
        false,
    )
    .unwrap();
}

fn update(a: &ServiceAllocator, old: &Value, new: &mut Value) -> ApiResult<()> {
    let info = info();
    a.mutate(
        &MutationRequest {
            operation: Operation::Update,
            info: &info,
            old: Some(old),
            dry_run: false,
            extensions: &http::Extensions::new(),
        },
        new,
    )
}

#[test]
fn the_protocols_of_one_port_number_share_a_node_port() {
    let a = alloc();
    let mut s = svc(
        "n",
        "u1",
        json!({"type": "NodePort", "ports": [
            {"port": 53, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}, {"port": 80}]}),
    );
    create(&a, &mut s, false).unwrap();
    let ports = &s["spec"]["ports"];
    assert_eq!(ports[0]["nodePort"], ports[1]["nodePort"]);
    assert_ne!(ports[0]["nodePort"], ports[2]["nodePort"]);
    assert_eq!(a.held(), (1, 2));
    // An asked node port is shared too, whichever port comes first.
    let mut t = svc(
        "m",
        "u2",
        json!({"type": "NodePort", "ports": [
            {"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP", "nodePort": 30053}]}),
    );
    create(&a, &mut t, false).unwrap();
    assert_eq!(t["spec"]["ports"][0]["nodePort"], 30053);
    // An update adding UDP to a stored TCP port takes the TCP port's node port.
    let mut tcp = svc(
        "p",
        "u3",
        json!({"type": "NodePort", "ports": [{"port": 8053, "protocol": "TCP"}]}),
    );
    create(&a, &mut tcp, false).unwrap();
    a.observe(&tcp);
    let mut both = tcp.clone();
    both["spec"]["ports"]
        .as_array_mut()
        .unwrap()
        .push(json!({"port": 8053, "protocol": "UDP"}));
    update(&a, &tcp, &mut both).unwrap();
    assert_eq!(
        both["spec"]["ports"][1]["nodePort"],
        tcp["spec"]["ports"][0]["nodePort"]
    );
}

#[test]
fn leaving_external_name_never_keeps_an_address_another_service_took() {
    let a = alloc();
    // An ExternalName Service an earlier build stored with its old address in the spec.
    let stale = svc(
        "b",
        "u1",
        json!({"type": "ExternalName", "externalName": "x.example", "clusterIP": "10.0.0.9",
            "clusterIPs": ["10.0.0.9"]}),
    );
    a.observe(&stale);
    let mut e = svc("e", "u2", json!({"clusterIP": "10.0.0.9"}));
    create(&a, &mut e, false).unwrap();
    a.observe(&e);
    let mut back = stale.clone();
    back["spec"]["type"] = json!("ClusterIP");
    let err = update(&a, &stale, &mut back).unwrap_err();
    assert!(
        err.0.message.contains("provided IP is already allocated"),
        "{}",
        err.0.message
    );
    // As stored by this build (the strategy dropped the address): a fresh one.
    let dropped = svc(
        "b",
        "u1",
        json!({"type": "ExternalName", "externalName": "x.example"}),
    );
    let mut back = svc("b", "u1", json!({"type": "ClusterIP"}));
    update(&a, &dropped, &mut back).unwrap();
    assert_ne!(back["spec"]["clusterIP"], "10.0.0.9");
    assert!(back["spec"]["clusterIP"].is_string());
}
