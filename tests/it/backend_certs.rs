//! `snirelay certs` against real TLS backends on loopback, with
//! certificates made here: what each backend presents for each name
//! (subject names, issuer, coverage, verification, ALPN), the coalescing
//! warning when one `*.example.test` certificate serves names routed to
//! two backends, the same as an error under `coalescing_risk = "error"`,
//! a clean report once each backend has its own certificate, a backend
//! that speaks PROXY, and an address that refuses.
//!
//! And through a quic listener, against quinn QUIC servers: the same
//! fields learnt with a QUIC handshake offering `h3`, the coalescing
//! warning for a shared certificate over HTTP/3, a QUIC server that does
//! not speak `h3` (its refusal reported), and a backend the relay sends a
//! PROXY v2 header over UDP (not checked, nothing sent).

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::*;
use quinn::crypto::rustls::QuicServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

const A: &str = "a.example.test";
const B: &str = "b.example.test";
const ISSUER: &str = "CN=snirelay certs test CA";

/// A CA that signs server certificates.
struct Ca {
    der: CertificateDer<'static>,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new() -> Ca {
        Ca::named("snirelay certs test CA")
    }

    /// A CA whose subject is `CN=common_name`.
    fn named(common_name: &str) -> Ca {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let der = params.self_signed(&key).unwrap().der().clone();
        Ca {
            der,
            issuer: Issuer::new(params, key),
        }
    }

    /// A server configuration presenting a certificate for `names`,
    /// selecting h2 when offered.
    fn server(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    }

    fn pem(&self) -> String {
        pem("CERTIFICATE", &self.der)
    }
}

/// A TLS backend on 127.0.0.1:0 presenting `config`'s certificate; with
/// `proxy_v2`, each connection must start with a PROXY v2 header, whose
/// command byte (0x20: LOCAL) is sent on `commands`.
async fn backend(
    config: Arc<rustls::ServerConfig>,
    proxy_v2: Option<tokio::sync::mpsc::UnboundedSender<u8>>,
) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let proxy_v2 = proxy_v2.map(Arc::new);
    raw_backend_on(listener, move |mut tcp| {
        let acceptor = acceptor.clone();
        let proxy_v2 = proxy_v2.clone();
        async move {
            if let Some(commands) = proxy_v2 {
                let mut head = [0u8; 16];
                if tcp.read_exact(&mut head).await.is_err() {
                    return;
                }
                let mut rest = vec![0u8; usize::from(u16::from_be_bytes([head[14], head[15]]))];
                if tcp.read_exact(&mut rest).await.is_err() {
                    return;
                }
                let _ = commands.send(head[12]);
            }
            if let Ok(mut tls) = acceptor.accept(tcp).await {
                let mut buf = [0u8; 64];
                while matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {}
            }
        }
    })
}

/// A QUIC server on 127.0.0.1:0 (quinn) presenting `config`'s
/// certificate and selecting among `alpn`; it accepts connections and
/// holds each until the client closes it.
fn quic_backend(
    config: Arc<rustls::ServerConfig>,
    alpn: &[&[u8]],
) -> (quinn::Endpoint, SocketAddr) {
    let mut tls = (*config).clone();
    tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let crypto = QuicServerConfig::try_from(Arc::new(tls)).unwrap();
    let server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let endpoint = quinn::Endpoint::server(server, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = endpoint.local_addr().unwrap();
    let accepting = endpoint.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            tokio::spawn(async move {
                if let Ok(connection) = incoming.await {
                    connection.closed().await;
                }
            });
        }
    });
    (endpoint, addr)
}

/// What a listener of `protocol = "quic"` adds to [`config_on`]'s: the
/// protocol, and an idle timeout long enough that a busy machine's pauses
/// do not end a browser's flow mid-page.
pub(crate) const QUIC_LISTENER: &str = "protocol = \"quic\"\nidle_timeout = \"3s\"";

/// A configuration routing a.example.test to backend one and
/// b.example.test to backend two on a TCP listener `edge`; `global` goes
/// into `[global]`, `one` into `[backend.one]`.
pub(crate) fn config(one: SocketAddr, two: SocketAddr, global: &str, one_extra: &str) -> String {
    config_on("", one, two, global, one_extra)
}

/// As [`config`], with `listener_extra` in the listener `edge`
/// ([`QUIC_LISTENER`] makes it a quic listener).
pub(crate) fn config_on(
    listener_extra: &str,
    one: SocketAddr,
    two: SocketAddr,
    global: &str,
    one_extra: &str,
) -> String {
    format!(
        r#"
[global]
{global}

[[listener]]
name = "edge"
listen = ["127.0.0.1:0"]
{listener_extra}

[[route]]
name = "route-a"
sni = ["{A}"]
backend = "one"

[[route]]
name = "route-b"
sni = ["{B}"]
backend = "two"

[backend.one]
addresses = ["{one}"]
{one_extra}

[backend.two]
addresses = ["{two}"]
"#
    )
}

/// Runs `snirelay certs --format json` on `config`, trusting the CA
/// certificates of `ca_pem`.
pub(crate) async fn certs(tag: &str, config: &str, ca_pem: &str) -> (Option<i32>, Value, String) {
    let dir = scratch_dir(tag);
    let path = dir.join("snirelay.toml");
    std::fs::write(&path, config).unwrap();
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, ca_pem).unwrap();
    let args: Vec<String> = [
        "certs",
        "--config",
        path.to_str().unwrap(),
        "--ca",
        ca_path.to_str().unwrap(),
        "--format",
        "json",
        "--timeout",
        "3s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (code, stdout, stderr) = run_snirelay(args).await;
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout {stdout}\nstderr {stderr}"));
    (code, report, stderr)
}

/// The one row of `name`.
fn row<'r>(report: &'r Value, name: &str) -> &'r Value {
    let rows: Vec<&Value> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == name)
        .collect();
    assert_eq!(rows.len(), 1, "{report:#}");
    rows[0]
}

fn coalescing_message(level: &str, from: (&str, &str, &str), to: (&str, &str, &str)) -> String {
    coalescing_message_for("h2", level, from, to)
}

/// The warning (or error) line for a backend that selected `alpn`.
pub(crate) fn coalescing_message_for(
    alpn: &str,
    level: &str,
    from: (&str, &str, &str),
    to: (&str, &str, &str),
) -> String {
    let (route, backend, name) = from;
    let (other_route, other_backend, covered) = to;
    format!(
        "{level}: coalescing risk on listener edge: the certificate backend {backend} presents \
         for {name} (route {route}) also covers {covered} of route {other_route} (backend \
         {other_backend}), and backend {backend} selects {alpn}: a browser may reuse its connection \
         to {name} for {covered}, and the relay, which routes by the hello alone, never sees \
         that name, so those requests reach backend {backend}, not {other_backend}. Fixes: \
         distinct certificates per backend; backend {backend} answering 421 Misdirected Request \
         for hosts it does not serve; or an ORIGIN frame (RFC 8336) from backend {backend} that \
         leaves {covered} out."
    )
}

/// What a report shows when backends one (at `one`) and two (at `two`)
/// both present the CA's `*.example.test` certificate, learnt over
/// `transport` with `alpn` selected: every field of each row, and a
/// coalescing warning each way.
fn assert_shared_wildcard(
    report: &Value,
    (one, two): (SocketAddr, SocketAddr),
    (transport, alpn): (&str, &str),
) {
    for (name, backend, address) in [(A, "one", one), (B, "two", two)] {
        let row = row(report, name);
        assert_eq!(row["transport"], transport, "{row:#}");
        assert_eq!(row["backend"], backend);
        assert_eq!(row["address"], address.to_string());
        assert_eq!(row["status"], "ok", "{row:#}");
        assert_eq!(row["covers"], true);
        assert_eq!(row["verified"], "ok");
        assert_eq!(row["alpn"], alpn);
        assert_eq!(row["tls_version"], "TLSv1_3");
        assert_eq!(row["certificate"]["issuer"], ISSUER);
        assert_eq!(
            row["certificate"]["names"],
            serde_json::json!(["*.example.test"])
        );
        assert!(row["days_left"].as_i64().unwrap() > 14, "{row:#}");
    }
    let messages: Vec<&str> = report["coalescing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["message"].as_str().unwrap())
        .collect();
    let warning = |from, to| coalescing_message_for(alpn, "warning", from, to);
    assert_eq!(
        messages,
        [
            warning(("route-a", "one", A), ("route-b", "two", B)),
            warning(("route-b", "two", B), ("route-a", "one", A)),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_wildcard_certificate_on_two_backends_is_a_coalescing_warning() {
    let ca = Ca::new();
    let wildcard = ca.server(&["*.example.test"]);
    let one = backend(wildcard.clone(), None).await;
    let two = backend(wildcard, None).await;

    let (code, report, stderr) = certs("certs-shared", &config(one, two, "", ""), &ca.pem()).await;
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert_shared_wildcard(&report, (one, two), ("tcp", "h2"));
    let first = &report["coalescing"][0];
    assert_eq!(first["level"], "warning");
    assert_eq!(first["other_backend"], "two");
    assert_eq!(first["covered_name"], B);
    assert_eq!(first["covered_names"], 1);

    // The same under `coalescing_risk = "error"`.
    let (code, report, _) = certs(
        "certs-shared-error",
        &config(one, two, "coalescing_risk = \"error\"", ""),
        &ca.pem(),
    )
    .await;
    assert_eq!(code, Some(2), "{report:#}");
    assert_eq!(
        report["coalescing"][0]["message"],
        coalescing_message("error", ("route-a", "one", A), ("route-b", "two", B))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_per_backend_is_clean() {
    let ca = Ca::new();
    let one = backend(ca.server(&[A]), None).await;
    let two = backend(ca.server(&[B]), None).await;
    let (code, report, stderr) =
        certs("certs-distinct", &config(one, two, "", ""), &ca.pem()).await;
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    assert_eq!(report["coalescing"], serde_json::json!([]));
    assert_eq!(
        row(&report, A)["certificate"]["names"],
        serde_json::json!([A])
    );
    assert_eq!(
        row(&report, B)["certificate"]["names"],
        serde_json::json!([B])
    );
    assert_eq!(row(&report, B)["covers"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_from_another_ca_is_an_error() {
    let ca = Ca::new();
    let stranger = Ca::named("another CA");
    let one = backend(stranger.server(&["other.test"]), None).await;
    let two = backend(ca.server(&[B]), None).await;
    let (code, report, _) = certs("certs-wrong", &config(one, two, "", ""), &ca.pem()).await;
    assert_eq!(code, Some(2), "{report:#}");
    let wrong = row(&report, A);
    assert_eq!(wrong["status"], "error");
    assert_eq!(wrong["covers"], false);
    assert_eq!(wrong["verified"], "invalid peer certificate: UnknownIssuer");
    assert_eq!(row(&report, B)["status"], "ok");
    assert_eq!(report["coalescing"], serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_backend_gets_the_local_header_and_a_refusing_address_is_an_error() {
    let ca = Ca::new();
    let (commands, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let one = backend(ca.server(&[A]), Some(commands)).await;
    // Bound, then dropped: nothing listens there.
    let refusing = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let (code, report, _) = certs(
        "certs-proxy",
        &config(one, refusing, "", "proxy_protocol = \"v2\""),
        &ca.pem(),
    )
    .await;
    assert_eq!(code, Some(2), "{report:#}");
    assert_eq!(row(&report, A)["status"], "ok", "{report:#}");
    assert_eq!(seen.recv().await, Some(0x20), "a v2 LOCAL header");
    let refused = row(&report, B);
    assert_eq!(refused["status"], "error");
    assert_eq!(refused["certificate"], Value::Null);
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .starts_with("connect failed: Connection refused"),
        "{refused:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_quic_one_wildcard_certificate_on_two_backends_is_an_h3_coalescing_warning() {
    let ca = Ca::new();
    let wildcard = ca.server(&["*.example.test"]);
    let (_one, one) = quic_backend(wildcard.clone(), &[b"h3"]);
    let (_two, two) = quic_backend(wildcard, &[b"h3"]);
    let config = config_on(QUIC_LISTENER, one, two, "", "");

    let (code, report, stderr) = certs("certs-quic-shared", &config, &ca.pem()).await;
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    assert_shared_wildcard(&report, (one, two), ("quic", "h3"));
    assert_eq!(report["coalescing"][0]["alpn"], "h3");
    assert_eq!(report["not_checked"], serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_quic_a_server_without_h3_is_an_error_and_a_proxied_backend_is_not_checked() {
    let ca = Ca::new();
    // Backend one speaks another protocol over QUIC; backend two is sent
    // PROXY v2 headers over UDP by the relay, which it reads.
    let (_one, one) = quic_backend(ca.server(&[A]), &[b"hq-interop"]);
    let (two_endpoint, two) = quic_backend(ca.server(&[B]), &[b"h3"]);
    let config = config_on(QUIC_LISTENER, one, two, "", "").replace(
        &format!("addresses = [\"{two}\"]"),
        &format!(
            "addresses = [\"{two}\"]\nproxy_protocol = \"v2\"\nquic_reads_proxy_protocol = true"
        ),
    );
    let (code, report, stderr) = certs("certs-quic-refused", &config, &ca.pem()).await;
    assert_eq!(code, Some(2), "{report:#}\n{stderr}");
    let refused = row(&report, A);
    assert_eq!(refused["status"], "error", "{refused:#}");
    assert_eq!(refused["certificate"], Value::Null);
    // The server's no_application_protocol alert (120), as quinn words it.
    assert_eq!(
        refused["error"],
        "QUIC handshake failed: aborted by peer: the cryptographic handshake failed: error \
         120: peer doesn't support any known protocol",
        "{refused:#}"
    );
    assert_eq!(report["checks"].as_array().unwrap().len(), 1, "{report:#}");
    assert_eq!(
        report["not_checked"],
        serde_json::json!([{
            "listener": "edge",
            "route": "route-b",
            "backend": "two",
            "reason": "quic: the relay sends this backend a PROXY v2 header over UDP \
                       (proxy_protocol = \"v2\"), which a QUIC handshake here does not send",
        }])
    );
    // Nothing was sent to it: no handshake, not even a refused Initial.
    let stats = two_endpoint.stats();
    let seen = stats.accepted_handshakes + stats.refused_handshakes + stats.ignored_handshakes;
    assert_eq!(seen, 0);
}

/// A cluster backend is checked per name where a connection for that name
/// goes now: `a` to the node its lookup answers (reached with the hop
/// PROXY header, LOCAL here), `b`, answered "this node", to the
/// `local_backend`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_backend_is_checked_where_its_lookup_sends_each_name() {
    let ca = Ca::new();
    let (commands, mut sent) = tokio::sync::mpsc::unbounded_channel();
    let node = backend(ca.server(&[A]), Some(commands)).await;
    let own = backend(ca.server(&[B]), None).await;
    let own_was = own;
    let cp = common::control_plane::ControlPlane::start().await;
    cp.set(A, common::control_plane::Reply::endpoints(&[node]));
    cp.set(B, common::control_plane::Reply::endpoints::<String>(&[]));
    let config = format!(
        r#"
[[listener]]
name = "edge"
listen = ["127.0.0.1:0"]

[[route]]
name = "sites"
sni = ["{A}", "{B}"]
backend = "cluster"

[backend.cluster.cluster]
lookup_url = "{url}"
allowed_targets = ["127.0.0.0/8"]
hop_proxy_protocol = "v2"
local_backend = "own"

[backend.own]
addresses = ["{own}"]
"#,
        url = cp.url(),
    );
    let (code, report, stderr) = certs("certs-cluster", &config, &ca.pem()).await;
    assert_eq!(code, Some(0), "{report:#}\n{stderr}");
    assert_eq!(report["not_checked"], serde_json::json!([]), "{report:#}");
    for (name, address) in [(A, node), (B, own)] {
        let row = row(&report, name);
        assert_eq!(row["backend"], "cluster", "{report:#}");
        assert_eq!(row["address"], address.to_string(), "{report:#}");
        assert_eq!(row["covers"], true, "{report:#}");
        assert_eq!(row["verified"], "ok", "{report:#}");
    }
    // The node was sent the hop header first: a LOCAL command (0x20).
    assert_eq!(sent.recv().await, Some(0x20));
    assert_eq!((cp.requests(A), cp.requests(B)), (1, 1));

    // One wildcard certificate on the node and on the local backend: the
    // lookup sends a and b to different places behind one backend, which
    // a browser's reused connection would not follow.
    let (commands, _sent) = tokio::sync::mpsc::unbounded_channel();
    let wildcard = ca.server(&["*.example.test"]);
    let node = backend(wildcard.clone(), Some(commands)).await;
    let own = backend(wildcard, None).await;
    cp.set(A, common::control_plane::Reply::endpoints(&[node]));
    let config = config.replace(&own_was.to_string(), &own.to_string());
    let (code, report, stderr) = certs("certs-cluster-shared", &config, &ca.pem()).await;
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    let risks = report["coalescing"].as_array().unwrap();
    assert_eq!(risks.len(), 2, "{report:#}");
    let first = &risks[0];
    assert_eq!(first["backend"], format!("cluster at {node}"));
    assert_eq!(first["other_backend"], format!("cluster at {own}"));
    assert_eq!(first["covered_name"], B);
    assert_eq!(
        first["message"],
        coalescing_message_for(
            "h2",
            "warning",
            ("sites", &format!("cluster at {node}"), A),
            ("sites", &format!("cluster at {own}"), B),
        )
    );
}
