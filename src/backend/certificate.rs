//! What a backend presents as a TLS server, learned as a TLS client of
//! it: the end-entity certificate's subject names, issuer and not-after
//! ([`CertificateSummary`]), whether it covers a name ([`san_covers`],
//! RFC 6125 §6.4.3), whether its chain verifies against trusted roots, and
//! the ALPN protocol the backend selects, and the name sent for a route's
//! pattern ([`name_to_send`]). `snirelay certs` and the certificate watch
//! beside `kind = "tls"` health checks
//! ([`crate::backend::certificate_watch`]) read certificates through this
//! module.
//!
//! A certificate is learned with a complete handshake (TLS 1.3 encrypts
//! it): the handshake accepts any certificate ([`AcceptAnyCertificate`],
//! which still checks the handshake's signatures), and
//! [`CertificateClient::fetch`] verifies the chain afterwards, so a
//! certificate that does not verify is still reported rather than lost in
//! a failed handshake. Over TCP the caller hands in the connection
//! ([`CertificateClient::fetch_within`]); over QUIC the same client
//! configuration drives a quinn handshake from the caller's endpoint
//! ([`CertificateClient::fetch_quic_within`], offering [`H3_ALPN`]).
//! Session resumption is off: each handshake shows the chain the address
//! presents now, not one remembered from another address.
//!
//! Not here: choosing the addresses, the source a connection leaves from,
//! or what a PROXY header says (the callers'), and subject common names:
//! browsers match only the subject alternative names, so a certificate
//! without a DNS name covers nothing.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_rustls::TlsConnector;

use crate::wire::sni::PatternRef;

/// The label put below a `*.suffix` pattern to make a name to send.
pub(crate) const WILDCARD_PROBE_LABEL: &str = "snirelay-check";

/// The name a certificate check sends for a route's pattern: an exact name
/// as written, for `*.suffix` the name [`WILDCARD_PROBE_LABEL`] below it;
/// none for the default route (`*`).
pub(crate) fn name_to_send(pattern: PatternRef<'_>) -> Option<String> {
    match pattern {
        PatternRef::Exact(name) => Some(name.to_owned()),
        PatternRef::Below(suffix) => Some(format!("{WILDCARD_PROBE_LABEL}.{suffix}")),
        PatternRef::Any => None,
    }
}

/// The protocols a certificate fetch offers, as a browser does over TCP:
/// what the backend selects among them is what a browser gets through the
/// relay, which passes the handshake through untouched.
pub(crate) const BROWSER_ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The protocol a certificate fetch over QUIC offers, as a browser does to
/// a QUIC server: HTTP/3, the one protocol of a browser's QUIC connections.
pub(crate) const H3_ALPN: [&[u8]; 1] = [b"h3"];

/// The parts of an end-entity certificate a report needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CertificateSummary {
    /// The DNS names (and IP addresses) of the subject alternative names,
    /// as written, in order.
    pub names: Vec<String>,
    /// The issuer's distinguished name (`CN=..., O=...`).
    pub issuer: String,
    /// The end of validity, in Unix seconds.
    pub not_after: i64,
}

impl CertificateSummary {
    /// Reads a DER certificate.
    pub(crate) fn parse(der: &[u8]) -> Result<CertificateSummary, String> {
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| format!("unreadable certificate: {e}"))?;
        let mut names = Vec::new();
        let san = cert
            .subject_alternative_name()
            .map_err(|e| format!("unreadable subject alternative names: {e}"))?;
        for name in san.iter().flat_map(|ext| ext.value.general_names.iter()) {
            use x509_parser::extensions::GeneralName;
            match name {
                GeneralName::DNSName(dns) => names.push((*dns).to_owned()),
                GeneralName::IPAddress(bytes) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*bytes) {
                        names.push(std::net::IpAddr::from(v4).to_string());
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*bytes) {
                        names.push(std::net::IpAddr::from(v6).to_string());
                    }
                }
                _ => {}
            }
        }
        Ok(CertificateSummary {
            names,
            issuer: cert.issuer().to_string(),
            not_after: cert.validity().not_after.timestamp(),
        })
    }

    /// Whether one of the subject alternative names covers `name`.
    pub(crate) fn covers(&self, name: &str) -> bool {
        self.names.iter().any(|san| san_covers(san, name))
    }
}

/// Whether the subject alternative name `san` covers the host name `name`,
/// as RFC 6125 §6.4.3 and browsers match: ASCII case ignored, a trailing
/// dot ignored; a wildcard only as the whole left-most label, standing for
/// exactly one label (`*.a.b` covers `x.a.b`, not `a.b` nor `y.x.a.b`),
/// and only above at least two labels (`*.com` covers nothing).
pub(crate) fn san_covers(san: &str, name: &str) -> bool {
    let san = san.trim_end_matches('.');
    let name = name.trim_end_matches('.');
    match san.strip_prefix("*.") {
        None => !san.contains('*') && san.eq_ignore_ascii_case(name),
        Some(suffix) => {
            if suffix.contains('*') || !suffix.contains('.') {
                return false;
            }
            match name.split_once('.') {
                Some((label, rest)) => !label.is_empty() && rest.eq_ignore_ascii_case(suffix),
                None => false,
            }
        }
    }
}

/// What one completed handshake learned.
#[derive(Debug, Clone)]
pub(crate) struct Presented {
    /// The end-entity certificate.
    pub certificate: CertificateSummary,
    /// `Ok` when the chain verifies for the name against the trusted
    /// roots, otherwise rustls's reason; `None` for a client without roots
    /// ([`CertificateClient::without_roots`]).
    pub verified: Option<Result<(), String>>,
    /// The protocol the backend selected, if any.
    pub alpn: Option<String>,
    /// The TLS version negotiated (`TLSv1_3`).
    pub tls_version: String,
}

/// Why no certificate was learned.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    #[error("TLS handshake failed: {0}")]
    Handshake(std::io::Error),
    #[error("the backend sent no certificate")]
    NoCertificate,
    #[error("{0}")]
    Unreadable(String),
    #[error("sending the PROXY LOCAL header failed: {0}")]
    Announce(std::io::Error),
}

/// A TLS client that completes handshakes whatever the certificate, then
/// verifies it against its roots (if it has any).
#[derive(Debug, Clone)]
pub(crate) struct CertificateClient {
    config: Arc<ClientConfig>,
    verifier: Option<Arc<WebPkiServerVerifier>>,
}

impl CertificateClient {
    /// A client offering `alpn`, verifying against `roots` (which must not
    /// be empty).
    pub(crate) fn new(roots: RootCertStore, alpn: &[&[u8]]) -> Result<CertificateClient, String> {
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| e.to_string())?;
        let mut client = CertificateClient::without_roots(alpn)?;
        client.verifier = Some(verifier);
        Ok(client)
    }

    /// A client offering `alpn` that verifies nothing: it only reads what
    /// is presented.
    pub(crate) fn without_roots(alpn: &[&[u8]]) -> Result<CertificateClient, String> {
        let provider = provider();
        let mut config = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        // A resumed session presents no certificate: it would report the
        // one another address showed for the name.
        config.resumption = rustls::client::Resumption::disabled();
        Ok(CertificateClient {
            config: Arc::new(config),
            verifier: None,
        })
    }

    /// Sends `header` (a PROXY LOCAL header) if any, completes a handshake
    /// for `name` on `stream`, reads what the backend presented, verifies
    /// it and closes with a close_notify. No timeout: the caller bounds it.
    pub(crate) async fn fetch<S>(
        &self,
        mut stream: S,
        header: Option<&[u8]>,
        name: ServerName<'static>,
    ) -> Result<Presented, FetchError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        if let Some(header) = header {
            stream
                .write_all(header)
                .await
                .map_err(FetchError::Announce)?;
        }
        let mut tls = TlsConnector::from(self.config.clone())
            .connect(name.clone(), stream)
            .await
            .map_err(FetchError::Handshake)?;
        let (_, session) = tls.get_ref();
        let chain = session
            .peer_certificates()
            .filter(|c| !c.is_empty())
            .ok_or(FetchError::NoCertificate)?
            .to_vec();
        let alpn = session.alpn_protocol().map(alpn_name);
        let tls_version = session
            .protocol_version()
            .and_then(|v| v.as_str())
            .unwrap_or("unknown")
            .to_owned();
        // A polite close; what it does changes nothing learned.
        let _ = tls.shutdown().await;
        self.presented(&chain, &name, alpn, tls_version)
    }

    /// What a completed handshake showed: `chain` (end entity first,
    /// not empty) read and verified for `name`.
    fn presented(
        &self,
        chain: &[CertificateDer<'static>],
        name: &ServerName<'_>,
        alpn: Option<String>,
        tls_version: String,
    ) -> Result<Presented, FetchError> {
        Ok(Presented {
            certificate: CertificateSummary::parse(&chain[0]).map_err(FetchError::Unreadable)?,
            verified: self.verify(chain, name),
            alpn,
            tls_version,
        })
    }

    /// Connects (`connect`, from wherever the caller's connections leave),
    /// then [`fetch`](Self::fetch)es, all within `budget`; the failure as
    /// the reports word it.
    pub(crate) async fn fetch_within(
        &self,
        budget: std::time::Duration,
        connect: impl std::future::Future<Output = std::io::Result<tokio::net::TcpStream>>,
        header: Option<&[u8]>,
        name: ServerName<'static>,
    ) -> Result<Presented, String> {
        let attempt = async {
            let stream = connect.await.map_err(|e| format!("connect failed: {e}"))?;
            let _ = stream.set_nodelay(true);
            self.fetch(stream, header, name)
                .await
                .map_err(|e| e.to_string())
        };
        tokio::time::timeout(budget, attempt)
            .await
            .unwrap_or_else(|_| Err(format!("no completed handshake within {budget:?}")))
    }

    /// A complete QUIC handshake (QUIC v1, so TLS 1.3) with `address` for
    /// `name`, from `endpoint` ([`quic_endpoint_for`]), within `budget`:
    /// what the QUIC server presented and the protocol it selected of the
    /// client's (a QUIC server refuses a client whose protocols it does not
    /// serve, so a fetch offering [`H3_ALPN`] to a server without HTTP/3
    /// fails with the server's reason). The connection is closed at once,
    /// with no stream opened. The failure as the reports word it.
    pub(crate) async fn fetch_quic_within(
        &self,
        budget: std::time::Duration,
        endpoint: &quinn::Endpoint,
        address: std::net::SocketAddr,
        name: ServerName<'static>,
    ) -> Result<Presented, String> {
        use quinn::crypto::rustls::{HandshakeData, QuicClientConfig};
        let crypto = QuicClientConfig::try_from(self.config.clone())
            .map_err(|e| format!("QUIC client setup: {e}"))?;
        let config = quinn::ClientConfig::new(Arc::new(crypto));
        let attempt = async {
            let connection = endpoint
                .connect_with(config, address, &name.to_str())
                .map_err(|e| format!("QUIC connect failed: {e}"))?
                .await
                .map_err(|e| format!("QUIC handshake failed: {e}"))?;
            let chain = connection
                .peer_identity()
                .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
                .filter(|chain| !chain.is_empty());
            let alpn = connection
                .handshake_data()
                .and_then(|data| data.downcast::<HandshakeData>().ok())
                .and_then(|data| data.protocol)
                .map(|p| alpn_name(&p));
            connection.close(0u32.into(), b"");
            let chain = chain.ok_or_else(|| FetchError::NoCertificate.to_string())?;
            self.presented(&chain, &name, alpn, "TLSv1_3".to_owned())
                .map_err(|e| e.to_string())
        };
        tokio::time::timeout(budget, attempt)
            .await
            .unwrap_or_else(|_| Err(format!("no completed QUIC handshake within {budget:?}")))
    }

    /// Whether `chain` (end entity first) verifies for `name` now; `None`
    /// without roots.
    fn verify(
        &self,
        chain: &[CertificateDer<'static>],
        name: &ServerName<'_>,
    ) -> Option<Result<(), String>> {
        let verifier = self.verifier.as_ref()?;
        Some(
            verifier
                .verify_server_cert(&chain[0], &chain[1..], name, &[], UnixTime::now())
                .map(|_| ())
                .map_err(|e| e.to_string()),
        )
    }
}

/// A protocol name as a report prints it.
fn alpn_name(protocol: &[u8]) -> String {
    String::from_utf8_lossy(protocol).into_owned()
}

/// A QUIC client endpoint for certificate fetches toward `address`: a UDP
/// socket on the unspecified address of its family, port 0 (the host's
/// own address, as a TCP connect without `source` leaves from). One serves
/// any number of fetches at once.
pub(crate) fn quic_endpoint_for(address: std::net::SocketAddr) -> std::io::Result<quinn::Endpoint> {
    let any: std::net::IpAddr = match address {
        std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    quinn::Endpoint::client((any, 0).into())
}

/// The crypto provider of every TLS client snirelay runs (aws-lc-rs, as
/// the rest of the binary).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// A verifier that accepts any certificate but still checks the
/// handshake's signatures, so the handshake itself is real: for a client
/// that wants to see a certificate it may not trust (`probe --insecure`,
/// a certificate fetch, a TLS health check).
#[derive(Debug)]
pub(crate) struct AcceptAnyCertificate(pub(crate) Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::certificate::*;

    #[test]
    fn a_wildcard_stands_for_exactly_one_label() {
        assert!(san_covers("*.example.test", "a.example.test"));
        assert!(san_covers("*.Example.TEST", "A.example.test."));
        assert!(!san_covers("*.example.test", "example.test"));
        assert!(!san_covers("*.example.test", "b.a.example.test"));
        assert!(!san_covers("*.test", "example.test"));
        assert!(!san_covers("a*.example.test", "ab.example.test"));
        assert!(!san_covers("*.*.example.test", "a.b.example.test"));
    }

    #[test]
    fn an_exact_name_covers_only_itself() {
        assert!(san_covers("a.example.test", "A.Example.Test"));
        assert!(!san_covers("a.example.test", "b.example.test"));
        assert!(!san_covers("a.example.test", "x.a.example.test"));
    }
}
