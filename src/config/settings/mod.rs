//! The validated settings that runtime modules read: plain data, built by
//! the checker ([`crate::config::check`]) and shown by `/config`
//! ([`crate::config::effective`]). The modules that act on them ([`crate::admission`], `proxy`,
//! `sockopt`, `pump`, `backend`) import them from here and add their behaviour in
//! their own `impl` blocks, so that configuration imports no runtime
//! module.
//!
//! Not here: checking values ([`crate::config::check`]), defaults (`config`), or any
//! behaviour beyond plain constructors.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::wire::cidr::{Cidr, CidrSet};
use crate::wire::proxy_tlv::TlvTypes;

mod backends;
pub use backends::*;
mod log;
pub(crate) use log::*;

// ------------------------------------------------------------- the relay

/// A connection's relay timeouts: its listener's, or its route's where the
/// route sets its own. Built by the configuration; the relay borrows them
/// from the route table for the connection's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// `idle_timeout`: no byte moved either way for this long.
    pub idle: Duration,
    /// `half_close_timeout`: once a side has sent FIN, no byte moved for
    /// this long. Only shortens `idle`: a longer value never bites.
    pub half_close: Duration,
    /// `max_connection_lifetime`, counted from accept; `None`: no limit.
    pub lifetime: Option<Duration>,
}

// ----------------------------------------------------- bandwidth limits

/// One token bucket of bytes: `bytes_per_second`, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRate {
    /// The rate, in bytes per second.
    pub bytes_per_second: std::num::NonZeroU64,
    /// Bytes that may move at once above the rate (`burst`; default: one
    /// second's worth of the rate).
    pub burst: std::num::NonZeroU64,
}

/// A route's (or listener's) bandwidth limits (`rate_up`, `rate_down`,
/// `rate_per_source_up`, `rate_per_source_down`, `burst`), validated: a
/// route's own keys laid over its listener's. "Up" is client → backend,
/// "down" backend → client. All `None`: the connection has no bucket and
/// pays nothing (see [`crate::pump::throttle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bandwidth {
    /// Each connection's own bucket, client → backend.
    pub up: Option<ByteRate>,
    /// Each connection's own bucket, backend → client.
    pub down: Option<ByteRate>,
    /// One bucket per source, shared by its connections, client → backend.
    pub per_source_up: Option<ByteRate>,
    /// One bucket per source, shared by its connections, backend → client.
    pub per_source_down: Option<ByteRate>,
    /// `burst` as written (the route's, else its listener's); `None`:
    /// each bucket holds one second of its rate.
    pub burst: Option<std::num::NonZeroU64>,
    /// Whether the per-source buckets are the route's own (it sets a
    /// `rate_per_source_*` key) rather than its listener's, which all the
    /// listener's routes without their own share.
    pub own_per_source: bool,
}

impl Bandwidth {
    /// Whether any limit is set.
    pub fn is_limited(&self) -> bool {
        self.up.is_some()
            || self.down.is_some()
            || self.per_source_up.is_some()
            || self.per_source_down.is_some()
    }
}

// ------------------------------------------------------------- admission

/// A listener's admission settings (`[listener.limits]`), validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Open connections per source key; `None` is unlimited.
    ///
    /// Memory: the source's entry in the listener's source table (see
    /// `max_sources`). Hot path: one mutex hold and one SipHash of the key
    /// on admit, again on close.
    pub connections_per_source: Option<NonZeroU32>,
    /// New connections per source key; `None` is unlimited.
    ///
    /// Memory: 8 bytes in the source's entry, kept for `burst /
    /// per_second` seconds after its last attempt (see `max_sources`). Hot
    /// path: a few integer operations (GCRA) under the entry's lock.
    pub rate_per_source: Option<Rate>,
    /// Bits of an IPv4 source that form its key (1..=32).
    pub source_prefix_v4: u8,
    /// Bits of an IPv6 source that form its key (1..=128).
    pub source_prefix_v6: u8,
    /// Count and report, but do not refuse, on the counting limits.
    pub dry_run: bool,
    /// When not empty, only these sources are admitted.
    ///
    /// Memory: one hash-set entry per block, fixed per snapshot. Hot path:
    /// one hash lookup per distinct prefix length in the list.
    pub allow: CidrSet,
    /// These sources are never admitted; beats `allow`. Costs as `allow`.
    pub deny: CidrSet,
    /// Refused attempts spend rate too (HAProxy `conn_rate` semantics): a
    /// source that keeps trying faster than its rate stays refused instead
    /// of getting exactly its rate through. Costs nothing extra.
    pub rate_counts_refused: bool,
    /// What the counting limits (open connections, rate, attempts) count
    /// by: the source, the hello's JA4, or both (`limit_key`).
    pub limit_key: LimitKey,
    /// `attempts_per_source` within `attempts_period`: a sliding count of
    /// every attempt, refused ones included, as HAProxy's `conn_rate`;
    /// `None` is unlimited. Exclusive of `rate_per_source`.
    ///
    /// Memory: 24 bytes in the source's entry, kept for two periods after
    /// its last attempt (see [`crate::admission::attempts`] and
    /// `max_sources`). Hot path: a few integer operations under the
    /// entry's lock.
    pub attempts_per_source: Option<Attempts>,
    /// `max_sources`: sources the table remembers without an open
    /// connection; past it the least recently used goes (see
    /// [`crate::admission`]). Memory: about 160 bytes each when full.
    pub max_sources: NonZeroU32,
    /// `ja4_source_multiple`: under a JA4 `limit_key`, the source alone is
    /// counted too, held to this many times the counting limits, so that a
    /// client cannot multiply its share by changing its JA4.
    pub ja4_source_multiple: NonZeroU32,
}

/// `attempts_per_source` attempts within `attempts_period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempts {
    /// `attempts_per_source`: the most attempts counted within a period;
    /// the attempt that makes the count exceed it is refused.
    pub count: NonZeroU32,
    /// `attempts_period`: the sliding period, in whole milliseconds.
    pub period: Duration,
}

/// `limit_key`: what `connections_per_source` and the rate count by.
/// `deny` and `allow` always judge the source address, before a byte is
/// read; a key with the JA4 can only be counted once the hello is parsed,
/// so those limits are decided right after inspection instead of at
/// accept (see `admission`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LimitKey {
    /// The source address cut to its prefix (the default).
    #[default]
    Source,
    /// The hello's JA4 fingerprint: every client of one TLS stack together.
    Ja4,
    /// The source cut to its prefix and the JA4 together.
    SourceJa4,
}

impl LimitKey {
    /// Every key, in the order the reference lists them.
    pub const ALL: [LimitKey; 3] = [LimitKey::Source, LimitKey::Ja4, LimitKey::SourceJa4];

    /// As written in the file.
    pub const fn as_str(self) -> &'static str {
        match self {
            LimitKey::Source => "source",
            LimitKey::Ja4 => "ja4",
            LimitKey::SourceJa4 => "source+ja4",
        }
    }

    /// Whether the key needs the hello's fingerprint.
    pub(crate) const fn needs_ja4(self) -> bool {
        !matches!(self, LimitKey::Source)
    }
}

/// A GCRA rate: `per_second` new connections, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// `connection_rate_per_source`: new connections per second.
    pub per_second: NonZeroU32,
    /// `connection_burst_per_source`: connections at once above the rate
    /// (default: one second's worth of it).
    pub burst: NonZeroU32,
}

impl Limits {
    /// No limits at all: what a listener without `[listener.limits]` gets.
    pub fn unlimited() -> Limits {
        Limits {
            connections_per_source: None,
            rate_per_source: None,
            source_prefix_v4: 32,
            source_prefix_v6: 64,
            dry_run: false,
            allow: CidrSet::default(),
            deny: CidrSet::default(),
            rate_counts_refused: false,
            limit_key: LimitKey::Source,
            attempts_per_source: None,
            max_sources: crate::config::DEFAULT_MAX_SOURCES,
            ja4_source_multiple: crate::config::DEFAULT_JA4_SOURCE_MULTIPLE,
        }
    }
}

// ------------------------------------------------------ the PROXY protocol

/// What the listener expects from trusted sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `require`: a trusted peer must send a header.
    Require,
    /// `optional`: a trusted peer may send one, or start with the hello.
    Optional,
}

/// A listener's validated `[listener.proxy_protocol]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    /// The networks `trusted` lists as such.
    pub trusted: Vec<Cidr>,
    /// The host names `trusted` lists, each with its addresses.
    pub trusted_names: Vec<TrustedName>,
    pub mode: Mode,
    pub max_hops: u8,
    /// `pass_through_tlvs`: the types copied from a header into the one a
    /// v2 backend receives.
    pub pass_through_tlvs: TlvTypes,
}

/// A host name in `trusted`, resolved when the configuration was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedName {
    /// As configured (lowercase, no trailing dot).
    pub name: String,
    /// Its addresses then (IPv4-mapped ones as IPv4), never empty.
    pub addrs: Vec<IpAddr>,
}

/// A backend's `proxy_protocol` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outbound {
    /// `none`: no header; the backend sees the relay's address.
    #[default]
    None,
    /// `v1`: the text header.
    V1,
    /// `v2`: the binary header, which carries TLVs (the hop count among them).
    V2,
}

/// One entry of a backend's `proxy_protocol_tlvs`: a TLV its v2 header
/// carries, of a type the checker allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyTlv {
    /// The TLV's type byte (`type`).
    pub kind: u8,
    /// Where its value comes from (`value`, `text` or `bytes`).
    pub value: TlvValue,
}

/// Where a [`ProxyTlv`]'s value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlvValue {
    /// Learnt from the connection (`value = "…"`).
    From(TlvSource),
    /// `text = "…"`: these UTF-8 bytes.
    Text(String),
    /// `bytes = "…"` (hex): these bytes.
    Bytes(Vec<u8>),
}

impl TlvValue {
    /// The most bytes the value can take.
    pub(crate) fn max_len(&self) -> usize {
        match self {
            TlvValue::From(source) => source.max_len(),
            TlvValue::Text(text) => text.len(),
            TlvValue::Bytes(bytes) => bytes.len(),
        }
    }
}

/// A value learnt from the connection, by its name in `value = "…"`.
/// Each is omitted from a header when the connection has none (no ALPN
/// offered, no SNI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlvSource {
    /// The first ALPN protocol the client offered.
    Alpn,
    /// The SNI, normalised (lowercase, no trailing dot).
    Sni,
    /// The hello's JA4 fingerprint (`t…` on TCP), 36 characters.
    Ja4,
    /// The hello's JA3 fingerprint, its MD5 form: 32 hex digits.
    Ja3,
}

impl TlvSource {
    /// Every source, as `value` names it.
    pub const ALL: &[TlvSource] = &[
        TlvSource::Alpn,
        TlvSource::Sni,
        TlvSource::Ja4,
        TlvSource::Ja3,
    ];

    /// The source's name in `value = "…"`.
    pub fn as_str(self) -> &'static str {
        match self {
            TlvSource::Alpn => "alpn",
            TlvSource::Sni => "sni",
            TlvSource::Ja4 => "ja4",
            TlvSource::Ja3 => "ja3",
        }
    }

    pub(crate) fn from_name(name: &str) -> Option<TlvSource> {
        TlvSource::ALL.iter().copied().find(|s| s.as_str() == name)
    }

    /// The longest value: an ALPN protocol name is at most 255 bytes (RFC
    /// 7301), a host name 253, a JA4 36 characters, a JA3 hash 32.
    pub(crate) fn max_len(self) -> usize {
        match self {
            TlvSource::Alpn => 255,
            TlvSource::Sni => 253,
            TlvSource::Ja4 => 36,
            TlvSource::Ja3 => 32,
        }
    }
}

// ------------------------------------------------------------ TCP sockets

/// TCP keepalive settings (`tcp_keepalive`): after `idle` with nothing
/// sent or received, probe every `interval`; after `count` unanswered
/// probes (or unacknowledged data for as long, see [`crate::sockopt::set_keepalive`]) the
/// kernel fails the socket with ETIMEDOUT. The kernel counts
/// in whole seconds (TCP_KEEPIDLE, TCP_KEEPINTVL: 1..=32767), so `config`
/// accepts nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// `idle`: quiet time before the first probe, whole seconds.
    pub idle: Duration,
    /// `interval`: time between probes, whole seconds.
    pub interval: Duration,
    /// `count`: unanswered probes before the connection is closed.
    pub count: u32,
}
