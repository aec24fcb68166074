//! `snirelay probe --readyz URL`: asks an edge's admin listener whether it
//! wants clients (`GET /readyz`, plain HTTP/1.1, one request with
//! `Connection: close`, within the probe's `--timeout`), as a DNS
//! watchdog or load balancer would before sending clients to it. With
//! `[admin] ready_requires` on the edge, a 503 names the backends that are
//! down, and the report carries them.
//!
//! Only `http://host[:port][/path]` (the admin listener speaks no TLS; the
//! path defaults to `/readyz`). The answer is read up to
//! [`MAX_ANSWER_BYTES`].
//!
//! Not here: the TLS probe of the edge's addresses (`probe`), or the
//! edge's judgement ([`crate::admin::ready`]).

use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Largest answer read from `/readyz`.
pub(crate) const MAX_ANSWER_BYTES: u64 = 64 * 1024;

/// What the edge's `/readyz` said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct ReadyzReport {
    /// The URL asked.
    pub url: String,
    /// Whether it answered 200.
    pub ready: bool,
    /// The HTTP status; absent when there was no answer.
    pub status: Option<u16>,
    /// What is down, as the edge's JSON names it (`requirement: backend
    /// why`); empty without `ready_requires` on the edge.
    pub down: Vec<String>,
    /// Why there was no answer.
    pub error: Option<String>,
}

impl ReadyzReport {
    /// One line for the text report.
    pub(crate) fn to_text(&self) -> String {
        let mut line = format!("readyz {}: ", self.url);
        match (self.status, &self.error) {
            (Some(status), _) => {
                line.push_str(&format!(
                    "{status} {}",
                    if self.ready { "ready" } else { "not ready" }
                ));
                if !self.down.is_empty() {
                    line.push_str(&format!(" ({})", self.down.join("; ")));
                }
            }
            (None, Some(error)) => line.push_str(&format!("no answer: {error}")),
            (None, None) => line.push_str("no answer"),
        }
        line.push('\n');
        line
    }
}

/// `http://host[:port][/path]`: the address to connect to, the Host
/// header and the path.
fn parse(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?}: only http:// (the admin listener speaks plain HTTP)"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/readyz"),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(format!("{url:?}: write it as http://host:port/readyz"));
    }
    let has_port = match authority.rfind(']') {
        Some(close) => authority[close..].contains(':'),
        None => authority.contains(':'),
    };
    let authority = if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    Ok((authority, path.to_owned()))
}

/// Asks `url` within `budget`.
pub(crate) async fn check(url: &str, budget: Duration) -> ReadyzReport {
    let mut report = ReadyzReport {
        url: url.to_owned(),
        ready: false,
        status: None,
        down: Vec::new(),
        error: None,
    };
    let (authority, path) = match parse(url) {
        Ok(parsed) => parsed,
        Err(error) => {
            report.error = Some(error);
            return report;
        }
    };
    let exchange = async {
        // "host:port" or "[v6]:port", resolved by the system resolver.
        let mut stream = TcpStream::connect(authority.as_str()).await?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.take(MAX_ANSWER_BYTES).read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = match timeout(budget, exchange).await {
        Ok(Ok(raw)) => raw,
        Ok(Err(error)) => {
            report.error = Some(error.to_string());
            return report;
        }
        Err(_) => {
            report.error = Some(format!("no answer within {budget:?}"));
            return report;
        }
    };
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    report.status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok());
    if report.status.is_none() {
        report.error = Some("not an HTTP answer".to_owned());
    }
    report.ready = report.status == Some(200);
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(body) {
        report.down = json["down"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                format!(
                    "{}: {} {}",
                    d["requirement"].as_str().unwrap_or("?"),
                    d["backend"].as_str().unwrap_or("-"),
                    d["why"].as_str().unwrap_or("?")
                )
            })
            .collect();
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_take_a_default_port_and_path() {
        assert_eq!(
            parse("http://edge.example:9901/readyz").unwrap(),
            ("edge.example:9901".to_owned(), "/readyz".to_owned())
        );
        assert_eq!(
            parse("http://192.0.2.1").unwrap(),
            ("192.0.2.1:80".to_owned(), "/readyz".to_owned())
        );
        assert_eq!(
            parse("http://[::1]:9901/ready").unwrap(),
            ("[::1]:9901".to_owned(), "/ready".to_owned())
        );
        assert_eq!(
            parse("http://[::1]").unwrap(),
            ("[::1]:80".to_owned(), "/readyz".to_owned())
        );
        assert!(parse("https://edge:9901").is_err());
        assert!(parse("http://user@edge:9901").is_err());
    }
}
