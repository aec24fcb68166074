//! Checks the PROXY v2 TLV keys: a backend's `proxy_protocol_tlvs` (what
//! its v2 header adds) and a listener's `[listener.proxy_protocol]
//! pass_through_tlvs` (what it copies from a peer's header). Which types
//! each may name is the spec's business and lives in [`crate::wire::proxy_tlv`]
//! ([`TlvRole`]); here: the key and index of every problem, the value
//! sources, and the bound on what a backend's list can add.
//!
//! Not here: encoding ([`crate::proxy::outbound`]) or reading headers.

use super::*;
use crate::wire::proxy_tlv::{MAX_ADDED_TLV_BYTES, TLV_ALPN, TlvRole, TlvTypes};

impl Checker {
    /// `proxy_protocol_tlvs` of backend `key`, whose header is `version`.
    pub(super) fn proxy_tlvs(
        &mut self,
        key: &str,
        entries: Option<&[ProxyTlvEntry]>,
        version: Option<Outbound>,
    ) -> Option<Arc<[ProxyTlv]>> {
        let key = format!("{key}.proxy_protocol_tlvs");
        let entries = entries.unwrap_or_default();
        if !entries.is_empty() && version.is_some_and(|v| v != Outbound::V2) {
            self.problem(
                &key,
                "needs proxy_protocol = \"v2\" (only v2 headers carry TLVs)",
            );
        }
        let problems = self.problems.len();
        let mut tlvs: Vec<ProxyTlv> = Vec::with_capacity(entries.len());
        let mut first_at = [None::<usize>; 256];
        for (i, entry) in entries.iter().enumerate() {
            let at = format!("{key}[{i}]");
            let kind = self.ranged(&format!("{at}.type"), Some(entry.kind), TLV_TYPE_RANGE, 0);
            let value = self.tlv_value(&at, entry);
            let Some(kind) = kind.map(|k| k as u8) else {
                continue;
            };
            let role = TlvRole::of(kind);
            if !role.addable() {
                self.problem(
                    format!("{at}.type"),
                    format!(
                        "0x{kind:02X} is {}; proxy_protocol_tlvs may send 0x01 (value = \"alpn\"), \
                         the custom types 0xE1-0xEF and the experimental 0xF0-0xF7",
                        role.describe()
                    ),
                );
            }
            match first_at[usize::from(kind)] {
                Some(first) => self.problem(
                    format!("{at}.type"),
                    format!("0x{kind:02X} is already sent by {key}[{first}]"),
                ),
                None => first_at[usize::from(kind)] = Some(i),
            }
            let Some(value) = value else { continue };
            if kind == TLV_ALPN && value != TlvValue::From(TlvSource::Alpn) {
                self.problem(
                    at,
                    "type 0x01 is PP2_TYPE_ALPN: it carries the client's ALPN, value = \"alpn\"",
                );
            }
            tlvs.push(ProxyTlv { kind, value });
        }
        let worst: usize = tlvs.iter().map(|t| 3 + t.value.max_len()).sum();
        if worst > MAX_ADDED_TLV_BYTES {
            self.problem(
                &key,
                format!(
                    "these TLVs take up to {worst} bytes (type and length included, each value \
                     at its longest); at most {MAX_ADDED_TLV_BYTES} fit"
                ),
            );
        }
        (self.problems.len() == problems).then(|| tlvs.into())
    }

    /// The value of one entry: exactly one of `value`, `text`, `bytes`.
    fn tlv_value(&mut self, at: &str, entry: &ProxyTlvEntry) -> Option<TlvValue> {
        match (&entry.value, &entry.text, &entry.bytes) {
            (Some(name), None, None) => match TlvSource::from_name(name) {
                Some(source) => Some(TlvValue::From(source)),
                None => {
                    let known = TlvSource::ALL
                        .iter()
                        .map(|s| format!("{:?}", s.as_str()))
                        .collect::<Vec<_>>()
                        .join(", ");
                    let why = "is not a value source";
                    self.problem(
                        format!("{at}.value"),
                        format!("{name:?} {why} (one of {known})"),
                    );
                    None
                }
            },
            (None, Some(text), None) => Some(TlvValue::Text(text.clone())),
            (None, None, Some(hex)) => match from_hex(hex) {
                Some(bytes) => Some(TlvValue::Bytes(bytes)),
                None => {
                    self.problem(
                        format!("{at}.bytes"),
                        format!("{hex:?} is not hex (two digits per byte, such as \"0a1b\")"),
                    );
                    None
                }
            },
            (None, None, None) => {
                self.problem(at, "needs one of `value`, `text` or `bytes`");
                None
            }
            _ => {
                self.problem(
                    at,
                    "`value`, `text` and `bytes` are alternatives; set only one",
                );
                None
            }
        }
    }

    /// `[listener.proxy_protocol] pass_through_tlvs` at `key`.
    pub(super) fn pass_through_tlvs(
        &mut self,
        key: &str,
        types: Option<&[i64]>,
    ) -> Option<TlvTypes> {
        let key = format!("{key}.pass_through_tlvs");
        let problems = self.problems.len();
        let mut set = TlvTypes::NONE;
        for (i, &kind) in types.unwrap_or_default().iter().enumerate() {
            let at = format!("{key}[{i}]");
            let Some(kind) = self.ranged(&at, Some(kind), TLV_TYPE_RANGE, 0) else {
                continue;
            };
            let kind = kind as u8;
            let role = TlvRole::of(kind);
            if !role.passable() {
                self.problem(
                    &at,
                    format!(
                        "0x{kind:02X} is {}; pass_through_tlvs may copy 0x01 (ALPN), 0x20 (SSL), \
                         0x30 (NETNS), the custom types 0xE0-0xEF and the experimental 0xF0-0xF7",
                        role.describe()
                    ),
                );
            } else if set.contains(kind) {
                self.problem(&at, format!("0x{kind:02X} is listed twice"));
            }
            set.insert(kind);
        }
        (self.problems.len() == problems).then_some(set)
    }
}

/// Bytes from hex digits, two per byte, either case.
fn from_hex(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if digits.len() % 2 != 0 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    digits
        .chunks(2)
        .map(|pair| {
            let pair = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(pair, 16).ok()
        })
        .collect()
}
