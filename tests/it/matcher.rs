//! The allowlist rules of docs/design.md "route", as a table.

use snirelay::wire::matcher::SniMatcher;
use snirelay::wire::sni::{Pattern, Sni};

fn matcher(patterns: &[&'static str]) -> SniMatcher<&'static str> {
    let mut m = SniMatcher::new();
    for p in patterns {
        m.insert(&Pattern::parse(p).unwrap(), *p).unwrap();
    }
    m
}

fn find<'a>(m: &'a SniMatcher<&'static str>, name: &str) -> Option<&'a str> {
    let sni = Sni::parse(name.as_bytes()).ok()?;
    m.find(&sni).copied()
}

#[test]
fn allowlist_rules() {
    let m = matcher(&[
        "example.com",
        "*.example.com",
        "api.example.com",
        "*.eu.example.com",
        "*.xn--bcher-kva.de",
        "xn--mnchen-3ya.de",
    ]);
    let table: &[(&str, Option<&str>)] = &[
        // Apex and wildcard are separate rules.
        ("example.com", Some("example.com")),
        ("www.example.com", Some("*.example.com")),
        // Any depth below the wildcard's suffix.
        ("a.b.c.example.com", Some("*.example.com")),
        // Exact beats wildcard.
        ("api.example.com", Some("api.example.com")),
        // Exact names match only themselves.
        ("v2.api.example.com", Some("*.example.com")),
        // The longest suffix wins.
        ("x.eu.example.com", Some("*.eu.example.com")),
        ("x.y.eu.example.com", Some("*.eu.example.com")),
        // A wildcard never matches its own suffix: eu.example.com falls to
        // the shorter wildcard.
        ("eu.example.com", Some("*.example.com")),
        // Case-insensitive; a trailing dot is no HostName (RFC 6066 §3).
        ("WWW.Example.COM", Some("*.example.com")),
        ("example.com.", None),
        ("www.example.com.", None),
        // Label boundaries are exact.
        ("badexample.com", None),
        ("www.badexample.com", None),
        ("example.com.evil.net", None),
        ("examplexcom", None),
        ("com", None),
        // Punycode names are ordinary names.
        ("shop.xn--bcher-kva.de", Some("*.xn--bcher-kva.de")),
        ("xn--bcher-kva.de", None),
        ("xn--mnchen-3ya.de", Some("xn--mnchen-3ya.de")),
        ("XN--MNCHEN-3YA.DE", Some("xn--mnchen-3ya.de")),
        // Names that are not valid host names match nothing.
        ("example.com..", None),
        ("*.example.com", None),
        ("ex ample.com", None),
        ("", None),
    ];
    for (name, expected) in table {
        assert_eq!(find(&m, name), *expected, "{name:?}");
    }
    // UTF-8 must arrive as punycode.
    assert_eq!(find(&m, "shop.bücher.de"), None);
}

#[test]
fn a_pattern_may_be_added_once() {
    let mut m = SniMatcher::new();
    m.insert(&Pattern::parse("*.example.com").unwrap(), 1)
        .unwrap();
    m.insert(&Pattern::parse("example.com").unwrap(), 2)
        .unwrap();
    let again = m.insert(&Pattern::parse("*.EXAMPLE.com.").unwrap(), 3);
    assert_eq!(
        again.unwrap_err().to_string(),
        "pattern `*.example.com` is already taken by another route"
    );
    assert_eq!(m.len(), 2);
}
