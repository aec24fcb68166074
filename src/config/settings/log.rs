//! The validated `[log]` section: where log lines go (stderr, stdout,
//! journald or a syslog server), the syslog address, facility and framing,
//! and the size of the queue in front of a socket target. Plain data with
//! the names each value has in the file, so `check` reads them and
//! `/config` writes them back.
//!
//! Not here: writing anything (`logging`), or checking the file
//! ([`crate::config::check`]).

use std::fmt;
use std::path::PathBuf;

/// Where log lines go (`[log] target`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTarget {
    /// Standard error, as before `[log]` existed: journald or a container
    /// runtime collects it.
    Stderr,
    /// Standard output.
    Stdout,
    /// journald's native socket, each field its own journal field.
    Journald,
    /// A syslog server ([`Log::syslog`]).
    Syslog,
}

impl LogTarget {
    /// Every target, by its name in the file.
    pub const ALL: [(&'static str, LogTarget); 4] = [
        ("stderr", LogTarget::Stderr),
        ("stdout", LogTarget::Stdout),
        ("journald", LogTarget::Journald),
        ("syslog", LogTarget::Syslog),
    ];

    /// Its name in the file.
    pub(crate) fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, t)| *t == self)
            .map_or("", |e| e.0)
    }
}

/// Where a syslog server listens (`[log] syslog`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyslogAddress {
    /// `unix:/dev/log`: a local socket, datagram (as `/dev/log` is) or
    /// stream (tried when the datagram connect is refused as the wrong
    /// type).
    Unix(PathBuf),
    /// `udp://host:port`: one datagram per line (RFC 5426).
    Udp {
        /// A host name (resolved at every connect) or an IP literal.
        host: String,
        port: u16,
    },
    /// `tcp://host:port`: octet-counted frames (RFC 6587 section 3.4.1).
    Tcp {
        /// A host name (resolved at every connect) or an IP literal.
        host: String,
        port: u16,
    },
}

/// The port of a `udp://` or `tcp://` address that names none.
pub(crate) const DEFAULT_SYSLOG_PORT: u16 = 514;

impl fmt::Display for SyslogAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host_port = |f: &mut fmt::Formatter<'_>, scheme: &str, host: &str, port: u16| {
            if host.contains(':') {
                write!(f, "{scheme}://[{host}]:{port}")
            } else {
                write!(f, "{scheme}://{host}:{port}")
            }
        };
        match self {
            SyslogAddress::Unix(path) => write!(f, "unix:{}", path.display()),
            SyslogAddress::Udp { host, port } => host_port(f, "udp", host, *port),
            SyslogAddress::Tcp { host, port } => host_port(f, "tcp", host, *port),
        }
    }
}

impl SyslogAddress {
    /// Parses `unix:/path`, `udp://host[:port]` or `tcp://host[:port]`
    /// (an IPv6 literal in brackets); the error says what is wrong.
    pub fn parse(text: &str) -> Result<SyslogAddress, String> {
        if let Some(path) = text.strip_prefix("unix:") {
            if !path.starts_with('/') {
                return Err(format!("{text:?}: the socket path must be absolute"));
            }
            return Ok(SyslogAddress::Unix(PathBuf::from(path)));
        }
        let (tcp, rest) = if let Some(rest) = text.strip_prefix("udp://") {
            (false, rest)
        } else if let Some(rest) = text.strip_prefix("tcp://") {
            (true, rest)
        } else {
            return Err(format!(
                "{text:?} is not \"unix:/path\", \"udp://host:port\" or \"tcp://host:port\""
            ));
        };
        let (host, port) = split_host_port(rest).ok_or_else(|| {
            format!("{text:?}: expected host, host:port or [IPv6]:port after the scheme")
        })?;
        let port = match port {
            None => DEFAULT_SYSLOG_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => p,
                _ => return Err(format!("{text:?}: {p:?} is not a port (1..=65535)")),
            },
        };
        let host = host.to_owned();
        Ok(if tcp {
            SyslogAddress::Tcp { host, port }
        } else {
            SyslogAddress::Udp { host, port }
        })
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`; the host is not empty and
/// holds no `/`, space or `@`.
fn split_host_port(text: &str) -> Option<(&str, Option<&str>)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        host.parse::<std::net::Ipv6Addr>().ok()?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let bad = |c: char| c == '/' || c == '@' || c.is_whitespace();
    (!host.is_empty() && !host.contains(bad)).then_some((host, port))
}

/// A syslog facility (RFC 5424 section 6.2.1), by its usual name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facility(u8);

impl Facility {
    /// The 24 facilities of RFC 5424, in code order (`kern` is 0,
    /// `local7` 23), named as syslog daemons name them.
    pub const NAMES: [&'static str; 24] = [
        "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron",
        "authpriv", "ftp", "ntp", "audit", "alert", "clock", "local0", "local1", "local2",
        "local3", "local4", "local5", "local6", "local7",
    ];

    /// The facility of this name.
    pub(crate) fn from_name(name: &str) -> Option<Facility> {
        let code = Self::NAMES.iter().position(|n| *n == name)?;
        Some(Facility(code as u8))
    }

    /// Its code (0..=23).
    pub(crate) fn code(self) -> u8 {
        self.0
    }

    /// Its name in the file.
    pub(crate) fn name(self) -> &'static str {
        Self::NAMES[usize::from(self.0)]
    }
}

/// How a syslog message is framed (`[log] syslog_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyslogFormat {
    /// RFC 5424: `<PRI>1 TIMESTAMP HOST APP PROCID - - MSG`.
    Rfc5424,
    /// RFC 3164 (BSD): `<PRI>Mmm dd hh:mm:ss HOST APP[PID]: MSG`.
    Rfc3164,
}

impl SyslogFormat {
    /// Its name in the file.
    pub(crate) fn name(self) -> &'static str {
        match self {
            SyslogFormat::Rfc5424 => "rfc5424",
            SyslogFormat::Rfc3164 => "rfc3164",
        }
    }
}

/// The `[log]` section, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    pub target: LogTarget,
    /// Used when `target` is [`LogTarget::Syslog`].
    pub syslog: SyslogAddress,
    /// The facility of every line (syslog, and journald's
    /// `SYSLOG_FACILITY`).
    pub facility: Facility,
    pub syslog_format: SyslogFormat,
    /// Lines held for a socket target while it is slow or down; past it a
    /// line is dropped and counted.
    ///
    /// Memory: one formatted line (a few hundred bytes) per slot in use;
    /// nothing is allocated for empty slots.
    pub queue: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syslog_addresses_parse_and_print_back() {
        for (text, want) in [
            (
                "unix:/dev/log",
                SyslogAddress::Unix(PathBuf::from("/dev/log")),
            ),
            (
                "udp://logs.example:5514",
                SyslogAddress::Udp {
                    host: "logs.example".into(),
                    port: 5514,
                },
            ),
            (
                "tcp://[2001:db8::1]:601",
                SyslogAddress::Tcp {
                    host: "2001:db8::1".into(),
                    port: 601,
                },
            ),
        ] {
            assert_eq!(SyslogAddress::parse(text), Ok(want.clone()), "{text}");
            assert_eq!(want.to_string(), text);
        }
        // The port defaults to 514 and is then written out.
        let bare = SyslogAddress::parse("udp://10.0.0.5").unwrap();
        assert_eq!(bare.to_string(), "udp://10.0.0.5:514");
        for bad in [
            "unix:dev/log",
            "syslog://h:514",
            "tcp://",
            "tcp://h:0",
            "tcp://h:x",
            "udp://[not-v6]:514",
            "udp://a b:514",
            "logs.example:514",
        ] {
            assert!(SyslogAddress::parse(bad).is_err(), "{bad} was taken");
        }
    }

    #[test]
    fn facilities_are_the_24_codes_in_order() {
        assert_eq!(Facility::from_name("kern").map(Facility::code), Some(0));
        assert_eq!(Facility::from_name("daemon").map(Facility::code), Some(3));
        assert_eq!(Facility::from_name("local0").map(Facility::code), Some(16));
        assert_eq!(Facility::from_name("local7").map(Facility::code), Some(23));
        assert_eq!(Facility::from_name("local8"), None);
        for name in Facility::NAMES {
            assert_eq!(Facility::from_name(name).unwrap().name(), name);
        }
    }
}
