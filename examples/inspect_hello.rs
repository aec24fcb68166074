//! Prints what snirelay reads from a captured ClientHello: SNI, ALPN, ECH,
//! and the verdict the relay would reach.
//!
//! `cargo run --example inspect_hello -- tests/data/chromium_pq.bin`
//!
//! A capture is the raw bytes a client sent first on a TCP connection, e.g.
//! from `tshark -w` or a listener that writes what it receives.

use snirelay::config::DEFAULT_MAX_CLIENT_HELLO_BYTES;
use snirelay::wire::client_hello::{Ech, parse};
use snirelay::wire::sni::Sni;

fn main() {
    let mut status = 0;
    for path in std::env::args().skip(1) {
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) => {
                eprintln!("{path}: {e}");
                status = 1;
                continue;
            }
        };
        match parse(&bytes, DEFAULT_MAX_CLIENT_HELLO_BYTES) {
            Ok(hello) => {
                let sni = match hello.server_name.as_deref().map(Sni::parse) {
                    None => "(none)".to_owned(),
                    Some(Ok(sni)) => sni.to_string(),
                    Some(Err(e)) => format!("(invalid: {e})"),
                };
                let alpn: Vec<_> = hello
                    .alpn
                    .iter()
                    .map(|p| String::from_utf8_lossy(p))
                    .collect();
                let ech = match hello.ech {
                    None => "none".to_owned(),
                    Some(Ech::Outer { config_id }) => format!("outer(config_id={config_id})"),
                    Some(Ech::Inner) => "inner".to_owned(),
                };
                let version = hello
                    .version
                    .map_or("none".to_owned(), |v| format!("{v:#06x}"));
                println!(
                    "{path}: {} bytes, sni={sni}, alpn=[{}], ech={ech}, version={version}",
                    hello.len,
                    alpn.join(","),
                );
            }
            Err(verdict) => {
                println!("{path}: {verdict}");
                status = 1;
            }
        }
    }
    std::process::exit(status);
}
