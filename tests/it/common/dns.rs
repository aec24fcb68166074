//! A test DNS server on 127.0.0.1 (UDP and TCP on one port), authoritative
//! for whatever names the test sets, changed while the relay runs.
//!
//! The socket is bound before [`DnsServer::start`] returns, so its address
//! can go straight into a relay config: nothing to wait for. Names are
//! matched case-insensitively, with or without the trailing dot. A name
//! that is set answers NOERROR with its A or AAAA records (NOERROR and no
//! record for the other family); a name that is not set answers NXDOMAIN.
//! Negative answers carry an SOA whose minimum is [`NEGATIVE_TTL`].
//!
//! [`Mode`] makes the server stop answering (queries are read and counted,
//! then dropped), answer SERVFAIL, or truncate every UDP answer (TC bit, no
//! record: the client must ask again over TCP), and back. Every question
//! is counted per name and record type, whatever the mode and transport.
//!
//! Not here: EDNS options, DNSSEC, zones with delegations.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, SOA};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::WAIT;

/// The negative TTL (SOA minimum) of NXDOMAIN and empty answers, seconds.
pub(crate) const NEGATIVE_TTL: u32 = 1;

/// How the server treats the questions it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Answer,
    /// Read, count, and drop: the client times out.
    Silent,
    ServFail,
    /// UDP answers are truncated; TCP answers in full.
    Truncate,
}

#[derive(Default)]
struct Zone {
    records: HashMap<String, (Vec<IpAddr>, u32)>,
    /// Questions received, by (name, type).
    asked: HashMap<(String, RecordType), usize>,
    mode: Option<Mode>,
}

struct Shared {
    zone: Mutex<Zone>,
    asked: Notify,
}

/// The running server; stops when dropped.
pub(crate) struct DnsServer {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

fn key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl DnsServer {
    /// Binds 127.0.0.1:0 (UDP, then TCP on the same port) and serves.
    pub(crate) async fn start() -> DnsServer {
        for _ in 0..50 {
            let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind dns");
            let addr = socket.local_addr().unwrap();
            let Ok(listener) = TcpListener::bind(addr).await else {
                continue;
            };
            let shared = Arc::new(Shared {
                zone: Mutex::new(Zone::default()),
                asked: Notify::new(),
            });
            let udp = serve_udp(socket, shared.clone());
            let tcp = serve_tcp(listener, shared.clone());
            let task = tokio::spawn(async move {
                tokio::join!(udp, tcp);
            });
            return DnsServer { addr, shared, task };
        }
        panic!("no port free for both UDP and TCP");
    }

    /// Sets `name`'s address records (A for IPv4, AAAA for IPv6), with `ttl`
    /// seconds.
    pub(crate) fn set(&self, name: &str, addrs: Vec<IpAddr>, ttl: u32) {
        let mut zone = self.shared.zone.lock().unwrap();
        zone.records.insert(key(name), (addrs, ttl));
    }

    /// Removes `name`: NXDOMAIN from now on.
    pub(crate) fn remove(&self, name: &str) {
        self.shared.zone.lock().unwrap().records.remove(&key(name));
    }

    pub(crate) fn set_mode(&self, mode: Mode) {
        self.shared.zone.lock().unwrap().mode = Some(mode);
    }

    /// Questions received for `name`, of every type.
    pub(crate) fn queries(&self, name: &str) -> usize {
        let name = key(name);
        let zone = self.shared.zone.lock().unwrap();
        zone.asked
            .iter()
            .filter(|((n, _), _)| *n == name)
            .map(|(_, count)| count)
            .sum()
    }

    /// Questions of `record_type` received for `name`. A lookup through
    /// `snirelay::backend::dns::query` asks A once and AAAA once, so the A
    /// count is the number of lookups.
    pub(crate) fn queries_of(&self, name: &str, record_type: RecordType) -> usize {
        let zone = self.shared.zone.lock().unwrap();
        zone.asked
            .get(&(key(name), record_type))
            .copied()
            .unwrap_or(0)
    }

    /// Lookups of `name`: its A questions.
    pub(crate) fn lookups(&self, name: &str) -> usize {
        self.queries_of(name, RecordType::A)
    }

    /// Waits (up to [`WAIT`], then panics) until `name` was looked up at
    /// least `n` times.
    pub(crate) async fn wait_lookups(&self, name: &str, n: usize) {
        let waited = tokio::time::timeout(WAIT, async {
            loop {
                let notified = self.shared.asked.notified();
                if self.lookups(name) >= n {
                    return;
                }
                notified.await;
            }
        })
        .await;
        if waited.is_err() {
            panic!(
                "{name} was looked up {} times, waited for {n}",
                self.lookups(name)
            );
        }
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_udp(socket: UdpSocket, shared: Arc<Shared>) {
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((len, from)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let Ok(request) = Message::from_vec(&buf[..len]) else {
            continue;
        };
        let Some(reply) = answer(&request, &shared, true) else {
            continue;
        };
        if let Ok(bytes) = reply.to_vec() {
            let _ = socket.send_to(&bytes, from).await;
        }
    }
}

/// DNS over TCP: each message behind a two-byte length.
async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((mut stream, _)) = listener.accept().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            loop {
                let Ok(len) = stream.read_u16().await else {
                    return;
                };
                let mut buf = vec![0u8; len.into()];
                if stream.read_exact(&mut buf).await.is_err() {
                    return;
                }
                let Ok(request) = Message::from_vec(&buf) else {
                    return;
                };
                let Some(reply) = answer(&request, &shared, false) else {
                    continue;
                };
                let Ok(bytes) = reply.to_vec() else {
                    return;
                };
                let len = u16::try_from(bytes.len()).unwrap();
                if stream.write_u16(len).await.is_err() || stream.write_all(&bytes).await.is_err() {
                    return;
                }
            }
        });
    }
}

/// The reply to `request`, or `None` to stay silent.
fn answer(request: &Message, shared: &Shared, udp: bool) -> Option<Message> {
    if request.metadata.message_type != MessageType::Query {
        return None;
    }
    let query = request.queries.first()?;
    let name = key(&query.name().to_ascii());
    let (mode, records) = {
        let mut zone = shared.zone.lock().unwrap();
        *zone
            .asked
            .entry((name.clone(), query.query_type()))
            .or_default() += 1;
        (
            zone.mode.unwrap_or(Mode::Answer),
            zone.records.get(&name).cloned(),
        )
    };
    shared.asked.notify_waiters();
    let mut reply = Message::response(request.metadata.id, OpCode::Query);
    reply.metadata.recursion_desired = request.metadata.recursion_desired;
    reply.add_queries(request.queries.iter().cloned());
    match mode {
        Mode::Silent => return None,
        Mode::ServFail => {
            reply.metadata.response_code = ResponseCode::ServFail;
            return Some(reply);
        }
        Mode::Truncate if udp => {
            reply.metadata.truncation = true;
            return Some(reply);
        }
        Mode::Answer | Mode::Truncate => {}
    }
    reply.metadata.authoritative = true;
    let owner = query.name().clone();
    let answers: Vec<Record> = match &records {
        None => Vec::new(),
        Some((addrs, ttl)) => addrs
            .iter()
            .filter_map(|addr| match (addr, query.query_type()) {
                (IpAddr::V4(v4), RecordType::A) => Some(RData::A(A(*v4))),
                (IpAddr::V6(v6), RecordType::AAAA) => Some(RData::AAAA(AAAA(*v6))),
                _ => None,
            })
            .map(|data| Record::from_rdata(owner.clone(), *ttl, data))
            .collect(),
    };
    if records.is_none() {
        reply.metadata.response_code = ResponseCode::NXDomain;
    }
    if answers.is_empty() {
        let soa = SOA::new(
            Name::from_ascii("ns.test.").unwrap(),
            Name::from_ascii("hostmaster.test.").unwrap(),
            1,
            60,
            60,
            60,
            NEGATIVE_TTL,
        );
        reply.add_authority(Record::from_rdata(
            Name::root(),
            NEGATIVE_TTL,
            RData::SOA(soa),
        ));
    }
    reply.add_answers(answers);
    Some(reply)
}
