//! A real QUIC client understands the refusal (`snirelay::quic::refusal`):
//! ngtcp2's example client (Debian `ngtcp2-client`, `/usr/bin/gtlsclient`)
//! connects to a UDP socket on loopback, its first datagrams are read with
//! the Initial parser, the refusal is sent back, and the client must stop at
//! once reporting the TLS alert, instead of retransmitting until its idle
//! timeout. ngtcp2 0.12 (Debian 12) speaks QUIC v1 only (its v2 is a draft
//! codepoint), so v2 refusals are checked by the unit tests alone.

use crate::common;

use std::io::Read;
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use common::WAIT;
use snirelay::config::DEFAULT_MAX_CLIENT_HELLO_BYTES;
use snirelay::quic::Version;
use snirelay::quic::initial::{HelloLimits, Parser, Verdict};
use snirelay::quic::refusal::{UNRECOGNIZED_NAME, refusal};

/// The client of Debian's `ngtcp2-client` package (built with GnuTLS).
const NGTCP2_CLIENT: &str = "/usr/bin/gtlsclient";
/// The client's own idle timeout, far past [`WAIT`]: an exit within `WAIT`
/// is the refusal's doing.
const CLIENT_IDLE_TIMEOUT: &str = "--timeout=60s";

#[test]
fn ngtcp2_client_reports_the_refusal_at_once() {
    assert!(
        std::path::Path::new(NGTCP2_CLIENT).exists(),
        "{NGTCP2_CLIENT} is missing: install Debian's ngtcp2-client (.ci/install-deps)"
    );
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_read_timeout(Some(WAIT)).unwrap();
    let port = socket.local_addr().unwrap().port().to_string();
    let mut child = Command::new(NGTCP2_CLIENT)
        .args([CLIENT_IDLE_TIMEOUT, "127.0.0.1", &port])
        .arg(format!("https://localhost:{port}/"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{NGTCP2_CLIENT}: {e}"));
    // Both pipes are drained by threads; the stderr one reports its end of
    // file, which is the client's exit.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        stdout.read_to_string(&mut text).unwrap();
        text
    });
    let (exited, closed) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        let _ = exited.send(text);
    });

    let mut parser = Parser::new(HelloLimits::for_hello_bytes(DEFAULT_MAX_CLIENT_HELLO_BYTES));
    let mut buf = [0u8; 65536];
    let (hello, client) = loop {
        let (len, from) = socket
            .recv_from(&mut buf)
            .expect("the client's Initial within the wait");
        match parser.feed(&buf[..len]) {
            Ok(hello) => break (hello, from),
            Err(Verdict::Incomplete) => assert!(parser.datagrams() < 8, "{parser:?}"),
            Err(verdict) => panic!("the client's first flight: {verdict:?}"),
        }
    };
    // The client sends its host as SNI, and "localhost" for a numeric one.
    assert_eq!(hello.hello.server_name.as_deref(), Some(&b"localhost"[..]));
    assert_eq!(hello.version, Version::V1);

    let answer = refusal(
        hello.version,
        &hello.dcid,
        &hello.scid,
        UNRECOGNIZED_NAME,
        "no route",
    );
    let sent = Instant::now();
    socket.send_to(&answer, client).unwrap();

    let stderr = match closed.recv_timeout(WAIT) {
        Ok(text) => text,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the client still runs {WAIT:?} after the refusal");
        }
    };
    let waited = sent.elapsed();
    let status = child.wait().unwrap();
    let stdout = out.join().unwrap();
    eprintln!("ngtcp2 client exited ({status}) {waited:?} after the refusal");
    eprintln!("stdout:\n{stdout}\nstderr:\n{stderr}");
    // ngtcp2 logs the frame it read (its debug output, on stderr), then
    // enters the draining state (RFC 9000 §10.2.2) and ends.
    let output = format!("{stdout}{stderr}");
    assert!(
        output.contains(
            "Initial CONNECTION_CLOSE(0x1c) error_code=CRYPTO_ERROR(0x170) frame_type=6 \
             reason_len=8 reason=[no route]"
        ),
        "{output}"
    );
    assert!(output.contains("ERR_DRAINING"), "{output}");
}
