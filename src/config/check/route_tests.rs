//! A route's `listener`: one name, a list, `"*"`; each listener a copy of
//! the route, checked for that listener; and the warning for PROXY
//! headers toward a QUIC server.

use std::path::Path;

use crate::config::{Config, ConfigError, Listener, Problem, Protocol};

/// A tcp listener `tls`, a quic listener `h3` and backend `origin`.
const HEAD: &str = r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]

[[listener]]
name = "h3"
protocol = "quic"
listen = ["127.0.0.1:0"]

[backend.origin]
addresses = ["192.0.2.10:443"]
"#;

fn loads(routes: &str) -> Config {
    Config::from_toml(&format!("{HEAD}\n{routes}"), Path::new("test.toml"))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The problems of a whole file that must not load.
fn invalid(text: &str) -> Vec<Problem> {
    match Config::from_toml(text, Path::new("test.toml")) {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        Err(e) => panic!("not a list of problems: {e}"),
        Ok(_) => panic!("loaded:\n{text}"),
    }
}

/// Every problem of `HEAD` and `routes`, as `check` prints each.
fn problems(routes: &str) -> Vec<String> {
    invalid(&format!("{HEAD}\n{routes}"))
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// Asserts that one of `problems` is under `key` and says `words`.
fn assert_has(problems: &[Problem], key: &str, words: &str) {
    assert!(
        problems
            .iter()
            .any(|p| p.key == key && p.message.contains(words)),
        "{key}: {words}: {problems:#?}"
    );
}

/// The one problem that starts with `start`.
fn problem(routes: &str, start: &str) -> String {
    let all = problems(routes);
    let found: Vec<&String> = all.iter().filter(|p| p.starts_with(start)).collect();
    assert_eq!(found.len(), 1, "{start}: {all:#?}");
    found[0].clone()
}

/// A listener's routes: each one's name and patterns.
fn routes(config: &Config, listener: &str) -> Vec<(String, Vec<String>)> {
    let listener: &Listener = config.listener(listener).unwrap();
    listener
        .routes
        .iter()
        .map(|r| {
            let patterns = listener.patterns(r).map(|p| p.to_string()).collect();
            (r.name.clone(), patterns)
        })
        .collect()
}

fn route(name: &str, listener: &str, sni: &str) -> String {
    format!(
        "[[route]]\nname = {name:?}\nlistener = {listener}\nsni = [{sni:?}]\nbackend = \"origin\"\n"
    )
}

#[test]
fn a_string_names_one_listener() {
    let config = loads(&format!(
        "{}{}",
        route("web", "\"tls\"", "a.example"),
        route("h3web", "\"h3\"", "a.example")
    ));
    assert_eq!(
        routes(&config, "tls"),
        [("web".to_owned(), vec!["a.example".to_owned()])]
    );
    assert_eq!(
        routes(&config, "h3"),
        [("h3web".to_owned(), vec!["a.example".to_owned()])]
    );
}

#[test]
fn a_list_gives_each_listener_a_copy_with_the_same_names() {
    let config = loads(
        "[[route]]\nname = \"site\"\nlistener = [\"tls\", \"h3\"]\n\
         sni = [\"example.com\", \"*.example.com\"]\nbackend = \"origin\"\n\
         max_connections = 100\n[route.limits]\nconnections_per_source = 5\n",
    );
    let names = vec!["example.com".to_owned(), "*.example.com".to_owned()];
    for listener in ["tls", "h3"] {
        assert_eq!(
            routes(&config, listener),
            [("site".to_owned(), names.clone())],
            "{listener}"
        );
        let copy = &config.listener(listener).unwrap().routes[0];
        assert_eq!(copy.backend.name, "origin");
        assert_eq!(copy.max_connections.map(|n| n.get()), Some(100));
        assert!(copy.limits.is_some());
    }
    // Each copy lays the route over its own listener: the idle timeout is
    // each listener's default (TCP's 5 minutes, QUIC's 30 seconds).
    let idle = |l: &str| config.listener(l).unwrap().routes[0].timeouts.idle;
    assert_eq!(idle("tls").as_secs(), 300);
    assert_eq!(idle("h3").as_secs(), 30);
    assert_eq!(config.listener("h3").unwrap().protocol, Protocol::Quic);
    // Written back, the route is its copies, one block per listener.
    let written = config.to_file();
    let listeners: Vec<Vec<String>> = written
        .routes
        .iter()
        .map(|r| r.listener.as_ref().unwrap().as_slice().to_vec())
        .collect();
    assert_eq!(listeners, [vec!["tls".to_owned()], vec!["h3".to_owned()]]);
}

#[test]
fn a_star_names_every_listener() {
    let config = loads(&route("fallback", "\"*\"", "*"));
    for listener in ["tls", "h3"] {
        assert_eq!(
            routes(&config, listener),
            [("fallback".to_owned(), vec!["*".to_owned()])]
        );
    }
    let mixed = problem(
        &route("r", "[\"*\", \"tls\"]", "a.example"),
        "route[0].listener",
    );
    assert!(mixed.contains("already means every listener"), "{mixed}");
    let empty = problem(&route("r", "[]", "a.example"), "route[0].listener");
    assert!(empty.contains("[] names no listener"), "{empty}");
    // No listener may be called "*", so the word never means one.
    let text = format!(
        "{HEAD}[[listener]]\nname = \"*\"\nlisten = [\"127.0.0.1:0\"]\n{}",
        route("r", "\"*\"", "a.example")
    );
    assert_has(
        &invalid(&text),
        "listener[2].name",
        "is not a listener name",
    );
}

#[test]
fn an_unknown_listener_is_named_with_the_nearest_one() {
    let listed = problem(
        &route("r", "[\"tls\", \"h4\"]", "a.example"),
        "route[0].listener[1]",
    );
    assert_eq!(
        listed,
        "route[0].listener[1]: \"h4\" names no [[listener]]; did you mean \"h3\"? the listeners: \"tls\", \"h3\""
    );
    let alone = problem(&route("r", "\"backend\"", "a.example"), "route[0].listener");
    assert_eq!(
        alone,
        "route[0].listener: \"backend\" names no [[listener]]; the listeners: \"tls\", \"h3\""
    );
    let twice = problem(
        &route("r", "[\"tls\", \"tls\"]", "a.example"),
        "route[0].listener[1]",
    );
    assert!(twice.contains("\"tls\" is listed twice"), "{twice}");
    // Unset with two listeners: required, and the message shows the forms.
    let unset = problem(
        "[[route]]\nsni = [\"a.example\"]\nbackend = \"origin\"\n",
        "route[0].listener",
    );
    assert!(
        unset.contains("required when there is more than one [[listener]]")
            && unset.contains("`listener = [\"tls\", \"h3\"]`")
            && unset.contains("`listener = \"*\"`"),
        "{unset}"
    );
}

#[test]
fn a_tcp_only_key_on_a_route_naming_a_quic_listener_is_an_error_saying_what_to_write() {
    let text = "[[route]]\nname = \"site\"\nlistener = [\"tls\", \"h3\"]\nsni = [\"a.example\"]\n\
                backend = \"origin\"\nhalf_close_timeout = \"5s\"\nrate_up = 100000\n";
    let all = problems(text);
    assert_eq!(
        problem(text, "route[0].half_close_timeout"),
        "route[0].half_close_timeout: is a TCP setting (it counts from a FIN); route \"site\" is \
         on protocol = \"quic\" listener \"h3\", whose flows have none: split the route: one \
         [[route]] with `listener = [\"tls\"]` keeps `half_close_timeout`, another with \
         `listener = \"h3\"` goes without it; or drop `half_close_timeout`"
    );
    let rate = problem(text, "route[0].rate_up");
    assert!(
        rate.contains("listener \"h3\"") && rate.contains("split the route"),
        "{rate}"
    );
    assert_eq!(all.len(), 2, "{all:#?}");
    // On a quic listener alone, the fix is to drop the key.
    let alone = problem(
        "[[route]]\nname = \"site\"\nlistener = \"h3\"\nsni = [\"a.example\"]\nbackend = \"origin\"\n\
         half_close_timeout = \"5s\"\n[[route]]\nlistener = \"tls\"\nsni = [\"a.example\"]\nbackend = \"origin\"\n",
        "route[0].half_close_timeout",
    );
    assert!(
        alone.ends_with("whose flows have none: drop `half_close_timeout` from the route"),
        "{alone}"
    );
}

#[test]
fn a_name_twice_on_one_listener_through_two_routes_is_still_an_error() {
    let text = format!(
        "{}{}",
        route("both", "[\"tls\", \"h3\"]", "a.example"),
        route("tcp", "\"tls\"", "a.example")
    );
    let all = problems(&text);
    assert_eq!(
        all,
        [
            "route[1].sni[0]: pattern `a.example` is already taken by another route on listener \
          \"tls\" (route \"both\"; give one of them an `alpn` list)"
        ]
    );
    // A name twice within one route is said once, not once per copy.
    let within = problems(
        "[[route]]\nlistener = [\"tls\", \"h3\"]\nsni = [\"a.example\", \"a.example\"]\n\
         backend = \"origin\"\n",
    );
    assert_eq!(
        within,
        ["route[0].sni[1]: pattern `a.example` is listed twice in this route"]
    );
    // The same name in two blocks on a tcp and a quic listener is fine.
    loads(&format!(
        "{}{}",
        route("tcp", "\"tls\"", "a.example"),
        route("quic", "\"h3\"", "a.example")
    ));
}

#[test]
fn proxy_headers_toward_a_quic_listener_s_backend_are_a_warning_unless_it_reads_them() {
    let routes = route("site", "[\"tls\", \"h3\"]", "a.example");
    // The keys go into `HEAD`'s last table, `[backend.origin]`.
    let with = |backend: &str| loads(&format!("{backend}\n{routes}"));
    let config = with("proxy_protocol = \"v2\"");
    let warnings: Vec<String> = config.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].starts_with(
            "route[0].backend: backend \"origin\" sends PROXY v2 headers (proxy_protocol = \"v2\"), \
             and route \"site\" reaches it from protocol = \"quic\" listener \"h3\""
        ),
        "{warnings:#?}"
    );
    assert!(
        warnings[0].contains("set `quic_reads_proxy_protocol = true` in [backend.origin]"),
        "{warnings:#?}"
    );
    let reads = with("proxy_protocol = \"v2\"\nquic_reads_proxy_protocol = true");
    assert!(reads.warnings.is_empty(), "{:?}", reads.warnings);
    assert!(with("").warnings.is_empty());

    // The key means something only with a v2 header toward a quic listener.
    let key = "backend.origin.quic_reads_proxy_protocol";
    let without_header = format!("{HEAD}quic_reads_proxy_protocol = true\n{routes}");
    assert_has(
        &invalid(&without_header),
        key,
        "needs proxy_protocol = \"v2\"",
    );
    let tcp_only = format!(
        "{HEAD}proxy_protocol = \"v2\"\nquic_reads_proxy_protocol = true\n{}{}",
        route("site", "\"tls\"", "a.example"),
        "[[route]]\nlistener = \"h3\"\nsni = [\"b.example\"]\nbackend = \"other\"\n\
         [backend.other]\naddresses = [\"192.0.2.11:443\"]\n"
    );
    assert_has(
        &invalid(&tcp_only),
        key,
        "no protocol = \"quic\" listener routes to this backend",
    );
}
