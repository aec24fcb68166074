use std::path::Path;

use crate::config::{Config, ConfigError, Problem};

/// A valid file with `listener`, `route`, `backend` and `extra` lines put
/// in their sections.
fn file(listener: &str, route: &str, backend: &str, extra: &str) -> String {
    format!(
        "[[listener]]\nname = \"tls\"\nlisten = [\"127.0.0.1:8443\"]\n{listener}\n\n\
         [[route]]\nsni = [\"example.com\"]\nbackend = \"home\"\n{route}\n\n\
         [backend.home]\naddresses = [\"192.0.2.10:443\"]\n{backend}\n\n{extra}\n"
    )
}

/// A wrong input: the listener, route, backend and other sections' lines,
/// the problem's key, and words its message has.
type Case<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str, &'a [&'a str]);

fn problems(text: &str) -> Vec<Problem> {
    match Config::from_toml(text, Path::new("/etc/snirelay/snirelay.toml")) {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("expected problems, got {other:?}\n{text}"),
    }
}

#[test]
fn each_wrong_input_names_its_key_what_was_found_and_what_to_write() {
    let cases: &[Case] = &[
        (
            "idle_timeout = 300",
            "",
            "",
            "",
            "listener[0].idle_timeout",
            &[
                "found integer 300",
                "expected duration",
                "`idle_timeout = \"300s\"`",
                "\"300ms\"",
            ],
        ),
        (
            "proxy_protocol = \"v2\"",
            "",
            "",
            "",
            "listener[0].proxy_protocol",
            &[
                "found string \"v2\"",
                "set `proxy_protocol = \"v2\"` on the backend",
                "`[listener.proxy_protocol] trusted = [",
            ],
        ),
        (
            "",
            "",
            "proxy_protocol = 2",
            "",
            "backend.home.proxy_protocol",
            &[
                "found integer 2",
                "\"v2\", \"v1\", \"none\"",
                "`proxy_protocol = \"v2\"`",
            ],
        ),
        (
            "",
            "",
            "",
            "[global]\nmax_connections = \"5000\"",
            "global.max_connections",
            &[
                "found string \"5000\"",
                "without quotes",
                "`max_connections = 5000`",
            ],
        ),
        (
            "",
            "",
            "",
            "[admin]\nlisten = \"127.0.0.1:9901\"\nexpose_config = \"yes\"",
            "admin.expose_config",
            &[
                "found string \"yes\"",
                "expected boolean",
                "`expose_config = true`",
            ],
        ),
        (
            "",
            "alpn = \"h2\"",
            "",
            "",
            "route[0].alpn",
            &[
                "found string \"h2\"",
                "a list, even of one",
                "`alpn = [\"h2\"]`",
            ],
        ),
        (
            "colour = \"blue\"",
            "",
            "",
            "",
            "listener[0].colour",
            &["unknown key `colour`", "the keys here are name, listen"],
        ),
        (
            "",
            "",
            "max_conections_per_address = 5",
            "",
            "backend.home.max_conections_per_address",
            &["did you mean `max_connections_per_address`?"],
        ),
        (
            "tcp_keepalive = { idel = \"60s\" }",
            "",
            "",
            "",
            "listener[0].tcp_keepalive.idel",
            &["did you mean `idle`?"],
        ),
        (
            "",
            "",
            "tcp_keepalive = \"60s\"",
            "",
            "backend.home.tcp_keepalive",
            &["found string \"60s\"", "expected table, true or false"],
        ),
        (
            "",
            "",
            "",
            "[log]\nqueue = 1.5",
            "log.queue",
            &["found number 1.5", "expected integer"],
        ),
    ];
    for (listener, route, backend, extra, key, words) in cases {
        let found = problems(&file(listener, route, backend, extra));
        let problem = found
            .iter()
            .find(|p| p.key == *key)
            .unwrap_or_else(|| panic!("no problem for {key}: {found:?}"));
        let message = problem.to_string();
        for word in *words {
            assert!(message.contains(word), "{key}: {message:?} lacks {word:?}");
        }
        for rust in ["struct ", "enum ", "i64", "u64", "Section", "Setting"] {
            assert!(
                !message.contains(rust),
                "{key}: {message:?} names a Rust type"
            );
        }
    }
}

#[test]
fn type_errors_and_the_checkers_problems_come_in_one_report() {
    let text = "[global]\nsplice = \"yes\"\n\n\
        [[listener]]\nname = \"tls\"\nlisten = [\"127.0.0.1:8443\"]\n\
        idle_timeout = 300\nclient_hello_timeout = \"5x\"\n\n\
        [[route]]\nsni = [\"example.com\"]\nbackend = \"home\"\nmax_connections = \"many\"\n\n\
        [backend.home]\naddresses = [\"origin.example.com:443\"]\nproxy_protocol = 2\n";
    let found = problems(text);
    let keys: Vec<&str> = found.iter().map(|p| p.key.as_str()).collect();
    for key in [
        "listener[0].idle_timeout",
        "route[0].max_connections",
        "backend.home.proxy_protocol",
        "global.splice",
        // The checker's, in the same run.
        "listener[0].client_hello_timeout",
        "backend.home.addresses[0]",
    ] {
        assert!(keys.contains(&key), "{key} missing from {keys:?}");
    }
    let host = found
        .iter()
        .find(|p| p.key == "backend.home.addresses[0]")
        .unwrap()
        .to_string();
    assert!(
        host.contains("resolve = \"origin.example.com:443\""),
        "{host}"
    );
}
