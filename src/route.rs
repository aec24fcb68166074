//! Routing: from the ClientHello's server name to a route and its backend,
//! or to a refusal the client can understand.
//!
//! A listener generation holds one compiled [`RouteTable`]: every pattern
//! (and the no-SNI fallback) leads to one [`RouteEntry`] that owns the
//! route's name, its backend, its relay timeouts and the drain signal of
//! that identity (listener, pattern → backend). [`RouteTable::build`] compiles it from the
//! validated listener and the previous generation's table: an identity
//! that leads to an equal backend keeps its drain signal (so connections
//! started under any earlier generation stay reachable), the others get
//! fresh ones, and [`RouteTable::retired_by`] names the signals a reload
//! must fire. The validated configuration holds no run-time state.
//!
//! Per connection the name is normalised into an [`Sni`] once and looked up
//! once ([`RouteTable::decide`]); the same parse gives the name for the log
//! line. A name that matches nothing, or is not a valid host name, is
//! refused with a fatal TLS `unrecognized_name` alert (RFC 6066 §3), which
//! TLS clients report as such instead of a bare reset. A hello without SNI
//! follows the listener's `no_sni` policy.
//!
//! Not here: connecting, or any per-source policy; what else a reload
//! changed (`reload`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::client_hello::ClientHello;
use crate::config::{Backend, Listener, NoSni, Timeouts};
use crate::drain::DrainSignal;
use crate::matcher::SniMatcher;
use crate::reason::CloseReason;
use crate::sni::{Pattern, Sni};

/// A TLS 1.2-framed fatal alert record: level 2 (fatal), description 112
/// (unrecognized_name).
pub const UNRECOGNIZED_NAME_ALERT: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 112];

/// How long a refused client may take to read the alert and close, and how
/// much it may send meanwhile, before the relay closes regardless.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
const REFUSAL_LINGER_BYTES: usize = 64 * 1024;

/// Where a routed connection goes: one identity (listener, pattern or no
/// SNI → backend) of a generation's route table.
#[derive(Debug)]
pub struct RouteEntry {
    /// The route's name, or `no_sni` for the listener's fallback.
    pub route: Box<str>,
    pub backend: Arc<Backend>,
    /// The drain signal of this identity.
    pub drain: Arc<DrainSignal>,
    /// The relay timeouts of connections on this route (the listener's for
    /// `no_sni`). Not part of the identity: a reload that changes only them
    /// applies them to new connections and drains none.
    pub timeouts: Timeouts,
}

/// A listener's routes as one generation runs them.
#[derive(Debug, Default)]
pub struct RouteTable {
    /// Pattern → index into `entries` (one entry per pattern).
    matcher: SniMatcher<usize>,
    entries: Vec<RouteEntry>,
    no_sni: Option<RouteEntry>,
}

/// What routing decided for one hello.
#[derive(Debug)]
pub struct Decision<'a> {
    /// The server name as it should be logged: normalised when valid,
    /// otherwise the raw bytes escaped so that a hostile name cannot forge
    /// log lines; `None` without SNI.
    pub sni: Option<Box<str>>,
    pub target: Result<&'a RouteEntry, NoRoute>,
}

impl RouteTable {
    /// Compiles `listener`'s routes. An identity `previous` also has,
    /// leading to an equal backend and not yet drained, keeps its drain
    /// signal; every other one gets a fresh signal.
    pub fn build(listener: &Listener, previous: Option<&RouteTable>) -> RouteTable {
        let mut table = RouteTable::default();
        for route in &listener.routes {
            for pattern in &route.patterns {
                let kept = previous.and_then(|p| p.entry_for(pattern));
                let entry = RouteEntry {
                    route: route.name.as_str().into(),
                    backend: route.backend.clone(),
                    drain: carried(kept, &route.backend),
                    timeouts: route.timeouts,
                };
                // Patterns were checked unique per listener by validation.
                if table.matcher.insert(pattern, table.entries.len()).is_ok() {
                    table.entries.push(entry);
                }
            }
        }
        if let NoSni::Backend(backend) = &listener.no_sni {
            let kept = previous.and_then(|p| p.no_sni.as_ref());
            table.no_sni = Some(RouteEntry {
                route: "no_sni".into(),
                backend: backend.clone(),
                drain: carried(kept, backend),
                timeouts: listener.timeouts(),
            });
        }
        table
    }

    /// The drain signals of `self` that `next` (the same listener's next
    /// table, or `None` when the listener is gone) does not carry on: the
    /// connections on them must drain.
    pub fn retired_by(&self, next: Option<&RouteTable>) -> Vec<Arc<DrainSignal>> {
        let carried: HashSet<*const DrainSignal> = next
            .map(|next| next.signals().map(Arc::as_ptr).collect())
            .unwrap_or_default();
        self.signals()
            .filter(|signal| !carried.contains(&Arc::as_ptr(signal)))
            .cloned()
            .collect()
    }

    /// Routes one hello: parses its name once, looks it up once.
    pub fn decide(&self, hello: &ClientHello) -> Decision<'_> {
        let Some(raw) = hello.server_name.as_deref() else {
            let target = self.no_sni.as_ref().ok_or(NoRoute::NoSni);
            return Decision { sni: None, target };
        };
        match Sni::parse(raw) {
            Ok(sni) => Decision {
                target: self
                    .matcher
                    .find(&sni)
                    .map(|&i| &self.entries[i])
                    .ok_or(NoRoute::Unmatched),
                sni: Some(sni.as_str().into()),
            },
            Err(_) => Decision {
                sni: Some(
                    String::from_utf8_lossy(raw)
                        .escape_debug()
                        .to_string()
                        .into_boxed_str(),
                ),
                target: Err(NoRoute::Unmatched),
            },
        }
    }

    /// The entry stored for exactly this pattern.
    fn entry_for(&self, pattern: &Pattern) -> Option<&RouteEntry> {
        self.matcher.get(pattern).map(|&i| &self.entries[i])
    }

    fn signals(&self) -> impl Iterator<Item = &Arc<DrainSignal>> {
        self.entries
            .iter()
            .map(|e| &e.drain)
            .chain(self.no_sni.as_ref().map(|e| &e.drain))
    }
}

/// The previous identity's signal when it led to an equal backend and has
/// not been fired; a fresh one otherwise.
fn carried(previous: Option<&RouteEntry>, backend: &Arc<Backend>) -> Arc<DrainSignal> {
    match previous {
        Some(was) if *was.backend == **backend && !was.drain.is_fired() => was.drain.clone(),
        _ => DrainSignal::new(),
    }
}

/// Why a connection may not go anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoRoute {
    #[error("no SNI, and the listener rejects hellos without one")]
    NoSni,
    #[error("the SNI matches no route")]
    Unmatched,
}

impl From<NoRoute> for CloseReason {
    fn from(r: NoRoute) -> Self {
        match r {
            NoRoute::NoSni => CloseReason::NoSni,
            NoRoute::Unmatched => CloseReason::Unmatched,
        }
    }
}

/// Sends the `unrecognized_name` alert, half-closes, and lingers briefly so
/// the alert is read rather than destroyed by a reset (closing a socket with
/// unread input makes the kernel send RST).
pub async fn refuse(client: &mut TcpStream) {
    if client.write_all(&UNRECOGNIZED_NAME_ALERT).await.is_err() {
        return;
    }
    if client.shutdown().await.is_err() {
        return;
    }
    let _ = timeout(REFUSAL_LINGER, async {
        let mut sink = [0u8; 1024];
        let mut drained = 0;
        while drained < REFUSAL_LINGER_BYTES {
            match client.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
}
