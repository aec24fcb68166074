//! What `tcp_keepalive` costs per connection: the socket options a
//! connected backend socket gets, against TCP_NODELAY (one setsockopt(2)),
//! which every relayed socket already pays. Client sockets pay nothing:
//! they inherit keepalive from the listening socket.
//!
//! And what a backend `source` adds to each connect: a socket made with
//! IP_BIND_ADDRESS_NO_PORT set and bound to a source address (what
//! `sockopt::probe_source` does), against the socket alone.
//!
//! Run: `cargo bench --bench sockopt`.

#![allow(missing_docs)] // criterion_group! defines an undocumented pub fn

use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use snirelay::sockopt::{self, Keepalive};

fn bench(c: &mut Criterion) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let _accepted = listener.accept().unwrap();
    let probes = Keepalive {
        idle: Duration::from_secs(60),
        interval: Duration::from_secs(10),
        count: 6,
    };
    let mut group = c.benchmark_group("connected_socket");
    group.bench_function("nodelay", |b| b.iter(|| stream.set_nodelay(true).unwrap()));
    group.bench_function("keepalive_on", |b| {
        b.iter(|| sockopt::set_keepalive(&stream, Some(probes)).unwrap())
    });
    group.bench_function("keepalive_off", |b| {
        b.iter(|| sockopt::set_keepalive(&stream, None).unwrap())
    });
    group.finish();

    let mut group = c.benchmark_group("backend_socket");
    let source = "127.0.0.2".parse().unwrap();
    group.bench_function("socket_only", |b| {
        b.iter(|| {
            socket2::Socket::new(
                socket2::Domain::IPV4,
                socket2::Type::STREAM.cloexec(),
                Some(socket2::Protocol::TCP),
            )
            .unwrap()
        })
    });
    group.bench_function("socket_with_source", |b| {
        b.iter(|| sockopt::probe_source(source, None).unwrap())
    });
    group.bench_function("socket_with_source_and_ports", |b| {
        b.iter(|| sockopt::probe_source(source, Some((32768, 60999))).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
