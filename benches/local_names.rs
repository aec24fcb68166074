//! What the pushed local names cost: the check a cluster backend with a
//! `local_backend` makes on every connection before its lookup
//! (`Cache::is_local_name`: a read lock and one hash lookup, plus an SNI
//! parse and a matcher walk when `local_overrides` is set), with 0 and
//! 20,000 pushed names, for a name in the set and one not; and a push of
//! 20,000 names (normalising them and swapping the set in, no file).
//!
//! Run: `cargo bench --bench local_names`.

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use snirelay::backend::cluster::Cache;
use snirelay::backend::local_names;
use snirelay::backend::{Cluster, ClusterLookup, ClusterProtocol};
use snirelay::proxy::outbound::Outbound;
use snirelay::wire::sni::Pattern;

fn cluster(overrides: &[&str]) -> Cluster {
    Cluster {
        lookup: ClusterLookup::Http {
            url: "http://127.0.0.1:1/resolve".into(),
            resolver: None,
        },
        local_backend: Some("traefik".into()),
        positive_ttl: Duration::from_secs(3),
        negative_ttl: Duration::from_secs(60),
        lookup_timeout: Duration::from_secs(2),
        allowed_targets: vec!["10.0.0.0/8".parse().unwrap()],
        max_lookups_in_flight: 16,
        new_names_per_second: 50,
        local_overrides: overrides
            .iter()
            .map(|p| Pattern::parse(p).unwrap())
            .collect(),
        hop_proxy_protocol: Outbound::V2,
        this_node: Vec::new(),
        protocol: ClusterProtocol::Snirelay,
        headers: Vec::new(),
        tls: None,
        node_choice: Default::default(),
    }
}

fn names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("site-{i}.tenant.example.com"))
        .collect()
}

fn bench(c: &mut Criterion) {
    let plain = Cache::new("pangolin", &cluster(&[]));
    let overridden = Cache::new(
        "pangolin",
        &cluster(&["pangolin.example.net", "*.internal.example.net"]),
    );
    let mut group = c.benchmark_group("local_names");
    for pushed in [0usize, 20_000] {
        local_names::replace(local_names::normalise(&names(pushed)).0);
        for (case, name) in [
            ("in_set", "site-7.tenant.example.com"),
            ("not_in_set", "www.elsewhere.example.org"),
        ] {
            group.bench_with_input(
                BenchmarkId::new(format!("check_{case}"), pushed),
                &name,
                |b, name| b.iter(|| plain.is_local_name(std::hint::black_box(name))),
            );
            group.bench_with_input(
                BenchmarkId::new(format!("check_with_overrides_{case}"), pushed),
                &name,
                |b, name| b.iter(|| overridden.is_local_name(std::hint::black_box(name))),
            );
        }
    }
    let push = names(20_000);
    group.bench_function("push_20000", |b| {
        b.iter(|| local_names::replace(local_names::normalise(&push).0).len)
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
