//! Label and field selector parsing and matching.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use listwatch_api::{FieldSelector, LabelSelector};
use std::hint::black_box;

fn selectors(c: &mut Criterion) {
    let pod = listwatch_benches::pod("default", "web-1", "node-7");
    let label_text = "app=web,tier in (frontend,backend),!canary,environment notin (dev)";
    let field_text = "spec.nodeName=node-7,status.phase!=Failed";
    c.bench_function("label_selector_parse", |b| {
        b.iter(|| LabelSelector::parse(black_box(label_text)))
    });
    c.bench_function("field_selector_parse", |b| {
        b.iter(|| FieldSelector::parse(black_box(field_text)))
    });
    let (Ok(label), Ok(field)) = (
        LabelSelector::parse(label_text),
        FieldSelector::parse(field_text),
    ) else {
        panic!("benchmark selectors must parse");
    };
    c.bench_function("label_selector_match", |b| {
        b.iter(|| label.matches(black_box(&pod)))
    });
    c.bench_function("field_selector_match", |b| {
        b.iter(|| field.matches(black_box(&pod)))
    });
}

criterion_group!(benches, selectors);
criterion_main!(benches);
