//! Planning one connection's backend addresses (`plan::plan`): what each
//! policy costs per connection, for a set of 3 and of 16 addresses, with 3
//! attempts, equal and unequal weights. `source_hash` pays a SipHash-2-4 and
//! a 32-step fixed-point log2 per ranked address and comparison;
//! `round_robin` with unequal weights takes the smooth rotation's lock.
//!
//! Run: `cargo bench --bench select`.

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use std::net::{IpAddr, SocketAddr};

use criterion::{Criterion, criterion_group, criterion_main};
use snirelay::backend::balance::Policy;
use snirelay::backend::policy_state::State;
use snirelay::backend::{Member, carry_members, plan};

fn set(n: u16, weighted: bool) -> std::sync::Arc<[snirelay::backend::Endpoint]> {
    let members: Vec<Member> = (0..n)
        .map(|i| Member {
            addr: SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 443)),
            weight: if weighted { u32::from(i % 4) + 1 } else { 1 },
            max_connections: None,
            source: None,
            backup: false,
        })
        .collect();
    carry_members(&[], &members)
}

fn bench(c: &mut Criterion) {
    let policies = [
        Policy::Ordered,
        Policy::RoundRobin,
        Policy::LeastConnections,
        Policy::SourceHash,
    ];
    for n in [3u16, 16] {
        for weighted in [false, true] {
            let set = set(n, weighted);
            for policy in policies {
                let state = State::default();
                let label = format!(
                    "plan {} of {n}{}",
                    policy.as_str(),
                    if weighted { " weighted" } else { "" }
                );
                let mut client = 0u32;
                c.bench_function(&label, |b| {
                    b.iter(|| {
                        client = client.wrapping_add(1);
                        let ip = IpAddr::from(client.to_be_bytes());
                        let plan = plan::plan(policy, &state, &set, 3, ip, None);
                        std::hint::black_box(plan.len())
                    })
                });
            }
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
