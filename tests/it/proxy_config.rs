//! The PROXY protocol configuration keys: defaults, and every bad value
//! refused with its key named.

use std::path::Path;

use snirelay::config::{Config, ConfigError, DEFAULT_MAX_HOPS};
use snirelay::proxy::inbound::Mode;
use snirelay::proxy::outbound::Outbound;

fn load(listener_extra: &str, backend_extra: &str) -> Result<Config, ConfigError> {
    let text = format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
{listener_extra}

[[route]]
sni = ["example.com"]
backend = "b"

[backend.b]
addresses = ["127.0.0.1:9443"]
{backend_extra}
"#
    );
    Config::from_toml(&text, Path::new("test.toml"))
}

fn problems(listener_extra: &str, backend_extra: &str) -> String {
    match load(listener_extra, backend_extra) {
        Ok(_) => panic!("accepted: {listener_extra} {backend_extra}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn defaults_are_no_header_out_and_no_preface_in() {
    let config = load("", "").unwrap();
    assert!(config.listeners[0].proxy_protocol.is_none());
    let b = &config.backends["b"];
    assert_eq!(b.proxy_protocol, Outbound::None);
    assert!(!b.proxy_protocol_crc32c);

    let config = load(
        "[listener.proxy_protocol]\ntrusted = [\"10.0.0.0/8\", \"2001:db8::/32\", \"192.0.2.7\"]",
        "proxy_protocol = \"v2\"\nproxy_protocol_crc32c = true",
    )
    .unwrap();
    let inbound = config.listeners[0].proxy_protocol.as_ref().unwrap();
    assert_eq!(inbound.mode, Mode::Require);
    assert_eq!(inbound.max_hops, DEFAULT_MAX_HOPS);
    assert_eq!(DEFAULT_MAX_HOPS, 3);
    assert!(inbound.trusts("10.1.2.3".parse().unwrap()));
    assert!(inbound.trusts("2001:db8::1".parse().unwrap()));
    assert!(inbound.trusts("192.0.2.7".parse().unwrap()));
    assert!(!inbound.trusts("192.0.2.8".parse().unwrap()));
    assert_eq!(config.backends["b"].proxy_protocol, Outbound::V2);
    assert!(config.backends["b"].proxy_protocol_crc32c);

    let config = load(
        "[listener.proxy_protocol]\ntrusted = [\"10.0.0.0/8\"]\nmode = \"optional\"\nmax_hops = 8",
        "proxy_protocol = \"v1\"",
    )
    .unwrap();
    let inbound = config.listeners[0].proxy_protocol.as_ref().unwrap();
    assert_eq!((inbound.mode, inbound.max_hops), (Mode::Optional, 8));
    assert_eq!(config.backends["b"].proxy_protocol, Outbound::V1);
}

#[test]
fn bad_values_name_their_key_and_value() {
    let pp = "[listener.proxy_protocol]\n";
    let cases = [
        (
            format!("{pp}trusted = []"),
            "",
            "listener[0].proxy_protocol.trusted: at least one network is required",
        ),
        (
            format!("{pp}trusted = [\"10.0.0.1/8\"]"),
            "",
            "listener[0].proxy_protocol.trusted[0]: \"10.0.0.1/8\": has host bits set; the network is 10.0.0.0/8",
        ),
        (
            // Neither a network nor a host name (a name would be resolved).
            format!("{pp}trusted = [\"10.0.0.0/8\", \"no pe\"]"),
            "",
            "listener[0].proxy_protocol.trusted[1]: \"no pe\": not an IP address or network",
        ),
        (
            format!("{pp}trusted = [\"10.0.0.0/8\"]\nmode = \"sometimes\""),
            "",
            "listener[0].proxy_protocol.mode: \"sometimes\" is neither \"require\" nor \"optional\"",
        ),
        (
            format!("{pp}trusted = [\"10.0.0.0/8\"]\nmax_hops = 0"),
            "",
            "listener[0].proxy_protocol.max_hops: 0 is out of range (1..=16)",
        ),
        (
            String::new(),
            "proxy_protocol = \"v3\"",
            "backend.b.proxy_protocol: \"v3\" is not one of \"v2\", \"v1\", \"none\"",
        ),
        (
            String::new(),
            "proxy_protocol = \"v1\"\nproxy_protocol_crc32c = true",
            "backend.b.proxy_protocol_crc32c: true needs proxy_protocol = \"v2\"",
        ),
        (
            String::new(),
            "proxy_protocol_crc32c = true",
            "backend.b.proxy_protocol_crc32c: true needs proxy_protocol = \"v2\"",
        ),
    ];
    for (listener, backend, expected) in cases {
        let message = problems(&listener, backend);
        assert!(
            message.contains(expected),
            "{message}\n  does not contain\n{expected}"
        );
    }
    // Unknown keys are refused by name.
    let message = problems(&format!("{pp}trusted = [\"10.0.0.0/8\"]\ntrust = []"), "");
    assert!(
        message.contains("unknown key `trust`: did you mean `trusted`?"),
        "{message}"
    );
}
