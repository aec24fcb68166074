//! Routing one SNI against 10,000 routes: normalising the client's name
//! (`Sni::parse`) plus the compiled matcher lookup, for an exact hit, a
//! wildcard hit several labels deep, and a miss; then, with a default
//! route (`*`) added, the miss that lands on it and the walk over every
//! matching pattern (`matches`) that an ALPN fall-through makes at worst.
//!
//! Run: `cargo bench --bench matching`.

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use criterion::{Criterion, criterion_group, criterion_main};
use snirelay::wire::matcher::SniMatcher;
use snirelay::wire::sni::{Pattern, Sni};

fn matcher() -> SniMatcher<usize> {
    let mut m = SniMatcher::new();
    for i in 0..5_000 {
        m.insert(
            &Pattern::parse(&format!("host{i}.tenant{}.example.com", i % 97)).unwrap(),
            i,
        )
        .unwrap();
        m.insert(
            &Pattern::parse(&format!("*.svc{i}.example.net")).unwrap(),
            5_000 + i,
        )
        .unwrap();
    }
    assert_eq!(m.len(), 10_000);
    m
}

fn bench(c: &mut Criterion) {
    let m = matcher();
    let cases: [(&str, &[u8], Option<usize>); 3] = [
        ("exact", b"Host4242.tenant71.example.com.", Some(4242)),
        ("wildcard", b"a.b.c.svc4999.example.net", Some(9999)),
        ("miss", b"www.not-routed.example.org", None),
    ];
    for (label, raw, expect) in cases {
        assert_eq!(m.find(&Sni::parse(raw).unwrap()).copied(), expect);
        c.bench_function(&format!("match 10k routes: {label}"), |b| {
            b.iter(|| {
                let sni = Sni::parse(std::hint::black_box(raw)).unwrap();
                std::hint::black_box(m.find(&sni).copied())
            })
        });
    }
}

fn bench_default_route(c: &mut Criterion) {
    let mut m = matcher();
    m.insert(&Pattern::Any, usize::MAX).unwrap();
    m.insert(
        &Pattern::parse("*.b.c.svc4999.example.net").unwrap(),
        10_000,
    )
    .unwrap();
    let miss: &[u8] = b"www.not-routed.example.org";
    assert_eq!(
        m.find(&Sni::parse(miss).unwrap()).copied(),
        Some(usize::MAX)
    );
    c.bench_function("match 10k routes: default route", |b| {
        b.iter(|| {
            let sni = Sni::parse(std::hint::black_box(miss)).unwrap();
            std::hint::black_box(m.find(&sni).copied())
        })
    });
    let deep: &[u8] = b"a.b.c.svc4999.example.net";
    let walk: Vec<usize> = m.matches(&Sni::parse(deep).unwrap()).copied().collect();
    assert_eq!(walk, [10_000, 9999, usize::MAX]);
    c.bench_function("match 10k routes: walk every match", |b| {
        b.iter(|| {
            let sni = Sni::parse(std::hint::black_box(deep)).unwrap();
            std::hint::black_box(m.matches(&sni).count())
        })
    });
}

criterion_group!(benches, bench, bench_default_route);
criterion_main!(benches);
