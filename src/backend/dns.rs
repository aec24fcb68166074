//! One DNS question to one server: the A and AAAA records of a name, asked
//! of a given `resolver = "IP:53"`, with the smallest TTL of the answer.
//!
//! [`query`] sends the A and AAAA questions side by side over UDP (hickory's
//! client: random query id and source port, answers checked against the
//! server address and the question), repeats a question over TCP when the
//! UDP answer is truncated, and folds the two answers into one [`DnsAnswer`].
//! It tells a negative answer (NXDOMAIN, or NOERROR with no A/AAAA record:
//! `DnsAnswer.addrs` empty) from a failure ([`DnsError`]: timeout, SERVFAIL,
//! REFUSED, transport). When either question fails the whole query fails:
//! half an answer cannot be told from a change of the set, and callers keep
//! their last good set on failure anyway.
//!
//! Not here: caching, retries across calls, TTL clamping, search domains
//! (the name is always taken as fully qualified) or recursion of our own
//! (the server is expected to answer, as a recursive resolver or the zone's
//! authority does). Callers cache (`super::resolve`, the cluster lookups).
//!
//! Cost: one UDP socket per question (two per call), opened and closed by
//! the call; nothing is kept between calls. It runs on background tasks or
//! once per cache miss, never per relayed byte.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_net::NetError;
use hickory_net::client::{Client, ClientHandle};
use hickory_net::runtime::TokioRuntimeProvider;
use hickory_net::tcp::TcpClientStream;
use hickory_net::udp::UdpClientStream;
use hickory_proto::op::{DnsResponse, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};
use tokio::time::Instant;

/// What the server said about a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsAnswer {
    /// The A and AAAA addresses, A first, in the server's order, without
    /// duplicates. Empty: a negative answer (the name does not exist, or
    /// has no address record).
    pub addrs: Vec<IpAddr>,
    /// How long the answer may be used: the smallest TTL among the answer
    /// records (CNAMEs on the way included); for a negative answer the
    /// zone's negative TTL from its SOA, or zero when the server sent none.
    pub ttl: Duration,
}

/// Why there is no answer. Every variant is a failure to learn anything:
/// callers keep what they knew.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    /// The name to look up is not a valid DNS name.
    #[error("{name:?} is not a valid DNS name")]
    InvalidName {
        /// The name as given.
        name: String,
    },
    /// The server did not answer within the lookup's timeout.
    #[error("no answer from {server} within {timeout:?}")]
    Timeout {
        /// The DNS server asked.
        server: SocketAddr,
        /// The time allowed, retries included.
        timeout: Duration,
    },
    /// The server answered with an error code other than NXDOMAIN
    /// (SERVFAIL, REFUSED, ...).
    #[error("{server} answered {record_type} with {code}")]
    Response {
        /// The DNS server asked.
        server: SocketAddr,
        /// A or AAAA.
        record_type: RecordType,
        /// The response code it sent.
        code: ResponseCode,
    },
    /// Sending the query or reading the reply failed (a socket error, a
    /// reply that does not parse).
    #[error("asking {server} for {record_type} failed: {reason}")]
    Transport {
        /// The DNS server asked.
        server: SocketAddr,
        /// A or AAAA.
        record_type: RecordType,
        /// The resolver library's error, as text.
        reason: String,
    },
}

/// Asks `server` for the A and AAAA records of `name`, both within
/// `timeout` (UDP retransmissions and a TCP retry for a truncated answer
/// included).
pub async fn query(
    server: SocketAddr,
    name: &str,
    timeout: Duration,
) -> Result<DnsAnswer, DnsError> {
    let mut fqdn = Name::from_ascii(name).map_err(|_| DnsError::InvalidName {
        name: name.to_owned(),
    })?;
    fqdn.set_fqdn(true);
    let deadline = Instant::now() + timeout;
    let asked = async {
        tokio::try_join!(
            ask(server, &fqdn, RecordType::A, deadline),
            ask(server, &fqdn, RecordType::AAAA, deadline),
        )
    };
    let (v4, v6) = tokio::time::timeout_at(deadline, asked)
        .await
        .map_err(|_| DnsError::Timeout { server, timeout })?
        .map_err(|e| e.at(timeout))?;
    Ok(fold(&[v4, v6]))
}

/// A failure of one question; a timeout is reported with the caller's
/// overall budget.
enum AskError {
    Timeout(SocketAddr),
    Other(DnsError),
}

impl AskError {
    fn at(self, timeout: Duration) -> DnsError {
        match self {
            AskError::Timeout(server) => DnsError::Timeout { server, timeout },
            AskError::Other(e) => e,
        }
    }
}

/// One question, over UDP and, when the answer was truncated, over TCP.
async fn ask(
    server: SocketAddr,
    name: &Name,
    record_type: RecordType,
    deadline: Instant,
) -> Result<DnsResponse, AskError> {
    let transport = |error: NetError| match error {
        NetError::Timeout => AskError::Timeout(server),
        other => AskError::Other(DnsError::Transport {
            server,
            record_type,
            reason: other.to_string(),
        }),
    };
    let left = deadline.saturating_duration_since(Instant::now());
    let stream = UdpClientStream::builder(server, TokioRuntimeProvider::default())
        .with_timeout(Some(left))
        .build();
    let (mut client, background) = Client::<TokioRuntimeProvider>::from_sender(stream);
    let background = tokio::spawn(background);
    let answer = client
        .query(name.clone(), DNSClass::IN, record_type)
        .await
        .map_err(transport);
    background.abort();
    let mut answer = answer?;
    if answer.metadata.truncation {
        let left = deadline.saturating_duration_since(Instant::now());
        // The provider owns the exchange's background task: it lives
        // until this question is answered and is aborted with it.
        let provider = TokioRuntimeProvider::default();
        let mut client = TcpClientStream::exchange(server, None, left, Some(1), provider.clone())
            .await
            .map_err(transport)?;
        answer = client
            .query(name.clone(), DNSClass::IN, record_type)
            .await
            .map_err(transport)?;
        drop(provider);
    }
    match answer.metadata.response_code {
        ResponseCode::NoError | ResponseCode::NXDomain => Ok(answer),
        code => Err(AskError::Other(DnsError::Response {
            server,
            record_type,
            code,
        })),
    }
}

/// The A and AAAA answers as one.
fn fold(responses: &[DnsResponse]) -> DnsAnswer {
    let mut addrs = Vec::new();
    let mut ttl: Option<u32> = None;
    for response in responses {
        for record in &response.answers {
            let addr = match &record.data {
                RData::A(a) => IpAddr::V4(a.0),
                RData::AAAA(aaaa) => IpAddr::V6(aaaa.0),
                RData::CNAME(_) => {
                    ttl = Some(ttl.map_or(record.ttl, |t| t.min(record.ttl)));
                    continue;
                }
                _ => continue,
            };
            ttl = Some(ttl.map_or(record.ttl, |t| t.min(record.ttl)));
            if !addrs.contains(&addr) {
                addrs.push(addr);
            }
        }
    }
    if addrs.is_empty() {
        let negative = responses.iter().filter_map(|r| r.negative_ttl()).min();
        return DnsAnswer {
            addrs,
            ttl: Duration::from_secs(negative.unwrap_or(0).into()),
        };
    }
    DnsAnswer {
        addrs,
        ttl: Duration::from_secs(ttl.unwrap_or(0).into()),
    }
}
