//! The flow table on plain values: stages whose slots, holds and chosen
//! addresses are numbers and strings ([`Plain`]), and a clock that is a
//! start plus whole seconds. What the table decides (hold, route, close,
//! sweep) does not depend on what the stages hold.

use super::*;
use crate::flow::carry_out::Refused;
use crate::quic::flows::stages::{Admitted, Routed};
use crate::wire::proxy::Header;
use crate::wire::proxy_tlv::PassedTlvs;

/// Stages that admit every address but `refused` (with the slot number
/// `7`) and route every name but `refused.test` (refused with alert 112,
/// `unrecognized_name`), holding plain values.
#[derive(Debug)]
struct Plain {
    refused: SocketAddr,
}

impl Stages for Plain {
    type Slot = u32;
    type Kept = &'static str;
    type ToChoose = u32;
    type Chosen = u16;

    fn admit<'d>(
        &self,
        _generation: &Generation,
        record: &mut FlowRecord,
        arrival: DatagramArrival<'d>,
    ) -> Result<Admitted<'d, u32>, CloseReason> {
        if record.part.peer() == self.refused {
            return Err(CloseReason::Denied);
        }
        Ok(Admitted {
            slot: 7,
            payload: arrival.payload().expect("a plain datagram"),
            relayed: None,
        })
    }

    fn carry_out(
        &self,
        _generation: &Generation,
        _record: &mut FlowRecord,
        hello: &QuicHello,
        slot: u32,
        _relayed: Option<&(Header, PassedTlvs)>,
        _local: Option<SocketAddr>,
    ) -> Result<Routed<&'static str, u32>, Refused> {
        if hello.hello.server_name.as_deref() == Some(b"refused.test".as_slice()) {
            return Err(Refused {
                reason: CloseReason::Unmatched,
                alert: Some(112),
            });
        }
        Ok(Routed {
            idle: Duration::from_secs(30),
            lifetime: None,
            kept: "routed",
            to_choose: slot + 1,
        })
    }
}

fn plain_table(refused: &str) -> FlowTable<u32, Taken, Plain> {
    let series = crate::metrics::metrics().listener("h3", "quic");
    let stages = Plain {
        refused: addr(refused),
    };
    FlowTable::new(None, series, crate::metrics::metrics(), stages)
}

fn start(
    table: &mut FlowTable<u32, Taken, Plain>,
    now: Instant,
    from: &str,
    datagram: &[u8],
) -> bool {
    let generation = generation("");
    table.start(
        now,
        addr(from),
        None,
        DatagramArrival::Direct(datagram),
        &generation,
        &permits(10),
    )
}

#[test]
fn plain_stages_values_pass_through_the_table_untouched() {
    let generation = generation("");
    let mut table = plain_table("192.0.2.9:9");
    let t0 = Instant::now();
    let flight = initials("example.com", 2);
    assert!(start(&mut table, t0, "192.0.2.1:5000", &flight[0]));
    assert!(table.poll_event().is_none(), "half a hello is held");
    table.handle(
        t0 + Duration::from_secs(1),
        addr("192.0.2.1:5000"),
        &flight[1],
        &generation,
    );
    // Routed: what choosing needs is the stages' value (the slot, plus 1).
    let Some(Event::Pick(pick)) = table.poll_event() else {
        panic!("a routed flow asks for its address");
    };
    assert_eq!((pick.from, pick.choose), (addr("192.0.2.1:5000"), 8));
    // Chosen: the flow opens with its held datagrams, what the route kept
    // and the address chosen, as given.
    table.chosen(pick.from, pick.id, Ok(4433));
    let Some(Event::Open(opening)) = table.poll_event() else {
        panic!("a chosen flow opens");
    };
    assert_eq!(opening.held.len(), 2);
    assert_eq!((opening.kept, opening.chosen), ("routed", 4433));
    assert_eq!(opening.idle, Duration::from_secs(30));
    assert!(table.poll_event().is_none());
}

#[test]
fn plain_stages_refusals_close_with_their_reason_and_answer() {
    let mut table = plain_table("192.0.2.9:9");
    let t0 = Instant::now();
    // Refused at admission: closed at once, nothing held.
    assert!(!start(
        &mut table,
        t0,
        "192.0.2.9:9",
        &initials("example.com", 1)[0]
    ));
    let Some(Event::Close {
        reason,
        record,
        answer,
    }) = table.poll_event()
    else {
        panic!("a refused flow closes");
    };
    assert_eq!(
        (reason, record.part.peer()),
        (CloseReason::Denied, addr("192.0.2.9:9"))
    );
    assert!(answer.is_none());
    assert_eq!((table.len(), table.pending()), (0, (0, 0)));
    // Refused after the hello: the alert goes back in a CONNECTION_CLOSE.
    assert!(start(
        &mut table,
        t0,
        "192.0.2.2:5000",
        &initials("refused.test", 1)[0]
    ));
    assert_eq!(table.len(), 0);
    let Some(Event::Close { reason, answer, .. }) = table.poll_event() else {
        panic!("a refused hello closes");
    };
    assert_eq!(reason, CloseReason::Unmatched);
    assert_eq!(answer.map(|(to, _)| to), Some(addr("192.0.2.2:5000")));
}

#[test]
fn plain_stages_on_a_fake_clock_a_pending_flow_ends_at_its_hello_timeout() {
    let mut table = plain_table("192.0.2.9:9");
    let t0 = Instant::now();
    let second = Duration::from_secs(1);
    let flight = initials("example.com", 2);
    assert!(start(&mut table, t0, "192.0.2.1:5000", &flight[0]));
    // The test listener's client_hello_timeout is 5 s: at 4.999 s the
    // flow still waits, at 5 s it ends.
    table.sweep(t0 + 5 * second - Duration::from_millis(1), 5 * second);
    assert!(table.poll_event().is_none());
    assert_eq!(table.pending(), (1, 1200));
    table.sweep(t0 + 5 * second, 5 * second);
    let Some(Event::Close { reason, record, .. }) = table.poll_event() else {
        panic!("the pending flow ends at its hello timeout");
    };
    assert_eq!(
        (reason, record.part.peer()),
        (CloseReason::HelloTimeout, addr("192.0.2.1:5000"))
    );
    assert_eq!(table.pending(), (0, 0));
}
