//! Routing one SNI against 10,000 routes: normalising the client's name
//! (`Sni::parse`) plus the compiled matcher lookup, for an exact hit, a
//! wildcard hit several labels deep, and a miss; then, with a default
//! route (`*`) added, the miss that lands on it and the walk over every
//! matching pattern (`matches`) that an ALPN fall-through makes at worst.
//!
//! Then the same three lookups at 10, 1,000 and 100,000 names (half exact,
//! half wildcards), to show that a lookup costs the same whatever the
//! number of names: one hash per label, never a walk over the list.
//!
//! Run: `cargo bench --bench matching`.

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use criterion::{Criterion, criterion_group, criterion_main};
use snirelay::wire::matcher::SniMatcher;
use snirelay::wire::sni::{Pattern, Sni};

fn matcher() -> SniMatcher<usize> {
    sized(10_000)
}

/// `n` patterns: `n / 2` exact names and as many `*.` wildcards.
fn sized(n: usize) -> SniMatcher<usize> {
    let half = n / 2;
    let mut m = SniMatcher::new();
    for i in 0..half {
        m.insert(
            &Pattern::parse(&format!("host{i}.tenant{}.example.com", i % 97)).unwrap(),
            i,
        )
        .unwrap();
        m.insert(
            &Pattern::parse(&format!("*.svc{i}.example.net")).unwrap(),
            half + i,
        )
        .unwrap();
    }
    assert_eq!(m.len(), 2 * half);
    m
}

fn bench_sizes(c: &mut Criterion) {
    for n in [10, 1_000, 100_000] {
        let m = sized(n);
        let last = n / 2 - 1;
        let exact = format!("Host{last}.tenant{}.example.com.", last % 97);
        let deep = format!("a.b.c.svc{last}.example.net");
        let cases: [(&str, &[u8], Option<usize>); 3] = [
            ("exact", exact.as_bytes(), Some(last)),
            ("wildcard", deep.as_bytes(), Some(n - 1)),
            ("miss", b"www.not-routed.example.org", None),
        ];
        lookups(c, &m, &format!("match {n} names"), &cases);
    }
}

/// Times `find` (with the name's normalisation) for each case, after
/// checking its answer.
fn lookups(
    c: &mut Criterion,
    m: &SniMatcher<usize>,
    group: &str,
    cases: &[(&str, &[u8], Option<usize>)],
) {
    for &(label, raw, expect) in cases {
        assert_eq!(m.find(&Sni::parse(raw).unwrap()).copied(), expect);
        c.bench_function(&format!("{group}: {label}"), |b| {
            b.iter(|| {
                let sni = Sni::parse(std::hint::black_box(raw)).unwrap();
                std::hint::black_box(m.find(&sni).copied())
            })
        });
    }
}

fn bench(c: &mut Criterion) {
    let m = matcher();
    let cases: [(&str, &[u8], Option<usize>); 3] = [
        ("exact", b"Host4242.tenant71.example.com.", Some(4242)),
        ("wildcard", b"a.b.c.svc4999.example.net", Some(9999)),
        ("miss", b"www.not-routed.example.org", None),
    ];
    lookups(c, &m, "match 10k routes", &cases);
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

criterion_group!(benches, bench, bench_default_route, bench_sizes);
criterion_main!(benches);
