//! listwatch-client's typed `Api<Pod>` beside kube-rs's `Api<Pod>` (the real peer) against the
//! same running server, in the same run: a whole list of k8s-openapi `Pod`s, and an informer
//! synced from nothing, plus listwatch's dynamic `Object` list as the decode-free reference.
//!
//! ```text
//! cargo run --release -p listwatch-apiserver &
//! cargo run --release -p listwatch-apiserver --example typed_list -- http://127.0.0.1:8080 2000 7
//! ```
//!
//! Creates PODS pods in a fresh namespace, then for ROUNDS rounds runs each measurement once,
//! rotating their order every round (so a slow moment of a shared machine is spread over all
//! of them). Prints each one's median and the spread (min–max) of its rounds. Both clients
//! list unpaginated at the same resource version semantics ("" , a consistent read) over
//! HTTP/1.1 with one warm connection pool each; the informers list by pages of 500 (both
//! clients' defaults) and watch. Loopback only; bounded by its arguments.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, Namespace, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use listwatch_client::{
    Api, HttpClient, HttpConfig, Informer, InformerConfig, ListRequest, ListerWatcher,
};

fn pod(i: usize) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("p-{i:05}")),
            labels: Some([("app".to_owned(), "web".to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("node-{}", i % 50)),
            containers: vec![Container {
                name: "c".into(),
                image: Some("registry.example/app:1.2.3".into()),
                args: Some(vec!["--port=8080".into(), "--verbose".into()]),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

fn summary(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = samples[samples.len() / 2];
    println!(
        "{name:<40} median {:>8.1} ms   spread {:>8.1} – {:>8.1} ms   ({} rounds)",
        ms(median),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
        samples.len()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8080".into());
    let pods: usize = args.next().map_or(2000, |a| a.parse().unwrap());
    let rounds: usize = args.next().map_or(7, |a| a.parse().unwrap());
    assert!((1..=100_000).contains(&pods) && (1..=100).contains(&rounds));

    let ours = HttpClient::new(HttpConfig::new(url.clone()).unwrap()).unwrap();
    let theirs = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let ns = format!("typed-list-{}", std::process::id());
    Api::<Namespace>::cluster(ours.clone())
        .create(&Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        })
        .await
        .unwrap();
    let api = Api::<Pod>::namespaced(ours.clone(), &ns);
    let t = Instant::now();
    futures::stream::iter(0..pods)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&pod(i)).await.unwrap() }
        })
        .buffer_unordered(8)
        .for_each(|_| async {})
        .await;
    println!("created {pods} pods in {:.1?}", t.elapsed());

    let dynamic = api.lister_watcher().unwrap();
    let kube_api = kube::Api::<Pod>::namespaced(theirs.clone(), &ns);
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); 5];
    for round in 0..rounds {
        for step in 0..5 {
            let which = (step + round) % 5;
            let t = Instant::now();
            let n = match which {
                0 => api.list(&ListRequest::default()).await.unwrap().items.len(),
                1 => kube_api
                    .list(&kube::api::ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .len(),
                2 => dynamic
                    .list(&ListRequest::default())
                    .await
                    .unwrap()
                    .items
                    .len(),
                3 => {
                    let informer = Informer::spawn(
                        Api::<Pod>::namespaced(ours.clone(), &ns),
                        InformerConfig::default(),
                    );
                    informer.wait_until_synced().await.unwrap();
                    informer.store().len()
                }
                _ => {
                    let (reader, writer) = kube::runtime::reflector::store::<Pod>();
                    let stream = kube::runtime::reflector(
                        writer,
                        kube::runtime::watcher(
                            kube_api.clone(),
                            kube::runtime::watcher::Config::default(),
                        ),
                    );
                    let driver = tokio::spawn(stream.for_each(|_| async {}));
                    reader.wait_until_ready().await.unwrap();
                    let n = reader.len();
                    driver.abort();
                    n
                }
            };
            samples[which].push(t.elapsed());
            assert_eq!(n, pods, "measurement {which} saw {n} pods");
        }
    }
    println!("{pods} pods, {rounds} rounds");
    let names = [
        "listwatch Api<Pod>::list",
        "kube-rs Api<Pod>::list",
        "listwatch dynamic list (Object)",
        "listwatch Informer<Pod> synced",
        "kube-rs reflector<Pod> ready",
    ];
    for (name, s) in names.iter().zip(samples) {
        summary(name, s);
    }
    let _ = Api::<Namespace>::cluster(ours).delete(&ns).await;
}
