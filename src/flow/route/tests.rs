//! Unit tests of the route table: lookups, fallbacks, drain slots and
//! ECH, without sockets.

use std::path::Path;

use crate::config::Config;
use crate::drain::DrainSignal;
use crate::flow::route::*;

const RULES: &str = r#"
[[listener]]
name = "tls"
listen = "127.0.0.1:0"
ech_config_ids = [7]

[[route]]
name = "site"
sni = ["example.com", "*.example.com"]
backend = "web"

[[route]]
name = "acme"
sni = ["example.com"]
alpn = ["acme-tls/1"]
backend = "certs"

[[route]]
name = "acme_only"
sni = ["*.acme.example.com"]
alpn = ["acme-tls/1"]
backend = "certs"

[[route]]
name = "private"
sni = ["private.example.com"]
ech = "reject"
backend = "web"

[[route]]
name = "ech"
sni = ["ech.example.com"]
ech = "frontend"
backend = "web"

[[route]]
name = "default"
sni = ["*"]
backend = "fallback"

[backend.web]
addresses = ["127.0.0.1:1001"]

[backend.certs]
addresses = ["127.0.0.1:1002"]

[backend.fallback]
addresses = ["127.0.0.1:1003"]

[backend.frontend]
addresses = ["127.0.0.1:1004"]
"#;

fn table(text: &str) -> RouteTable {
    let config = Config::from_toml(text, Path::new("test.toml")).unwrap();
    RouteTable::build(&config.listeners[0], None)
}

fn hello(name: Option<&str>, alpn: &[&str], ech: Option<Ech>) -> ClientHello {
    ClientHello {
        server_name: name.map(|n| n.as_bytes().to_vec()),
        alpn: alpn.iter().map(|p| p.as_bytes().to_vec()).collect(),
        ech,
        version: Some(0x0304),
        len: 0,
    }
}

/// Where `hello` goes: (route, backend), or the refusal.
fn goes(table: &RouteTable, hello: &ClientHello) -> Result<(String, String), NoRoute> {
    table
        .decide(hello)
        .target
        .map(|e| (e.route.to_string(), e.backend.name.clone()))
}

fn to(route: &str, backend: &str) -> Result<(String, String), NoRoute> {
    Ok((route.to_owned(), backend.to_owned()))
}

#[test]
fn exact_and_wildcard_routes_beat_the_default_route() {
    let t = table(RULES);
    let go = |name| goes(&t, &hello(Some(name), &[], None));
    assert_eq!(go("example.com"), to("site", "web"));
    assert_eq!(go("a.b.example.com"), to("site", "web"));
    assert_eq!(go("other.test"), to("default", "fallback"));
    assert_eq!(go("example.org"), to("default", "fallback"));
    // Not a host name: refused, default route or not.
    assert_eq!(go("bad name"), Err(NoRoute::Unmatched));
    assert_eq!(go("10.0.0.1"), Err(NoRoute::Unmatched));
    // No SNI: the listener's no_sni (reject), never the default route.
    assert_eq!(goes(&t, &hello(None, &[], None)), Err(NoRoute::NoSni));
    // A trailing dot is no HostName (RFC 6066 §3), default route or not.
    assert_eq!(go("example.com."), Err(NoRoute::Unmatched));
    assert_eq!(go("other.test."), Err(NoRoute::Unmatched));
}

/// `case_sensitive_names` and `ldh_names`: a name spelled as the route
/// refuses passes to the next pattern (the shorter suffix, then `*`), as
/// an HAProxy ACL without `-i` (or a `[a-z0-9-]` regex) goes on to the
/// next rule.
#[test]
fn a_route_that_refuses_a_spelling_passes_the_name_to_the_next_pattern() {
    let t = table(
        r#"
[[listener]]
name = "tls"
listen = "127.0.0.1:0"

[[route]]
name = "exact"
sni = ["www.example.com"]
case_sensitive_names = true
backend = "web"

[[route]]
name = "sub"
sni = ["*.example.com"]
case_sensitive_names = true
ldh_names = true
backend = "certs"

[[route]]
name = "default"
sni = ["*"]
backend = "fallback"

[backend.web]
addresses = ["127.0.0.1:1001"]

[backend.certs]
addresses = ["127.0.0.1:1002"]

[backend.fallback]
addresses = ["127.0.0.1:1003"]
"#,
    );
    let go = |name| goes(&t, &hello(Some(name), &[], None));
    assert_eq!(go("www.example.com"), to("exact", "web"));
    assert_eq!(go("WWW.example.com"), to("sub", "certs"));
    assert_eq!(go("www.EXAMPLE.com"), to("default", "fallback"));
    assert_eq!(go("A.example.com"), to("sub", "certs"));
    assert_eq!(go("a.Example.com"), to("default", "fallback"));
    assert_eq!(go("a_b.example.com"), to("default", "fallback"));
    assert_eq!(go("OTHER.test"), to("default", "fallback"));
}

#[test]
fn a_route_with_a_matching_alpn_wins_over_the_same_name_without() {
    let t = table(RULES);
    let go = |name, alpn: &[&str]| goes(&t, &hello(Some(name), alpn, None));
    assert_eq!(go("example.com", &["acme-tls/1"]), to("acme", "certs"));
    // Any offered protocol matches.
    assert_eq!(
        go("example.com", &["h2", "acme-tls/1"]),
        to("acme", "certs")
    );
    assert_eq!(go("example.com", &["h2"]), to("site", "web"));
    assert_eq!(go("example.com", &[]), to("site", "web"));
    // A pattern with only an alpn route is passed over for the next
    // matching pattern (here `*.example.com`).
    assert_eq!(
        go("x.acme.example.com", &["acme-tls/1"]),
        to("acme_only", "certs")
    );
    assert_eq!(go("x.acme.example.com", &["h2"]), to("site", "web"));
}

#[test]
fn min_tls_version_refuses_hellos_offering_nothing_as_new() {
    let t = table(&RULES.replace(
        "ech_config_ids = [7]",
        "ech_config_ids = [7]\nmin_tls_version = \"1.3\"",
    ));
    let mut h = hello(Some("example.com"), &[], None);
    assert_eq!(goes(&t, &h), to("site", "web"));
    h.version = Some(0x0303);
    assert_eq!(goes(&t, &h), Err(NoRoute::TlsVersion));
    h.version = None;
    assert_eq!(goes(&t, &h), Err(NoRoute::TlsVersion));
    // The version is judged before the name.
    h.server_name = Some(b"bad name".to_vec());
    assert_eq!(goes(&t, &h), Err(NoRoute::TlsVersion));
    assert_eq!(NoRoute::TlsVersion.alert(), 70);
    // Unset: every version.
    let t = table(RULES);
    assert_eq!(goes(&t, &h), Err(NoRoute::Unmatched));
}

#[test]
fn ech_policy_concerns_real_ech_and_lets_grease_pass() {
    let t = table(RULES);
    let real = Some(Ech::Outer { config_id: 7 });
    let grease = Some(Ech::Outer { config_id: 8 });
    let decide = |name, ech| {
        let d = t.decide(&hello(Some(name), &[], ech));
        (d.ech, d.target.map(|e| e.backend.name.clone()))
    };
    assert_eq!(
        decide("private.example.com", real),
        (Some(EchKind::Real), Err(NoRoute::EchRejected))
    );
    assert_eq!(
        decide("private.example.com", grease),
        (Some(EchKind::Grease), Ok("web".into()))
    );
    assert_eq!(
        decide("private.example.com", None),
        (None, Ok("web".into()))
    );
    assert_eq!(
        decide("ech.example.com", real),
        (Some(EchKind::Real), Ok("frontend".into()))
    );
    assert_eq!(
        decide("ech.example.com", grease),
        (Some(EchKind::Grease), Ok("web".into()))
    );
    assert_eq!(
        decide("ech.example.com", Some(Ech::Inner)),
        (Some(EchKind::Inner), Ok("web".into()))
    );
    assert_eq!(NoRoute::EchRejected.alert(), 40);
    // Without configured ids every outer ECH is concerned.
    let t = table(&RULES.replace("ech_config_ids = [7]", ""));
    let d = t.decide(&hello(Some("private.example.com"), &[], grease));
    assert_eq!(
        (d.ech, d.target.err()),
        (Some(EchKind::Unknown), Some(NoRoute::EchRejected))
    );
}

#[test]
fn the_alpn_set_and_the_ech_backend_are_part_of_the_drain_identity() {
    let old = table(RULES);
    let config = Config::from_toml(
        &RULES
            .replace(
                "alpn = [\"acme-tls/1\"]\nbackend = \"certs\"\n\n[[route]]\nname = \"acme_only\"",
                "alpn = [\"acme-tls/1\"]\nbackend = \"web\"\n\n[[route]]\nname = \"acme_only\"",
            )
            .replace(
                "[backend.frontend]\naddresses = [\"127.0.0.1:1004\"]",
                "[backend.frontend]\naddresses = [\"127.0.0.1:1005\"]",
            ),
        Path::new("test.toml"),
    )
    .unwrap();
    let new = RouteTable::build(&config.listeners[0], Some(&old));
    let signal = |t: &RouteTable, name, alpn: &[&str], ech| {
        t.decide(&hello(Some(name), alpn, ech))
            .target
            .unwrap()
            .drain
            .signal()
            .clone()
    };
    let retired = old.retired_by(Some(&new));
    let is_retired = |s: &Arc<DrainSignal>| retired.iter().any(|r| Arc::ptr_eq(r, s));
    // The acme route of example.com changed backend; the site did not.
    assert!(is_retired(&signal(
        &old,
        "example.com",
        &["acme-tls/1"],
        None
    )));
    assert!(!is_retired(&signal(&old, "example.com", &["h2"], None)));
    assert!(Arc::ptr_eq(
        &signal(&old, "example.com", &["h2"], None),
        &signal(&new, "example.com", &["h2"], None)
    ));
    // The ECH backend of ech.example.com changed; its own route did not.
    let real = Some(Ech::Outer { config_id: 7 });
    assert!(is_retired(&signal(&old, "ech.example.com", &[], real)));
    assert!(!is_retired(&signal(&old, "ech.example.com", &[], None)));
    assert_eq!(retired.len(), 2);
}

/// `site{i}.{set}.example.com` for each `i`, quoted for TOML.
fn names(set: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range
        .map(|i| format!("\"site{i}.{set}.example.com\""))
        .collect()
}

/// One listener with one route of `names`, built after `previous`.
fn names_table(names: &[String], previous: Option<&RouteTable>) -> RouteTable {
    let text = format!(
        "[[listener]]\nname = \"tls\"\nlisten = \"127.0.0.1:0\"\n\n[[route]]\nname = \"names\"\nsni = [{}]\nbackend = \"b\"\n\n[backend.b]\naddresses = [\"127.0.0.1:1001\"]\n",
        names.join(", ")
    );
    let config = Config::from_toml(&text, Path::new("test.toml")).unwrap();
    RouteTable::build(&config.listeners[0], previous)
}

fn slot_of<'t>(table: &'t RouteTable, name: &str) -> &'t DrainSlot {
    table
        .decide(&hello(Some(name), &[], None))
        .target
        .unwrap()
        .drain
}

#[test]
fn a_reload_that_keeps_every_name_shares_the_slot_block() {
    let old = names_table(&names("a", 0..100), None);
    let new = names_table(&names("a", 0..100), Some(&old));
    assert_eq!(new.blocks.len(), 1);
    assert!(Arc::ptr_eq(&old.blocks[0], &new.blocks[0]));
    assert!(std::ptr::eq(
        slot_of(&old, "site7.a.example.com"),
        slot_of(&new, "site7.a.example.com")
    ));
    assert!(old.retired_by(Some(&new)).is_empty());
}

#[test]
fn a_reload_of_other_names_makes_one_new_block_and_keeps_none() {
    let old = names_table(&names("a", 0..100), None);
    let new = names_table(&names("b", 0..100), Some(&old));
    assert_eq!(new.blocks.len(), 1);
    assert_eq!(new.blocks[0].len(), 100);
    assert!(!Arc::ptr_eq(&old.blocks[0], &new.blocks[0]));
    assert_eq!(old.retired_by(Some(&new)).len(), 100);
}

#[test]
fn a_block_carried_too_sparsely_is_left_behind_with_its_signals_handed_on() {
    // 160 names, of which the next table keeps 5 (under one in 16) and
    // adds 95 new ones: the 5 move to the new block, each with the signal
    // the old slot now holds.
    let old = names_table(&names("a", 0..160), None);
    let untouched = slot_of(&old, "site3.a.example.com") as *const DrainSlot;
    let kept_and_new = [names("a", 0..5), names("b", 0..95)].concat();
    let new = names_table(&kept_and_new, Some(&old));
    assert_eq!(new.blocks.len(), 1, "the old block is not kept");
    assert_eq!(new.blocks[0].len(), 100);
    let moved = slot_of(&new, "site3.a.example.com");
    assert!(!std::ptr::eq(moved, untouched));
    assert!(Arc::ptr_eq(
        moved.signal(),
        slot_of(&old, "site3.a.example.com").signal()
    ));
    // A connection still routed by the old table joins the same signal.
    let guard = slot_of(&old, "site3.a.example.com").enter();
    assert!(Arc::ptr_eq(guard.signal(), moved.signal()));
    // The moved five are carried; the other 155 are retired.
    let retired = old.retired_by(Some(&new));
    assert_eq!(retired.len(), 155);
    assert!(!retired.iter().any(|r| Arc::ptr_eq(r, moved.signal())));
}

#[test]
fn a_block_carried_by_one_in_sixteen_is_kept() {
    let old = names_table(&names("a", 0..160), None);
    let new = names_table(&[names("a", 0..10), names("b", 0..5)].concat(), Some(&old));
    assert_eq!(
        new.blocks.len(),
        2,
        "the old block (10 of 160 carried) and the fresh one"
    );
    assert!(Arc::ptr_eq(&old.blocks[0], &new.blocks[0]));
    assert!(std::ptr::eq(
        slot_of(&old, "site9.a.example.com"),
        slot_of(&new, "site9.a.example.com")
    ));
    assert_eq!(old.retired_by(Some(&new)).len(), 150);
}
