//! Who is on the other end of an admin connection ([`AdminPeer`]): a TCP
//! peer's address, or a Unix socket peer's credentials. Every log line of
//! the admin listener names it (`admin.peer`), and control takes a Unix
//! peer's credentials as its name.
//!
//! Not here: reading it off an accepted socket ([`super::stream`]), or what
//! a peer may do ([`super::auth`]).

use std::net::SocketAddr;

/// Who is on the other end of an admin connection.
#[derive(Debug, Clone)]
pub enum AdminPeer {
    /// A TCP peer's address and port.
    Tcp(SocketAddr),
    /// SO_PEERCRED of a Unix socket peer (`None`s when unavailable).
    Unix {
        /// The peer process's user id.
        uid: Option<u32>,
        /// The peer process's id.
        pid: Option<i32>,
    },
}

impl std::fmt::Display for AdminPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminPeer::Tcp(addr) => write!(f, "{addr}"),
            AdminPeer::Unix { uid, pid } => {
                let show = |v: Option<String>| v.unwrap_or_else(|| "?".to_owned());
                write!(
                    f,
                    "uid={},pid={}",
                    show(uid.map(|u| u.to_string())),
                    show(pid.map(|p| p.to_string()))
                )
            }
        }
    }
}
