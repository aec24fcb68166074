//! What address maintenance costs per connection: once connected, a
//! connection moves its drain guard from the route's signal to the part
//! of it for its address (`EndpointState::drain_part`: one uncontended
//! lock of the address's list of parts, a scan of it, an `Arc` clone and
//! two atomic adds), against registering with the route alone (one `Arc`
//! clone, one atomic add), which every connection paid before. `parts`
//! is how many route identities have connections open on the address.
//!
//! Run: `cargo bench --bench drain_part`.

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use std::sync::Arc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use snirelay::backend::EndpointState;
use snirelay::drain::DrainSignal;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("connection_drain_guard");
    let route = DrainSignal::new();
    group.bench_function("route_only", |b| b.iter(|| route.enter()));
    for parts in [1usize, 8] {
        let state = EndpointState::default();
        // Other routes' parts, each held by an open connection.
        let others: Vec<Arc<DrainSignal>> = (1..parts).map(|_| DrainSignal::new()).collect();
        let _held: Vec<_> = others.iter().map(|r| state.drain_part(r).enter()).collect();
        let _mine = state.drain_part(&route).enter();
        group.bench_with_input(
            BenchmarkId::new("route_then_part", parts),
            &parts,
            |b, _| {
                b.iter(|| {
                    let guard = route.enter();
                    let part = state.drain_part(guard.signal()).enter();
                    drop(guard);
                    part
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
