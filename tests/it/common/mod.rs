//! Test harness shared by the integration tests: the relay as a real child
//! process on port 0, certificates made at test time, TLS and raw backends
//! on loopback, and clients.
//!
//! Readiness is never slept for: the relay's JSON log is read line by line,
//! and tests wait (with a deadline) for the `ready` line or for a
//! connection's `connection closed` line.
//!
//! The one helper folder of the integration tests (`tests/it`): this module
//! and its submodules, and two fragments that are not modules but are
//! `include!`d where needed, by tests, examples and benches alike:
//! `man_pages.rs` (the man pages from the CLI) and `quic_capture.rs` (the
//! captured QUIC first flights). The benches `hello_cpu` and `status_page`
//! use this module by path.

#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// How long any wait in a test may take before the test fails.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------- the relay

/// A running `snirelay` child process.
pub(crate) struct Relay {
    child: Child,
    dir: PathBuf,
    pub config_path: PathBuf,
    /// Bound addresses by listener name, in the order they were logged.
    pub listening: HashMap<String, Vec<SocketAddr>>,
    log: Arc<LogBook>,
}

/// Every JSON line the relay has written to stderr so far.
#[derive(Default)]
pub(crate) struct LogBook {
    lines: Mutex<Vec<Value>>,
    changed: Notify,
}

impl Relay {
    /// Starts the relay on `config` (TOML text) and waits for `ready`.
    pub(crate) async fn start(config: &str) -> Relay {
        Relay::start_with_args(config, &[]).await
    }

    pub(crate) async fn start_with_args(config: &str, args: &[&str]) -> Relay {
        Relay::launch(config, |path| {
            let mut command = Relay::command(path);
            command.args(args);
            command
        })
        .await
    }

    /// The first address of the first listener.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr_of("tls")
    }

    pub(crate) fn addr_of(&self, listener: &str) -> SocketAddr {
        self.listening[listener][0]
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn log_lines(&self) -> Vec<Value> {
        self.log.lines.lock().unwrap().clone()
    }

    /// Waits until a log line satisfies `pred`, and returns it.
    pub(crate) async fn wait_log(&self, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_lines(|lines| lines.iter().find(|l| pred(l)).cloned())
            .await
    }

    /// The admin listener's address, from its `admin listening` line.
    pub(crate) async fn admin_addr(&self) -> SocketAddr {
        self.wait_log(|l| l["message"] == "admin listening").await["addr"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// Waits until at least `count` log lines satisfy `pred`.
    pub(crate) async fn wait_count(&self, count: usize, pred: impl Fn(&Value) -> bool) {
        self.wait_lines(|lines| (lines.iter().filter(|l| pred(l)).count() >= count).then_some(()))
            .await
    }

    /// Waits until `look` finds something in the log so far. `look` runs
    /// with the log locked, so it must not call back into the relay.
    pub(crate) async fn wait_lines<T>(&self, look: impl Fn(&[Value]) -> Option<T>) -> T {
        let book = self.log.clone();
        let found = tokio::time::timeout(WAIT, async {
            loop {
                let changed = book.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if let Some(found) = look(&book.lines.lock().unwrap()) {
                    return found;
                }
                changed.await;
            }
        })
        .await;
        match found {
            Ok(found) => found,
            Err(_) => panic!(
                "log condition not met within {WAIT:?}; log: {:#?}",
                self.log_lines()
            ),
        }
    }

    /// Waits for the `connection closed` line of the connection from `peer`.
    pub(crate) async fn closed_line(&self, peer: SocketAddr) -> Value {
        let peer = peer.to_string();
        self.wait_log(|l| l["message"] == "connection closed" && l["client.peer"] == peer.as_str())
            .await
    }

    /// Lines about closed connections.
    pub(crate) fn closed_lines(&self) -> Vec<Value> {
        self.log_lines()
            .into_iter()
            .filter(|l| l["message"] == "connection closed")
            .collect()
    }

    /// Open descriptors of the relay process.
    pub(crate) fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .unwrap()
            .count()
    }

    /// Sends a signal to the relay.
    pub(crate) fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args(["-s", signal, &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit and returns its exit code.
    pub(crate) async fn wait_exit(&mut self) -> Option<i32> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(tokio::time::Instant::now() < deadline, "relay did not exit");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One heavy or timing-bound test at a time, across every area of the
/// suite: the latency or spread each measures should be the relay's, not
/// its neighbours'. Taken by the thousand held connections of `admin`, the
/// thousand slow control clients of `admin_control`, the two tests that
/// drive a browser (`quic_browser`, `admin_status`: a loaded Chromium took
/// 23 s for a fetch bounded at 10 s) and the reload whose closes are timed
/// over `drain_timeout` (`reload`), and the Initial flood whose one real
/// connection must finish within its hello timeout (`quic_quinn`: seen
/// timing out beside other areas' tests at load 8), which in one test
/// binary could otherwise run side by side.
pub(crate) static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Raises this process's soft descriptor limit to its hard limit, once,
/// before the first relay starts. Every area's tests share this process
/// and hold their client sockets in it at once (a thousand each for the
/// heaviest), so the room one test makes for itself (`admin_control` raises
/// the limit the same way) is made for all from the start, whatever order
/// the tests run in. The relay raises its own limit at start-up either way.
fn raise_descriptor_limit() {
    static RAISED: std::sync::Once = std::sync::Once::new();
    RAISED.call_once(|| {
        snirelay::sockopt::raise_nofile_limit().expect("RLIMIT_NOFILE");
    });
}

/// A fresh directory for one test's files.
pub(crate) fn scratch_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "snirelay-test-{tag}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A one-listener config routing `patterns` to `backend`.
pub(crate) fn simple_config(
    patterns: &[&str],
    backend: SocketAddr,
    listener_extra: &str,
) -> String {
    one_route_config(
        patterns,
        listener_extra,
        &format!("addresses = [\"{backend}\"]\nconnect_timeout = \"2s\""),
    )
}

/// A one-listener config (named `tls`, on a free loopback port, with
/// `listener_extra` in its table) routing `patterns` to backend `b`, whose
/// table is `backend_body`.
pub(crate) fn one_route_config(
    patterns: &[&str],
    listener_extra: &str,
    backend_body: &str,
) -> String {
    let sni = patterns
        .iter()
        .map(|p| format!("{p:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
{listener_extra}

[[route]]
sni = [{sni}]
backend = "b"

[backend.b]
{backend_body}
"#
    )
}

// ------------------------------------------------------------ certificates

/// A CA, a server certificate for some names, and a client certificate.
pub(crate) struct Pki {
    pub ca: CertificateDer<'static>,
    pub server_chain: Vec<CertificateDer<'static>>,
    server_key: Vec<u8>,
    pub client_chain: Vec<CertificateDer<'static>>,
    client_key: Vec<u8>,
}

impl Pki {
    pub(crate) fn new(server_names: &[&str]) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "snirelay test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);

        let names: Vec<String> = server_names.iter().map(|s| s.to_string()).collect();
        let server_key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(names)
            .unwrap()
            .signed_by(&server_key, &issuer)
            .unwrap();

        let client_key = KeyPair::generate().unwrap();
        let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        client_params
            .distinguished_name
            .push(DnType::CommonName, "agent-42");
        let client = client_params.signed_by(&client_key, &issuer).unwrap();

        Pki {
            ca: ca.der().clone(),
            server_chain: vec![server.der().clone()],
            server_key: server_key.serialize_der(),
            client_chain: vec![client.der().clone()],
            client_key: client_key.serialize_der(),
        }
    }

    fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.clone()).unwrap();
        roots
    }

    /// A server that requires a client certificate signed by the CA.
    pub(crate) fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(self.roots()))
            .build()
            .unwrap();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.clone()));
        let config = rustls::ServerConfig::builder()
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.server_chain.clone(), key)
            .unwrap();
        Arc::new(config)
    }

    /// A client that trusts the CA and presents the client certificate.
    pub(crate) fn client_config(&self) -> rustls::ClientConfig {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.client_key.clone()));
        rustls::ClientConfig::builder()
            .with_root_certificates(self.roots())
            .with_client_auth_cert(self.client_chain.clone(), key)
            .unwrap()
    }

    /// [`Pki::client_config`] on `provider` (TLS 1.3 only, as QUIC needs),
    /// for a test that picks the key exchange groups.
    pub(crate) fn client_config_with_provider(
        &self,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> rustls::ClientConfig {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.client_key.clone()));
        rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(self.roots())
            .with_client_auth_cert(self.client_chain.clone(), key)
            .unwrap()
    }

    /// As [`Pki::client_config_with_provider`], with ECH as `ech` says
    /// (TLS 1.3 only, as ECH is).
    pub(crate) fn client_config_with_ech(
        &self,
        provider: Arc<rustls::crypto::CryptoProvider>,
        ech: rustls::client::EchMode,
    ) -> rustls::ClientConfig {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.client_key.clone()));
        rustls::ClientConfig::builder_with_provider(provider)
            .with_ech(ech)
            .unwrap()
            .with_root_certificates(self.roots())
            .with_client_auth_cert(self.client_chain.clone(), key)
            .unwrap()
    }
}

// --------------------------------------------------------------- backends

type Handler<S> = Arc<dyn Fn(S) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A TLS backend (requires client certificates) on 127.0.0.1:0 that runs
/// `handler` on every accepted, handshaken connection.
pub(crate) async fn tls_backend<F, Fut>(pki: &Pki, handler: F) -> SocketAddr
where
    F: Fn(tokio_rustls::server::TlsStream<TcpStream>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    tls_backend_on(listener, pki, handler)
}

/// [`tls_backend`] on a listener the caller bound (another address).
pub(crate) fn tls_backend_on<F, Fut>(listener: TcpListener, pki: &Pki, handler: F) -> SocketAddr
where
    F: Fn(tokio_rustls::server::TlsStream<TcpStream>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server_config());
    let handler: Handler<_> = Arc::new(move |s| Box::pin(handler(s)));
    raw_backend_on(listener, move |tcp| {
        let acceptor = acceptor.clone();
        let handler = handler.clone();
        async move {
            if let Ok(tls) = acceptor.accept(tcp).await {
                handler(tls).await;
            }
        }
    })
}

/// A plain TCP backend on 127.0.0.1:0 that runs `handler` per connection.
pub(crate) async fn raw_backend<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    raw_backend_on(listener, handler)
}

/// [`raw_backend`] on a listener the caller bound (another address).
pub(crate) fn raw_backend_on<F, Fut>(listener: TcpListener, handler: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let addr = listener.local_addr().unwrap();
    let handler = Arc::new(handler);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handler = handler.clone();
            tokio::spawn(async move { handler(stream).await });
        }
    });
    addr
}

/// An address on which nothing listens (connects are refused), for the
/// rest of the run: its port stays bound, never listening, by a socket
/// kept here, so no other test's listener can take it and connect(2)
/// never picks it as a source port. A port found free and released could
/// be taken (a health check once found a listener there).
pub(crate) fn closed_port() -> SocketAddr {
    static HELD: std::sync::Mutex<Vec<socket2::Socket>> = std::sync::Mutex::new(Vec::new());
    let (addr, socket) = closed_port_held();
    HELD.lock().unwrap().push(socket);
    addr
}

/// [`closed_port`] for a test that opens the port later: the socket that
/// holds it, to drop right before binding a listener there.
pub(crate) fn closed_port_held() -> (SocketAddr, socket2::Socket) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    (addr, socket)
}

// ----------------------------------------------------------------- clients

/// Connects a rustls client through `relay_addr` with SNI `name`.
pub(crate) async fn tls_connect<S: AsyncRead + AsyncWrite + Unpin>(
    config: rustls::ClientConfig,
    name: &str,
    stream: S,
) -> std::io::Result<tokio_rustls::client::TlsStream<S>> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    connector
        .connect(ServerName::try_from(name.to_owned()).unwrap(), stream)
        .await
}

/// A real ClientHello captured from a client, by file name in tests/data.
pub(crate) fn capture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The ClientHello rustls sends for `name`, made in memory.
pub(crate) fn hello_for(name: &str) -> Vec<u8> {
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

/// Closes `stream` with a reset (SO_LINGER 0), as a peer that aborts does.
pub(crate) fn reset(stream: TcpStream) {
    socket2::SockRef::from(&stream)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(stream);
}

/// A stream wrapper that writes at most `max` bytes per write call and
/// flushes each, so every TLS byte leaves in its own small segment.
pub(crate) struct Trickle<S> {
    pub inner: S,
    pub max: usize,
}

impl<S: AsyncRead + Unpin> AsyncRead for Trickle<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Trickle<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let max = self.max.min(buf.len());
        Pin::new(&mut self.inner).poll_write(cx, &buf[..max])
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

// ------------------------------------------------- third-party peer processes

/// A third-party program (HAProxy, nginx) run as a child for interop tests,
/// its stdout and stderr collected line by line.
pub(crate) struct Tool {
    child: Child,
    pub dir: PathBuf,
    log: Arc<LogBook>,
}

impl Tool {
    /// Finds `program` on PATH or in /usr/sbin and starts it in `dir`.
    /// Panics (never skips) when the program is not installed.
    pub(crate) fn spawn(program: &str, args: &[&str], dir: PathBuf, package: &str) -> Tool {
        let path = ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]
            .iter()
            .map(|d| PathBuf::from(d).join(program))
            .find(|p| p.exists())
            .unwrap_or_else(|| {
                panic!("{program} is not installed: this test needs it (apt-get install {package})")
            });
        let mut child = Command::new(&path)
            .args(args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", path.display()));
        let log = Arc::new(LogBook::default());
        for pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let book = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    book.lines.lock().unwrap().push(Value::String(line));
                    book.changed.notify_waiters();
                }
            });
        }
        Tool { child, dir, log }
    }

    /// The program's process id (the program's own when it was started
    /// through `ip netns exec`, which execs it).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.log
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    }

    /// Waits until an output line satisfies `pred`, and returns it; fails
    /// the test (with the output so far) if the program exits first or
    /// after [`WAIT`].
    pub(crate) async fn wait_line(&mut self, pred: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let changed = self.log.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(line) = self.lines().into_iter().find(|l| pred(l)) {
                return line;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "exited ({status}) before the expected line; output: {:#?}",
                    self.lines()
                );
            }
            // Bounded so a process exit (which notifies nothing) is noticed.
            let slice = tokio::time::Instant::now() + Duration::from_millis(200);
            if tokio::time::timeout_at(slice.min(deadline), changed.as_mut())
                .await
                .is_err()
                && tokio::time::Instant::now() >= deadline
            {
                panic!(
                    "no matching line within {WAIT:?}; output: {:#?}",
                    self.lines()
                );
            }
        }
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port the kernel just chose (bound on port 0, then released),
/// for programs that must be told their port in a config file.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A loopback UDP port the kernel just chose (bound on port 0, then
/// released), for programs that must be told their port.
pub(crate) fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A loopback port free for both TCP and UDP just now (the kernel's choice
/// for TCP, kept if UDP can bind it too; bounded tries), for servers such
/// as Caddy that serve HTTP/1-2 and HTTP/3 on one port.
pub(crate) fn free_tcp_udp_port() -> u16 {
    for _ in 0..100 {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no loopback port free for both TCP and UDP in 100 tries");
}

/// Waits (bounded by [`WAIT`]) until `ready()` holds, for programs that
/// log no readiness line: checks every 20 ms, and fails at once, with the
/// program's output, if it exits first. `what` ends the messages
/// ("bound UDP port 4433").
async fn wait_tool_ready<F, Fut>(tool: &mut Tool, what: &str, mut ready: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if ready().await {
            return;
        }
        if let Some(status) = tool.child.try_wait().unwrap() {
            panic!(
                "exited ({status}) before it {what}; output: {:#?}",
                tool.lines()
            );
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing {what} within {WAIT:?}; output: {:#?}",
            tool.lines()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether a socket in one of the /proc/net `tables` is bound to local
/// `port`, in `state` when given (`0A`: a TCP socket listening). Field 2 of
/// each row is `local_address` (`HEXIP:HEXPORT`), field 4 `st`.
fn proc_net_has(tables: &[&str], port: u16, state: Option<&str>) -> bool {
    let local = format!(":{port:04X}");
    tables.iter().any(|path| {
        let table = std::fs::read_to_string(path).unwrap_or_default();
        table.lines().skip(1).any(|row| {
            let fields: Vec<&str> = row.split_whitespace().collect();
            fields.len() > 3
                && fields[1].ends_with(&local)
                && state.is_none_or(|state| fields[3] == state)
        })
    })
}

/// Waits (bounded) until some socket is bound to UDP `port` on loopback
/// (read from /proc/net/udp), for programs that log no readiness line.
pub(crate) async fn wait_udp_bound(port: u16, tool: &mut Tool) {
    let what = format!("bound UDP port {port}");
    wait_tool_ready(tool, &what, || {
        std::future::ready(proc_net_has(&["/proc/net/udp"], port, None))
    })
    .await;
}

/// Waits (bounded) until something accepts connections on `addr`, for
/// programs that log no readiness line.
pub(crate) async fn wait_accepting(addr: SocketAddr, tool: &mut Tool) {
    let what = format!("accepted on {addr}");
    wait_tool_ready(tool, &what, || async move {
        TcpStream::connect(addr).await.is_ok()
    })
    .await;
}

/// Waits (bounded) until a socket listens on TCP `port` (read from
/// /proc/net/tcp and tcp6), without connecting: for a tool that would route
/// a probe connection on to a backend the test watches.
pub(crate) async fn wait_listening(port: u16, tool: &mut Tool) {
    let what = format!("listened on TCP port {port}");
    wait_tool_ready(tool, &what, || {
        std::future::ready(proc_net_has(
            &["/proc/net/tcp", "/proc/net/tcp6"],
            port,
            Some("0A"),
        ))
    })
    .await;
}

/// Headless chromium as a client (`browser::chromium`), and the key pin
/// that makes it trust a [`Pki`] server certificate.
pub(crate) mod browser;

// ------------------------------------------ reload, stop, upgrade (issue 5)

impl Relay {
    /// Starts the relay with full control over its command: `build` gets the
    /// config path and returns the command to spawn (it must run snirelay
    /// itself, or `exec` it, so that [`Relay::pid`] is the relay's). Waits
    /// for `ready` like [`Relay::start`].
    pub(crate) async fn launch(
        config: &str,
        build: impl FnOnce(&std::path::Path) -> Command,
    ) -> Relay {
        raise_descriptor_limit();
        let dir = scratch_dir("relay");
        let config_path = dir.join("snirelay.toml");
        std::fs::write(&config_path, config).unwrap();
        let mut command = build(&config_path);
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start snirelay");
        let log = Arc::new(LogBook::default());
        let stderr = child.stderr.take().unwrap();
        let book = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({ "raw": line }));
                book.lines.lock().unwrap().push(value);
                book.changed.notify_waiters();
            }
            book.lines
                .lock()
                .unwrap()
                .push(serde_json::json!({ "message": "<stderr closed>" }));
            book.changed.notify_waiters();
        });
        let mut relay = Relay {
            child,
            dir,
            config_path,
            listening: HashMap::new(),
            log,
        };
        relay
            .wait_log(|l| l["message"] == "ready" || l["message"] == "<stderr closed>")
            .await;
        for line in relay.log_lines() {
            if line["message"] == "listening" {
                let name = line["listener"].as_str().unwrap().to_owned();
                let addr = line["addr"].as_str().unwrap().parse().unwrap();
                relay.listening.entry(name).or_default().push(addr);
            }
        }
        assert!(
            !relay.listening.is_empty(),
            "relay did not start: {:#?}",
            relay.log_lines()
        );
        relay
    }

    /// The relay binary with `run --config PATH` and JSON debug logs.
    pub(crate) fn command(config_path: &std::path::Path) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_snirelay"));
        command.arg("run").arg("--config").arg(config_path).args([
            "--log-format",
            "json",
            "--log-level",
            "debug",
        ]);
        command
    }

    /// Waits until at least `n` log lines satisfy `pred`; returns the n-th.
    pub(crate) async fn wait_nth(&self, n: usize, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_lines(|lines| lines.iter().filter(|l| pred(l)).nth(n - 1).cloned())
            .await
    }

    /// Replaces the config file, sends SIGHUP and waits for the reload's
    /// outcome line (the `n`-th reload of this relay); returns it.
    pub(crate) async fn reload(&self, config: &str, n: usize) -> Value {
        std::fs::write(&self.config_path, config).unwrap();
        self.signal("HUP");
        self.wait_nth(n, |l| {
            l["message"] == "reload applied"
                || l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("reload rejected"))
        })
        .await
    }

    /// Whether the process has exited (without waiting).
    pub(crate) fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }
}

/// A listener's `[listener.limits]` with the per-source connection cap off,
/// for tests that play a load or many clients from one loopback address.
pub(crate) const NO_SOURCE_LIMIT: &str = "[listener.limits]\nconnections_per_source = false\n";

/// A TLS backend that echoes everything it reads (mutual TLS).
pub(crate) async fn tls_echo_backend(pki: &Pki) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    serve_tls_echo(pki, Arc::new(listener));
    addr
}

/// Serves mutual-TLS echo on `listener` (bound by the caller, e.g. on a
/// chosen address or port) until the returned task is aborted.
pub(crate) fn serve_tls_echo(pki: &Pki, listener: Arc<TcpListener>) -> tokio::task::JoinHandle<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let acceptor = tokio_rustls::TlsAcceptor::from(pki.server_config());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                while let Ok(n @ 1..) = tls.read(&mut buf).await {
                    if tls.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                let _ = tls.shutdown().await;
            });
        }
    })
}

/// One relayed echo session for `name`; returns the backend address the
/// relay logged for it (`backend.addr`).
pub(crate) async fn relayed_backend_addr(relay: &Relay, pki: &Pki, name: &str) -> String {
    let tls = echo_session(pki, relay.addr(), name)
        .await
        .expect("relayed echo session");
    let local = tls.get_ref().0.local_addr().unwrap();
    drop(tls);
    let line = relay.closed_line(local).await;
    line["backend.addr"].as_str().unwrap().to_owned()
}

/// A relayed TLS session through `addr` with SNI `name`, proven by one echo.
pub(crate) async fn echo_session(
    pki: &Pki,
    addr: SocketAddr,
    name: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let mut tls = tls_connect(pki.client_config(), name, tcp).await?;
    echo_once(&mut tls, b"hello").await?;
    Ok(tls)
}

/// One echo round trip.
pub(crate) async fn echo_once<S>(tls: &mut S, message: &[u8]) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tls.write_all(message).await?;
    tls.flush().await?;
    let mut back = vec![0u8; message.len()];
    tls.read_exact(&mut back).await?;
    if back != message {
        return Err(std::io::Error::other("echo differs"));
    }
    Ok(())
}

/// What a [`load`] run did.
#[derive(Debug, Default, Clone)]
pub(crate) struct LoadReport {
    pub attempted: u64,
    pub succeeded: u64,
    pub failures: Vec<String>,
    pub elapsed: Duration,
}

/// Starts a client load: every 1/`rate` s a new connection to the address
/// `target` currently holds does a full mutual-TLS handshake through the
/// relay and one echo, then closes. Stops when `stop` fires, waits for the
/// connections in flight, and reports. Bounded: at most `rate * 60`
/// connections and 512 in flight.
pub(crate) fn load(
    pki: &Pki,
    target: Arc<Mutex<SocketAddr>>,
    name: &'static str,
    rate: u32,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<LoadReport> {
    let config = Arc::new(pki.client_config());
    tokio::spawn(async move {
        let start = std::time::Instant::now();
        let in_flight = Arc::new(tokio::sync::Semaphore::new(512));
        let report = Arc::new(Mutex::new(LoadReport::default()));
        let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..u64::from(rate) * 60 {
            tokio::select! {
                _ = tick.tick() => {}
                () = stop.cancelled() => break,
            }
            let permit = in_flight.clone().acquire_owned().await.unwrap();
            let addr = *target.lock().unwrap();
            let config = config.clone();
            let report = report.clone();
            report.lock().unwrap().attempted += 1;
            tasks.spawn(async move {
                let result = tokio::time::timeout(WAIT, async {
                    let tcp = TcpStream::connect(addr).await?;
                    let connector = tokio_rustls::TlsConnector::from(config);
                    let mut tls = connector
                        .connect(ServerName::try_from(name).unwrap(), tcp)
                        .await?;
                    echo_once(&mut tls, b"x").await?;
                    use tokio::io::AsyncWriteExt;
                    let _ = tls.shutdown().await;
                    std::io::Result::Ok(())
                })
                .await;
                let mut report = report.lock().unwrap();
                match result {
                    Ok(Ok(())) => report.succeeded += 1,
                    Ok(Err(e)) => report.failures.push(format!("{addr}: {e}")),
                    Err(_) => report.failures.push(format!("{addr}: timed out")),
                }
                drop(permit);
            });
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
        let mut report = report.lock().unwrap().clone();
        report.elapsed = start.elapsed();
        report
    })
}

// ------------------------------------------------- admission and hostile input

/// Connects to `to` from the loopback address `from` (127.0.0.2, …), so
/// tests can play several clients with distinct sources.
pub(crate) async fn connect_from(
    from: std::net::IpAddr,
    to: SocketAddr,
) -> std::io::Result<TcpStream> {
    let socket = match from {
        std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(from, 0))?;
    socket.connect(to).await
}

/// CPU time (user + system, in clock ticks) a process has used so far,
/// from /proc/PID/stat.
pub(crate) fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// How many connections wait in the kernel accept queue of the IPv4
/// listening socket on `addr` (rx_queue of a LISTEN row in /proc/net/tcp).
pub(crate) fn accept_queue_len(addr: SocketAddr) -> u32 {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let port = format!(":{:04X}", addr.port());
    for row in table.lines().skip(1) {
        let cols: Vec<&str> = row.split_whitespace().collect();
        if cols[1].ends_with(&port) && cols[3] == "0A" {
            let (_tx, rx) = cols[4].split_once(':').unwrap();
            return u32::from_str_radix(rx, 16).unwrap();
        }
    }
    panic!("no listening socket on {addr} in /proc/net/tcp");
}

/// Waits (polling, with the usual deadline) until `cond` holds.
pub(crate) async fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

impl Relay {
    /// Waits until at least `n` log lines satisfy `pred`; returns them all.
    pub(crate) async fn wait_matching(
        &self,
        n: usize,
        pred: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        self.wait_lines(|lines| {
            let found: Vec<Value> = lines.iter().filter(|l| pred(l)).cloned().collect();
            (found.len() >= n).then_some(found)
        })
        .await
    }
}

// ------------------------------------------------------------- PEM files

/// The PEM files a command-line TLS client needs: the CA to trust and the
/// client certificate and key to present.
pub(crate) struct PemFiles {
    pub ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Pki {
    /// Writes the CA and the client certificate and key as PEM into `dir`.
    pub(crate) fn write_pem(&self, dir: &std::path::Path) -> PemFiles {
        let files = PemFiles {
            ca: dir.join("ca.pem"),
            client_cert: dir.join("client.pem"),
            client_key: dir.join("client.key"),
        };
        std::fs::write(&files.ca, pem("CERTIFICATE", &self.ca)).unwrap();
        let chain: String = self
            .client_chain
            .iter()
            .map(|c| pem("CERTIFICATE", c))
            .collect();
        std::fs::write(&files.client_cert, chain).unwrap();
        std::fs::write(&files.client_key, pem("PRIVATE KEY", &self.client_key)).unwrap();
        files
    }
}

impl Pki {
    /// Writes the server certificate chain and its key as PEM into `dir`
    /// (`server.pem`, `server.key`), for a server run as a child process.
    pub(crate) fn write_server_pem(&self, dir: &std::path::Path) -> (PathBuf, PathBuf) {
        let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
        let chain: String = self
            .server_chain
            .iter()
            .map(|c| pem("CERTIFICATE", c))
            .collect();
        std::fs::write(&cert, chain).unwrap();
        std::fs::write(&key, pem("PRIVATE KEY", &self.server_key)).unwrap();
        (cert, key)
    }
}

/// PEM armour (RFC 7468) around DER bytes.
pub(crate) fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Standard base64 (RFC 4648 §4, padded).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut b64 = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                b64.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                b64.push('=');
            }
        }
    }
    b64
}

/// `snirelay ctl ARGS --config CONFIG`: its exit code, stdout and stderr.
pub(crate) async fn ctl(config: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = vec!["ctl".to_owned()];
    all.extend(args.iter().map(|s| s.to_string()));
    all.extend(["--config".to_owned(), config.display().to_string()]);
    run_snirelay(all).await
}

/// Runs the snirelay binary with `args` off the async runtime and returns
/// its exit code, stdout and stderr.
pub(crate) async fn run_snirelay(args: Vec<String>) -> (Option<i32>, String, String) {
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_snirelay"))
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("cannot run snirelay")
    })
    .await
    .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Runs `command` (one that should exit, such as a `run` refused at
/// start) with its stderr captured; kills it and panics if it is still
/// running after [`WAIT`]. Returns its exit code and stderr.
pub(crate) async fn run_to_exit(mut command: Command) -> (Option<i32>, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let deadline = tokio::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if tokio::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} was still running after {WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    (status.code(), reader.join().unwrap())
}

// ------------------------------------------------------------ HTTP client

/// A plain HTTP/1.1 GET (`Connection: close`) to the admin listener:
/// returns the status code and the body.
pub(crate) async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    // Bodies from a fixed-length `Full` are never chunked.
    let answer = http_tcp(addr, &request).await;
    (answer.status, answer.body)
}

/// The value of one sample in a Prometheus text exposition, by its full
/// series text (`name{labels}`); 0 when the series is absent.
pub(crate) fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// One counter or gauge of the relay's metrics now.
pub(crate) async fn metric_now(admin: SocketAddr, series: &str) -> f64 {
    let (_, text) = http_get(admin, "/metrics").await;
    metric(&text, series)
}

/// Polls the relay's metric `series` until it reaches `at_least` (bounded
/// by WAIT); returns its value.
pub(crate) async fn wait_metric(admin: SocketAddr, series: &str, at_least: f64) -> f64 {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let value = metric_now(admin, series).await;
        if value >= at_least {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} is {value}, not {at_least}, after {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// ------------------------------------------------------ reload fixtures

/// The names the two routes of [`two_routes`] serve.
pub(crate) const NAMES: &[&str] = &["app.example.com", "r.example.com", "s.example.com"];

/// Listener `tls` with route `r` (r.example.com, app.example.com) → `r` and
/// route `s` (s.example.com) → `s`; `extra` is appended verbatim. Every
/// client of these tests comes from 127.0.0.1, and a load can hold more
/// than the default per-source cap in flight, so that limit is off.
pub(crate) fn two_routes(r: SocketAddr, s: SocketAddr, extra: &str) -> String {
    format!(
        r#"
[global]
drain_timeout = "2s"

[[listener]]
name = "tls"
listen = ["127.0.0.1:0"]
{NO_SOURCE_LIMIT}

[[route]]
name = "r"
listener = "tls"
sni = ["r.example.com", "app.example.com"]
backend = "r"

[[route]]
name = "s"
listener = "tls"
sni = ["s.example.com"]
backend = "s"

[backend.r]
addresses = ["{r}"]

[backend.s]
addresses = ["{s}"]
{extra}
"#
    )
}

/// Starts a relay that offers its listening sockets at `path` for a binary
/// upgrade, and waits until it does.
pub(crate) async fn start_with_takeover(config: &str, path: &std::path::Path) -> Relay {
    let relay = Relay::launch(config, |config_path| {
        let mut command = Relay::command(config_path);
        command.arg("--takeover").arg(path);
        command
    })
    .await;
    relay
        .wait_log(|l| l["message"] == "offering binary takeover")
        .await;
    relay
}

// ------------------------------------------------------------ backends

/// A listener that never accepts, its tiny backlog filled: further SYNs are
/// dropped, so connects to it hang until the connector gives up (a
/// black-holed address, as seen from the relay).
pub(crate) struct BlackHole {
    pub addr: SocketAddr,
    _listener: socket2::Socket,
    _fillers: Vec<socket2::Socket>,
}

impl BlackHole {
    pub(crate) fn new() -> BlackHole {
        use socket2::{Domain, Socket, Type};
        let listener = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        listener.bind(&any.into()).unwrap();
        listener.listen(0).unwrap();
        let addr = listener.local_addr().unwrap().as_socket().unwrap();
        let mut fillers = Vec::new();
        for _ in 0..8 {
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
            s.set_nonblocking(true).unwrap();
            let _ = s.connect(&addr.into());
            fillers.push(s);
        }
        BlackHole {
            addr,
            _listener: listener,
            _fillers: fillers,
        }
    }
}

impl Default for BlackHole {
    fn default() -> Self {
        BlackHole::new()
    }
}

/// A plain TCP backend that writes `tag` to every connection, then reads
/// until the client closes. Returns its address and a count of accepted
/// connections.
pub(crate) async fn tagged_backend(
    tag: &'static str,
) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    tagged_backend_on(TcpListener::bind("127.0.0.1:0").await.unwrap(), tag)
}

/// [`tagged_backend`] on a listener the caller bound (another loopback
/// address, a chosen port).
pub(crate) fn tagged_backend_on(
    listener: TcpListener,
    tag: &'static str,
) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    let addr = raw_backend_on(listener, move |mut stream| {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let _ = stream.write_all(tag.as_bytes()).await;
            let mut sink = [0u8; 4096];
            while let Ok(n) = stream.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        }
    });
    (addr, accepted)
}

/// The test DNS server (`dns::DnsServer`).
pub(crate) mod dns;

/// A test hosts file for a child's resolver (`hosts::Hosts`).
pub(crate) mod hosts;

/// UDP echo backends and clients for the QUIC listener's tests.
pub(crate) mod udp;

// ------------------------------------------- cluster lookups (issue 6)

pub(crate) mod control_plane;

/// Waits (bounded by [`WAIT`]) until `done()` holds, checking again each
/// time `changed` is notified (the lookup doubles notify on every request).
/// `false` when [`WAIT`] passed first.
pub(crate) async fn wait_notified(
    changed: &tokio::sync::Notify,
    mut done: impl FnMut() -> bool,
) -> bool {
    tokio::time::timeout(WAIT, async {
        loop {
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if done() {
                return;
            }
            notified.await;
        }
    })
    .await
    .is_ok()
}

// ------------------------------- Pangolin's lookup protocol (issue 17)

/// A Pangolin control plane double (`pangolin::Pangolin`).
pub(crate) mod pangolin;

/// Pangolin's HA reference deployment as network namespaces
/// (`compose::Layout`).
pub(crate) mod compose;

// ------------------------------------------------ per-route limits (issue 15)

/// Sends the captured ClientHello `name` (see `tests/data`) to `to` from the
/// loopback source `from`, and waits for the outcome: `Some(bytes)`, the
/// first bytes the backend wrote back (a [`tagged_backend`]'s tag), when
/// the relay forwarded it; `None` when the relay closed it instead. The
/// stream is returned open, so a relayed connection stays counted until the
/// caller drops it.
pub(crate) async fn replay_hello_from(
    from: std::net::IpAddr,
    to: SocketAddr,
    name: &str,
) -> (TcpStream, Option<Vec<u8>>) {
    use tokio::io::AsyncWriteExt;
    let mut stream = connect_from(from, to).await.unwrap();
    stream.write_all(&capture(name)).await.unwrap();
    let back = relay_outcome(&mut stream).await;
    (stream, back)
}

/// What came back on a client connection whose hello was sent: the first
/// bytes from the backend, or `None` when the relay closed it.
pub(crate) async fn relay_outcome(stream: &mut TcpStream) -> Option<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 256];
    let read = tokio::time::timeout(WAIT, stream.read(&mut buf))
        .await
        .expect("the relay neither forwarded nor closed the connection");
    match read {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(buf[..n].to_vec()),
    }
}
// ---------------------------------------- network namespaces (issue 15)

pub(crate) mod netns;

// ------------------------------------- HAProxy beside snirelay (differential)

pub(crate) mod differential;
pub(crate) mod differential_check;
pub(crate) mod differential_script;

// ------------------------------------------------ run-time control (issue 16)

/// The admin request that sets `addr` of `backend` to `state` (`"drain"`,
/// `"maint"`, `"ready"`), with `token` as its bearer.
pub(crate) fn address_state_request(
    backend: &str,
    addr: SocketAddr,
    state: &str,
    token: &str,
) -> String {
    http_request_text(
        "POST",
        &format!("/backends/{backend}/addresses/{addr}/state"),
        &[&format!("Authorization: Bearer {token}")],
        &format!(r#"{{"state": "{state}"}}"#),
    )
}

/// An HTTP/1.1 request (`Connection: close`) as text: `method path`, the
/// `headers` (`Name: value`), and `body` with its Content-Length when not
/// empty.
pub(crate) fn http_request_text(method: &str, path: &str, headers: &[&str], body: &str) -> String {
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n");
    for header in headers {
        text.push_str(header);
        text.push_str("\r\n");
    }
    if !body.is_empty() || method == "POST" {
        text.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    text.push_str("\r\n");
    text.push_str(body);
    text
}

/// An admin answer: status, head (status line and headers) and body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Answer {
    /// The body as JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.head, self.body))
    }
}

/// Sends `request` on `stream` and reads the answer until the server closes.
pub(crate) async fn http_exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &str,
) -> Answer {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        raw
    };
    let raw = tokio::time::timeout(WAIT, exchange)
        .await
        .expect("admin request timed out");
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("no end of headers");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line: {head}"));
    Answer {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// [`http_exchange`] on a new TCP connection to `addr`.
pub(crate) async fn http_tcp(addr: SocketAddr, request: &str) -> Answer {
    http_exchange(TcpStream::connect(addr).await.unwrap(), request).await
}

/// [`http_exchange`] on a new connection to the Unix socket `path`.
pub(crate) async fn http_unix(path: &std::path::Path, request: &str) -> Answer {
    http_exchange(
        tokio::net::UnixStream::connect(path).await.unwrap(),
        request,
    )
    .await
}

/// Writes a token file (mode 0600, as `[admin] token_file` requires) in a
/// fresh scratch directory; returns its path.
pub(crate) fn token_file(text: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = scratch_dir("tokens").join("admin.tokens");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

// ------------------------------------------- recording backend, raw clients

/// What a recording backend saw on one connection.
#[derive(Debug)]
pub(crate) struct Recorded {
    /// The bytes of the first read: header and hello arrive together.
    pub first_read: Vec<u8>,
    /// Everything until the relay's FIN.
    pub all: Vec<u8>,
}

/// A plain TCP backend that records each connection until EOF.
pub(crate) async fn recording_backend()
-> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<Recorded>) {
    use tokio::io::AsyncReadExt;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let addr = raw_backend(move |mut stream| {
        let tx = tx.clone();
        async move {
            let mut buf = vec![0u8; 64 * 1024];
            let n = stream.read(&mut buf).await.unwrap_or(0);
            let first_read = buf[..n].to_vec();
            let mut all = first_read.clone();
            let _ = stream.read_to_end(&mut all).await;
            let _ = tx.send(Recorded { first_read, all });
        }
    })
    .await;
    (addr, rx)
}

/// Sends `bytes`, half-closes, and reads until the relay closes.
pub(crate) async fn send_and_finish(addr: SocketAddr, bytes: &[u8]) -> (SocketAddr, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut client = TcpStream::connect(addr).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(bytes).await.unwrap();
    client.shutdown().await.unwrap();
    let mut back = Vec::new();
    let _ = tokio::time::timeout(WAIT, client.read_to_end(&mut back))
        .await
        .expect("relay did not close");
    (local, back)
}

/// The first flight (the ClientHello) a rustls client with `config` sends
/// for `name`, made in memory.
pub(crate) fn hello_bytes(config: rustls::ClientConfig, name: &str) -> Vec<u8> {
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

/// A rustls ClientHello for `name` offering the ALPN protocols `alpn`.
pub(crate) fn client_hello(name: &str, alpn: &[&str]) -> Vec<u8> {
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    hello_bytes(config, name)
}

/// An ECHConfigList (draft-ietf-tls-esni §4) holding one configuration:
/// `config_id`, a fresh DHKEM(X25519) key, HKDF-SHA256 with AES-128-GCM,
/// and `public_name` (the outer SNI clients send).
pub(crate) fn ech_config_list(config_id: u8, public_name: &str) -> Vec<u8> {
    use rustls::crypto::aws_lc_rs::hpke::DH_KEM_X25519_HKDF_SHA256_AES_128 as SUITE;
    use rustls::crypto::hpke::Hpke;
    let (public, _private) = SUITE.generate_key_pair().unwrap();
    let mut contents = vec![config_id, 0x00, 0x20];
    contents.extend_from_slice(&(public.0.len() as u16).to_be_bytes());
    contents.extend_from_slice(&public.0);
    contents.extend_from_slice(&[0x00, 0x04, 0x00, 0x01, 0x00, 0x01]);
    contents.push(0); // maximum_name_length
    contents.push(public_name.len() as u8);
    contents.extend_from_slice(public_name.as_bytes());
    contents.extend_from_slice(&[0x00, 0x00]); // no extensions
    let mut config = vec![0xfe, 0x0d];
    config.extend_from_slice(&(contents.len() as u16).to_be_bytes());
    config.extend(contents);
    let mut list = (config.len() as u16).to_be_bytes().to_vec();
    list.extend(config);
    list
}

/// The ClientHello of a rustls client doing real ECH with the configuration
/// [`ech_config_list`] makes: the outer hello names `public_name`, the
/// encrypted inner one `inner_name`.
pub(crate) fn ech_hello(config_id: u8, public_name: &str, inner_name: &str) -> Vec<u8> {
    use rustls::client::{EchConfig, EchMode};
    use rustls::crypto::aws_lc_rs;
    let list = ech_config_list(config_id, public_name);
    let ech = EchConfig::new(list.into(), aws_lc_rs::hpke::ALL_SUPPORTED_SUITES).unwrap();
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
            .with_ech(EchMode::Enable(ech))
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
    hello_bytes(config, inner_name)
}

// ---------------------------------------------------------------- QUIC flows

/// A UDP backend that echoes every datagram to its sender (a stand-in for
/// a QUIC server once a flow is open: the relay no longer reads its
/// datagrams).
pub(crate) async fn udp_echo_backend() -> SocketAddr {
    let backend = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = backend.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((len, from)) = backend.recv_from(&mut buf).await {
            let _ = backend.send_to(&buf[..len], from).await;
        }
    });
    addr
}

/// Sends `message` from `client` to `to` and waits for it to come back,
/// sending it again every 200 ms (as a QUIC endpoint retransmits) until
/// its echo arrives, within [`WAIT`]. Other datagrams are skipped. Returns
/// how many times it was sent.
pub(crate) async fn udp_round_trip(
    client: &tokio::net::UdpSocket,
    to: SocketAddr,
    message: &[u8],
) -> usize {
    let mut buf = vec![0u8; 65536];
    let mut sent = 0;
    let echoed = tokio::time::timeout(WAIT, async {
        loop {
            client.send_to(message, to).await.unwrap();
            sent += 1;
            let retransmit = tokio::time::sleep(Duration::from_millis(200));
            tokio::pin!(retransmit);
            loop {
                tokio::select! {
                    received = client.recv_from(&mut buf) => {
                        let (len, _) = received.unwrap();
                        if &buf[..len] == message {
                            return;
                        }
                    }
                    () = &mut retransmit => break,
                }
            }
        }
    })
    .await;
    assert!(
        echoed.is_ok(),
        "no echo of a {}-byte datagram from {to} within {WAIT:?}",
        message.len()
    );
    sent
}

/// Opens a QUIC flow through the relay's quic listener at `relay`: sends
/// `hello` (a captured one-datagram first flight) from a fresh socket and
/// waits for its echo from a [`udp_echo_backend`]. The flow is open (and
/// listed by the admin listener) once the echo is back.
pub(crate) async fn open_quic_flow(relay: SocketAddr, hello: &[u8]) -> tokio::net::UdpSocket {
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    udp_round_trip(&client, relay, hello).await;
    client
}
