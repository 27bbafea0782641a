//! Start-to-ready of a test environment with 20 CRDs (issue 28's goal: under 100 ms on the
//! project's 2-core machine), and of one with the built-in kinds only; each sample is
//! `TestEnv::start` until it returns (every cache listed, the server answering), then the
//! drop (stop) measured apart so it does not count in the start.
//!
//! `cargo bench -p listwatch-testenv --bench start`. Beside it in docs/testing.md: envtest's
//! and kind's published start times (they are not run here: no network to download them).

#![allow(clippy::expect_used)] // a bench that cannot start its server has nothing to measure

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use listwatch_testenv::TestEnv;

fn crd(i: usize) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: kind{i}s.bench.example.com}}
spec:
  group: bench.example.com
  names: {{plural: kind{i}s, singular: kind{i}, kind: Kind{i}}}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {{name: Size, type: integer, jsonPath: .spec.size}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer, minimum: 0}}
              name: {{type: string, maxLength: 63}}
          status:
            type: object
            x-kubernetes-preserve-unknown-fields: true
    subresources: {{status: {{}}}}
"
    )
}

fn start(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let crds: Vec<String> = (0..20).map(crd).collect();
    let mut group = c.benchmark_group("testenv");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(20));
    for (name, n) in [
        ("start_to_ready_builtin_only", 0),
        ("start_to_ready_20_crds", 20),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let builder = crds[..n]
                        .iter()
                        .fold(TestEnv::builder(), |b, c| b.crd_yaml(c));
                    let t = Instant::now();
                    let env = runtime
                        .block_on(builder.start())
                        .expect("the server starts");
                    total += t.elapsed();
                    drop(env);
                }
                total
            });
        });
    }
    group.finish();
}

criterion_group!(benches, start);
criterion_main!(benches);
