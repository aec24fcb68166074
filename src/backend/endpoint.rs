//! One backend address and what the relay has learnt about it: open
//! connections (for `least_connections` and the per-address
//! `max_connections` cap), passive health (consecutive failed connects), the
//! active checker's verdict, and when it last failed. An [`Endpoint`] also
//! carries what the configuration says about the address: its `weight` and
//! its own connection cap.
//!
//! The state is shared by every connection and checker through an
//! `Arc<EndpointState>` and is only atomics: reading it on the connect path
//! costs a few loads, no lock. An [`AddressSet`] carries the state of the
//! addresses it keeps when it is replaced (a new DNS answer), so a re-resolve
//! does not forget that an address is down.
//!
//! Not here: choosing among addresses ([`crate::backend::plan`]) or
//! connecting ([`crate::tcp::dial`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::drain::DrainSignal;
use crate::metrics;

/// Milliseconds since a process-wide origin, so instants fit in an atomic.
/// 0 is reserved for "never". (Also the clock of `egress`'s cooldowns.)
pub(crate) fn now_ms() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(|| Instant::now() - Duration::from_millis(1));
    origin.elapsed().as_millis() as u64
}

/// An address of a backend with its shared state.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The address connected to.
    pub addr: SocketAddr,
    /// Its share of new connections under `round_robin`, `least_connections`
    /// and `source_hash` (1 for resolved and looked-up addresses).
    pub weight: u32,
    /// Its own `max_connections`; `None` leaves the backend's
    /// `max_connections_per_address` (if any) in force.
    pub max_connections: Option<u32>,
    /// A `backup` address: planned only while every other address is down.
    pub backup: bool,
    pub(crate) state: Arc<EndpointState>,
}

impl Endpoint {
    /// An address with weight 1 and no cap of its own, and fresh state.
    pub fn new(addr: SocketAddr) -> Endpoint {
        Endpoint::with(&Member::plain(addr))
    }

    fn with(member: &Member) -> Endpoint {
        Endpoint {
            addr: member.addr,
            weight: member.weight,
            max_connections: member.max_connections,
            backup: member.backup,
            state: Arc::default(),
        }
    }

    /// This address's cap, given the backend-wide one.
    pub(crate) fn cap(&self, per_address: Option<u32>) -> Option<u32> {
        self.max_connections.or(per_address)
    }

    /// Whether this address has `cap` connections open (or opening).
    pub(crate) fn is_full(&self, per_address: Option<u32>) -> bool {
        self.cap(per_address)
            .is_some_and(|cap| self.state.active() >= cap as usize)
    }
}

/// A configured address: plain settings.
pub use crate::config::settings::Member;

/// The addresses a connection may choose from, in configured (or answered)
/// order. Cloning is one reference count.
pub(crate) type AddressSet = Arc<[Endpoint]>;

/// A new set for `addrs` (duplicates dropped, order kept, weight 1, no
/// cap of their own) that keeps the state of every address `previous`
/// already had.
pub(crate) fn carry(previous: &[Endpoint], addrs: &[SocketAddr]) -> AddressSet {
    let members: Vec<Member> = addrs.iter().map(|&a| Member::plain(a)).collect();
    carry_members(previous, &members)
}

/// `carry` for configured addresses: each keeps its weight and cap.
pub fn carry_members(previous: &[Endpoint], members: &[Member]) -> AddressSet {
    let mut set: Vec<Endpoint> = Vec::with_capacity(members.len());
    for member in members {
        if set.iter().any(|e| e.addr == member.addr) {
            continue;
        }
        let mut endpoint = Endpoint::with(member);
        if let Some(kept) = previous.iter().find(|e| e.addr == member.addr) {
            endpoint.state = kept.state.clone();
        }
        set.push(endpoint);
    }
    set.into()
}

/// Whether two sets hold the same addresses, in any order.
pub(crate) fn same_addresses(a: &[Endpoint], b: &[Endpoint]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.iter().any(|y| y.addr == x.addr))
}

/// The state of one address shared by every connection and runtime that
/// uses it: open connections, passive and active health, operator state.
#[derive(Debug, Default)]
pub struct EndpointState {
    /// Relayed connections open through this address now. Shared with the
    /// state of the same address under a changed backend's new runtime
    /// ([`EndpointState::counting_with`]), so the connections still open
    /// under the old definition count against the new caps.
    active: Arc<AtomicUsize>,
    /// Consecutive failed connects (passive health).
    fails: AtomicU32,
    /// Passive health: down until this moment (`now_ms`), 0 when up.
    down_until: AtomicU64,
    /// The active checker's verdict: true while it says down.
    checked_down: AtomicBool,
    /// The last failed connect or check (`now_ms`), 0 for never.
    last_failure: AtomicU64,
    // Run-time control (issue 16).
    /// The operator's [`AddressState`] (its `u8`): health never changes it.
    operator: AtomicU8,
    /// The drain signals of the connections open on this address, one per
    /// route identity (parts of the routes' signals): what `maint` fires.
    /// Parts no connection holds any more are dropped as new ones come.
    /// Shared like `active` with the same address's state under a changed
    /// backend's new runtime.
    parts: Arc<Mutex<Vec<Arc<DrainSignal>>>>,
    /// The window of the last `maint`, for a connection that lands on the
    /// address after its parts were fired.
    maint_window_ms: AtomicU64,
    // The status page (issue 16).
    /// The last active check: `now_ms << 1 | passed`, 0 for none yet.
    last_check: AtomicU64,
}

/// What the operator said about an address (`POST
/// /backends/{b}/addresses/{a}/state`). Lives next to health in the
/// shared state, so it is kept wherever the state is (a re-resolve, a
/// reload that keeps the backend), and lost on restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum AddressState {
    /// Chosen as health and policy say.
    Ready,
    /// Not chosen for new connections; open ones continue.
    Drain,
    /// Not chosen for new connections; open ones are closed within
    /// `drain_timeout`.
    Maint,
}

impl AddressState {
    pub(crate) const ALL: [AddressState; 3] = [
        AddressState::Ready,
        AddressState::Drain,
        AddressState::Maint,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AddressState::Ready => "ready",
            AddressState::Drain => "drain",
            AddressState::Maint => "maint",
        }
    }

    fn from_u8(v: u8) -> AddressState {
        match v {
            1 => AddressState::Drain,
            2 => AddressState::Maint,
            _ => AddressState::Ready,
        }
    }
}

impl EndpointState {
    /// A fresh state (nothing known about health) that shares `other`'s
    /// count of open connections, and keeps the operator's state of the
    /// address and the drain parts of its open connections (so a `maint`
    /// set after the reload still reaches them).
    pub(crate) fn counting_with(other: &EndpointState) -> EndpointState {
        EndpointState {
            active: other.active.clone(),
            operator: AtomicU8::new(other.operator.load(Ordering::Relaxed)),
            parts: other.parts.clone(),
            maint_window_ms: AtomicU64::new(other.maint_window_ms.load(Ordering::Relaxed)),
            ..EndpointState::default()
        }
    }

    /// Whether neither passive nor active health has this address down.
    pub(crate) fn is_up(&self) -> bool {
        // 0 (never marked down) is the common case: no clock read for it,
        // as this runs per candidate address on every connection.
        let down_until = self.down_until.load(Ordering::Relaxed);
        !self.checked_down.load(Ordering::Relaxed) && (down_until == 0 || down_until <= now_ms())
    }

    /// The operator's state of this address.
    pub(crate) fn operator(&self) -> AddressState {
        AddressState::from_u8(self.operator.load(Ordering::Relaxed))
    }

    /// Sets the operator's state; returns the previous one.
    pub(crate) fn set_operator(&self, state: AddressState) -> AddressState {
        AddressState::from_u8(self.operator.swap(state as u8, Ordering::Relaxed))
    }

    /// The part of `route`'s drain signal for connections on this address
    /// (made on first use; a fired one is replaced).
    pub fn drain_part(&self, route: &Arc<DrainSignal>) -> Arc<DrainSignal> {
        let mut parts = self.parts.lock().unwrap_or_else(|e| e.into_inner());
        // Only this list holds it: no connection is left on that part.
        parts.retain(|p| Arc::strong_count(p) > 1);
        if let Some(part) = parts.iter().find(|p| p.is_part_of(route) && !p.is_fired()) {
            return part.clone();
        }
        let part = route.part();
        if self.operator() == AddressState::Maint {
            // Planned before the address went to maintenance, connected
            // after its parts were fired: this one closes too.
            let window = Duration::from_millis(self.maint_window_ms.load(Ordering::Relaxed));
            part.fire(window);
            return part;
        }
        parts.push(part.clone());
        part
    }

    /// Maintenance: the connections open on this address close at moments
    /// spread over `window`; new ones get new parts (and are not planned
    /// while the state says so). Returns how many were open.
    pub(crate) fn maint(&self, window: Duration) -> usize {
        self.maint_window_ms
            .store(window.as_millis() as u64, Ordering::Relaxed);
        let parts = std::mem::take(&mut *self.parts.lock().unwrap_or_else(|e| e.into_inner()));
        parts.iter().map(|p| p.fire(window)).sum()
    }

    /// Whether new connections may choose this address (the operator has
    /// not drained it or put it in maintenance). One relaxed load.
    pub(crate) fn selectable(&self) -> bool {
        self.operator.load(Ordering::Relaxed) == AddressState::Ready as u8
    }

    /// When the last connect or check failed, as an age; `None` for never.
    pub(crate) fn last_failure_age(&self) -> Option<Duration> {
        let last = self.last_failure.load(Ordering::Relaxed);
        (last != 0).then(|| Duration::from_millis(now_ms().saturating_sub(last)))
    }

    /// Open connections through this address.
    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Whether a connect or check to this address failed within `window`.
    pub(crate) fn failed_within(&self, window: Duration) -> bool {
        let last = self.last_failure.load(Ordering::Relaxed);
        last != 0 && now_ms().saturating_sub(last) < window.as_millis() as u64
    }

    /// Counts one open connection until the guard is dropped.
    pub fn enter(self: &Arc<Self>) -> InFlight {
        self.active.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// Like [`EndpointState::enter`], but only while fewer than `cap`
    /// connections are open (`None`: no cap). The slot is taken before the
    /// connect, so concurrent connections cannot overshoot the cap.
    pub(crate) fn try_enter(self: &Arc<Self>, cap: Option<u32>) -> Option<InFlight> {
        let Some(cap) = cap else {
            return Some(self.enter());
        };
        self.active
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < cap as usize).then_some(n + 1)
            })
            .ok()
            .map(|_| InFlight(self.clone()))
    }

    /// A connect to `addr` of `backend` succeeded.
    pub(crate) fn connect_succeeded(&self, backend: &str, addr: SocketAddr) {
        let had = self.fails.swap(0, Ordering::Relaxed);
        if self.down_until.swap(0, Ordering::Relaxed) != 0 {
            tracing::info!(%backend, %addr, after_failures = had, "backend address up again (a connect succeeded)");
            metrics::metrics().backend_address_health(backend, addr, !self.checked_down());
        }
    }

    /// A connect to `addr` failed; after `max_fails` in a row (0: never)
    /// the address is down for `backoff`. Returns whether this marked it down.
    pub(crate) fn connect_failed(
        &self,
        backend: &str,
        addr: SocketAddr,
        max_fails: u32,
        backoff: Duration,
    ) -> bool {
        let now = now_ms();
        self.last_failure.store(now, Ordering::Relaxed);
        let fails = self.fails.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if max_fails == 0 || fails < max_fails {
            return false;
        }
        let until = now + backoff.as_millis() as u64;
        let before = self.down_until.swap(until, Ordering::Relaxed);
        let newly = before <= now;
        if newly && before == 0 {
            tracing::warn!(%backend, %addr, failures = fails, backoff = ?backoff, "backend address marked down (consecutive connect failures)");
            metrics::metrics().backend_address_health(backend, addr, false);
        }
        newly
    }

    /// The active checker's verdict; returns whether it changed.
    pub(crate) fn set_checked_down(&self, down: bool) -> bool {
        if down {
            self.last_failure.store(now_ms(), Ordering::Relaxed);
        }
        self.checked_down.swap(down, Ordering::Relaxed) != down
    }

    /// Whether the active checker has this address down.
    pub(crate) fn checked_down(&self) -> bool {
        self.checked_down.load(Ordering::Relaxed)
    }

    /// Records a failure seen by a prober (active check, latency round)
    /// without touching the passive counters.
    pub(crate) fn note_failure(&self) {
        self.last_failure.store(now_ms(), Ordering::Relaxed);
    }

    /// An active health check of this address ended (`passed` or not).
    pub(crate) fn note_check(&self, passed: bool) {
        // At least 1 ms, so a check is never mistaken for "none yet".
        let at = now_ms().max(1);
        self.last_check
            .store(at << 1 | u64::from(passed), Ordering::Relaxed);
    }

    /// The last active check: how long ago, and whether it passed.
    pub(crate) fn last_check(&self) -> Option<(Duration, bool)> {
        let v = self.last_check.load(Ordering::Relaxed);
        (v != 0).then(|| {
            let age = Duration::from_millis(now_ms().saturating_sub(v >> 1));
            (age, v & 1 == 1)
        })
    }
}

/// One open connection through an address (`least_connections` reads the
/// count); dropping it ends the count.
#[derive(Debug)]
pub struct InFlight(Arc<EndpointState>);

impl InFlight {
    /// The state of the address this connection is on.
    pub(crate) fn state(&self) -> &Arc<EndpointState> {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn passive_health_marks_down_after_max_fails_and_up_on_success() {
        let state = EndpointState::default();
        let backoff = Duration::from_secs(60);
        assert!(!state.connect_failed("b", addr(1), 3, backoff));
        assert!(!state.connect_failed("b", addr(1), 3, backoff));
        assert!(state.is_up());
        assert!(state.connect_failed("b", addr(1), 3, backoff));
        assert!(!state.is_up());
        assert!(state.failed_within(Duration::from_secs(1)));
        state.connect_succeeded("b", addr(1));
        assert!(state.is_up());
    }

    #[test]
    fn max_fails_zero_never_marks_down() {
        let state = EndpointState::default();
        for _ in 0..10 {
            assert!(!state.connect_failed("b", addr(1), 0, Duration::from_secs(60)));
        }
        assert!(state.is_up());
    }

    #[test]
    fn carry_keeps_state_of_kept_addresses_and_drops_duplicates() {
        let old = carry(&[], &[addr(1), addr(2)]);
        old[0].state.set_checked_down(true);
        let new = carry(&old, &[addr(3), addr(1), addr(1)]);
        assert_eq!(new.len(), 2);
        assert_eq!(new[1].addr, addr(1));
        assert!(new[1].state.checked_down());
        assert!(Arc::ptr_eq(&new[1].state, &old[0].state));
        assert!(!same_addresses(&old, &new));
        assert!(same_addresses(&new, &carry(&[], &[addr(1), addr(3)])));
    }

    #[test]
    fn try_enter_stops_at_the_cap_and_a_dropped_guard_frees_a_slot() {
        let state = Arc::new(EndpointState::default());
        let a = state.try_enter(Some(2)).unwrap();
        let _b = state.try_enter(Some(2)).unwrap();
        assert!(state.try_enter(Some(2)).is_none());
        assert_eq!(state.active(), 2);
        drop(a);
        assert!(state.try_enter(Some(2)).is_some());
        // No cap: always.
        assert!(state.try_enter(None).is_some());
    }

    #[test]
    fn carry_members_keeps_state_but_takes_the_new_weight_and_cap() {
        let old = carry(&[], &[addr(1)]);
        old[0].state.set_checked_down(true);
        let new = carry_members(
            &old,
            &[Member {
                addr: addr(1),
                weight: 3,
                max_connections: Some(5),
                source: None,
                backup: false,
            }],
        );
        assert!(Arc::ptr_eq(&new[0].state, &old[0].state));
        assert_eq!((new[0].weight, new[0].max_connections), (3, Some(5)));
        assert_eq!(new[0].cap(Some(9)), Some(5));
        assert_eq!(old[0].cap(Some(9)), Some(9));
    }

    #[test]
    fn a_state_counting_with_another_shares_only_the_count_and_the_operator_state() {
        let old = Arc::new(EndpointState::default());
        old.set_checked_down(true);
        old.set_operator(AddressState::Drain);
        assert_eq!(
            EndpointState::counting_with(&old).operator(),
            AddressState::Drain
        );
        let held = old.enter();
        let new = Arc::new(EndpointState::counting_with(&old));
        assert_eq!(new.active(), 1);
        assert!(!new.checked_down(), "health starts afresh");
        assert!(new.try_enter(Some(1)).is_none());
        drop(held);
        assert_eq!(new.active(), 0);
    }

    #[tokio::test]
    async fn maint_fires_the_parts_of_open_connections_and_of_late_arrivals() {
        let state = EndpointState::default();
        let route = DrainSignal::new();
        let open = state.drain_part(&route).enter();
        assert!(
            Arc::ptr_eq(open.signal(), &state.drain_part(&route)),
            "one part per route"
        );
        state.set_operator(AddressState::Maint);
        assert_eq!(state.maint(Duration::from_millis(10)), 1);
        open.closing(1).await;
        assert_eq!(
            open.reason(),
            crate::close_reason::CloseReason::AddressMaint
        );
        // Planned before the change, connected after: closed as well.
        let late = state.drain_part(&route).enter();
        late.closing(2).await;
        assert_eq!(
            late.reason(),
            crate::close_reason::CloseReason::AddressMaint
        );
        // Ready again: a fresh part, not fired.
        state.set_operator(AddressState::Ready);
        assert!(!state.drain_part(&route).is_fired());
        assert!(!route.is_fired(), "the route is untouched");
    }

    #[test]
    fn in_flight_counts_open_connections() {
        let state = Arc::new(EndpointState::default());
        let a = state.enter();
        let b = state.enter();
        assert_eq!(state.active(), 2);
        drop(a);
        assert_eq!(state.active(), 1);
        drop(b);
        assert_eq!(state.active(), 0);
    }
}
