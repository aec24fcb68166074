//! Every key's accepted range (`*_RANGE`), as the checker applies it and
//! [`super::keys`] documents it: bounds that keep a setting meaningful.
//! A leaf: it names nothing else, so the key declarations can read it
//! without reaching the settings' types.
//!
//! Not here: defaults ([`super::defaults`]) or how a value is checked
//! against its range ([`super::check`]).

use std::ops::RangeInclusive;

/// Linux bounds: TCP_KEEPIDLE and TCP_KEEPINTVL (seconds), TCP_KEEPCNT.
pub(super) const KEEPALIVE_SECS_RANGE: RangeInclusive<i64> = 1..=32_767;
pub(super) const KEEPALIVE_COUNT_RANGE: RangeInclusive<i64> = 1..=127;
/// `max_sources`.
pub(super) const MAX_SOURCES_RANGE: RangeInclusive<i64> = 1..=10_000_000;
pub(super) const JA4_SOURCE_MULTIPLE_RANGE: RangeInclusive<i64> = 1..=1_000;
/// `[backend.*] max_datagram_size`: from QUIC's smallest datagram to
/// UDP's largest over IPv4.
pub(super) const MAX_DATAGRAM_SIZE_RANGE: RangeInclusive<i64> = 1200..=65_507;
pub(super) const MAX_CLIENT_HELLO_BYTES_RANGE: RangeInclusive<i64> = 512..=262_144;
pub(super) const MAX_CONNECTIONS_RANGE: RangeInclusive<i64> = 1..=10_000_000;
pub(super) const BACKLOG_RANGE: RangeInclusive<i64> = 1..=65_535;
pub(super) const MAX_HOPS_RANGE: RangeInclusive<i64> = 1..=16;
pub(super) const THREADS_RANGE: RangeInclusive<i64> = 1..=1024;
/// One page up to Linux's default `fs.pipe-max-size` (1 MiB).
pub(super) const PIPE_SIZE_RANGE: RangeInclusive<i64> = 4096..=1_048_576;
pub(super) const MAX_PIPES_RANGE: RangeInclusive<i64> = 1..=1_000_000;
pub(super) const RATE_RANGE: RangeInclusive<i64> = 1..=10_000_000;
/// `attempts_period`, in milliseconds (HAProxy counts in millisecond
/// ticks): long enough to count a burst, at most an hour.
pub(super) const ATTEMPTS_PERIOD_MS_RANGE: RangeInclusive<i64> = 100..=3_600_000;
/// `rate_up` and the other bandwidth rates, in bytes per second: from
/// 1 KB/s (below it a connection is stalled, not shaped) to 1 TB/s.
pub(super) const BANDWIDTH_RANGE: RangeInclusive<i64> = 1_000..=1_000_000_000_000;
/// `burst`, in bytes: at least one 1,500-byte packet, at most 1 TB.
pub(super) const BURST_RANGE: RangeInclusive<i64> = 1_500..=1_000_000_000_000;
pub(super) const PREFIX_V4_RANGE: RangeInclusive<i64> = 1..=32;
pub(super) const PREFIX_V6_RANGE: RangeInclusive<i64> = 1..=128;
pub(super) const CONNECT_ATTEMPTS_RANGE: RangeInclusive<i64> = 1..=64;
pub(super) const MAX_FAILS_RANGE: RangeInclusive<i64> = 0..=1000;
pub(super) const RISE_FALL_RANGE: RangeInclusive<i64> = 1..=100;
pub(super) const PORT_RANGE: RangeInclusive<i64> = 1..=65_535;
/// `[backend.*.cluster] max_lookups_in_flight`: below the cache's share of
/// unanswered names, so a full share always has an entry that can go.
pub(super) const LOOKUPS_IN_FLIGHT_RANGE: RangeInclusive<i64> = 1..=1_000;
/// `[backend.*.cluster] new_names_per_second`.
pub(super) const NEW_NAMES_RANGE: RangeInclusive<i64> = 1..=100_000;
/// An address's `weight`: 0 is refused (remove the address instead), and
/// 256 is HAProxy's maximum.
pub(super) const WEIGHT_RANGE: RangeInclusive<i64> = 1..=256;
/// `[log] queue`, in lines.
pub(super) const LOG_QUEUE_RANGE: RangeInclusive<i64> = 1..=1_000_000;
/// `max_connections` of an address and `max_connections_per_address`.
pub(super) const ADDRESS_CONNECTIONS_RANGE: RangeInclusive<i64> = 1..=10_000_000;
/// A PROXY v2 TLV type is one byte.
pub(super) const TLV_TYPE_RANGE: RangeInclusive<i64> = 0..=255;
