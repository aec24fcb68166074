//! Unit tests of the import's spelling keys (`case_sensitive_names`,
//! `ldh_names`) and of server lines that keep their server whatever
//! options they carry. The rest of the import's unit tests are
//! [`super::tests`]'s; nothing here runs HAProxy.

use super::tests::{EDGE, edge, load, not_lines, translate};

/// Tests without `-i` make `case_sensitive_names`, a `[a-z0-9-]` regex
/// `ldh_names`; one backend's names spelled both ways, and a regex
/// without `-i` that refuses capitals everywhere, are reported.
#[test]
fn the_spelling_a_test_compares_becomes_its_routes_keys() {
    let t = edge("    use_backend be if { req.ssl_sni -m end .example.com }\n");
    assert!(t.toml.contains("case_sensitive_names = true"), "{}", t.toml);
    assert!(t.not_translated.is_empty(), "{:?}", t.not_translated);
    load(&t.toml);
    let t =
        edge("    use_backend be if { req.ssl_sni -m reg -i ^([a-z0-9-]+\\.)*example\\.com$ }\n");
    assert!(t.toml.contains("ldh_names = true"), "{}", t.toml);
    assert!(!t.toml.contains("case_sensitive_names"), "{}", t.toml);
    load(&t.toml);
    let t = edge(
        "    use_backend be if { req.ssl_sni -i a.example.com }\n    use_backend be if { req.ssl_sni b.example.com }\n",
    );
    assert!(
        t.not_translated
            .iter()
            .any(|n| n.2.contains("compare the client's spelling differently")),
        "{:?}",
        t.not_translated
    );
    let t = edge("    use_backend be if { req.ssl_sni -m reg ^([a-z0-9-]+\\.)*example\\.com$ }\n");
    assert!(
        t.not_translated
            .iter()
            .any(|n| n.2.contains("refuses capitals in every label")),
        "{:?}",
        t.not_translated
    );
}

/// A server line keeps its server whatever options it carries: those
/// with a key become keys, the rest notes; `ssl` writes the server and
/// reports the line.
#[test]
fn a_server_line_with_unknown_options_keeps_its_server() {
    let text = format!(
        "{EDGE}    default_backend be\nbackend be\n    server s 192.0.2.1:443 check inter 2s maxconn 500 weight 10 slowstart 10s agent-check agent-port 9999 id 7\n    server t 192.0.2.2:443 ssl verify none\n"
    );
    let t = translate(&text, "t.cfg").unwrap();
    assert!(
        t.toml
            .contains(r#"{ address = "192.0.2.1:443", weight = 10, max_connections = 500 }"#),
        "{}",
        t.toml
    );
    assert!(
        t.toml
            .contains(r#"{ address = "192.0.2.2:443", weight = 1 }"#),
        "{}",
        t.toml
    );
    assert!(t.toml.contains("`slowstart 10s`"), "{}", t.toml);
    assert!(t.toml.contains("`agent-port 9999`"), "{}", t.toml);
    assert!(t.toml.contains("`id 7` has no snirelay key"), "{}", t.toml);
    assert!(t.toml.contains("t (no `check` in HAProxy"), "{}", t.toml);
    assert_eq!(not_lines(&t), [14], "{:?}", t.not_translated);
    assert!(
        t.not_translated[0].2.contains("`ssl`"),
        "{:?}",
        t.not_translated
    );
}
