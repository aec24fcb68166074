//! Batched datagram I/O for `protocol = "quic"` listeners, through
//! quinn-udp: several datagrams per system call each way.
//!
//! Receiving: one `recvmmsg` fills up to [`BATCH`] slots of a
//! [`RecvBatch`]; with UDP GRO (Linux 5.0 and later) a slot may hold
//! several datagrams of one source, cut at a fixed `stride`, which
//! [`RecvBatch::datagrams`] hands out one at a time, so that a pending
//! flow's parser still sees datagrams, never batches. GRO is asked for on
//! the listening socket (by quinn-udp's [`UdpSocketState::new`]) and on
//! every backend socket ([`crate::sockopt::enable_udp_gro`]).
//!
//! Sending: consecutive datagrams to one destination are gathered in a
//! [`SendBatch`] and go out in one `sendmsg` with UDP GSO (`UDP_SEGMENT`,
//! Linux 4.18 and later), which the kernel cuts back into the same
//! datagrams: all of one size but the last, which may be shorter. Only
//! datagrams of at most [`MAX_GSO_SEGMENT`] bytes are gathered, so that a
//! segment always fits a 1,500-byte path, where the kernel refuses larger
//! ones; larger datagrams go alone, as before. A datagram that goes alone
//! is a plain `sendto` (or `send` on a connected backend socket, which
//! keeps the socket's cached route). Where GSO is missing
//! (quinn-udp probes it once, and turns it off for good after a send the
//! device refused) every datagram goes alone; where GRO is missing each
//! slot holds one datagram. Neither changes what arrives: only how many
//! system calls it takes.
//!
//! Toward the clients, [`Gather`] collects the lone datagrams of many
//! flows (each flow's task sends from the shared listening socket) for one
//! `sendmmsg` (through nix, which wraps the call) per [`MMSG`] datagrams,
//! sent by the socket task once the flows woken with it have run.
//!
//! Sends never wait: a datagram the socket cannot take now is dropped, as
//! the network would drop it (QUIC retransmits), and so is one the kernel
//! refuses. Receives go through tokio's readiness (`readable` and
//! `try_io`), so a task sleeps until its socket has something; a receive
//! that leaves slots free ends the readiness, as EAGAIN would.
//!
//! Performance: one busy flow costs about half the CPU per GB it cost with
//! one system call per datagram (`examples/quicbench.rs`, benches/README.md); a flow
//! with one datagram in flight at a time gains nothing to speak of.
//!
//! One [`UdpSocketState`] per listening socket serves its backend sockets
//! too: it holds only what the kernel can do (GSO segments, fallbacks), not
//! anything of one socket, and making one per flow would probe the kernel
//! with two throw-away sockets per new flow.
//!
//! Memory: a [`RecvBatch`] is [`BATCH`] slots of 64 KiB (a GRO slot can
//! hold 64 KiB); each listening socket owns one, and the flows' tasks share
//! one per worker thread ([`with_scratch`]), so an idle flow holds no
//! buffer at all. The pages are touched only as far as datagrams fill them.
//!
//! Not here: what a datagram means, flows, bounds (`listener`); no
//! `unsafe` (quinn-udp and nix wrap the system calls).

use std::cell::RefCell;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;

use quinn_udp::{RecvMeta, Transmit, UdpSockRef, UdpSocketState};
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Slots per receive call (quinn-udp's `recvmmsg` batch: 32 on Linux).
pub(crate) const BATCH: usize = quinn_udp::BATCH_SIZE;
/// One slot: the largest UDP payload, which also bounds a GRO slot.
const SLOT: usize = 65_535;
/// The largest datagram gathered into a GSO send: a 1,500-byte path's UDP
/// payload over IPv6 (1,500 − 40 − 8). The kernel refuses a segment that
/// does not fit the path's MTU, where unsegmented it would only have been
/// dropped further on.
pub(crate) const MAX_GSO_SEGMENT: usize = 1_452;
/// The most bytes one GSO send carries (the IPv4 UDP payload limit).
const MAX_GSO_BYTES: usize = 65_507;

/// What the kernel offers for batching, shared by a listening socket and
/// its flows' backend sockets.
#[derive(Debug)]
pub(crate) struct Offload {
    state: UdpSocketState,
}

impl Offload {
    /// Sets up `socket` (a listening socket) for batched I/O: GRO where the
    /// kernel has it, non-blocking, and the kernel's GSO probed.
    pub(crate) fn new(socket: &impl AsFd) -> io::Result<Offload> {
        let state = UdpSocketState::new(UdpSockRef::from(socket))?;
        Ok(Offload { state })
    }

    /// The most datagrams one send may carry (1 without GSO).
    pub(crate) fn max_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    /// The most datagrams one receive slot may hold (1 without GRO).
    pub(crate) fn gro_segments(&self) -> usize {
        self.state.gro_segments()
    }

    /// Receives one batch into `batch` if `socket` has any now; `Ok(0)` if
    /// it has none (tokio then waits for the next readiness).
    ///
    /// A batch with free slots left means the kernel ran out of datagrams
    /// (`recvmmsg` stops early only at EAGAIN or an error, which the next
    /// call reports): its readiness is cleared then, as at EAGAIN, which
    /// saves the empty call per wake-up that a quiet flow would otherwise
    /// make. A datagram arriving after the call raises a new readiness
    /// event, which the clearing does not hide.
    pub(crate) fn try_recv(&self, socket: &UdpSocket, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.count = 0;
        let RecvBatch { buf, meta, count } = batch;
        let mut slots = buf.chunks_mut(SLOT);
        let mut bufs: [IoSliceMut<'_>; BATCH] =
            std::array::from_fn(|_| IoSliceMut::new(slots.next().unwrap_or_default()));
        let received = socket.try_io(Interest::READABLE, || {
            let n = self.state.recv(UdpSockRef::from(socket), &mut bufs, meta)?;
            *count = n;
            if n < BATCH {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        match received {
            Ok(n) => Ok(n),
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => Ok(*count),
            Err(error) => Err(error),
        }
    }

    /// Waits until `socket` is readable and receives one batch.
    pub(crate) async fn recv(
        &self,
        socket: &UdpSocket,
        batch: &mut RecvBatch,
    ) -> io::Result<usize> {
        loop {
            socket.readable().await?;
            let n = self.try_recv(socket, batch)?;
            if n > 0 {
                return Ok(n);
            }
        }
    }

    /// Sends `contents` to `destination` on `socket` without waiting: one
    /// datagram (a plain `sendto`), or with `segment` several of that size
    /// (the last may be shorter) in one GSO `sendmsg` through quinn-udp.
    /// Errors are for the caller to count or ignore: the datagrams are
    /// dropped.
    pub(crate) fn send(
        &self,
        socket: &impl AsFd,
        destination: SocketAddr,
        contents: &[u8],
        segment: Option<usize>,
    ) -> io::Result<()> {
        if segment.is_none() {
            // quinn-udp would add an IP_TOS control message to set no ECN.
            return socket2::SockRef::from(socket)
                .send_to(contents, &destination.into())
                .map(drop);
        }
        let transmit = Transmit {
            destination,
            ecn: None,
            contents,
            segment_size: segment,
            src_ip: None,
        };
        self.state.try_send(UdpSockRef::from(socket), &transmit)
    }

    /// Sends on `socket`, connected to `destination`: a single datagram as
    /// a plain `send`, without address or control message, so that the
    /// kernel keeps using the socket's cached route (an address or an IP
    /// control message, which quinn-udp always passes, makes it look the
    /// route up again); several through [`Offload::send`].
    pub(crate) fn send_connected(
        &self,
        socket: &UdpSocket,
        destination: SocketAddr,
        contents: &[u8],
        segment: Option<usize>,
    ) -> io::Result<()> {
        match segment {
            None => socket2::SockRef::from(socket).send(contents).map(drop),
            Some(_) => self.send(socket, destination, contents, segment),
        }
    }
}

/// The slots of one receive call and what the kernel said of each.
pub(crate) struct RecvBatch {
    buf: Box<[u8]>,
    meta: [RecvMeta; BATCH],
    count: usize,
}

impl Default for RecvBatch {
    fn default() -> Self {
        RecvBatch::new()
    }
}

impl RecvBatch {
    pub(crate) fn new() -> RecvBatch {
        RecvBatch {
            // Zeroed fresh from the allocator: pages are touched only as
            // datagrams land in them.
            buf: vec![0u8; SLOT * BATCH].into_boxed_slice(),
            meta: [RecvMeta::default(); BATCH],
            count: 0,
        }
    }

    /// The datagrams of the last receive, in arrival order, each with its
    /// source and, where the kernel said (IP_PKTINFO), the address it was
    /// sent to: a GRO slot gives its datagrams one by one.
    pub(crate) fn datagrams(&self) -> impl Iterator<Item = (SocketAddr, Option<IpAddr>, &[u8])> {
        self.meta[..self.count]
            .iter()
            .zip(self.buf.chunks(SLOT))
            .flat_map(|(meta, slot)| {
                let stride = if meta.stride == 0 {
                    meta.len.max(1)
                } else {
                    meta.stride
                };
                let data = &slot[..meta.len.min(SLOT)];
                // A zero-length datagram is still one datagram.
                let empty = data.is_empty().then_some(data);
                data.chunks(stride)
                    .chain(empty)
                    .map(move |datagram| (meta.addr, meta.dst_ip, datagram))
            })
    }
}

/// Datagrams to one destination gathered for one GSO send.
#[derive(Default)]
pub(crate) struct SendBatch {
    buf: Vec<u8>,
    key: Option<SocketAddr>,
    segment: usize,
    segments: usize,
    /// A shorter datagram ended the batch (GSO allows only the last one
    /// shorter).
    closed: bool,
}

impl SendBatch {
    /// Adds `datagram` for `key` (a destination, or what the caller maps to
    /// one). When it cannot join what is gathered (another key, another
    /// size, the batch full or closed), what is gathered goes to `send`
    /// first. `max_segments` is [`Offload::max_segments`].
    pub(crate) fn push(
        &mut self,
        key: SocketAddr,
        datagram: &[u8],
        max_segments: usize,
        send: impl FnMut(SocketAddr, &[u8], Option<usize>),
    ) {
        let joins = self.segments > 0
            && !self.closed
            && self.key == Some(key)
            && !datagram.is_empty()
            && datagram.len() <= self.segment
            && self.segments < max_segments
            && self.buf.len() + datagram.len() <= MAX_GSO_BYTES;
        if !joins {
            self.flush(send);
            self.key = Some(key);
            self.segment = datagram.len();
        }
        self.buf.extend_from_slice(datagram);
        self.segments += 1;
        if datagram.len() < self.segment
            || datagram.is_empty()
            || datagram.len() > MAX_GSO_SEGMENT
            || max_segments <= 1
        {
            self.closed = true;
        }
    }

    /// Hands what is gathered to `send` (key, bytes, segment size when
    /// there are several datagrams) and empties the batch.
    pub(crate) fn flush(&mut self, mut send: impl FnMut(SocketAddr, &[u8], Option<usize>)) {
        if let Some(key) = self.key.take()
            && self.segments > 0
        {
            let segment = (self.segments > 1).then_some(self.segment);
            send(key, &self.buf, segment);
        }
        self.buf.clear();
        self.segments = 0;
        self.closed = false;
    }
}

/// The most datagrams one `sendmmsg` of [`Gather`] carries.
const MMSG: usize = 64;
/// Bytes [`Gather`] holds before a flow's task sends them itself.
const MAX_GATHERED_BYTES: usize = 1 << 20;
/// While [`Gather`]'s flushes carry one flow's sends only (one busy flow), flows
/// send themselves, and every this many sends one is gathered again, to
/// see whether other flows now join it.
const PROBE_EVERY: usize = 64;

/// Sends of many flows to their clients, gathered from the flows' tasks and
/// sent from the listening socket together: lone datagrams (each flow's
/// one datagram of a wake-up, what many quiet flows make) in one
/// `sendmmsg` per [`MMSG`], GSO runs each in their own send, in the order
/// they were gathered. The socket task sends what is gathered once the
/// flows woken with it have run ([`Gather::flush`]).
///
/// A flow's own order holds: a flow whose task finds nothing gathered
/// sends a GSO run (several datagrams of its own) at once, itself; while
/// anything is gathered, everything joins the queue behind it. Where
/// gathering finds no other flow to join (one busy flow: each flush would
/// carry its sends only, after an extra wake-up of the socket task), flows send
/// themselves, gathering one send in [`PROBE_EVERY`] to look again.
#[derive(Default)]
pub(crate) struct Gather {
    queue: std::sync::Mutex<Gathered>,
    /// Wakes the socket task when the queue stops being empty.
    pub(crate) wake: tokio::sync::Notify,
    /// Whether flows send themselves (the last flush carried sends to one
    /// client only: gathering only added a wake-up), and the sends made so, which
    /// decide when to gather again for a try ([`PROBE_EVERY`]).
    direct: std::sync::atomic::AtomicBool,
    direct_sends: std::sync::atomic::AtomicUsize,
}

/// Gathered sends: their bytes, one after the other, and where each ends.
#[derive(Default)]
struct Gathered {
    buf: Vec<u8>,
    /// Destination, end in `buf`, segment size for a GSO run.
    sends: Vec<(SocketAddr, usize, Option<usize>)>,
}

impl Gather {
    /// Sends `contents` (one datagram, or several of `segment` bytes) to
    /// `to`, now on `socket` when nothing is gathered and it is a GSO run,
    /// otherwise by gathering it (and waking the socket task if it is the
    /// first). Beyond [`MAX_GATHERED_BYTES`] the caller sends all that is
    /// gathered itself.
    pub(crate) fn send(
        &self,
        offload: &Offload,
        socket: &impl AsFd,
        to: SocketAddr,
        contents: &[u8],
        segment: Option<usize>,
    ) {
        use std::sync::atomic::Ordering::Relaxed;
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let first = queue.sends.is_empty();
        let direct = self.direct.load(Relaxed)
            && (self.direct_sends.fetch_add(1, Relaxed) + 1) % PROBE_EVERY != 0;
        if first && (segment.is_some() || direct) {
            drop(queue);
            let _ = offload.send(socket, to, contents, segment);
            return;
        }
        queue.buf.extend_from_slice(contents);
        let end = queue.buf.len();
        queue.sends.push((to, end, segment));
        if queue.buf.len() > MAX_GATHERED_BYTES {
            offload.send_gathered(socket, &mut queue);
        } else if first {
            self.wake.notify_one();
        }
    }

    /// Sends what is gathered on `socket`. The queue stays locked while it
    /// goes out, so that a flow's GSO run sent at once never overtakes the
    /// flow's datagrams still in the queue.
    pub(crate) fn flush(&self, offload: &Offload, socket: &impl AsFd) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        // Sends to one client only: no other flow joined.
        let one_flow = queue.sends.windows(2).all(|pair| pair[0].0 == pair[1].0);
        offload.send_gathered(socket, &mut queue);
        self.direct
            .store(one_flow, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Offload {
    /// Sends `gathered` on `socket` and empties it: runs of lone datagrams
    /// in `sendmmsg` calls of up to [`MMSG`], GSO runs one by one. A
    /// datagram the kernel refuses is dropped and the rest go on; one the
    /// socket cannot take now is dropped with what follows it in its call.
    fn send_gathered(&self, socket: &impl AsFd, gathered: &mut Gathered) {
        let Gathered { buf, sends } = gathered;
        let mut start = 0;
        let mut i = 0;
        while i < sends.len() {
            let (to, end, segment) = sends[i];
            if segment.is_some() {
                let _ = self.send(socket, to, &buf[start..end], segment);
                start = end;
                i += 1;
                continue;
            }
            // A stretch of lone datagrams.
            let stretch = sends[i..]
                .iter()
                .take(MMSG)
                .take_while(|(_, _, segment)| segment.is_none())
                .count();
            let mut slices = Vec::with_capacity(stretch);
            let mut addresses = Vec::with_capacity(stretch);
            let mut from = start;
            for &(to, end, _) in &sends[i..i + stretch] {
                slices.push([io::IoSlice::new(&buf[from..end])]);
                addresses.push(Some(nix::sys::socket::SockaddrStorage::from(to)));
                from = end;
            }
            send_many(socket, &slices, &addresses);
            start = from;
            i += stretch;
        }
        buf.clear();
        sends.clear();
    }
}

/// One `sendmmsg` per try for `slices` (one datagram each) to `addresses`;
/// a single datagram is a plain `sendto`.
fn send_many(
    socket: &impl AsFd,
    slices: &[[io::IoSlice<'_>; 1]],
    addresses: &[Option<nix::sys::socket::SockaddrStorage>],
) {
    use nix::sys::socket::{MsgFlags, MultiHeaders, sendmmsg};
    use std::os::fd::AsRawFd;
    let fd = socket.as_fd().as_raw_fd();
    let mut sent = 0;
    while sent < slices.len() {
        if slices.len() - sent == 1 {
            let to = addresses[sent].as_ref().expect("an address per datagram");
            let _ = nix::sys::socket::sendto(fd, &slices[sent][0], to, MsgFlags::empty());
            return;
        }
        let mut headers = MultiHeaders::preallocate(slices.len() - sent, None);
        match sendmmsg(
            fd,
            &mut headers,
            &slices[sent..],
            &addresses[sent..],
            [] as [nix::sys::socket::ControlMessage<'_>; 0],
            MsgFlags::empty(),
        ) {
            // The first datagram left is refused (it went nowhere): the
            // rest go on.
            Ok(results) => sent += results.count().max(1),
            // The socket cannot take more now: dropped, as the network
            // would drop them.
            Err(nix::errno::Errno::EAGAIN) => return,
            Err(_) => sent += 1,
        }
    }
}

/// What the flows' tasks of one worker thread share: a receive batch and a
/// send batch, used between two awaits only.
struct Scratch {
    recv: RecvBatch,
    send: SendBatch,
}

thread_local! {
    static SCRATCH: RefCell<Option<Box<Scratch>>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's scratch batches (made on first use). `f`
/// must not call `with_scratch` again.
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut RecvBatch, &mut SendBatch) -> R) -> R {
    SCRATCH.with_borrow_mut(|scratch| {
        let scratch = scratch.get_or_insert_with(|| {
            Box::new(Scratch {
                recv: RecvBatch::new(),
                send: SendBatch::default(),
            })
        });
        f(&mut scratch.recv, &mut scratch.send)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathered_sends_of_many_flows_arrive_each_in_its_order() {
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let offload = Offload::new(&sender).unwrap();
        let receivers: Vec<_> = (0..3)
            .map(|_| {
                let r = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                r.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .unwrap();
                r
            })
            .collect();
        let to: Vec<_> = receivers.iter().map(|r| r.local_addr().unwrap()).collect();
        let gso = offload.max_segments() > 1;
        let gather = Gather::default();
        let mut expected: Vec<Vec<Vec<u8>>> = vec![Vec::new(); 3];
        // More lone datagrams than one sendmmsg carries, to the three in
        // turn, with a GSO run in the middle (where the kernel has GSO).
        for i in 0..MMSG + 10 {
            let datagram = format!("datagram {i}").into_bytes();
            gather.send(&offload, &sender, to[i % 3], &datagram, None);
            expected[i % 3].push(datagram);
            if i == 5 && gso {
                let run = [[7u8; 100], [8u8; 100]].concat();
                gather.send(&offload, &sender, to[0], &run, Some(100));
                expected[0].push(vec![7u8; 100]);
                expected[0].push(vec![8u8; 100]);
            }
        }
        // Nothing left before the socket task's flush.
        let mut buf = [0u8; 2048];
        receivers[0].set_nonblocking(true).unwrap();
        assert!(receivers[0].recv(&mut buf).is_err());
        receivers[0].set_nonblocking(false).unwrap();
        gather.flush(&offload, &sender);
        for (receiver, expected) in receivers.iter().zip(expected) {
            for datagram in expected {
                let len = receiver.recv(&mut buf).unwrap();
                assert_eq!(&buf[..len], &datagram[..]);
            }
        }
        // A GSO run with nothing gathered goes at once.
        if gso {
            let run = [[1u8; 100], [2u8; 100]].concat();
            gather.send(&offload, &sender, to[1], &run, Some(100));
            for byte in [1u8, 2] {
                let len = receivers[1].recv(&mut buf).unwrap();
                assert_eq!(&buf[..len], &[byte; 100][..]);
            }
        }
    }

    fn gathered(datagrams: &[&[u8]], max_segments: usize) -> Vec<(Vec<u8>, Option<usize>)> {
        let key: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut sent = Vec::new();
        let mut batch = SendBatch::default();
        for datagram in datagrams {
            batch.push(key, datagram, max_segments, |_, c, s| {
                sent.push((c.to_vec(), s))
            });
        }
        batch.flush(|_, c, s| sent.push((c.to_vec(), s)));
        sent
    }

    #[test]
    fn equal_datagrams_and_a_shorter_last_go_in_one_send() {
        let sent = gathered(&[&[1; 100], &[2; 100], &[3; 60], &[4; 100]], 64);
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0].0.len(), 260);
        assert_eq!(sent[0].1, Some(100));
        assert_eq!(sent[1], (vec![4; 100], None));
    }

    #[test]
    fn a_longer_datagram_starts_a_new_send() {
        let sent = gathered(&[&[1; 100], &[2; 200], &[3; 200]], 64);
        assert_eq!(
            sent,
            vec![
                (vec![1; 100], None),
                ([vec![2; 200], vec![3; 200]].concat(), Some(200))
            ]
        );
    }

    #[test]
    fn without_gso_every_datagram_goes_alone() {
        let sent = gathered(&[&[1; 100], &[2; 100]], 1);
        assert_eq!(sent, vec![(vec![1; 100], None), (vec![2; 100], None)]);
    }

    #[test]
    fn large_and_empty_datagrams_go_alone() {
        let big = [7u8; MAX_GSO_SEGMENT + 1];
        let sent = gathered(&[&big, &big, &[], &[]], 64);
        assert_eq!(sent.len(), 4);
        assert!(sent.iter().all(|(_, segment)| segment.is_none()));
    }

    #[test]
    fn a_send_holds_at_most_max_segments() {
        let datagrams = vec![&[5u8; 10][..]; 10];
        let sent = gathered(&datagrams, 4);
        let counts: Vec<usize> = sent.iter().map(|(c, _)| c.len() / 10).collect();
        assert_eq!(counts, vec![4, 4, 2]);
    }

    #[test]
    fn another_destination_starts_a_new_send() {
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        );
        let mut sent = Vec::new();
        let mut batch = SendBatch::default();
        for key in [a, a, b, a] {
            batch.push(key, &[1; 10], 64, |k, c, _| sent.push((k, c.len())));
        }
        batch.flush(|k, c, _| sent.push((k, c.len())));
        assert_eq!(sent, vec![(a, 20), (b, 10), (a, 10)]);
    }

    #[test]
    fn a_gro_slot_gives_its_datagrams_one_by_one() {
        let from: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut batch = RecvBatch::new();
        batch.buf[..250].fill(1);
        batch.meta[0] = RecvMeta {
            addr: from,
            len: 250,
            stride: 100,
            ..RecvMeta::default()
        };
        batch.meta[1] = RecvMeta {
            addr: from,
            len: 0,
            stride: 0,
            ..RecvMeta::default()
        };
        batch.count = 2;
        let lens: Vec<usize> = batch.datagrams().map(|(_, _, d)| d.len()).collect();
        assert_eq!(lens, vec![100, 100, 50, 0]);
    }
}
