//! The differential harness's verdict: which per-connection differences
//! between HAProxy and snirelay are listed (in docs/migrating-from-haproxy.md,
//! section [`SECTION`], each by an identifier), what shape each has, and
//! the check that fails a script on any other difference.
//!
//! Two outcomes are the same when they relayed to the same server with the
//! same PROXY header fields at the same time (or both refused), ended the
//! same way (alert and its description, reset, close, or still open), and, when both
//! ended, at the same time. "The same time" is per script ([`Timing`]):
//! within a tolerance strictly less than half the shortest timer the
//! script exercises, so that a proxy firing that timer at once, or twice as
//! late, differs. One allowance: a reset and a close within the tolerance
//! of the hello, without an alert, are the same refusal (which of the two
//! the client sees depends on whether its hello arrived before the proxy
//! closed, in both proxies).
//!
//! Connections a script marks as one burst ([`Conn::in_burst`]: arriving
//! too close together for either proxy to promise an order) are compared
//! as sorted lists of outcomes instead of one by one.
//!
//! A connection that differs must carry the identifier of a listed
//! difference whose shape ([`DIFFERENCES`]) it has and snirelay's exact
//! decision ([`Decision`]: which server, or which refusal); a connection
//! that carries one must differ (so a difference that goes away is
//! noticed), unless the difference is one HAProxy itself shows only in
//! some runs ([`Difference::always`] false), or only against one HAProxy
//! version ([`Conn::only_on`]). Timing still counts inside a listed
//! difference: where both relayed, the answers arrive at the same time;
//! where both ended, they end at the same time (except
//! `not-tls-refused-at-once`, `idle-close-without-fin-wait` and
//! `paced-accept-not-earlier`, differences of timing themselves, whose
//! shapes say which is earlier).
//!
//! The module `differential` checks that the identifiers here, the doc's
//! and those the scripts use are the same sets, so the list cannot rot.
//!
//! Not here: running anything (the sibling `differential`).

use std::time::Duration;

use super::differential::{Conn, End, Outcome};

/// The heading of the doc section that lists the differences.
pub(crate) const SECTION: &str = "## Where snirelay decides differently, and why";

/// How close two moments must be to be the same, for one script: a
/// tolerance strictly less than half the shortest timer the script
/// exercises (so a timer fired at once or at twice its length is told
/// apart from one fired on time), checked when the script states it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// The shortest timer the script exercises (inspect delay, client-fin,
    /// check interval, a rate's pace…).
    pub shortest_timer: Duration,
    pub tolerance: Duration,
}

impl Timing {
    /// A script whose shortest timer is `shortest_timer_ms`, compared
    /// within `tolerance_ms`; panics unless the tolerance is strictly
    /// below half the timer.
    /// `const`, so a script's `const` fails to build with a tolerance too
    /// wide for its timer.
    pub(crate) const fn new(shortest_timer_ms: u64, tolerance_ms: u64) -> Timing {
        assert!(
            2 * tolerance_ms < shortest_timer_ms,
            "the tolerance must be strictly below half the shortest timer"
        );
        Timing {
            shortest_timer: Duration::from_millis(shortest_timer_ms),
            tolerance: Duration::from_millis(tolerance_ms),
        }
    }

    /// Whether two moments are the same within the tolerance.
    pub(crate) fn same_time(&self, a: Duration, b: Duration) -> bool {
        a.abs_diff(b) <= self.tolerance
    }

    /// Whether two outcomes are the same (see the module header).
    pub(crate) fn same(&self, h: &Outcome, s: &Outcome) -> bool {
        h.relayed == s.relayed
            && (h.end == s.end || self.refused_at_accept(h) && self.refused_at_accept(s))
            && self.same_times(h, s)
    }

    /// The timing half of [`Timing::same`]: the answers' moments where both
    /// were answered, the server-side closes where both closed, and the
    /// ends where both ended.
    fn same_times(&self, h: &Outcome, s: &Outcome) -> bool {
        let both = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (Some(a), Some(b)) => self.same_time(a, b),
            (a, b) => a.is_none() && b.is_none(),
        };
        both(h.answered, s.answered)
            && both(h.server_closed, s.server_closed)
            && (h.end == End::Open || s.end == End::Open || self.same_time(h.after, s.after))
            && (h.end == End::Open) == (s.end == End::Open)
    }

    /// Within a listed difference: the moments both sides have are the
    /// same (the answer where both were answered, the end where both
    /// ended the same way).
    fn same_shared_times(&self, h: &Outcome, s: &Outcome) -> bool {
        let answered = match (h.answered, s.answered) {
            (Some(a), Some(b)) => self.same_time(a, b),
            _ => true,
        };
        let ended = h.end == End::Open
            || s.end == End::Open
            || h.relayed.is_some() != s.relayed.is_some()
            || self.same_time(h.after, s.after);
        answered && ended
    }

    /// Refused, without an alert, right away: closed unread at accept (a
    /// limit). Whether the client then sees a reset or a plain close is a race
    /// in both proxies (a close with the client's hello still unread is sent
    /// as a reset), so the two count as the same refusal there.
    fn refused_at_accept(&self, o: &Outcome) -> bool {
        refused_quietly(o) && o.after <= self.tolerance
    }
}

/// The largest difference between the two sides' moments (answer,
/// server-side close, end where both ended alike) over `results`: how much
/// of the tolerance a run used.
pub(crate) fn spread<'a>(results: impl IntoIterator<Item = &'a (Outcome, Outcome)>) -> Duration {
    let mut widest = Duration::ZERO;
    for (h, s) in results {
        let pairs = [
            (h.answered, s.answered),
            (h.server_closed, s.server_closed),
            (
                (h.end != End::Open && h.relayed == s.relayed && h.end == s.end).then_some(h.after),
                (s.end != End::Open).then_some(s.after),
            ),
        ];
        for (a, b) in pairs {
            if let (Some(a), Some(b)) = (a, b) {
                widest = widest.max(a.abs_diff(b));
            }
        }
    }
    widest
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

/// snirelay's own decision on a connection that shows a listed
/// difference: asserted exactly, not only that it differs from HAProxy's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Relayed to this server (its address in the HAProxy configuration).
    To(&'static str),
    /// Refused with this TLS alert description.
    Alert(u8),
    /// Refused by closing without an alert (a close or a reset).
    Closed,
}

impl Decision {
    /// Whether `s` (snirelay's outcome) is this decision.
    pub(crate) fn is(&self, s: &Outcome) -> bool {
        match *self {
            Decision::To(server) => s.relayed.as_ref().is_some_and(|r| r.0 == server),
            Decision::Alert(description) => s.relayed.is_none() && s.end == End::Alert(description),
            Decision::Closed => refused_quietly(s),
        }
    }
}

/// A listed difference: its identifier (as the doc writes it, in bold)
/// and the shape a connection's two outcomes must have to show it.
pub(crate) struct Difference {
    pub id: &'static str,
    pub shape: fn(&Timing, &Outcome, &Outcome) -> bool,
    /// Whether the moments both sides have must still be the same (see
    /// the module header); false only where the moment is the difference.
    pub same_moments: bool,
    /// Whether a connection that carries it must differ: false where
    /// HAProxy itself decides either way from run to run (a race between
    /// two of its own timers), so the same outcome is allowed as well.
    pub always: bool,
}

/// Every listed difference. docs/migrating-from-haproxy.md explains each
/// under [`SECTION`].
pub(crate) const DIFFERENCES: &[Difference] = &[
    // HAProxy's reject closes without a word; snirelay says
    // `unrecognized_name`, at the same moment (a name no route takes, or
    // no name where the listener refuses hellos without one).
    Difference {
        id: "alert-on-unmatched",
        shape: |t, h, s| {
            refused_quietly(h) && s.end == End::Alert(112) && t.same_time(h.after, s.after)
        },
        same_moments: true,
        always: true,
    },
    // HAProxy waits out inspect-delay on bytes that are no ClientHello
    // (then `reject if WAIT_END`); snirelay refuses them at once.
    Difference {
        id: "not-tls-refused-at-once",
        shape: |t, h, s| refused(h) && closed(s) && s.after + t.tolerance < h.after,
        same_moments: false,
        always: true,
    },
    // HAProxy relays what is no complete ClientHello (HTTP bytes, a
    // truncated or absent hello) to the default backend once inspect-delay
    // ends; snirelay refuses it.
    Difference {
        id: "unparsed-to-default",
        shape: |_, h, s| h.relayed.is_some() && closed(s),
        same_moments: true,
        always: true,
    },
    // A server name that is no host name (here with a space, or with a
    // trailing dot, which RFC 6066 §3 rules out): HAProxy's default
    // backend takes it, snirelay refuses it with `unrecognized_name` even
    // where a default route exists.
    Difference {
        id: "invalid-name-refused",
        shape: |_, h, s| h.relayed.is_some() && s.relayed.is_none() && s.end == End::Alert(112),
        same_moments: true,
        always: true,
    },
    // `-m dom D` also matches D as inner labels (`D.evil.net`): HAProxy
    // relays such a name to D's backend, snirelay (D and `*.D`) routes it
    // as any other name: elsewhere, or refused.
    Difference {
        id: "dom-inner-labels",
        shape: |_, h, s| h.relayed.is_some() && h.relayed != s.relayed,
        same_moments: true,
        always: true,
    },
    // A hello whose server_name lists two host names (RFC 6066 allows one):
    // HAProxy routes on the first, snirelay refuses the hello as malformed.
    Difference {
        id: "strict-hello",
        shape: |_, h, s| h.relayed.is_some() && closed(s),
        same_moments: true,
        always: true,
    },
    // The same server and PROXY v2 addresses; snirelay's header adds its
    // AUTHORITY (the SNI) and UNIQUE_ID TLVs, and its hop count (0xE0)
    // when the connection arrived with a PROXY header; HAProxy's
    // send-proxy-v2 adds none.
    Difference {
        id: "proxy-v2-tlvs",
        shape: |t, h, s| match (&h.relayed, &s.relayed) {
            (Some((hs, Some(hp))), Some((ss, Some(sp)))) => {
                let extra = sp.strip_prefix(hp.as_str()).unwrap_or("!");
                let tlvs = extra.rsplit_once(" tlvs=").map_or("!", |(_, t)| t);
                let authority = extra.starts_with(" authority=") == tlvs.starts_with("0x02,");
                hs == ss
                    && h.end == s.end
                    && t.same_times(h, s)
                    && authority
                    && ["0x02,0x05", "0x05", "0x02,0x05,0xe0", "0x05,0xe0"].contains(&tlvs)
            }
            _ => false,
        },
        same_moments: true,
        always: true,
    },
    // HAProxy 2.6 only, and only sometimes: an idle relayed connection
    // closes toward the client one fin timer (`client-fin` / `server-fin`)
    // after `timeout client` / `server` expired, when the two idle timers
    // expire together and one side's is handled first (the expiry shuts one
    // direction, the other then waits out the fin timer); otherwise at the
    // idle timeout, as HAProxy 3.0 and snirelay always do. The fin timer is
    // the script's shortest.
    Difference {
        id: "idle-close-without-fin-wait",
        shape: |t, h, s| {
            h.relayed.is_some()
                && h.relayed == s.relayed
                && h.end == End::Close
                && s.end == End::Close
                && s.after + t.tolerance < h.after
                && t.same_time(h.after, s.after + t.shortest_timer)
        },
        same_moments: false,
        always: false,
    },
    // `maxconnrate`'s pace: HAProxy's estimate (the last period's count
    // weighted by what is left of it) can take a connection one pace step
    // earlier than the even pace, right after a period boundary;
    // snirelay then takes it on the pace, never earlier. The pace is the
    // script's shortest timer.
    Difference {
        id: "paced-accept-not-earlier",
        shape: |t, h, s| match (h.answered, s.answered) {
            (Some(h_at), Some(s_at)) => {
                h.relayed.is_some()
                    && h.relayed == s.relayed
                    && h_at + t.tolerance < s_at
                    && s_at <= h_at + t.shortest_timer + t.tolerance
            }
            _ => false,
        },
        same_moments: false,
        always: false,
    },
];

/// Fails unless every connection of `script` has the same outcome on
/// both sides within `timing`, or shows the listed difference it names
/// (against HAProxy `version`) with snirelay's decision as the script
/// states it; the message is the whole table, with the widest gap between
/// the two sides' moments.
pub(crate) fn check(
    what: &str,
    version: &str,
    timing: &Timing,
    script: &[Conn],
    results: &[(Outcome, Outcome)],
) {
    assert_eq!(script.len(), results.len());
    let results = &unbursted(script, results);
    let mut table = String::new();
    let mut failures = Vec::new();
    for (conn, (h, s)) in script.iter().zip(results) {
        let equal = timing.same(h, s);
        let verdict = match (equal, conn.differs_on(version)) {
            (true, None) => "same".to_owned(),
            (true, Some((id, _))) if DIFFERENCES.iter().any(|d| d.id == id && !d.always) => {
                format!("same ({id} allowed, not produced)")
            }
            (true, Some((id, _))) => {
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
            (false, Some((id, decision))) => {
                let listed = DIFFERENCES
                    .iter()
                    .find(|d| d.id == id)
                    .unwrap_or_else(|| panic!("{id} is not in DIFFERENCES"));
                let shaped = (listed.shape)(timing, h, s);
                let timed = !listed.same_moments || timing.same_shared_times(h, s);
                if !shaped {
                    failures.push(format!("{}: differs, not as {id} does", conn.label));
                    format!("DIFFERS, NOT AS {id}")
                } else if !decision.is(s) {
                    failures.push(format!(
                        "{}: {id}, but snirelay's decision is not {decision:?}",
                        conn.label
                    ));
                    format!("{id}, BUT NOT {decision:?}")
                } else if !timed {
                    failures.push(format!("{}: {id}, at another moment", conn.label));
                    format!("{id}, AT ANOTHER MOMENT")
                } else {
                    format!("listed: {id}, snirelay {decision:?}")
                }
            }
        };
        table += &format!(
            "\n  {:<32} HAProxy: {h}\n  {:<32} snirelay: {s}\n  {:<32} -> {verdict}",
            conn.label, "", ""
        );
    }
    // Shown with `-- --nocapture`, and on failure.
    println!(
        "{}: tolerance {} ms (shortest timer {} ms), widest gap {} ms{table}",
        what.lines().next().unwrap_or(what),
        timing.tolerance.as_millis(),
        timing.shortest_timer.as_millis(),
        spread(
            script
                .iter()
                .zip(results)
                .filter(|(conn, _)| conn.differs_on(version).is_none())
                .map(|(_, r)| r)
        )
        .as_millis()
    );
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
