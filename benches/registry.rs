//! What listing connections costs each connection: registering with the
//! registry once relaying starts (the entry's allocation and one with the
//! route name and SNI, one shard lock and map insert) and leaving it at close (one shard lock and map remove),
//! with `open` other connections registered; and one page of a listing.
//!
//! Run: `cargo bench --bench registry`. The listing's effect on relaying
//! under load is measured by `scripts/loadbench.sh --only listing`.

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use std::path::Path;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use snirelay::config::Config;
use snirelay::flow::registry::{self, Filter, Meta};
use tokio::time::Instant;

fn bench(c: &mut Criterion) {
    let config = Config::from_toml(
        r#"
        [[listener]]
        name = "edge"
        listen = ["127.0.0.1:0"]
        [[route]]
        sni = ["www.example.com"]
        backend = "origin"
        [backend.origin]
        addresses = ["127.0.0.1:9"]
        "#,
        Path::new("bench.toml"),
    )
    .unwrap();
    let listener = Arc::new(config.listeners[0].clone());
    let backend = config.backends.values().next().unwrap().clone();
    let accepted = Instant::now();
    let meta = |id| Meta {
        id,
        listener: &listener,
        route: "www.example.com",
        sni: Some("www.example.com"),
        backend: &backend,
        backend_addr: "127.0.0.1:9".parse().unwrap(),
        client: "127.0.0.1:40000".parse().unwrap(),
        claimed: None,
        accepted,
        local: false,
    };
    let mut group = c.benchmark_group("registry");
    let mut next = 0u64;
    for open in [0usize, 8000] {
        let _held: Vec<_> = (0..open)
            .map(|_| {
                next += 1;
                registry::register(meta(next))
            })
            .collect();
        group.bench_with_input(
            BenchmarkId::new("register_and_leave", open),
            &open,
            |b, _| {
                b.iter(|| {
                    next += 1;
                    registry::register(meta(next))
                })
            },
        );
        if open > 0 {
            group.bench_function(BenchmarkId::new("list_page_1000", open), |b| {
                b.iter(|| registry::list(&Filter::default(), 0, 1000))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
