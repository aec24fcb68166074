//! Routing: from the ClientHello's server name to a route and its backend,
//! or to a refusal the client can understand.
//!
//! The name is normalised into an [`Sni`] and looked up in the listener's
//! compiled matcher. A name that matches nothing, or is not a valid host
//! name, is refused with a fatal TLS `unrecognized_name` alert (RFC 6066
//! §3), which TLS clients report as such instead of a bare reset. A hello
//! without SNI follows the listener's `no_sni` policy.
//!
//! Not here: connecting, or any per-source policy.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::client_hello::ClientHello;
use crate::close::CloseReason;
use crate::config::{Backend, Listener, NoSni};
use crate::drain::DrainSignal;
use crate::sni::Sni;

/// A TLS 1.2-framed fatal alert record: level 2 (fatal), description 112
/// (unrecognized_name).
pub const UNRECOGNIZED_NAME_ALERT: [u8; 7] = [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 112];

/// How long a refused client may take to read the alert and close, and how
/// much it may send meanwhile, before the relay closes regardless.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
const REFUSAL_LINGER_BYTES: usize = 64 * 1024;

/// Where a routed connection goes.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    /// The route's name, or `no_sni` for the listener's fallback.
    pub route: &'a str,
    pub backend: Arc<Backend>,
    /// The drain signal of (listener, pattern or no SNI → backend).
    pub drain: Arc<DrainSignal>,
}

/// Why a connection may not go anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no SNI, and the listener rejects hellos without one")]
    NoSni,
    #[error("the SNI matches no route")]
    Unmatched,
}

impl From<Refusal> for CloseReason {
    fn from(r: Refusal) -> Self {
        match r {
            Refusal::NoSni => CloseReason::NoSni,
            Refusal::Unmatched => CloseReason::Unmatched,
        }
    }
}

/// The server name as it should be logged: normalised when valid, otherwise
/// the raw bytes escaped so that a hostile name cannot forge log lines.
pub fn loggable_name(hello: &ClientHello) -> Option<String> {
    let raw = hello.server_name.as_deref()?;
    Some(match Sni::parse(raw) {
        Ok(sni) => sni.as_str().to_owned(),
        Err(_) => String::from_utf8_lossy(raw).escape_debug().to_string(),
    })
}

/// Chooses the route for a hello on `listener`.
pub fn choose<'a>(listener: &'a Listener, hello: &ClientHello) -> Result<Target<'a>, Refusal> {
    let Some(raw) = hello.server_name.as_deref() else {
        return match &listener.no_sni {
            NoSni::Reject => Err(Refusal::NoSni),
            NoSni::Backend(backend) => Ok(Target {
                route: "no_sni",
                backend: backend.clone(),
                drain: listener.no_sni_drain.clone(),
            }),
        };
    };
    let sni = Sni::parse(raw).map_err(|_| Refusal::Unmatched)?;
    let route = listener
        .matcher
        .find(&sni)
        .map(|&id| &listener.routes[id])
        .ok_or(Refusal::Unmatched)?;
    // Same patterns, same precedence: this finds the pattern that matched.
    let drain = listener.drains.find(&sni).ok_or(Refusal::Unmatched)?;
    Ok(Target {
        route: &route.name,
        backend: route.backend.clone(),
        drain: drain.clone(),
    })
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
