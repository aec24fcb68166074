//! `[global] max_connection_rate` and `[listener.limits]`: defaults, parsed
//! values, and errors that name the key and the bad value.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::path::Path;

use snirelay::admission::{Limits, Rate};
use snirelay::config::{
    Config, ConfigError, DEFAULT_CONNECTIONS_PER_SOURCE, DEFAULT_SOURCE_PREFIX_V4,
    DEFAULT_SOURCE_PREFIX_V6,
};

fn config(global: &str, limits: &str) -> Result<Config, ConfigError> {
    let text = format!(
        r#"
[global]
{global}

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[listener.limits]
{limits}

[[route]]
sni = ["example.com"]
backend = "b"

[backend.b]
addresses = ["127.0.0.1:9"]
"#
    );
    Config::from_toml(&text, Path::new("test.toml"))
}

fn problems(global: &str, limits: &str) -> String {
    match config(global, limits) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted: {global} / {limits}"),
    }
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

#[test]
fn limits_default_to_256_open_per_source_no_rate_and_32_and_64_bit_sources() {
    let c = config("", "").unwrap();
    assert_eq!(c.global.max_connection_rate, None);
    let limits = &c.listeners[0].limits;
    assert_eq!(DEFAULT_CONNECTIONS_PER_SOURCE, nz(256));
    assert_eq!(
        limits,
        &Limits {
            connections_per_source: Some(DEFAULT_CONNECTIONS_PER_SOURCE),
            ..Limits::unlimited()
        }
    );
    assert_eq!(limits.source_prefix_v4, DEFAULT_SOURCE_PREFIX_V4);
    assert_eq!(limits.source_prefix_v6, DEFAULT_SOURCE_PREFIX_V6);
}

#[test]
fn false_turns_the_per_source_connection_limit_off_and_true_is_refused() {
    let c = config("", "connections_per_source = false").unwrap();
    assert_eq!(c.listeners[0].limits, Limits::unlimited());
    let text = problems("", "connections_per_source = true");
    assert!(
        text.contains("listener[0].limits.connections_per_source: true names no count"),
        "{text}"
    );
}

#[test]
fn every_limit_key_is_read() {
    let c = config(
        "max_connection_rate = 500",
        r#"
connections_per_source = 100
connection_rate_per_source = 30
connection_burst_per_source = 60
source_prefix_v4 = 24
source_prefix_v6 = 56
dry_run = true
allow = ["10.0.0.0/8", "2001:db8::/32"]
deny = ["10.1.2.3"]
"#,
    )
    .unwrap();
    assert_eq!(c.global.max_connection_rate, Some(nz(500)));
    let l = &c.listeners[0].limits;
    assert_eq!(l.connections_per_source, Some(nz(100)));
    assert_eq!(
        l.rate_per_source,
        Some(Rate {
            per_second: nz(30),
            burst: nz(60)
        })
    );
    assert_eq!(
        (l.source_prefix_v4, l.source_prefix_v6, l.dry_run),
        (24, 56, true)
    );
    assert!(l.allow.contains("10.9.9.9".parse::<IpAddr>().unwrap()));
    assert!(l.deny.contains("10.1.2.3".parse::<IpAddr>().unwrap()));
    assert!(!l.deny.contains("10.1.2.4".parse::<IpAddr>().unwrap()));
}

#[test]
fn a_burst_defaults_to_one_second_of_its_rate() {
    let c = config("", "connection_rate_per_source = 7").unwrap();
    assert_eq!(
        c.listeners[0].limits.rate_per_source,
        Some(Rate {
            per_second: nz(7),
            burst: nz(7)
        })
    );
}

#[test]
fn bad_values_are_named_with_their_key() {
    let cases = [
        (
            "max_connection_rate = 0",
            "",
            "global.max_connection_rate: 0 is out of range",
        ),
        (
            "",
            "connections_per_source = -1",
            "listener[0].limits.connections_per_source: -1 is out of range",
        ),
        (
            "",
            "connection_rate_per_source = 0",
            "listener[0].limits.connection_rate_per_source: 0 is out of range",
        ),
        (
            "",
            "connection_burst_per_source = 5",
            "listener[0].limits.connection_burst_per_source: 5 is set without connection_rate_per_source",
        ),
        (
            "",
            "source_prefix_v4 = 33",
            "listener[0].limits.source_prefix_v4: 33 is out of range",
        ),
        (
            "",
            "source_prefix_v6 = 0",
            "listener[0].limits.source_prefix_v6: 0 is out of range",
        ),
        (
            "",
            r#"allow = ["10.0.0.1/8"]"#,
            r#"listener[0].limits.allow[0]: "10.0.0.1/8": has host bits set; the network is 10.0.0.0/8"#,
        ),
        (
            "",
            r#"deny = ["ok", "10.0.0.0/8"]"#,
            r#"listener[0].limits.deny[0]: "ok": not an IP address"#,
        ),
        (
            "",
            r#"deny = ["::/129"]"#,
            r#"listener[0].limits.deny[0]: "::/129": prefix length 129 is too long for this address family"#,
        ),
    ];
    for (global, limits, expected) in cases {
        let text = problems(global, limits);
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
}

#[test]
fn unknown_limit_keys_are_refused() {
    let text = problems("", "connections_per_ip = 5");
    assert!(text.contains("connections_per_ip"), "{text}");
}
