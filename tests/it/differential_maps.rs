//! Differential script for names read from files: a `use_backend
//! %[req.ssl_sni,lower,map(FILE)]` map and a `req.ssl_sni -i -f FILE`
//! ACL, against snirelay's translation. The harness and its tolerances:
//! [`crate::differential`].

use crate::differential::compare;

use crate::common::differential::*;
use crate::common::differential_check::Timing;

/// The maps' scripts: the shortest timer is the 1 s inspect delay.
const MAPS: Timing = Timing::new(1000, 200);

/// The map's names reach their backends (in any case: the rule
/// lowercases), the `-f` list's name its backend, and a name the map
/// lacks, one it maps to a backend that does not exist, and a hello
/// without SNI reach the default backend, in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_file_and_a_pattern_file_route_as_haproxy_does() {
    let (web, api, admin, default) = (
        "192.0.2.31:443",
        "192.0.2.32:443",
        "192.0.2.33:443",
        "192.0.2.34:443",
    );
    let script = vec![
        Conn::hello("example.com"),
        Conn::hello("WWW.Example.COM"),
        Conn::hello("api.example.com"),
        Conn::hello("beta.example.com"),
        Conn::hello("admin.example.com"),
        Conn::hello("Admin.Example.com"),
        Conn::hello("other.example.org"),
        Conn::hello("a.api.example.com"),
        Conn::no_sni(),
    ];
    // HAProxy runs in a scratch directory: the files by their full paths.
    let at = |name: &str| fixture(name).display().to_string();
    let runs = compare(
        "sni-map-file.cfg",
        |t| {
            t.replace(
                "tests/data/haproxy/sni-map-file.map",
                &at("sni-map-file.map"),
            )
            .replace(
                "tests/data/haproxy/sni-map-file.staff.lst",
                &at("sni-map-file.staff.lst"),
            )
        },
        &[web, api, admin, default].map(|s| (s, Mode::Answer)),
        MAPS,
        &script,
    )
    .await;
    for (version, results) in runs {
        let servers: Vec<Option<&str>> = results
            .iter()
            .map(|(h, _)| h.relayed.as_ref().map(|r| r.0.as_str()))
            .collect();
        assert_eq!(
            servers,
            [
                Some(web),
                Some(web),
                Some(api),
                Some(default),
                Some(admin),
                Some(admin),
                Some(default),
                Some(default),
                Some(default),
            ],
            "HAProxy {version}"
        );
    }
}

/// A map looked up without `,lower` (`map_str(FILE,DEFAULT)`): names as
/// the map writes them reach their backends in both, a miss and a key
/// whose backend does not exist reach the converter's default; a name in
/// capitals misses the key in both (the import writes the map's routes
/// with `case_sensitive_names`) and reaches the default backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_without_lower_routes_as_haproxy_does_capitals_included() {
    let (web, api, default) = ("192.0.2.51:443", "192.0.2.52:443", "192.0.2.54:443");
    let script = vec![
        Conn::hello("example.com"),
        Conn::hello("www.example.com"),
        Conn::hello("api.example.com"),
        Conn::hello("WWW.Example.COM"),
        Conn::hello("Api.example.com"),
        Conn::hello("beta.example.com"),
        Conn::hello("other.example.org"),
        Conn::no_sni(),
    ];
    let at = fixture("sni-map-file.map").display().to_string();
    let runs = compare(
        "sni-map-no-lower.cfg",
        |t| t.replace("tests/data/haproxy/sni-map-file.map", &at),
        &[web, api, default].map(|s| (s, Mode::Answer)),
        MAPS,
        &script,
    )
    .await;
    for (version, results) in runs {
        let relayed: Vec<Option<String>> = results
            .iter()
            .map(|(h, _)| h.relayed.as_ref().map(|x| x.0.clone()))
            .collect();
        let s = |a: &str| Some(a.to_owned());
        assert_eq!(
            relayed,
            [
                s(web),
                s(web),
                s(api),
                s(default),
                s(default),
                s(default),
                s(default),
                s(default)
            ],
            "HAProxy {version}"
        );
        let snirelay: Vec<Option<String>> = results
            .iter()
            .map(|(_, s)| s.relayed.as_ref().map(|x| x.0.clone()))
            .collect();
        assert_eq!(snirelay, relayed, "HAProxy {version}");
    }
}
