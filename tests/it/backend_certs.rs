//! `snirelay certs` against real TLS backends on loopback, with
//! certificates made here: what each backend presents for each name
//! (subject names, issuer, coverage, verification, ALPN), the coalescing
//! warning when one `*.example.test` certificate serves names routed to
//! two backends, the same as an error under `coalescing_risk = "error"`,
//! a clean report once each backend has its own certificate, a backend
//! that speaks PROXY, and an address that refuses.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::*;
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

/// A configuration routing a.example.test to backend one and
/// b.example.test to backend two; `global` goes into `[global]`, `one`
/// into `[backend.one]`.
pub(crate) fn config(one: SocketAddr, two: SocketAddr, global: &str, one_extra: &str) -> String {
    format!(
        r#"
[global]
{global}

[[listener]]
name = "edge"
listen = ["127.0.0.1:0"]

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
    let (route, backend, name) = from;
    let (other_route, other_backend, covered) = to;
    format!(
        "{level}: coalescing risk on listener edge: the certificate backend {backend} presents \
         for {name} (route {route}) also covers {covered} of route {other_route} (backend \
         {other_backend}), and backend {backend} selects h2: a browser may reuse its connection \
         to {name} for {covered}, and the relay, which routes by the hello alone, never sees \
         that name, so those requests reach backend {backend}, not {other_backend}. Fixes: \
         distinct certificates per backend; backend {backend} answering 421 Misdirected Request \
         for hosts it does not serve; or an ORIGIN frame (RFC 8336) from backend {backend} that \
         leaves {covered} out."
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_wildcard_certificate_on_two_backends_is_a_coalescing_warning() {
    let ca = Ca::new();
    let wildcard = ca.server(&["*.example.test"]);
    let one = backend(wildcard.clone(), None).await;
    let two = backend(wildcard, None).await;

    let (code, report, stderr) = certs("certs-shared", &config(one, two, "", ""), &ca.pem()).await;
    assert_eq!(code, Some(1), "{report:#}\n{stderr}");
    for (name, backend, address) in [(A, "one", one), (B, "two", two)] {
        let row = row(&report, name);
        assert_eq!(row["backend"], backend);
        assert_eq!(row["address"], address.to_string());
        assert_eq!(row["status"], "ok");
        assert_eq!(row["covers"], true);
        assert_eq!(row["verified"], "ok");
        assert_eq!(row["alpn"], "h2");
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
    assert_eq!(
        messages,
        [
            coalescing_message("warning", ("route-a", "one", A), ("route-b", "two", B)),
            coalescing_message("warning", ("route-b", "two", B), ("route-a", "one", A)),
        ]
    );
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
