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
//! - A push of local names (`POST /update-local-snis`, the request
//!   Pangolin sends to Gerbil without any `Authorization`) that carries no
//!   `Authorization` header is let in when its TCP source is in `[admin]
//!   push_unauthenticated_from` ([`authorize_push`]), and named
//!   `allowlisted:IP`. A push that does present a credential is judged by
//!   it, wherever it comes from: a wrong token is a misconfiguration (a
//!   rotated token not rolled out), and accepting it from a listed source
//!   would hide that until the source moves. The source is the measured
//!   TCP peer, never a header such as `X-Forwarded-For`.
//!
//! Tokens are compared in constant time: every configured token is
//! compared, byte by byte over the longer of the two lengths, with no early
//! exit, so the time taken says nothing about how much of a token matched.
//!
//! Not here: which endpoints are control endpoints ([`super::control`]), reading
//! the token file ([`crate::config::read_tokens`]).

use hyper::HeaderMap;
use hyper::header::AUTHORIZATION;

use super::peer::AdminPeer;
use crate::config::TokenFile;
use crate::wire::cidr::Cidr;

/// Why a control request is refused before it is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthRefusal {
    /// TCP, and no token file: control is off on this listener (403).
    NoTokenFile,
    /// TCP, and no token or a wrong one (401).
    BadToken,
}

impl AuthRefusal {
    /// The `outcome` of `snirelay_admin_control_actions_total`.
    pub(crate) fn outcome(self) -> &'static str {
        match self {
            AuthRefusal::NoTokenFile => "forbidden",
            AuthRefusal::BadToken => "unauthorized",
        }
    }
}

/// The name a control request acts under (`who` in the log), or why it may
/// not act.
pub(crate) fn authorize(
    headers: &HeaderMap,
    peer: &AdminPeer,
    tokens: Option<&TokenFile>,
) -> Result<String, AuthRefusal> {
    if let AdminPeer::Unix { .. } = peer {
        return Ok(peer.to_string());
    }
    let tokens = tokens.ok_or(AuthRefusal::NoTokenFile)?;
    let presented = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or(AuthRefusal::BadToken)?;
    let mut found = None;
    for (name, token) in &tokens.tokens {
        // No short-circuit: every token is compared whatever matched.
        if constant_time_eq(presented.as_bytes(), token.as_bytes()) {
            found = Some(name);
        }
    }
    found
        .map(|n| format!("token:{n}"))
        .ok_or(AuthRefusal::BadToken)
}

/// How a push of local names was let in: the `authenticated` log field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Authorized {
    /// A valid token, or a Unix socket caller.
    Authenticated,
    /// No credential, from a source in `push_unauthenticated_from`.
    Allowlisted,
}

impl Authorized {
    /// The `authenticated` log field (`"false"` is a refusal).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Authorized::Authenticated => "true",
            Authorized::Allowlisted => "allowlisted",
        }
    }
}

/// [`authorize`] for `POST /update-local-snis`: also lets in a request
/// without an `Authorization` header from a TCP source in `allowlisted`.
/// A request with one is authorized by it alone.
pub(crate) fn authorize_push(
    headers: &HeaderMap,
    peer: &AdminPeer,
    tokens: Option<&TokenFile>,
    allowlisted: &[Cidr],
) -> Result<(String, Authorized), AuthRefusal> {
    if let AdminPeer::Tcp(addr) = peer
        && !headers.contains_key(AUTHORIZATION)
        && allowlisted.iter().any(|net| net.contains(addr.ip()))
    {
        return Ok((
            format!("allowlisted:{}", addr.ip()),
            Authorized::Allowlisted,
        ));
    }
    authorize(headers, peer, tokens).map(|who| (who, Authorized::Authenticated))
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
        let tcp = AdminPeer::Tcp("127.0.0.1:1".parse().unwrap());
        let f = file();
        assert_eq!(
            authorize(&bearer("Bearer other"), &tcp, Some(&f)),
            Ok("token:ci".into())
        );
        for bad in ["Bearer s3cre", "Bearer s3cret0", "Basic s3cret", "Bearer "] {
            assert_eq!(
                authorize(&bearer(bad), &tcp, Some(&f)),
                Err(AuthRefusal::BadToken),
                "{bad}"
            );
        }
        assert_eq!(
            authorize(&HeaderMap::new(), &tcp, Some(&f)),
            Err(AuthRefusal::BadToken)
        );
        assert_eq!(
            authorize(&bearer("Bearer s3cret"), &tcp, None),
            Err(AuthRefusal::NoTokenFile)
        );
        let unix = AdminPeer::Unix {
            uid: Some(1000),
            pid: Some(42),
        };
        assert_eq!(
            authorize(&HeaderMap::new(), &unix, None),
            Ok("uid=1000,pid=42".into())
        );
    }

    #[test]
    fn a_listed_source_pushes_without_a_token_but_not_with_a_wrong_one() {
        let listed: Vec<Cidr> = vec!["10.0.0.0/8".parse().unwrap(), "::1".parse().unwrap()];
        let from = |a: &str| AdminPeer::Tcp(a.parse().unwrap());
        let f = file();
        let push =
            |h: &HeaderMap, p: &AdminPeer, t: Option<&TokenFile>| authorize_push(h, p, t, &listed);
        let none = HeaderMap::new();
        assert_eq!(
            push(&none, &from("10.1.2.3:5000"), Some(&f)),
            Ok(("allowlisted:10.1.2.3".into(), Authorized::Allowlisted))
        );
        // An IPv4 client of a dual-stack listener, and no token file at all.
        assert_eq!(
            push(&none, &from("[::ffff:10.1.2.3]:5000"), None),
            Ok((
                "allowlisted:::ffff:10.1.2.3".into(),
                Authorized::Allowlisted
            ))
        );
        assert_eq!(
            push(&none, &from("[::1]:5000"), None).map(|(_, a)| a),
            Ok(Authorized::Allowlisted)
        );
        // Any credential is judged by itself, listed source or not.
        for bad in ["Bearer wrong", "Basic s3cret", "Bearer "] {
            assert_eq!(
                push(&bearer(bad), &from("10.1.2.3:5000"), Some(&f)),
                Err(AuthRefusal::BadToken),
                "{bad}"
            );
        }
        assert_eq!(
            push(&bearer("Bearer s3cret"), &from("10.1.2.3:5000"), None),
            Err(AuthRefusal::NoTokenFile)
        );
        assert_eq!(
            push(&bearer("Bearer s3cret"), &from("192.0.2.1:5000"), Some(&f)),
            Ok(("token:ops".into(), Authorized::Authenticated))
        );
        // Unlisted sources are as before.
        assert_eq!(
            push(&none, &from("192.0.2.1:5000"), Some(&f)),
            Err(AuthRefusal::BadToken)
        );
        assert_eq!(
            push(&none, &from("11.0.0.1:5000"), None),
            Err(AuthRefusal::NoTokenFile)
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
