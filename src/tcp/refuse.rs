//! Refusing a TCP client after its hello: the TLS alert record that says
//! why (its description from the one table, [`crate::wire::alert`]),
//! a half-close, and a short linger so the client reads the alert rather
//! than a reset.
//!
//! Not here: deciding to refuse ([`crate::flow::route`]), or QUIC's
//! refusal ([`crate::quic::refusal`]).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// How long a refused client may take to read the alert and close, and how
/// much it may send meanwhile, before the relay closes regardless.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
const REFUSAL_LINGER_BYTES: usize = 64 * 1024;

/// A TLS 1.2-framed fatal alert record with this description.
pub(crate) const fn alert_record(description: u8) -> [u8; 7] {
    [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, description]
}

/// Sends a fatal alert with description `alert`, half-closes, and lingers briefly so the alert
/// is read rather than destroyed by a reset (closing a socket with unread
/// input makes the kernel send RST).
pub(crate) async fn refuse(client: &mut TcpStream, alert: u8) {
    if client.write_all(&alert_record(alert)).await.is_err() {
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

#[cfg(test)]
mod tests {
    use crate::flow::route::NoRoute;
    use crate::tcp::refuse::*;

    #[test]
    fn the_alert_record_is_a_fatal_tls_alert() {
        assert_eq!(
            alert_record(NoRoute::TlsVersion.alert()),
            [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 70]
        );
    }
}
