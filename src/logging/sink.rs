//! The socket side of logging: a bounded queue in front of a syslog server
//! or journald, drained by a thread of its own, so that a slow or dead
//! receiver never blocks or slows a thread that logs.
//!
//! A thread that logs only formats its line and offers it to the queue
//! (`try_send`, no wait): when the queue is full the line is dropped and
//! counted (`snirelay_log_lines_dropped_total{reason="queue_full"}`). The
//! writer thread takes lines one at a time and sends each as one message:
//! a datagram (unix socket, UDP, journald), or an octet-counted frame on
//! TCP (RFC 6587; a unix stream socket gets a NUL after each message, as
//! glibc's `syslog(3)` sends). A failed connect or send drops the
//! connection; the next connect waits out a backoff that doubles from
//! [`MIN_BACKOFF`] to [`MAX_BACKOFF`] and resets at the first message
//! sent, while the queue fills behind it. A message whose send failed on a
//! fresh connection too is dropped (`reason="send_failed"`): one bad line
//! cannot hold the queue. Host names are resolved at every connect.
//!
//! What went wrong is told once per [`REPORT_INTERVAL`] at most, in one
//! WARN with the lines dropped and the last error, by a reporter thread,
//! under the target [`SINK_TARGET`], which the socket side never carries:
//! it goes to stderr (or stdout), never back into the target that failed.
//!
//! Memory: at most `queue` lines held (a few hundred bytes each, only
//! while held); one reusable frame buffer. Threads: two, started once.
//!
//! Not here: the wire formats ([`crate::logging::syslog`]), choosing what is logged
//! or where (`logging`).

use std::io::{self, Write};
use std::net::{TcpStream, ToSocketAddrs, UdpSocket};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

use super::syslog::{self, Line, Origin};
use crate::config::{SyslogAddress, SyslogFormat};

/// The tracing target of the sink's own reports: the console carries
/// it, the socket side never does.
pub(crate) const SINK_TARGET: &str = "snirelay::log_sink";

/// At most one WARN about dropped lines or an unreachable target per
/// this interval.
pub(crate) const REPORT_INTERVAL: Duration = Duration::from_secs(5);

/// The first wait before reconnecting after a failure.
pub(crate) const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two connects.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// How long one connect or one send may take before the connection is
/// dropped (a receiver that stopped reading).
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Where journald listens for native-protocol datagrams.
pub(crate) const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// Where the queue's lines go and how they are written.
#[derive(Debug, Clone)]
pub(crate) enum Destination {
    /// A syslog server, messages in `format`.
    Syslog {
        address: SyslogAddress,
        format: SyslogFormat,
    },
    /// journald's native socket at this path.
    Journald(PathBuf),
}

/// The counters and the last error, shared by the queue's two ends and
/// the reporter.
struct SinkStats {
    queue_full: Counter,
    send_failed: Counter,
    sent: Counter,
    /// Lines dropped since the last report.
    unreported_drops: AtomicU64,
    /// The last connect or send error since the last report.
    last_error: Mutex<Option<String>>,
    /// Lines offered and not yet written or dropped by the writer.
    pending: AtomicUsize,
}

impl SinkStats {
    fn failed(&self, error: String) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(error);
    }
}

/// The queue's sending end; lines offered here are written by the
/// writer thread.
pub(crate) struct Sink {
    queue: SyncSender<Line>,
    stats: Arc<SinkStats>,
}

impl Sink {
    /// Starts the writer and reporter threads for `destination`, with room
    /// for `capacity` lines. Nothing is connected yet: a target that is
    /// down at start is retried like one that goes down later.
    pub(crate) fn start(
        destination: Destination,
        origin: Origin,
        capacity: usize,
        dropped: impl Fn(&'static str) -> Counter,
        sent: Counter,
    ) -> io::Result<Sink> {
        let (queue, lines) = sync_channel(capacity);
        let stats = Arc::new(SinkStats {
            queue_full: dropped("queue_full"),
            send_failed: dropped("send_failed"),
            sent,
            unreported_drops: AtomicU64::new(0),
            last_error: Mutex::new(None),
            pending: AtomicUsize::new(0),
        });
        let writer = WriterThread {
            destination,
            origin,
            stats: stats.clone(),
            connection: None,
            backoff: MIN_BACKOFF,
            frame: Vec::with_capacity(1024),
        };
        std::thread::Builder::new()
            .name("log-writer".into())
            .spawn(move || writer.run(lines))?;
        let reporter = stats.clone();
        std::thread::Builder::new()
            .name("log-report".into())
            .spawn(move || report(&reporter))?;
        Ok(Sink { queue, stats })
    }

    /// Offers one line; never waits. A full queue drops it (counted).
    pub(crate) fn offer(&self, line: Line) {
        self.stats.pending.fetch_add(1, Ordering::Relaxed);
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.queue.try_send(line)
        {
            self.stats.pending.fetch_sub(1, Ordering::Relaxed);
            self.stats.queue_full.inc();
            self.stats.unreported_drops.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits until every line offered so far is written or dropped, or
    /// `within` has passed (at exit, so the last lines are not lost with a
    /// live target).
    pub(crate) fn flush(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while self.stats.pending.load(Ordering::Relaxed) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Every [`REPORT_INTERVAL`]: one WARN when lines were dropped or the
/// target failed since the last one.
fn report(stats: &SinkStats) {
    loop {
        std::thread::sleep(REPORT_INTERVAL);
        let dropped = stats.unreported_drops.swap(0, Ordering::Relaxed);
        let error = stats
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if dropped > 0 || error.is_some() {
            tracing::warn!(
                target: SINK_TARGET,
                dropped,
                error = error.as_deref().unwrap_or(""),
                interval_s = REPORT_INTERVAL.as_secs(),
                "log target failing: lines dropped or not delivered (at most one such line per interval)"
            );
        }
    }
}

/// An open connection to the destination.
enum Connection {
    UnixDatagram(UnixDatagram),
    UnixStream(UnixStream),
    Udp(UdpSocket),
    Tcp(TcpStream),
}

impl Connection {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        match self {
            Connection::UnixDatagram(s) => s.send(frame).map(drop),
            Connection::Udp(s) => s.send(frame).map(drop),
            Connection::UnixStream(s) => s.write_all(frame),
            Connection::Tcp(s) => s.write_all(frame),
        }
    }

    fn framing(&self) -> Framing {
        match self {
            Connection::UnixDatagram(_) | Connection::Udp(_) => Framing::Datagram,
            Connection::UnixStream(_) => Framing::NulTerminated,
            Connection::Tcp(_) => Framing::OctetCounted,
        }
    }
}

enum Framing {
    Datagram,
    NulTerminated,
    OctetCounted,
}

/// The writer thread's state.
struct WriterThread {
    destination: Destination,
    origin: Origin,
    stats: Arc<SinkStats>,
    connection: Option<Connection>,
    backoff: Duration,
    frame: Vec<u8>,
}

impl WriterThread {
    fn run(mut self, lines: Receiver<Line>) {
        while let Ok(line) = lines.recv() {
            self.deliver(&line);
            self.stats.pending.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Sends `line`, connecting (after the backoff) as often as needed;
    /// gives it up after a send failed on a fresh connection.
    fn deliver(&mut self, line: &Line) {
        let mut failed_sends = 0;
        loop {
            let connection = match self.connection.take() {
                Some(c) => c,
                None => match connect(&self.destination) {
                    Ok(c) => c,
                    Err(e) => {
                        self.stats.failed(format!("connect: {e}"));
                        self.wait_backoff();
                        continue;
                    }
                },
            };
            let mut connection = connection;
            self.encode(line, connection.framing());
            match connection.send(&self.frame) {
                Ok(()) => {
                    self.connection = Some(connection);
                    self.backoff = MIN_BACKOFF;
                    self.stats.sent.inc();
                    return;
                }
                Err(e) => {
                    // The connection is dropped: a stream may hold half a
                    // frame, a datagram socket's peer may have restarted.
                    self.stats.failed(format!("send: {e}"));
                    failed_sends += 1;
                    if failed_sends == 2 {
                        self.stats.send_failed.inc();
                        self.stats.unreported_drops.fetch_add(1, Ordering::Relaxed);
                        self.wait_backoff();
                        return;
                    }
                }
            }
        }
    }

    fn wait_backoff(&mut self) {
        std::thread::sleep(self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    fn encode(&mut self, line: &Line, framing: Framing) {
        self.frame.clear();
        match &self.destination {
            Destination::Journald(_) => syslog::journal_entry(&mut self.frame, &self.origin, line),
            Destination::Syslog { format, .. } => {
                syslog::message(&mut self.frame, *format, &self.origin, line);
                match framing {
                    Framing::Datagram => {}
                    Framing::NulTerminated => self.frame.push(0),
                    Framing::OctetCounted => syslog::octet_count(&mut self.frame, 0),
                }
            }
        }
    }
}

fn connect(destination: &Destination) -> io::Result<Connection> {
    match destination {
        Destination::Journald(path) => unix_datagram(path).map(Connection::UnixDatagram),
        Destination::Syslog { address, .. } => match address {
            SyslogAddress::Unix(path) => match unix_datagram(path) {
                Ok(socket) => Ok(Connection::UnixDatagram(socket)),
                // A stream socket (syslog-ng's `unix-stream`).
                Err(e) if e.raw_os_error() == Some(nix::libc::EPROTOTYPE) => {
                    let stream = UnixStream::connect(path)?;
                    stream.set_write_timeout(Some(IO_TIMEOUT))?;
                    Ok(Connection::UnixStream(stream))
                }
                Err(e) => Err(e),
            },
            SyslogAddress::Udp { host, port } => {
                let mut last = None;
                for addr in (host.as_str(), *port).to_socket_addrs()? {
                    let bind = if addr.is_ipv4() {
                        "0.0.0.0:0"
                    } else {
                        "[::]:0"
                    };
                    match UdpSocket::bind(bind).and_then(|s| s.connect(addr).map(|()| s)) {
                        Ok(socket) => return Ok(Connection::Udp(socket)),
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| no_address(host)))
            }
            SyslogAddress::Tcp { host, port } => {
                let mut last = None;
                for addr in (host.as_str(), *port).to_socket_addrs()? {
                    match TcpStream::connect_timeout(&addr, IO_TIMEOUT) {
                        Ok(stream) => {
                            stream.set_write_timeout(Some(IO_TIMEOUT))?;
                            stream.set_nodelay(true)?;
                            return Ok(Connection::Tcp(stream));
                        }
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| no_address(host)))
            }
        },
    }
}

fn no_address(host: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{host} resolves to no address"),
    )
}

fn unix_datagram(path: &Path) -> io::Result<UnixDatagram> {
    let socket = UnixDatagram::unbound()?;
    socket.connect(path)?;
    socket.set_write_timeout(Some(IO_TIMEOUT))?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::config::Facility;

    fn origin() -> Origin {
        Origin {
            facility: Facility::from_name("daemon").unwrap(),
            hostname: "h".to_owned(),
            pid: 7,
        }
    }

    fn line(n: usize) -> Line {
        Line {
            severity: 6,
            access: true,
            at: SystemTime::now(),
            json: format!("{{\"n\":{n}}}").into_bytes(),
        }
    }

    fn dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("snirelay-sink-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        // Nothing listens: the writer holds one line in its backoff, the
        // queue holds two, every other offer is dropped at once.
        let dir = dir("dead");
        let full = Counter::default();
        let sink = Sink::start(
            Destination::Syslog {
                address: SyslogAddress::Unix(dir.join("absent.sock")),
                format: SyslogFormat::Rfc5424,
            },
            origin(),
            2,
            |_| full.clone(),
            Counter::default(),
        )
        .unwrap();
        let started = Instant::now();
        for n in 0..10_000 {
            sink.offer(line(n));
        }
        assert!(started.elapsed() < Duration::from_secs(1), "offers waited");
        assert!(full.get() >= 10_000 - 3, "dropped {}", full.get());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn datagrams_arrive_framed_and_a_restarted_receiver_is_found_again() {
        let dir = dir("dgram");
        let path = dir.join("log.sock");
        let receiver = UnixDatagram::bind(&path).unwrap();
        receiver
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let sent = Counter::default();
        let sink = Sink::start(
            Destination::Syslog {
                address: SyslogAddress::Unix(path.clone()),
                format: SyslogFormat::Rfc3164,
            },
            origin(),
            16,
            |_| Counter::default(),
            sent.clone(),
        )
        .unwrap();
        sink.offer(line(1));
        let mut buf = [0u8; 4096];
        let n = receiver.recv(&mut buf).unwrap();
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        // daemon (3) * 8 + info (6) = 30.
        assert!(text.starts_with("<30>"), "{text}");
        assert!(text.ends_with(" h snirelay[7]: {\"n\":1}"), "{text}");

        // The receiver restarts at the same path.
        drop(receiver);
        std::fs::remove_file(&path).unwrap();
        let receiver = UnixDatagram::bind(&path).unwrap();
        receiver
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        sink.offer(line(2));
        let n = receiver.recv(&mut buf).unwrap();
        assert!(
            std::str::from_utf8(&buf[..n])
                .unwrap()
                .ends_with("{\"n\":2}")
        );
        sink.flush(Duration::from_secs(5));
        assert_eq!(sent.get(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn journald_gets_one_native_datagram_per_line() {
        let dir = dir("journal");
        let path = dir.join("socket");
        let journal = UnixDatagram::bind(&path).unwrap();
        journal
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let sink = Sink::start(
            Destination::Journald(path),
            origin(),
            16,
            |_| Counter::default(),
            Counter::default(),
        )
        .unwrap();
        let mut l = line(0);
        l.json =
            br#"{"message":"connection closed","client.peer":"127.0.0.1:5","sni":"a.example"}"#
                .to_vec();
        sink.offer(l);
        let mut buf = [0u8; 4096];
        let n = journal.recv(&mut buf).unwrap();
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        for field in [
            "PRIORITY=6\n",
            "SYSLOG_FACILITY=3\n",
            "SYSLOG_IDENTIFIER=snirelay\n",
            "SYSLOG_PID=7\n",
            "CLIENT_PEER=127.0.0.1:5\n",
            "MESSAGE=connection closed\n",
            "SNI=a.example\n",
        ] {
            assert!(text.contains(field), "{field:?} missing from {text:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A sink sending RFC 5424 to `address`, with a queue of 16.
    fn rfc5424_sink(address: SyslogAddress) -> Sink {
        Sink::start(
            Destination::Syslog {
                address,
                format: SyslogFormat::Rfc5424,
            },
            origin(),
            16,
            |_| Counter::default(),
            Counter::default(),
        )
        .unwrap()
    }

    /// Reads from `stream` (whose read timeout bounds each read) until it
    /// has seen `byte` `count` times.
    fn read_until(stream: &mut impl io::Read, byte: u8, count: usize) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while got.iter().filter(|b| **b == byte).count() < count {
            let n = stream.read(&mut buf).unwrap();
            assert!(n > 0, "closed early: {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        got
    }

    #[test]
    fn a_unix_stream_socket_gets_nul_terminated_messages() {
        let dir = dir("stream");
        let path = dir.join("log.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let sink = rfc5424_sink(SyslogAddress::Unix(path));
        sink.offer(line(1));
        sink.offer(line(2));
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let got = read_until(&mut stream, 0, 2);
        let messages: Vec<&[u8]> = got.split(|b| *b == 0).collect();
        assert!(messages[0].starts_with(b"<30>1 ") && messages[0].ends_with(b"{\"n\":1}"));
        assert!(messages[1].ends_with(b"{\"n\":2}"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tcp_frames_are_octet_counted() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let sink = rfc5424_sink(SyslogAddress::Tcp {
            host: "localhost".to_owned(),
            port,
        });
        sink.offer(line(1));
        sink.offer(line(22));
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let got = read_until(&mut stream, b'}', 2);
        let text = String::from_utf8(got).unwrap();
        let (len, rest) = text.split_once(' ').unwrap();
        let len: usize = len.parse().unwrap();
        assert!(rest[..len].starts_with("<30>1 ") && rest[..len].ends_with("{\"n\":1}"));
        let (len2, rest2) = rest[len..].split_once(' ').unwrap();
        assert_eq!(rest2.len(), len2.parse::<usize>().unwrap(), "{text}");
        assert!(rest2.ends_with("{\"n\":22}"));
    }
}
