//! The differential harness's scripts: what one scripted client
//! connection is ([`Conn`]: source, start, payload, segments, half-close,
//! watch, the listed difference it shows) and the bytes it sends, made
//! afresh for every play so that each connection's bytes are unique (the
//! recorders tell connections apart by them), including ClientHellos built
//! byte by byte for names a TLS library would refuse or normalise.
//!
//! Not here: playing a script or judging it (the siblings `differential`
//! and `differential_check`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::differential_check::Decision;

/// How long a client watches its connection unless its script says.
pub(crate) const WATCH: Duration = Duration::from_secs(3);

/// What a connection sends, made afresh for each side so that every
/// connection's bytes are unique (the recorders tell them apart by them).
#[derive(Debug, Clone)]
pub(crate) enum Payload {
    /// A ClientHello naming these SNI bytes as they are, or without SNI.
    Hello(Option<Vec<u8>>),
    /// A ClientHello whose SNI extension lists several host names.
    Names(Vec<Vec<u8>>),
    /// A PROXY header (`v1` text or v2 binary) claiming the client
    /// 203.0.113.7:5555 to 192.0.2.1:443, then a ClientHello for the name.
    Proxied(u8, String),
    /// A real client's first flight, captured in tests/data (the same bytes
    /// every time: one such connection per script and side).
    Capture(String),
    /// The first `n` bytes of a ClientHello for the name.
    Truncated(String, usize),
    /// An HTTP/1.1 request: bytes that are no TLS.
    Http,
    /// Nothing at all.
    Nothing,
}

/// One scripted client connection.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub label: String,
    /// The loopback source address's last octet (127.0.0.x).
    pub from: u8,
    /// When it connects, from the script's start.
    pub at: Duration,
    pub payload: Payload,
    /// Sends the payload in this many segments, this far apart.
    pub segments: (usize, Duration),
    /// Half-closes (FIN) once the backend's `R` arrived.
    pub half_close: bool,
    /// How long the client waits for the end after its last action.
    pub watch: Duration,
    /// The listed difference this connection shows, by identifier, and
    /// snirelay's own decision on it.
    pub differs: Option<(&'static str, Decision)>,
    /// The HAProxy version (major.minor) the listed difference shows
    /// against, when only one does (the other decides as snirelay does).
    pub differs_only_on: Option<&'static str>,
    /// A group of connections that arrive too close together for either
    /// proxy to promise which of them it takes first (both accept on
    /// several threads): their outcomes are compared as sorted lists.
    pub burst: Option<u32>,
}

impl Conn {
    fn new(label: String, payload: Payload) -> Conn {
        Conn {
            label,
            from: 1,
            at: Duration::ZERO,
            payload,
            segments: (1, Duration::ZERO),
            half_close: false,
            watch: WATCH,
            differs: None,
            differs_only_on: None,
            burst: None,
        }
    }

    /// A ClientHello for `name` (its bytes as written: case, dots and all).
    pub(crate) fn hello(name: &str) -> Conn {
        Conn::new(
            name.to_owned(),
            Payload::Hello(Some(name.as_bytes().into())),
        )
    }

    /// A ClientHello whose server_name list holds each of `names`.
    pub(crate) fn hello_names(names: &[&str]) -> Conn {
        Conn::new(
            names.join(" + "),
            Payload::Names(names.iter().map(|n| n.as_bytes().to_vec()).collect()),
        )
    }

    /// A hello for `name` behind a PROXY header of `version` (1 or 2), as
    /// a load balancer in front would send it.
    pub(crate) fn proxied(version: u8, name: &str) -> Conn {
        Conn::new(
            format!("{name} behind PROXY v{version}"),
            Payload::Proxied(version, name.to_owned()),
        )
    }

    /// The captured first flight tests/data/`file` of a real client.
    pub(crate) fn capture(file: &str) -> Conn {
        Conn::new(file.to_owned(), Payload::Capture(file.to_owned()))
    }

    pub(crate) fn no_sni() -> Conn {
        Conn::new("(no SNI)".into(), Payload::Hello(None))
    }

    pub(crate) fn http() -> Conn {
        Conn::new("(HTTP bytes)".into(), Payload::Http)
    }

    pub(crate) fn nothing() -> Conn {
        Conn::new("(nothing sent)".into(), Payload::Nothing)
    }

    /// The first `n` bytes of a hello for `name`, and then nothing.
    pub(crate) fn truncated(name: &str, n: usize) -> Conn {
        Conn::new(
            format!("{name} (first {n} bytes)"),
            Payload::Truncated(name.into(), n),
        )
    }

    pub(crate) fn from(mut self, octet: u8) -> Conn {
        self.from = octet;
        self
    }

    pub(crate) fn at_ms(mut self, ms: u64) -> Conn {
        self.at = Duration::from_millis(ms);
        self
    }

    pub(crate) fn at_us(mut self, us: u64) -> Conn {
        self.at = Duration::from_micros(us);
        self
    }

    pub(crate) fn split(mut self, parts: usize, gap_ms: u64) -> Conn {
        self.segments = (parts, Duration::from_millis(gap_ms));
        self
    }

    pub(crate) fn half_close(mut self) -> Conn {
        self.half_close = true;
        self
    }

    pub(crate) fn watch_ms(mut self, ms: u64) -> Conn {
        self.watch = Duration::from_millis(ms);
        self
    }

    pub(crate) fn labelled(mut self, label: impl Into<String>) -> Conn {
        self.label = label.into();
        self
    }

    /// One of the connections of burst `group`.
    pub(crate) fn in_burst(mut self, group: u32) -> Conn {
        self.burst = Some(group);
        self
    }

    /// This connection shows the listed difference `id`, and snirelay
    /// decides it as `decision` says (which server, or which refusal).
    pub(crate) fn differs(mut self, id: &'static str, decision: Decision) -> Conn {
        self.differs = Some((id, decision));
        self
    }

    /// The listed difference shows against HAProxy `version` (major.minor)
    /// only; against the others this connection must be the same.
    pub(crate) fn only_on(mut self, version: &'static str) -> Conn {
        self.differs_only_on = Some(version);
        self
    }

    /// The listed difference this connection shows against HAProxy
    /// `version`, if any.
    pub(crate) fn differs_on(&self, version: &str) -> Option<(&'static str, Decision)> {
        self.differs
            .filter(|_| self.differs_only_on.is_none_or(|only| only == version))
    }

    /// The bytes this connection sends, unique to this call.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        match &self.payload {
            Payload::Hello(name) => client_hello_bytes(name.as_slice(), n),
            Payload::Names(names) => client_hello_bytes(names, n),
            Payload::Capture(file) => super::capture(file),
            Payload::Proxied(version, name) => {
                let mut bytes = if *version == 1 {
                    b"PROXY TCP4 203.0.113.7 192.0.2.1 5555 443\r\n".to_vec()
                } else {
                    let mut v2 = b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
                    v2.extend([203, 0, 113, 7, 192, 0, 2, 1]);
                    v2.extend(5555u16.to_be_bytes());
                    v2.extend(443u16.to_be_bytes());
                    v2
                };
                bytes.extend(client_hello_bytes(&[name.as_bytes().to_vec()], n));
                bytes
            }
            Payload::Truncated(name, len) => {
                client_hello_bytes(&[name.as_bytes().to_vec()], n)[..*len].to_vec()
            }
            Payload::Http => format!("GET /{n} HTTP/1.1\r\nHost: example.com\r\n\r\n").into(),
            Payload::Nothing => Vec::new(),
        }
    }
}

/// A TLS 1.3 ClientHello (in a TLS 1.0 record, as clients send it) whose
/// server_name extension lists the names of `sni` byte for byte (none: no
/// extension); `unique` fills the random. Built here rather than by a TLS
/// library so that names a library would refuse or normalise (upper case,
/// a trailing dot, `_`, several names) go out as written.
pub(crate) fn client_hello_bytes(sni: &[Vec<u8>], unique: u64) -> Vec<u8> {
    fn ext(out: &mut Vec<u8>, kind: u16, body: &[u8]) {
        out.extend(kind.to_be_bytes());
        out.extend((body.len() as u16).to_be_bytes());
        out.extend(body);
    }
    let mut exts = Vec::new();
    if !sni.is_empty() {
        let mut list = Vec::new();
        for name in sni {
            list.push(0u8);
            list.extend((name.len() as u16).to_be_bytes());
            list.extend(name);
        }
        let mut body = (list.len() as u16).to_be_bytes().to_vec();
        body.extend(list);
        ext(&mut exts, 0, &body);
    }
    ext(&mut exts, 10, &[0, 2, 0x00, 0x1d]); // supported_groups: x25519
    ext(&mut exts, 13, &[0, 4, 0x04, 0x03, 0x08, 0x04]); // signature_algorithms
    ext(&mut exts, 43, &[4, 0x03, 0x04, 0x03, 0x03]); // supported_versions
    let mut share = vec![0, 36, 0x00, 0x1d, 0, 32];
    share.extend([0x42u8; 32]);
    ext(&mut exts, 51, &share); // key_share
    let mut body = vec![0x03, 0x03];
    let mut random = [0u8; 32];
    random[..8].copy_from_slice(&unique.to_be_bytes());
    random[8..12].copy_from_slice(&std::process::id().to_be_bytes());
    body.extend(random);
    body.push(0); // session id
    body.extend([0, 4, 0x13, 0x01, 0xc0, 0x2f]); // cipher suites
    body.extend([1, 0]); // compression: null
    body.extend((exts.len() as u16).to_be_bytes());
    body.extend(exts);
    let mut handshake = vec![1];
    handshake.extend(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend(body);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend((handshake.len() as u16).to_be_bytes());
    record.extend(handshake);
    record
}
