//! `[admin]`, validated: the admin listener's address, its token file,
//! readiness requirements and forwarding (`ForwardTo`), and the host-name
//! check the admin and cluster keys share.
//!
//! Not here: serving the admin API ([`crate::admin`]), or checking the
//! `[admin]` table of a file ([`super::check`]).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::wire::cidr::Cidr;

/// `[admin]`: the admin listener and who may use its control endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    /// A loopback (or, with `allow_public`, any) TCP address, or
    /// `unix:/path` (control endpoints open to whoever may connect).
    pub listen: AdminListen,
    /// `allow_public`: a non-loopback `listen` was meant (checked here;
    /// kept so the effective configuration shows it).
    pub allow_public: bool,
    /// Serve `/config` (`DEFAULT_ADMIN_EXPOSE_CONFIG`).
    pub expose_config: bool,
    /// Backend address metrics by address (`DEFAULT_ADMIN_ADDRESS_LABELS`).
    pub address_labels: bool,
    // Run-time control (issue 16).
    /// `token_file` and the tokens it held when the configuration was
    /// loaded (read again on every reload).
    pub token_file: Option<TokenFile>,
    // Pushed local names (issue 17).
    /// Where the pushed local names are kept across restarts (relative to
    /// the configuration file's directory); `None`: in memory only.
    pub local_names_file: Option<PathBuf>,
    /// `DEFAULT_MOVED_CLOSE_WINDOW`.
    pub moved_close_window: Duration,
    // One base address for a Pangolin node (issue 30).
    /// Sources whose `POST /update-local-snis` needs no token (TCP only;
    /// empty by default: a token is required). A push that presents a
    /// token is judged by it, wherever it comes from.
    pub push_unauthenticated_from: Vec<Cidr>,
    /// Where requests for paths the admin listener does not serve go;
    /// `None`: they are answered 404 as before.
    pub forward_unmatched_to: Option<ForwardTo>,
    /// `ready_requires`: what must have a usable address for `/readyz` to
    /// answer 200; empty (the default): ready once listening.
    pub ready_requires: Vec<ReadyRequirement>,
}

/// One entry of `[admin] ready_requires`: a backend, or the backend of a
/// route, that must have a usable address (up, not drained or in
/// maintenance, resolved) for `/readyz` to answer 200; `any_backend`: at
/// least one backend must.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadyRequirement {
    /// `"backend:NAME"`.
    Backend(String),
    /// `"route:NAME"`: the backend of every route of that name.
    Route(String),
    /// `"any_backend"`.
    AnyBackend,
}

impl ReadyRequirement {
    /// Parses `backend:NAME`, `route:NAME` or `any_backend` (names are not
    /// checked here).
    pub fn parse(text: &str) -> Result<ReadyRequirement, String> {
        let named = |name: &str, what: &str| {
            if name.is_empty() {
                Err(format!("{text:?} names no {what}"))
            } else {
                Ok(name.to_owned())
            }
        };
        if text == "any_backend" {
            Ok(ReadyRequirement::AnyBackend)
        } else if let Some(name) = text.strip_prefix("backend:") {
            named(name, "backend").map(ReadyRequirement::Backend)
        } else if let Some(name) = text.strip_prefix("route:") {
            named(name, "route").map(ReadyRequirement::Route)
        } else {
            Err(format!(
                "{text:?}: write \"backend:NAME\", \"route:NAME\" or \"any_backend\""
            ))
        }
    }
}

impl fmt::Display for ReadyRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadyRequirement::Backend(name) => write!(f, "backend:{name}"),
            ReadyRequirement::Route(name) => write!(f, "route:{name}"),
            ReadyRequirement::AnyBackend => f.write_str("any_backend"),
        }
    }
}

/// `[admin] forward_unmatched_to`, checked: a plain-HTTP upstream named by
/// an IP address or a host name (resolved on each forwarded request, so
/// `/etc/hosts` and DNS changes apply without a reload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardTo {
    /// The URL as written (for logs and `/config`).
    pub url: String,
    /// The host: an IP address (IPv6 without brackets) or a lowercase name.
    pub host: String,
    /// The port; 80 when the URL names none.
    pub port: u16,
}

impl ForwardTo {
    /// Parses `http://host[:port][/]`: plain HTTP (the upstream is on the
    /// node), no user, path, query or fragment, since the request's own
    /// path and query are forwarded unchanged.
    pub fn parse(text: &str) -> Result<ForwardTo, String> {
        let rest = match text.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            Some((scheme, _)) => {
                return Err(format!(
                    "{text:?}: only http:// is forwarded to (not {scheme}://): the upstream \
                     is a plain-HTTP API on this node, such as Gerbil's"
                ));
            }
            None => return Err(format!("{text:?}: write it as \"http://127.0.0.1:3004\"")),
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains(['/', '?', '#']) {
            return Err(format!(
                "{text:?}: no path, query or fragment: requests keep their own"
            ));
        }
        if authority.contains('@') {
            return Err(format!("{text:?}: no user information in the URL"));
        }
        let (host, port) = if let Some(inner) = authority.strip_prefix('[') {
            let (v6, after) = inner
                .split_once(']')
                .ok_or_else(|| format!("{text:?}: an IPv6 address needs its closing `]`"))?;
            let v6: std::net::Ipv6Addr = v6
                .parse()
                .map_err(|_| format!("{text:?}: {v6:?} is not an IPv6 address"))?;
            let port =
                match after {
                    "" => None,
                    p => Some(p.strip_prefix(':').ok_or_else(|| {
                        format!("{text:?}: expected `:port` after the IPv6 address")
                    })?),
                };
            (v6.to_string(), port)
        } else {
            let (host, port) = match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            };
            let host = if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
                ip.to_string()
            } else {
                match crate::wire::sni::Sni::parse_written(host.as_bytes()) {
                    Ok(name) => name.as_str().to_owned(),
                    Err(e) => return Err(format!("{text:?}: host {host:?}: {e}")),
                }
            };
            (host, port)
        };
        let port = match port {
            None => 80,
            Some(p) => match p.parse::<u16>() {
                Ok(port) if port > 0 => port,
                _ => return Err(format!("{text:?}: {p:?} is not a port (1-65535)")),
            },
        };
        Ok(ForwardTo {
            url: text.to_owned(),
            host,
            port,
        })
    }
}

/// The longest host name (RFC 1035), without its trailing dot.
const MAX_NAME_LEN: usize = 253;

/// Whether `text` is a host name: dot-separated labels of 1 to 63 letters,
/// digits, `-` or `_`, not starting or ending with `-`, at most
/// 253 bytes (a trailing dot allowed), and a last label that
/// is not all digits (that would be a mistyped IPv4 address, not a name).
pub(crate) fn is_host_name(text: &str) -> bool {
    let text = text.strip_suffix('.').unwrap_or(text);
    let label = |l: &str| {
        (1..=63).contains(&l.len())
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    (1..=MAX_NAME_LEN).contains(&text.len())
        && text.split('.').all(label)
        && !text
            .rsplit('.')
            .next()
            .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
}

/// Where the admin listener listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminListen {
    /// A TCP address: loopback, or any with `allow_public`.
    Tcp(SocketAddr),
    /// `unix:/path`: a Unix stream socket, created with mode 0660.
    Unix(PathBuf),
}

impl std::fmt::Display for AdminListen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminListen::Tcp(addr) => write!(f, "{addr}"),
            AdminListen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// `[admin] token_file`, read: the bearer tokens by name.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenFile {
    pub(crate) path: PathBuf,
    /// (name, token); names are unique. Never logged or shown.
    pub tokens: Vec<(String, String)>,
}

impl std::fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.tokens.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("TokenFile")
            .field("path", &self.path)
            .field("names", &names)
            .finish()
    }
}

/// Parses a token file: one bare token (named `token`), or lines
/// `name:token`; blank lines and `#` comments are skipped. Tokens are
/// printable ASCII without spaces; names are unique.
pub fn parse_tokens(text: &str) -> Result<Vec<(String, String)>, String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let valid = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic());
    let mut tokens: Vec<(String, String)> = Vec::new();
    if let [only] = lines.as_slice()
        && !only.contains(':')
    {
        if !valid(only) {
            return Err("the token holds a character that is not printable ASCII".into());
        }
        tokens.push(("token".to_owned(), (*only).to_owned()));
        return Ok(tokens);
    }
    for (n, line) in lines.iter().enumerate() {
        let Some((name, token)) = line.split_once(':') else {
            return Err(format!(
                "line {}: expected `name:token` (a file of several tokens names each)",
                n + 1
            ));
        };
        let name = name.trim();
        let token = token.trim();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
        {
            return Err(format!(
                "line {}: the name {name:?} is not [A-Za-z0-9-_.@]+",
                n + 1
            ));
        }
        if !valid(token) {
            return Err(format!(
                "line {}: the token of {name:?} is empty or not printable ASCII",
                n + 1
            ));
        }
        if tokens.iter().any(|(other, _)| other == name) {
            return Err(format!("line {}: the name {name:?} appears twice", n + 1));
        }
        tokens.push((name.to_owned(), token.to_owned()));
    }
    if tokens.is_empty() {
        return Err("the file holds no token".into());
    }
    Ok(tokens)
}

/// Reads and checks `[admin] token_file`: it must exist, not be readable
/// by others (mode & 0o004), and hold at least one token.
pub(crate) fn read_tokens(path: &Path) -> Result<TokenFile, String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mode = meta.permissions().mode();
    if mode & 0o004 != 0 {
        return Err(format!(
            "{} is readable by every user (mode {:o}); chmod o-r it",
            path.display(),
            mode & 0o777
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let tokens = parse_tokens(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(TokenFile {
        path: path.to_owned(),
        tokens,
    })
}
