//! Syslog and journald wire formats, pure: the RFC 5424 and RFC 3164
//! headers, octet-counting framing for TCP (RFC 6587 section 3.4.1), and
//! journald's native datagram (`KEY=value` lines). Each function appends
//! one message to a buffer the writer thread reuses.
//!
//! The message (MSG) is the JSON object of the `--log-format json` line,
//! whatever `--log-format` says: the same fields, flat, for a receiver to
//! parse (rsyslog's `mmjsonparse`, syslog-ng's `json-parser`). RFC 5424's
//! MSGID is `access` for the connection lines (target `snirelay::access`)
//! and `-` otherwise, so a receiver can file them apart without parsing;
//! STRUCTURED-DATA is `-` (the fields are in MSG). Timestamps are UTC: RFC
//! 5424's with microseconds, RFC 3164's `Mmm dd hh:mm:ss` (which carries no
//! zone).
//!
//! Not here: sockets, the queue, or choosing what to log ([`crate::logging::sink`],
//! `logging`).

use std::io::Write;
use std::time::SystemTime;

use crate::config::{Facility, SyslogFormat};

/// The APP-NAME (RFC 5424) and TAG (RFC 3164) of every message.
pub(crate) const APP_NAME: &str = "snirelay";

/// RFC 5424 severities (section 6.2.1), from a tracing level.
pub(crate) fn severity(level: tracing::Level) -> u8 {
    match level {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        tracing::Level::INFO => 6,
        tracing::Level::DEBUG | tracing::Level::TRACE => 7,
    }
}

/// What every message of this process shares.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub(crate) facility: Facility,
    /// HOSTNAME: printable ASCII without spaces, at most 255 bytes; `-`
    /// when unknown.
    pub(crate) hostname: String,
    pub(crate) pid: u32,
}

impl Origin {
    /// This process on this host (the kernel's host name).
    pub(crate) fn here(facility: Facility) -> Origin {
        let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        Origin {
            facility,
            hostname: header_field(name.trim(), 255),
            pid: std::process::id(),
        }
    }
}

/// A header field as RFC 5424 allows it (PRINTUSASCII, no space), cut to
/// `max` bytes; `-` (NILVALUE) when nothing is left.
fn header_field(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(max)
        .collect();
    if clean.is_empty() {
        "-".to_owned()
    } else {
        clean
    }
}

/// One log line on its way to a socket.
#[derive(Debug)]
pub(crate) struct Line {
    pub(crate) severity: u8,
    /// A connection's access line (target `snirelay::access`).
    pub(crate) access: bool,
    pub(crate) at: SystemTime,
    /// The JSON object, without a trailing newline.
    pub(crate) json: Vec<u8>,
}

/// Appends `line` as one syslog message in `format` to `out`.
pub(crate) fn message(out: &mut Vec<u8>, format: SyslogFormat, origin: &Origin, line: &Line) {
    let pri = u16::from(origin.facility.code()) * 8 + u16::from(line.severity);
    let _ = match format {
        SyslogFormat::Rfc5424 => write!(
            out,
            "<{pri}>1 {} {} {APP_NAME} {} {} - ",
            humantime::format_rfc3339_micros(line.at),
            origin.hostname,
            origin.pid,
            if line.access { "access" } else { "-" },
        ),
        SyslogFormat::Rfc3164 => write!(
            out,
            "<{pri}>{} {} {APP_NAME}[{}]: ",
            bsd_timestamp(line.at),
            origin.hostname,
            origin.pid,
        ),
    };
    out.extend_from_slice(&line.json);
}

/// RFC 3164's `Mmm dd hh:mm:ss` (day padded with a space), in UTC.
fn bsd_timestamp(at: SystemTime) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    // "2026-12-02T06:05:49Z": fixed positions.
    let iso = humantime::format_rfc3339_seconds(at).to_string();
    let month = iso.get(5..7).and_then(|m| m.parse::<usize>().ok());
    let day = iso.get(8..10).and_then(|d| d.parse::<u8>().ok());
    match (month, day, iso.get(11..19)) {
        (Some(m @ 1..=12), Some(day), Some(time)) => format!("{} {day:>2} {time}", MONTHS[m - 1]),
        _ => "Jan  1 00:00:00".to_owned(),
    }
}

/// Prefixes the message that starts at `start` in `out` with its length
/// in octets and a space (RFC 6587 octet counting, for TCP).
pub(crate) fn octet_count(out: &mut Vec<u8>, start: usize) {
    let len = (out.len() - start).to_string();
    out.splice(start..start, len.bytes().chain([b' ']));
}

/// Appends `line` as one journald native-protocol datagram: `MESSAGE`,
/// `PRIORITY`, `SYSLOG_FACILITY`, `SYSLOG_IDENTIFIER`, `SYSLOG_PID`, and
/// every other field of the JSON line under its journal name
/// (`client.peer` → `CLIENT_PEER`); `timestamp` and `level` are left to
/// journald's own fields.
pub(crate) fn journal_entry(out: &mut Vec<u8>, origin: &Origin, line: &Line) {
    journal_field(out, "PRIORITY", line.severity.to_string().as_bytes());
    journal_field(
        out,
        "SYSLOG_FACILITY",
        origin.facility.code().to_string().as_bytes(),
    );
    journal_field(out, "SYSLOG_IDENTIFIER", APP_NAME.as_bytes());
    journal_field(out, "SYSLOG_PID", origin.pid.to_string().as_bytes());
    let fields: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&line.json).unwrap_or_default();
    if fields.is_empty() {
        journal_field(out, "MESSAGE", &line.json);
        return;
    }
    for (name, value) in &fields {
        if name == "timestamp" || name == "level" {
            continue;
        }
        let Some(key) = journal_name(name) else {
            continue;
        };
        match value {
            serde_json::Value::String(text) => journal_field(out, &key, text.as_bytes()),
            other => journal_field(out, &key, other.to_string().as_bytes()),
        }
    }
}

/// A journal field name: uppercase ASCII letters, digits and `_`,
/// starting with a letter, at most 64 bytes (`client.peer` →
/// `CLIENT_PEER`); `None` when nothing usable is left.
fn journal_name(name: &str) -> Option<String> {
    let key: String = name
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' => c.to_ascii_uppercase(),
            _ => '_',
        })
        .skip_while(|c| !c.is_ascii_alphabetic())
        .take(64)
        .collect();
    (!key.is_empty()).then_some(key)
}

/// One field: `KEY=value\n`, or, when the value holds a newline,
/// `KEY\n` + its length (64-bit little-endian) + the value + `\n`.
fn journal_field(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    out.extend_from_slice(key.as_bytes());
    if value.contains(&b'\n') {
        out.push(b'\n');
        out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        out.push(b'=');
    }
    out.extend_from_slice(value);
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn origin() -> Origin {
        Origin {
            facility: Facility::from_name("local0").unwrap(),
            hostname: "edge-1".to_owned(),
            pid: 42,
        }
    }

    fn line(access: bool) -> Line {
        Line {
            severity: 6,
            access,
            // 2026-12-02T06:05:49.5Z
            at: UNIX_EPOCH + Duration::from_millis(1_796_191_549_500),
            json: br#"{"message":"connection closed","client.peer":"127.0.0.1:5"}"#.to_vec(),
        }
    }

    #[test]
    fn rfc5424_header_has_pri_version_time_host_app_pid_and_msgid() {
        let mut out = Vec::new();
        message(&mut out, SyslogFormat::Rfc5424, &origin(), &line(true));
        let text = String::from_utf8(out).unwrap();
        // local0 (16) * 8 + info (6) = 134.
        assert_eq!(
            text,
            "<134>1 2026-12-02T06:05:49.500000Z edge-1 snirelay 42 access - \
             {\"message\":\"connection closed\",\"client.peer\":\"127.0.0.1:5\"}"
        );
        let mut out = Vec::new();
        message(&mut out, SyslogFormat::Rfc5424, &origin(), &line(false));
        assert!(String::from_utf8(out).unwrap().contains(" 42 - - {"));
    }

    #[test]
    fn rfc3164_header_pads_the_day_and_tags_with_the_pid() {
        let mut out = Vec::new();
        message(&mut out, SyslogFormat::Rfc3164, &origin(), &line(true));
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("<134>Dec  2 06:05:49 edge-1 snirelay[42]: {\"message\""),
            "{text}"
        );
    }

    #[test]
    fn severity_follows_the_level() {
        assert_eq!(severity(tracing::Level::ERROR), 3);
        assert_eq!(severity(tracing::Level::WARN), 4);
        assert_eq!(severity(tracing::Level::INFO), 6);
        assert_eq!(severity(tracing::Level::DEBUG), 7);
    }

    #[test]
    fn octet_counting_prefixes_the_length_of_the_message_only() {
        let mut out = b"17 <134>1 earlier".to_vec();
        let start = out.len();
        out.extend_from_slice("<14>1 é".as_bytes());
        octet_count(&mut out, start);
        assert_eq!(&out[start..], "8 <14>1 é".as_bytes());
    }

    #[test]
    fn header_fields_are_printable_and_never_empty() {
        assert_eq!(header_field("edge 1\n", 255), "edge1");
        assert_eq!(header_field("", 255), "-");
        assert_eq!(header_field("abcdef", 3), "abc");
    }

    #[test]
    fn journal_entry_names_each_field_and_frames_newlines_by_length() {
        let mut out = Vec::new();
        let mut l = line(true);
        l.json =
            br#"{"timestamp":"x","level":"INFO","message":"a\nb","bytes.up":12,"1x":"y"}"#.to_vec();
        journal_entry(&mut out, &origin(), &l);
        let mut want = b"PRIORITY=6\nSYSLOG_FACILITY=16\nSYSLOG_IDENTIFIER=snirelay\n\
                        SYSLOG_PID=42\nX=y\nBYTES_UP=12\nMESSAGE\n"
            .to_vec();
        want.extend_from_slice(&3u64.to_le_bytes());
        want.extend_from_slice(b"a\nb\n");
        // serde_json's map is ordered by key: "1x", "bytes.up", "message".
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&want)
        );
    }
}
