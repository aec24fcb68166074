//! Who may use the control endpoints, and under what name their changes
//! are logged.
//!
//! - A Unix socket caller is known: whoever may open the socket (mode
//!   0660: its owner and group) may control, and is named by its peer
//!   credentials (`uid=…,pid=…`), token or not.
//! - A TCP caller needs `Authorization: Bearer <token>` with a token of
//!   `[admin] token_file`; it is named by the token's name, never the
//!   token. No token or a wrong one: 401 with `WWW-Authenticate: Bearer`.
//!   No token file configured: 403, whatever the caller sends.
//!
//! Tokens are compared in constant time: every configured token is
//! compared, byte by byte over the longer of the two lengths, with no early
//! exit, so the time taken says nothing about how much of a token matched.
//!
//! Not here: which endpoints are control endpoints (`control`), reading
//! the token file (`config::read_tokens`).

use hyper::HeaderMap;
use hyper::header::AUTHORIZATION;

use super::Peer;
use crate::config::TokenFile;

/// Why a control request is refused before it is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// TCP, and no token file: control is off on this listener (403).
    NoTokenFile,
    /// TCP, and no token or a wrong one (401).
    BadToken,
}

impl Refusal {
    /// The `outcome` of `snirelay_admin_control_actions_total`.
    pub fn outcome(self) -> &'static str {
        match self {
            Refusal::NoTokenFile => "forbidden",
            Refusal::BadToken => "unauthorized",
        }
    }
}

/// The name a control request acts under (`who` in the log), or why it may
/// not act.
pub fn authorize(
    headers: &HeaderMap,
    peer: &Peer,
    tokens: Option<&TokenFile>,
) -> Result<String, Refusal> {
    if let Peer::Unix { .. } = peer {
        return Ok(peer.to_string());
    }
    let tokens = tokens.ok_or(Refusal::NoTokenFile)?;
    let presented = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or(Refusal::BadToken)?;
    let mut found = None;
    for (name, token) in &tokens.tokens {
        // No short-circuit: every token is compared whatever matched.
        if constant_time_eq(presented.as_bytes(), token.as_bytes()) {
            found = Some(name);
        }
    }
    found.map(|n| format!("token:{n}")).ok_or(Refusal::BadToken)
}

/// Whether `a == b`, in a time that depends only on the longer length.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn file() -> TokenFile {
        TokenFile {
            path: "/t".into(),
            tokens: vec![
                ("ops".into(), "s3cret".into()),
                ("ci".into(), "other".into()),
            ],
        }
    }

    fn bearer(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn tokens_name_the_caller_and_anything_else_is_refused() {
        let tcp = Peer::Tcp("127.0.0.1:1".parse().unwrap());
        let f = file();
        assert_eq!(
            authorize(&bearer("Bearer other"), &tcp, Some(&f)),
            Ok("token:ci".into())
        );
        for bad in ["Bearer s3cre", "Bearer s3cret0", "Basic s3cret", "Bearer "] {
            assert_eq!(
                authorize(&bearer(bad), &tcp, Some(&f)),
                Err(Refusal::BadToken),
                "{bad}"
            );
        }
        assert_eq!(
            authorize(&HeaderMap::new(), &tcp, Some(&f)),
            Err(Refusal::BadToken)
        );
        assert_eq!(
            authorize(&bearer("Bearer s3cret"), &tcp, None),
            Err(Refusal::NoTokenFile)
        );
        let unix = Peer::Unix {
            uid: Some(1000),
            pid: Some(42),
        };
        assert_eq!(
            authorize(&HeaderMap::new(), &unix, None),
            Ok("uid=1000,pid=42".into())
        );
    }

    #[test]
    fn constant_time_eq_is_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
