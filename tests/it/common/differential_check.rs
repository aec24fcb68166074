//! The differential harness's verdict: which per-connection differences
//! between HAProxy and snirelay are listed (in docs/migrating-from-haproxy.md,
//! section [`SECTION`], each by an identifier), what shape each has, and
//! the check that fails a script on any other difference.
//!
//! Two outcomes are the same when they relayed to the same server with the
//! same PROXY header fields at the same time (or both refused), ended the same way (alert
//! and its description, reset, close, or still open), and, when both
//! ended, within [`TOLERANCE`] plus [`TOLERANCE_SHARE`] of the later end of
//! each other (timers fire late on a loaded machine: the CI runs this
//! area beside the rest of the suite on two cores). One allowance: a reset
//! and a close within [`TOLERANCE`] of the hello, without an alert, are
//! the same refusal (which of the two the client sees depends on whether
//! its hello arrived before the proxy closed, in both proxies).
//!
//! Connections a script marks as one burst ([`Conn::in_burst`]: arriving
//! too close together for either proxy to promise an order) are compared
//! as sorted lists of outcomes instead of one by one.
//!
//! A connection that differs must carry the identifier of a listed
//! difference whose shape ([`DIFFERENCES`]) it has; a connection that
//! carries one must differ (so a difference that goes away is noticed).
//! The module `differential` checks that the identifiers here, the doc's
//! and those the scripts use are the same sets, so the list cannot rot.
//!
//! Not here: running anything (the sibling `differential`).

use std::time::Duration;

use super::differential::{Conn, End, Outcome};

/// The heading of the doc section that lists the differences.
pub(crate) const SECTION: &str = "## Where snirelay decides differently, and why";

/// Two ends are "at the same time" within this, plus [`TOLERANCE_SHARE`]
/// of the later one.
pub(crate) const TOLERANCE: Duration = Duration::from_millis(400);

/// The share of the later end added to [`TOLERANCE`] (a quarter: 250 ms on
/// a one-second timer).
pub(crate) const TOLERANCE_SHARE: f64 = 0.25;

/// Whether two moments are the same within the tolerance.
pub(crate) fn same_time(a: Duration, b: Duration) -> bool {
    let later = a.max(b);
    a.abs_diff(b) <= TOLERANCE + later.mul_f64(TOLERANCE_SHARE)
}

/// Whether two outcomes are the same (see the module header).
pub(crate) fn same(h: &Outcome, s: &Outcome) -> bool {
    h.relayed == s.relayed
        && match (h.answered, s.answered) {
            (Some(a), Some(b)) => same_time(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
        && (h.end == s.end || refused_at_accept(h) && refused_at_accept(s))
        && match (h.server_closed, s.server_closed) {
            (Some(a), Some(b)) => same_time(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
        && (h.end == End::Open || same_time(h.after, s.after))
}

/// Refused, without an alert, right away: closed unread at accept (a
/// limit). Whether the client then sees a reset or a plain close is a race
/// in both proxies (a close with the client's hello still unread is sent
/// as a reset), so the two count as the same refusal there.
fn refused_at_accept(o: &Outcome) -> bool {
    refused_quietly(o) && o.after <= TOLERANCE
}

fn refused_quietly(o: &Outcome) -> bool {
    o.relayed.is_none() && matches!(o.end, End::Close | End::Reset)
}

/// snirelay's refusal of what it cannot route on (`not_tls`, `malformed`,
/// `hello_timeout`): a plain close, nothing relayed.
fn closed(o: &Outcome) -> bool {
    o.relayed.is_none() && o.end == End::Close
}

fn refused(o: &Outcome) -> bool {
    o.relayed.is_none() && o.end != End::Open
}

/// A listed difference: its identifier (as the doc writes it, in bold)
/// and the shape a connection's two outcomes must have to show it.
pub(crate) struct Difference {
    pub id: &'static str,
    pub shape: fn(&Outcome, &Outcome) -> bool,
}

/// Every listed difference. docs/migrating-from-haproxy.md explains each
/// under [`SECTION`].
pub(crate) const DIFFERENCES: &[Difference] = &[
    // HAProxy's reject closes without a word; snirelay says
    // `unrecognized_name`, at the same moment (a name no route takes, or
    // no name where the listener refuses hellos without one).
    Difference {
        id: "alert-on-unmatched",
        shape: |h, s| refused_quietly(h) && s.end == End::Alert(112) && same_time(h.after, s.after),
    },
    // HAProxy waits out inspect-delay on bytes that are no ClientHello
    // (then `reject if WAIT_END`); snirelay refuses them at once.
    Difference {
        id: "not-tls-refused-at-once",
        shape: |h, s| refused(h) && closed(s) && s.after + TOLERANCE < h.after,
    },
    // HAProxy relays what is no complete ClientHello (HTTP bytes, a
    // truncated or absent hello) to the default backend once inspect-delay
    // ends; snirelay refuses it.
    Difference {
        id: "unparsed-to-default",
        shape: |h, s| h.relayed.is_some() && closed(s),
    },
    // A server name that is no host name (here with a space, or with a
    // trailing dot, which RFC 6066 §3 rules out): HAProxy's default
    // backend takes it, snirelay refuses it with `unrecognized_name` even
    // where a default route exists.
    Difference {
        id: "invalid-name-refused",
        shape: |h, s| h.relayed.is_some() && s.relayed.is_none() && s.end == End::Alert(112),
    },
    // `-m dom D` also matches D as inner labels (`D.evil.net`): HAProxy
    // relays such a name to D's backend, snirelay (D and `*.D`) routes it
    // as any other name: elsewhere, or refused.
    Difference {
        id: "dom-inner-labels",
        shape: |h, s| h.relayed.is_some() && h.relayed != s.relayed,
    },
    // A hello whose server_name lists two host names (RFC 6066 allows one):
    // HAProxy routes on the first, snirelay refuses the hello as malformed.
    Difference {
        id: "strict-hello",
        shape: |h, s| h.relayed.is_some() && closed(s),
    },
    // The same server and PROXY v2 addresses; snirelay's header adds its
    // AUTHORITY (the SNI) and UNIQUE_ID TLVs, and its hop count (0xE0)
    // when the connection arrived with a PROXY header; HAProxy's
    // send-proxy-v2 adds none.
    Difference {
        id: "proxy-v2-tlvs",
        shape: |h, s| match (&h.relayed, &s.relayed) {
            (Some((hs, Some(hp))), Some((ss, Some(sp)))) => {
                let extra = sp.strip_prefix(hp.as_str()).unwrap_or("!");
                let tlvs = extra.rsplit_once(" tlvs=").map_or("!", |(_, t)| t);
                let authority = extra.starts_with(" authority=") == tlvs.starts_with("0x02,");
                hs == ss
                    && h.end == s.end
                    && authority
                    && ["0x02,0x05", "0x05", "0x02,0x05,0xe0", "0x05,0xe0"].contains(&tlvs)
            }
            _ => false,
        },
    },
];

/// Fails unless every connection of `script` has the same outcome on
/// both sides or shows the listed difference it names; the message is the
/// whole table.
pub(crate) fn check(what: &str, script: &[Conn], results: &[(Outcome, Outcome)]) {
    assert_eq!(script.len(), results.len());
    let results = &unbursted(script, results);
    let mut table = String::new();
    let mut failures = Vec::new();
    for (conn, (h, s)) in script.iter().zip(results) {
        let equal = same(h, s);
        let verdict = match (equal, conn.differs) {
            (true, None) => "same".to_owned(),
            (true, Some(id)) => {
                failures.push(format!(
                    "{}: listed difference {id} not produced",
                    conn.label
                ));
                format!("same, but {id} expected")
            }
            (false, None) => {
                failures.push(format!("{}: unlisted difference", conn.label));
                "UNLISTED DIFFERENCE".to_owned()
            }
            (false, Some(id)) => {
                let listed = DIFFERENCES
                    .iter()
                    .find(|d| d.id == id)
                    .unwrap_or_else(|| panic!("{id} is not in DIFFERENCES"));
                if (listed.shape)(h, s) {
                    format!("listed: {id}")
                } else {
                    failures.push(format!("{}: differs, not as {id} does", conn.label));
                    format!("DIFFERS, NOT AS {id}")
                }
            }
        };
        table += &format!(
            "\n  {:<32} HAProxy: {h}\n  {:<32} snirelay: {s}\n  {:<32} -> {verdict}",
            conn.label, "", ""
        );
    }
    // Shown with `-- --nocapture`, and on failure.
    println!("{}{table}", what.lines().next().unwrap_or(what));
    assert!(failures.is_empty(), "{what}: {failures:#?}\n{table}");
}

/// `results` with each burst's outcomes (see [`Conn::in_burst`]) sorted,
/// on each side apart, by what happened (relayed where and with which
/// header, how it ended), so that the i-th of HAProxy's is compared with
/// the i-th of snirelay's: which of a burst's connections a limit took is
/// neither proxy's decision, how many it took is.
fn unbursted(script: &[Conn], results: &[(Outcome, Outcome)]) -> Vec<(Outcome, Outcome)> {
    let mut results = results.to_vec();
    let groups: std::collections::BTreeSet<u32> = script.iter().filter_map(|c| c.burst).collect();
    let key = |o: &Outcome| (o.relayed.clone(), format!("{:?}", o.end));
    for group in groups {
        let at: Vec<usize> = (0..script.len())
            .filter(|&i| script[i].burst == Some(group))
            .collect();
        let mut h: Vec<Outcome> = at.iter().map(|&i| results[i].0.clone()).collect();
        let mut s: Vec<Outcome> = at.iter().map(|&i| results[i].1.clone()).collect();
        h.sort_by_key(key);
        s.sort_by_key(key);
        for (n, &i) in at.iter().enumerate() {
            results[i] = (h[n].clone(), s[n].clone());
        }
    }
    results
}
