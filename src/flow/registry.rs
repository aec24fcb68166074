//! The registry of open connections: what `GET /connections` lists and
//! `DELETE /connections` closes.
//!
//! A connection registers once it is relaying (its backend connected and
//! the hello replayed), with what its log line will name: id, listener,
//! route, SNI, backend and address, measured and claimed client, accept
//! time. Its `Activity` (bytes each way, last byte moved) lives in the
//! entry, so a listing reads the relay's own counters. The [`Registered`]
//! guard removes the entry when the connection ends.
//!
//! The table is sharded by id (`SHARDS` mutex-guarded ordered maps): a
//! registration or removal locks one shard for a map insert or remove, and
//! a listing locks one shard at a time only to copy out at most one page of
//! `Arc`s; JSON is formatted after every lock is released, so a full
//! listing of thousands of connections never holds a shard for long.
//!
//! Closing one connection: `close` stops the entry's `Activity` with the
//! operator's code, which wakes the relay (it waits on that stop alone),
//! and the connection ends with [`CloseReason::Admin`] instead of
//! `shutdown`. The process's shutdown reaches relaying connections the
//! same way (`shut_down`, code `SHUTDOWN`), not through a waiter on the
//! shutdown token in each connection's task.
//!
//! Cost per connection: the entry (one allocation of 192 bytes, a class of
//! mimalloc's, with the `Arc`'s counts: its three addresses packed in 24
//! bytes each, the route name and SNI in one more allocation, the
//! `local_backend` flag in the accept stamp's top bit; listener and
//! backend are shared `Arc`s; it was 224 bytes with plain `SocketAddr`s), its place in a
//! shard's ordered set (a B-tree of pointers: about 15 bytes per entry), and one shard lock
//! at register and at remove (`cargo bench --bench registry`). The entry
//! once held a child of the accept loop's token as its stop: 112 bytes
//! more per connection, and the route name and SNI in two allocations.
//!
//! An operator's route drain (`drain`) closes the route's registered
//! connections at moments spread over its window, like a reload's drain,
//! but without firing the route's drain signal: the route stays in the
//! configuration and keeps taking new connections.
//!
//! A push of the local name set (`POST /update-local-snis`) closes, the same
//! way, the connections a cluster backend sent to its `local_backend` whose
//! name is no longer local (`move_out`, reason `moved`); an entry says
//! whether it went local in one `bool`.
//!
//! QUIC flows register the same way once they are open ([`crate::quic::socket_task`]:
//! the hello routed and the backend socket connected), with their
//! listener's protocol, so an operator lists, filters (`protocol`), closes
//! and drains them like TCP connections; the flow's task waits on the same
//! per-entry token and its byte counts go to the entry's `Activity`.
//!
//! Not here: connections still in setup (preface, inspect, connect) and
//! QUIC flows still pending (hello incomplete) are not listed, closed or
//! drained; reload drains (see `drain`).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::addr::PackedAddr;
use crate::close_reason::CloseReason;
use crate::config::{Backend, Listener, Protocol};
use crate::drain::unit_fraction;
use crate::flow::access::{ConnRecord, RecordPart};
use crate::pump::ready::{self, Activity};
use crate::wire::cidr::Cidr;

/// The top bit of [`ConnectionEntry`]'s accept stamp: sent to a `local_backend`.
const LOCAL_BIT: u64 = 1 << 63;

/// Shards of the table; a power of two, so the shard is the id's low bits.
pub(crate) const SHARDS: usize = 16;

/// One open connection, as listed.
#[derive(Debug)]
pub struct ConnectionEntry {
    /// The connection's id, as its log lines name it.
    pub id: u64,
    /// The listener that accepted it.
    pub listener: Arc<Listener>,
    /// The route's name, a NUL, then the SNI (empty without one), in one
    /// allocation (see [`route`](Self::route) and [`sni`](Self::sni)): a
    /// valid SNI holds no NUL, so the last one splits them whatever the
    /// route's name holds.
    names: Box<str>,
    /// The backend it is relayed to.
    pub backend: Arc<Backend>,
    /// The backend address it connected to (see
    /// [`backend_addr`](Self::backend_addr)).
    backend_addr: PackedAddr,
    /// The TCP peer, as measured (see [`client`](Self::client)).
    client: PackedAddr,
    /// The client a trusted peer's PROXY header claims, if any (see
    /// [`claimed`](Self::claimed)).
    claimed: Option<PackedAddr>,
    /// When it was accepted, as an activity stamp (`ready::stamp`: eight
    /// bytes, where an `Instant` takes sixteen) in the low 63 bits (see
    /// [`age`](Self::age)); the top bit: sent to a cluster backend's
    /// `local_backend` (see [`local`](Self::local)).
    accepted_local: u64,
    /// The relay's byte counts and last activity, and its stop: why an
    /// operator stopped it (`ADMIN`, `DRAINED` or `MOVED`).
    pub activity: Activity,
}

/// What a connection registers with (see [`register`]).
pub struct Meta<'a> {
    /// The connection's id.
    pub id: u64,
    /// The listener that accepted it.
    pub listener: &'a Arc<Listener>,
    /// The name of the route it took.
    pub route: &'a str,
    /// The SNI its hello named; `None` without one.
    pub sni: Option<&'a str>,
    /// The backend it is relayed to.
    pub backend: &'a Arc<Backend>,
    /// The backend address it connected to.
    pub backend_addr: SocketAddr,
    /// The TCP peer (or QUIC source), as measured.
    pub client: SocketAddr,
    /// The client a trusted peer's PROXY header claims, if any.
    pub claimed: Option<SocketAddr>,
    /// When it was accepted.
    pub accepted: Instant,
    /// Sent to a cluster backend's `local_backend` (see [`ConnectionEntry::local`]).
    pub local: bool,
}

impl<'a> Meta<'a> {
    /// The entry of the connection or flow `record` describes, routed and
    /// connected (or its address chosen), `local` if it went to a
    /// cluster's `local_backend`: the one way both transports list one.
    pub(crate) fn of<'l, P: RecordPart<'l>>(record: &'a ConnRecord<P>, local: bool) -> Meta<'a> {
        let arrival = record.part.arrival();
        Meta {
            id: record.id,
            listener: record.part.listener(),
            route: record.route().unwrap_or_default(),
            sni: record.sni.as_deref(),
            backend: record.backend.as_ref().expect("registered once routed"),
            backend_addr: record.backend_addr.expect("registered once connected"),
            client: arrival.peer.0,
            claimed: record.claimed.map(|c| c.0),
            accepted: arrival.at,
            local,
        }
    }
}

/// An entry in a shard's ordered set, ordered (and found) by its id: the
/// set keeps one pointer per connection where a map from id to entry kept
/// the id twice, so its B-tree nodes are half the size (about 15 bytes
/// per connection instead of 27).
#[derive(Debug, Clone)]
struct ById(Arc<ConnectionEntry>);

impl Borrow<u64> for ById {
    fn borrow(&self) -> &u64 {
        &self.0.id
    }
}

impl PartialEq for ById {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for ById {}

impl PartialOrd for ById {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ById {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.id.cmp(&other.0.id)
    }
}

type Shard = Mutex<BTreeSet<ById>>;

fn table() -> &'static [Shard; SHARDS] {
    static TABLE: OnceLock<[Shard; SHARDS]> = OnceLock::new();
    TABLE.get_or_init(|| std::array::from_fn(|_| Mutex::new(BTreeSet::new())))
}

fn shard(id: u64) -> &'static Shard {
    &table()[id as usize % SHARDS]
}

fn lock(shard: &Shard) -> std::sync::MutexGuard<'_, BTreeSet<ById>> {
    // A panic while holding a shard leaves a valid map: keep serving.
    shard
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A registered connection; dropping it removes the entry.
#[derive(Debug)]
pub struct Registered {
    entry: Arc<ConnectionEntry>,
}

/// Registers a relaying connection. A TCP relay waits on the entry's stop
/// alone (the shutdown reaches it through `shut_down`, or
/// `Registered::stop_if_shut_down` right after this); a QUIC flow's task
/// waits on its socket's token beside it (`Registered::stopped`).
pub fn register(meta: Meta<'_>) -> Registered {
    let names = [meta.route, "\0", meta.sni.unwrap_or_default()]
        .concat()
        .into_boxed_str();
    let local = if meta.local { LOCAL_BIT } else { 0 };
    let entry = Arc::new(ConnectionEntry {
        id: meta.id,
        listener: meta.listener.clone(),
        names,
        backend: meta.backend.clone(),
        backend_addr: meta.backend_addr.into(),
        client: meta.client.into(),
        claimed: meta.claimed.map(PackedAddr::from),
        accepted_local: (ready::stamp(meta.accepted) & !LOCAL_BIT) | local,
        activity: Activity::new(),
    });
    lock(shard(meta.id)).insert(ById(entry.clone()));
    Registered { entry }
}

impl Registered {
    pub(crate) fn activity(&self) -> &Activity {
        &self.entry.activity
    }

    /// Resolves when the connection is to stop: `shutdown` (its accept
    /// loop's or QUIC socket's token), or an operator's close, drain or
    /// move (told apart by [`reason`](Self::reason)). The TCP relay reads
    /// the stop alone in its own poll instead ([`crate::pump::relay`]), after
    /// [`stop_if_shut_down`](Self::stop_if_shut_down).
    pub(crate) async fn stopped(&self, shutdown: &CancellationToken) {
        tokio::select! {
            _ = self.entry.activity.stopped() => {}
            () = shutdown.cancelled() => {}
        }
    }

    /// The entry, as listed.
    pub(crate) fn entry(&self) -> &ConnectionEntry {
        &self.entry
    }

    /// Stops the entry at once if `shutdown` has fired already: a
    /// connection that registered after [`shut_down`] walked the table.
    /// Called right after [`register`], by a holder that waits on the
    /// entry's stop alone.
    pub(crate) fn stop_if_shut_down(&self, shutdown: &CancellationToken) {
        if shutdown.is_cancelled() {
            self.entry.stop(SHUTDOWN);
        }
    }

    /// The entry itself, for a second holder that only counts activity
    /// (a QUIC flow's socket task counts the client's datagrams while the
    /// flow's own task holds this guard). Holding it does not keep the
    /// connection listed: the guard's drop removes it from the table.
    pub(crate) fn shared(&self) -> Arc<ConnectionEntry> {
        self.entry.clone()
    }

    /// The relay's reason, told apart: a stop by an operator is `admin`.
    pub(crate) fn reason(&self, relay: CloseReason) -> CloseReason {
        match (relay, self.entry.activity.stopped_as()) {
            (CloseReason::Shutdown, ADMIN) => CloseReason::Admin,
            (CloseReason::Shutdown, DRAINED) => CloseReason::Drained,
            (CloseReason::Shutdown, MOVED) => CloseReason::Moved,
            _ => relay,
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(shard(self.entry.id)).remove(&self.entry.id);
    }
}

/// Which connections a listing or a close selects; every set field must
/// match.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    /// Only the connection with this id.
    pub id: Option<u64>,
    /// Only connections on the listener of this name.
    pub listener: Option<String>,
    /// Only connections on the route of this name.
    pub route: Option<String>,
    /// Exact, lowercase.
    pub sni: Option<String>,
    /// Only connections to the backend of this name.
    pub backend: Option<String>,
    /// Matches the measured client or the claimed one.
    pub client: Option<Cidr>,
    /// The listener's protocol: TCP connections or QUIC flows.
    pub protocol: Option<Protocol>,
}

impl Filter {
    pub(crate) fn is_empty(&self) -> bool {
        self.id.is_none()
            && self.listener.is_none()
            && self.route.is_none()
            && self.sni.is_none()
            && self.backend.is_none()
            && self.client.is_none()
            && self.protocol.is_none()
    }

    fn matches(&self, e: &ConnectionEntry) -> bool {
        self.id.is_none_or(|id| id == e.id)
            && self
                .listener
                .as_deref()
                .is_none_or(|l| l == e.listener.name)
            && self.route.as_deref().is_none_or(|r| r == e.route())
            && self.sni.as_deref().is_none_or(|s| Some(s) == e.sni())
            && self.backend.as_deref().is_none_or(|b| b == e.backend.name)
            && self.client.as_ref().is_none_or(|c| {
                c.contains(e.client().ip()) || e.claimed().is_some_and(|a| c.contains(a.ip()))
            })
            && self.protocol.is_none_or(|p| p == e.listener.protocol)
    }
}

/// One page of matching connections, by ascending id, after `after`: at
/// most `limit`, and whether more match past the page.
pub fn list(filter: &Filter, after: u64, limit: usize) -> (Vec<Arc<ConnectionEntry>>, bool) {
    let mut page = Vec::with_capacity(limit.min(1024) + 1);
    for shard in table() {
        // Each shard gives at most limit + 1 (to know whether more follow);
        // the lock is held only for this copy.
        let map = lock(shard);
        page.extend(
            map.range(after.saturating_add(1)..)
                .map(|e| &e.0)
                .filter(|e| filter.matches(e))
                .take(limit + 1)
                .cloned(),
        );
    }
    page.sort_unstable_by_key(|e| e.id);
    let more = page.len() > limit;
    page.truncate(limit);
    (page, more)
}

/// Closes every matching connection (reason `admin`); returns how many.
pub(crate) fn close(filter: &Filter) -> usize {
    let mut chosen = Vec::new();
    for shard in table() {
        chosen.extend(
            lock(shard)
                .iter()
                .map(|e| &e.0)
                .filter(|e| filter.matches(e))
                .cloned(),
        );
    }
    for entry in &chosen {
        entry.stop(ADMIN);
    }
    chosen.len()
}

/// Stops every registered connection as the process shuts down (reason
/// `shutdown`), right after the shutdown token fires: a relaying
/// connection waits on its entry's stop alone, not on the token, which
/// saves every connection's task a waiter of 72 bytes. A connection that
/// registers after this has run finds the token fired and stops itself
/// (`connection::handle`): its insert and this walk take the same shard
/// lock, so one of the two sees the other. Returns how many it stopped.
pub(crate) fn shut_down() -> usize {
    let mut stopped = 0;
    for shard in table() {
        for entry in lock(shard).iter().map(|e| &e.0) {
            entry.stop(SHUTDOWN);
            stopped += 1;
        }
    }
    stopped
}

/// Wakes every registered connection's task to read its drain signal
/// again, after one or more [`DrainSignal`](crate::drain::DrainSignal)s
/// fired (a reload's changed or removed routes, an address put in
/// maintenance). The TCP relay keeps no waiter of its own on its drain
/// signal, which saves every relaying connection's task 72 bytes: it
/// reads the signal when woken, and waits on its entry's waker, which
/// this wakes ([`crate::pump::relay`]). A relay that registers its
/// waker after this walk took its entry's lock reads the fired signal
/// itself (the signal is set before the walk). Every connection is
/// woken, drained or not: a reload is rare, and an extra poll of a
/// connection that has nothing to do reads two sockets' readiness and
/// returns. Returns how many were woken.
pub(crate) fn drains_fired() -> usize {
    let mut woken = 0;
    for shard in table() {
        for entry in lock(shard).iter().map(|e| &e.0) {
            entry.activity.nudge();
            woken += 1;
        }
    }
    woken
}

/// Closes every matching connection at its own moment within `window`
/// from now (reason `drained`), as a reload drains a changed route: the
/// moments are drawn per connection id, and one task closes them in turn.
/// Returns how many will be closed.
pub(crate) fn drain(filter: &Filter, window: Duration) -> usize {
    spread(|e| filter.matches(e), window, DRAINED)
}

/// Closes, at moments spread over `window` (reason `moved`), every
/// connection sent to a cluster's `local_backend` whose name is in
/// `names` (names a push no longer lists as local), but for those that
/// `still_local(backend, sni)` says its backend still sends there (a
/// `local_overrides` name). Returns how many.
pub(crate) fn move_out(
    names: &HashSet<Box<str>>,
    window: Duration,
    still_local: impl Fn(&str, &str) -> bool,
) -> usize {
    if names.is_empty() {
        return 0;
    }
    spread(
        |e| {
            e.local()
                && e.sni()
                    .is_some_and(|s| names.contains(s) && !still_local(&e.backend.name, s))
        },
        window,
        MOVED,
    )
}

/// Closes the entries `pick` selects, each at its moment within `window`
/// (drawn per connection id), as `why`; one task closes them in turn.
fn spread(pick: impl Fn(&ConnectionEntry) -> bool, window: Duration, why: u8) -> usize {
    let start = Instant::now();
    let mut chosen: Vec<(Instant, Weak<ConnectionEntry>)> = Vec::new();
    for shard in table() {
        chosen.extend(
            lock(shard)
                .iter()
                .map(|e| &e.0)
                .filter(|e| pick(e))
                .map(|e| {
                    (
                        start + window.mul_f64(DRAIN_SPREAD * unit_fraction(e.id)),
                        Arc::downgrade(e),
                    )
                }),
        );
    }
    chosen.sort_unstable_by_key(|(at, _)| *at);
    let count = chosen.len();
    if count > 0 {
        // Weak: a connection that ends on its own meanwhile is not kept.
        tokio::spawn(async move {
            for (at, entry) in chosen {
                tokio::time::sleep_until(at).await;
                if let Some(entry) = entry.upgrade() {
                    entry.stop(why);
                }
            }
        });
    }
    count
}

/// The share of the window over which a drain spreads its closes (as
/// `drain` does: the last connection is gone before the window ends).
const DRAIN_SPREAD: f64 = 0.99;
const ADMIN: u8 = 1;
const DRAINED: u8 = 2;
const MOVED: u8 = 3;
/// The process's shutdown ([`shut_down`]): the relay's own reason,
/// `shutdown`, stands.
pub(crate) const SHUTDOWN: u8 = 4;

/// Open relaying connections per route name, for a summary (status page).
pub(crate) fn per_route() -> BTreeMap<Box<str>, usize> {
    let mut counts = BTreeMap::new();
    for shard in table() {
        for e in lock(shard).iter().map(|e| &e.0) {
            *counts.entry(e.route().into()).or_insert(0) += 1;
        }
    }
    counts
}

impl ConnectionEntry {
    /// Stops the relay, as `why`; the first reason given wins.
    fn stop(&self, why: u8) {
        self.activity.stop(why);
    }

    /// The name of the route it took (`no_sni` when its hello had no SNI).
    pub fn route(&self) -> &str {
        self.names.rsplit_once('\0').map_or("", |(route, _)| route)
    }

    /// The SNI its hello named; `None` without one.
    pub fn sni(&self) -> Option<&str> {
        let (_, sni) = self.names.rsplit_once('\0')?;
        (!sni.is_empty()).then_some(sni)
    }

    /// The backend address it connected to.
    pub fn backend_addr(&self) -> SocketAddr {
        self.backend_addr.get()
    }

    /// The TCP peer (or QUIC source), as measured.
    pub fn client(&self) -> SocketAddr {
        self.client.get()
    }

    /// The client a trusted peer's PROXY header claims, if any.
    pub fn claimed(&self) -> Option<SocketAddr> {
        self.claimed.map(PackedAddr::get)
    }

    /// Sent to a cluster backend's `local_backend` (this node holds the
    /// site): a push that no longer lists the name closes it (`move_out`).
    pub fn local(&self) -> bool {
        self.accepted_local & LOCAL_BIT != 0
    }

    /// How long ago it was accepted (a connection accepted before the
    /// first activity stamp of the process counts from that stamp).
    pub(crate) fn age(&self) -> Duration {
        ready::from_stamp(self.accepted_local & !LOCAL_BIT).elapsed()
    }

    pub(crate) fn idle(&self) -> Duration {
        self.activity.last().elapsed()
    }
}

#[cfg(test)]
mod tests {
    use crate::flow::registry::*;
    use std::path::Path;

    /// The entry and the `Arc`'s two counts fit mimalloc's 192-byte class:
    /// past it, every open connection pays 32 bytes more.
    #[test]
    fn an_entry_fits_a_192_byte_allocation() {
        let size = std::mem::size_of::<ConnectionEntry>() + 2 * std::mem::size_of::<usize>();
        assert!(size <= 192, "a registry entry takes {size} bytes");
    }

    use crate::config::Config;

    #[tokio::test]
    async fn pages_filters_and_closes() {
        let config = Config::from_toml(
            r#"
            [[listener]]
            name = "edge"
            listen = ["127.0.0.1:0"]
            [[route]]
            sni = ["a.test"]
            backend = "origin"
            [backend.origin]
            addresses = ["127.0.0.1:9"]
            "#,
            Path::new("registry.toml"),
        )
        .unwrap();
        let listener = Arc::new(config.listeners[0].clone());
        let backend = config.backends.values().next().unwrap().clone();
        let shutdown = CancellationToken::new();
        let base = 1u64 << 60;
        let mut held = Vec::new();
        for i in 0..40 {
            held.push(register(Meta {
                id: base + i,
                listener: &listener,
                route: "r",
                sni: Some(if i % 2 == 0 { "a.test" } else { "b.test" }),
                backend: &backend,
                backend_addr: "127.0.0.1:9".parse().unwrap(),
                client: "10.0.0.1:1".parse().unwrap(),
                claimed: Some("192.0.2.7:2".parse().unwrap()),
                accepted: Instant::now(),
                local: i % 4 == 1,
            }));
        }
        let filter = Filter {
            sni: Some("a.test".into()),
            ..Filter::default()
        };
        let (page, more) = list(&filter, base - 1, 15);
        assert_eq!(page.len(), 15);
        assert!(more);
        assert!(page.windows(2).all(|w| w[0].id < w[1].id));
        let (rest, more) = list(&filter, page[14].id, 15);
        assert_eq!((rest.len(), more), (5, false));
        let by_claim = Filter {
            client: Some("192.0.2.0/24".parse().unwrap()),
            id: Some(base + 3),
            ..Filter::default()
        };
        assert_eq!(close(&by_claim), 1);
        assert_ne!(held[3].activity().stopped_as(), 0);
        assert_eq!(held[3].reason(CloseReason::Shutdown), CloseReason::Admin);
        assert_eq!(held[2].activity().stopped_as(), 0);
        assert_eq!(held[2].reason(CloseReason::Shutdown), CloseReason::Shutdown);
        // A drain: every `b.test` one, within the window, as `drained`.
        let b = Filter {
            sni: Some("b.test".into()),
            ..Filter::default()
        };
        assert_eq!(drain(&b, Duration::from_millis(50)), 20);
        for (i, h) in held.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
            tokio::time::timeout(Duration::from_secs(5), h.stopped(&shutdown))
                .await
                .unwrap();
            let want = if i == 3 {
                CloseReason::Admin
            } else {
                CloseReason::Drained
            };
            assert_eq!(h.reason(CloseReason::Shutdown), want);
        }
        drop(held);
        assert!(list(&filter, base - 1, 10).0.is_empty());

        // Moved: only connections sent to a local backend, by name.
        let mut held = Vec::new();
        for i in 0..4u64 {
            held.push(register(Meta {
                id: base + 100 + i,
                listener: &listener,
                route: "r",
                sni: Some(if i < 2 { "gone.test" } else { "kept.test" }),
                backend: &backend,
                backend_addr: "127.0.0.1:9".parse().unwrap(),
                client: "10.0.0.1:1".parse().unwrap(),
                claimed: None,
                accepted: Instant::now(),
                local: i != 1,
            }));
        }
        let gone: HashSet<Box<str>> = ["gone.test".into()].into();
        assert_eq!(move_out(&gone, Duration::from_millis(20), |_, _| true), 0);
        assert_eq!(move_out(&gone, Duration::from_millis(20), |_, _| false), 1);
        tokio::time::timeout(Duration::from_secs(5), held[0].stopped(&shutdown))
            .await
            .unwrap();
        assert_eq!(held[0].reason(CloseReason::Shutdown), CloseReason::Moved);
        assert_eq!(held[1].activity().stopped_as(), 0, "a remote answer stays");
        assert_eq!(held[2].activity().stopped_as(), 0, "another name stays");

        // Packed fields come back whole; a connection that registers after
        // the shutdown walked the table stops itself.
        let late = register(Meta {
            id: base + 200,
            listener: &listener,
            route: "r\0with a NUL",
            sni: None,
            backend: &backend,
            backend_addr: "[fe80::1%3]:443".parse().unwrap(),
            client: "[2001:db8::7]:5".parse().unwrap(),
            claimed: None,
            accepted: Instant::now(),
            local: true,
        });
        let entry = late.shared();
        assert_eq!(entry.route(), "r\0with a NUL");
        assert_eq!(late.entry().sni(), None);
        assert_eq!(entry.backend_addr(), "[fe80::1%3]:443".parse().unwrap());
        assert_eq!(entry.client(), "[2001:db8::7]:5".parse().unwrap());
        assert_eq!(entry.claimed(), None);
        assert!(entry.local());
        assert!(entry.age() < Duration::from_secs(60));
        late.stop_if_shut_down(&shutdown);
        assert_eq!(late.activity().stopped_as(), 0);
        shutdown.cancel();
        late.stop_if_shut_down(&shutdown);
        assert_eq!(late.activity().stopped_as(), SHUTDOWN);
        assert_eq!(late.reason(CloseReason::Shutdown), CloseReason::Shutdown);
    }
}
