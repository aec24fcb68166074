//! The ClientHello strictness rules (RFC 8446 §4.1.2 and §4.2, RFC 6066 §3),
//! each on a hello built byte by byte here, with its exact verdict; the
//! incremental reassembler against the one-shot parser, however the stream
//! is cut; and, through the real relay, that a two-name hello and an empty
//! `host_name` are closed as `malformed` with nothing sent to the backend.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use snirelay::config::DEFAULT_MAX_CLIENT_HELLO_BYTES as LIMIT;
use snirelay::wire::client_hello::{ClientHello, Inspect, Reassembler, parse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

// ------------------------------------------------------------ byte builders

fn vec8(body: &[u8]) -> Vec<u8> {
    let mut out = vec![u8::try_from(body.len()).unwrap()];
    out.extend_from_slice(body);
    out
}

fn vec16(body: &[u8]) -> Vec<u8> {
    let mut out = u16::try_from(body.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// One server_name list entry: a name type and its opaque<1..2^16-1>.
fn name_entry(kind: u8, name: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend(vec16(name));
    out
}

/// A server_name extension body holding `entries`.
fn server_name(entries: &[Vec<u8>]) -> Vec<u8> {
    vec16(&entries.concat())
}

fn host(name: &str) -> Vec<u8> {
    server_name(&[name_entry(0, name.as_bytes())])
}

/// An ALPN extension body.
fn alpn(names: &[&[u8]]) -> Vec<u8> {
    let list: Vec<u8> = names.iter().flat_map(|n| vec8(n)).collect();
    vec16(&list)
}

/// A ClientHello's fields, as bytes, so that each can be broken on its own.
#[derive(Clone)]
struct Hello {
    session_id: Vec<u8>,
    /// The cipher_suites vector's content (2 bytes per suite).
    ciphers: Vec<u8>,
    compression: Vec<u8>,
    /// (type, body) in order; `None` leaves the extensions block out.
    extensions: Option<Vec<(u16, Vec<u8>)>>,
    /// Bytes appended to the extensions block inside its length.
    block_trailer: Vec<u8>,
}

impl Hello {
    /// What a TLS 1.3 client sends, with SNI `name`.
    fn typical(name: &str) -> Hello {
        Hello {
            session_id: vec![0x33; 32],
            ciphers: vec![0x13, 0x01, 0x13, 0x02],
            compression: vec![0],
            extensions: Some(vec![
                (0, host(name)),
                (10, vec16(&[0x00, 0x1d, 0x00, 0x17])),
                (11, vec8(&[0])),
                (13, vec16(&[0x08, 0x04, 0x04, 0x03])),
                (16, alpn(&[b"h2", b"http/1.1"])),
                (43, vec8(&[0x03, 0x04, 0x03, 0x03])),
                (45, vec8(&[1])),
                (
                    51,
                    vec16(&[&[0x00, 0x1d][..], &vec16(&[0x77; 32])].concat()),
                ),
            ]),
            block_trailer: Vec::new(),
        }
    }

    fn with(mut self, kind: u16, body: Vec<u8>) -> Hello {
        self.extensions.as_mut().unwrap().push((kind, body));
        self
    }

    /// Replaces every extension of type `kind` with `body`.
    fn set(mut self, kind: u16, body: Vec<u8>) -> Hello {
        for (k, b) in self.extensions.as_mut().unwrap() {
            if *k == kind {
                *b = body.clone();
            }
        }
        self
    }

    /// The handshake message, header included.
    fn message(&self) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[0x5a; 32]);
        body.extend(vec8(&self.session_id));
        body.extend(vec16(&self.ciphers));
        body.extend(vec8(&self.compression));
        if let Some(extensions) = &self.extensions {
            let mut block = Vec::new();
            for (kind, data) in extensions {
                block.extend_from_slice(&kind.to_be_bytes());
                block.extend(vec16(data));
            }
            block.extend_from_slice(&self.block_trailer);
            body.extend(vec16(&block));
        }
        let mut message = vec![1];
        message.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes()[1..]);
        message.extend(body);
        message
    }

    /// The message in one record.
    fn bytes(&self) -> Vec<u8> {
        record(&self.message())
    }
}

fn record(payload: &[u8]) -> Vec<u8> {
    let mut out = vec![22, 3, 1];
    out.extend(vec16(payload));
    out
}

/// `message` cut into records of `size` payload bytes.
fn records(message: &[u8], size: usize) -> Vec<u8> {
    message.chunks(size).flat_map(record).collect()
}

fn name_of(hello: &ClientHello) -> Option<&str> {
    hello
        .server_name
        .as_deref()
        .map(|n| std::str::from_utf8(n).unwrap())
}

#[track_caller]
fn malformed(hello: &Hello) {
    assert_eq!(parse(&hello.bytes(), LIMIT), Err(Inspect::Malformed));
}

// ---------------------------------------------------------------- the rules

#[test]
fn the_typical_hello_parses_and_every_strict_prefix_is_incomplete() {
    let hello = Hello::typical("a.example.com");
    for bytes in [hello.bytes(), records(&hello.message(), 1)] {
        for cut in 0..bytes.len() {
            assert_eq!(parse(&bytes[..cut], LIMIT), Err(Inspect::Incomplete));
        }
        let parsed = parse(&bytes, LIMIT).unwrap();
        assert_eq!(name_of(&parsed), Some("a.example.com"));
        assert_eq!(parsed.alpn, [b"h2".to_vec(), b"http/1.1".to_vec()]);
        assert_eq!(parsed.len, bytes.len());
    }
    // No extensions at all (a TLS 1.2-era hello): valid, without SNI.
    let bare = Hello {
        extensions: None,
        ..Hello::typical("x")
    };
    assert_eq!(parse(&bare.bytes(), LIMIT).unwrap().server_name, None);
}

#[test]
fn one_name_only_two_server_name_extensions_are_malformed() {
    // Different names: which one a backend honours is its choice.
    malformed(&Hello::typical("a.example.com").with(0, host("b.example.com")));
    // Even the same name twice: a duplicated extension type.
    malformed(&Hello::typical("a.example.com").with(0, host("a.example.com")));
}

#[test]
fn one_name_only_two_host_names_in_one_list_are_malformed() {
    let two = server_name(&[
        name_entry(0, b"a.example.com"),
        name_entry(0, b"b.example.com"),
    ]);
    malformed(&Hello::typical("x").set(0, two));
    // RFC 6066: no two names of the same type, whatever the type.
    let two_other = server_name(&[
        name_entry(0, b"a.example.com"),
        name_entry(7, b"one"),
        name_entry(7, b"two"),
    ]);
    malformed(&Hello::typical("x").set(0, two_other));
}

#[test]
fn a_host_name_next_to_another_name_type_is_routed_on() {
    for entries in [
        [name_entry(0, b"a.example.com"), name_entry(7, b"other")],
        [name_entry(7, b"other"), name_entry(0, b"a.example.com")],
    ] {
        let hello = Hello::typical("x").set(0, server_name(&entries));
        let parsed = parse(&hello.bytes(), LIMIT).unwrap();
        assert_eq!(name_of(&parsed), Some("a.example.com"));
    }
}

#[test]
fn a_list_of_only_other_name_types_means_no_sni() {
    let hello = Hello::typical("x").set(0, server_name(&[name_entry(7, b"other")]));
    assert_eq!(parse(&hello.bytes(), LIMIT).unwrap().server_name, None);
    let two_types = server_name(&[name_entry(7, b"other"), name_entry(255, b"more")]);
    let hello = Hello::typical("x").set(0, two_types);
    assert_eq!(parse(&hello.bytes(), LIMIT).unwrap().server_name, None);
}

#[test]
fn an_empty_host_name_is_malformed_not_unmatched() {
    malformed(&Hello::typical("x").set(0, host("")));
    // Nor is an empty list or an empty extension a way to say "no name".
    malformed(&Hello::typical("x").set(0, vec16(&[])));
    malformed(&Hello::typical("x").set(0, Vec::new()));
}

#[test]
fn empty_cipher_suites_or_compression_methods_are_malformed() {
    malformed(&Hello {
        ciphers: Vec::new(),
        ..Hello::typical("a.example.com")
    });
    malformed(&Hello {
        compression: Vec::new(),
        ..Hello::typical("a.example.com")
    });
    // An odd-length cipher_suites vector has half a suite left over.
    malformed(&Hello {
        ciphers: vec![0x13, 0x01, 0x13],
        ..Hello::typical("a.example.com")
    });
}

#[test]
fn a_session_id_longer_than_32_bytes_is_malformed() {
    // RFC 8446 §4.1.2: opaque legacy_session_id<0..32>.
    let at_most = Hello {
        session_id: vec![0x33; 32],
        ..Hello::typical("a.example.com")
    };
    assert!(parse(&at_most.bytes(), LIMIT).is_ok());
    malformed(&Hello {
        session_id: vec![0x33; 33],
        ..Hello::typical("a.example.com")
    });
}

#[test]
fn any_duplicated_extension_type_is_malformed() {
    let typical = || Hello::typical("a.example.com");
    malformed(&typical().with(16, alpn(&[b"h2"])));
    malformed(&typical().with(0x1234, vec![]).with(0x1234, vec![1, 2]));
    malformed(&typical().with(0x0a0a, vec![]).with(0x0a0a, vec![]));
    malformed(&typical().with(0xfe0d, vec![1]).with(0xfe0d, vec![1]));
    malformed(&typical().with(43, vec8(&[0x03, 0x04])));
    // Two different GREASE values, as Chromium sends, are two types.
    let grease = typical().with(0x0a0a, vec![]).with(0x1a1a, vec![0]);
    assert!(parse(&grease.bytes(), LIMIT).is_ok());
}

#[test]
fn bytes_left_over_in_the_server_name_extension_are_malformed() {
    let entry = name_entry(0, b"a.example.com");
    // Inside the list: one byte, or a partial second entry, after the entry.
    malformed(&Hello::typical("x").set(0, server_name(&[entry.clone(), vec![7]])));
    malformed(&Hello::typical("x").set(0, server_name(&[entry.clone(), vec![7, 0, 9, 1]])));
    // Inside the extension, after the list.
    let mut after = server_name(std::slice::from_ref(&entry));
    after.push(0);
    malformed(&Hello::typical("x").set(0, after));
    // A name whose length overruns the list.
    let mut overrun = entry.clone();
    overrun[2] += 1;
    malformed(&Hello::typical("x").set(0, server_name(&[overrun])));
}

#[test]
fn bytes_left_over_in_alpn_are_malformed() {
    let mut after_list = alpn(&[b"h2"]);
    after_list.push(0);
    malformed(&Hello::typical("x").set(16, after_list));
    // A partial entry at the end of the list.
    malformed(&Hello::typical("x").set(16, vec16(&[2, b'h', b'2', 5, b'h'])));
    // An entry overrunning the list, an empty entry, an empty list.
    malformed(&Hello::typical("x").set(16, vec16(&[3, b'h', b'2'])));
    malformed(&Hello::typical("x").set(16, vec16(&[2, b'h', b'2', 0])));
    malformed(&Hello::typical("x").set(16, vec16(&[])));
}

#[test]
fn bytes_left_over_in_the_other_decoded_extensions_are_malformed() {
    let broken: &[(u16, Vec<u8>)] = &[
        // supported_versions: half a version, trailing byte, empty.
        (43, vec8(&[0x03, 0x04, 0x03])),
        (43, [vec8(&[0x03, 0x04]), vec![0]].concat()),
        (43, vec8(&[])),
        // supported_groups, signature_algorithms(_cert): the same shapes.
        (10, vec16(&[0x00, 0x1d, 0x00])),
        (10, [vec16(&[0x00, 0x1d]), vec![0]].concat()),
        (13, vec16(&[0x08, 0x04, 0x04])),
        (13, [vec16(&[0x08, 0x04]), vec![0]].concat()),
        (50, vec16(&[0x08])),
        // ec_point_formats, psk_key_exchange_modes: empty, trailing byte.
        (11, vec8(&[])),
        (11, [vec8(&[0]), vec![0]].concat()),
        (45, [vec8(&[1]), vec![1]].concat()),
        // key_share: a partial entry, an empty key, bytes after the list.
        (51, vec16(&[0x00, 0x1d, 0x00])),
        (51, vec16(&[0x00, 0x1d, 0x00, 0x00])),
        (
            51,
            [
                vec16(&[&[0x00, 0x1d][..], &vec16(&[1; 32])].concat()),
                vec![0],
            ]
            .concat(),
        ),
        // A list whose length overruns the extension.
        (43, vec![4, 0x03, 0x04]),
    ];
    for (kind, body) in broken {
        let typical = Hello::typical("a.example.com");
        let present = typical
            .extensions
            .as_ref()
            .unwrap()
            .iter()
            .any(|(k, _)| k == kind);
        let hello = if present {
            typical.set(*kind, body.clone())
        } else {
            typical.with(*kind, body.clone())
        };
        assert_eq!(
            parse(&hello.bytes(), LIMIT),
            Err(Inspect::Malformed),
            "extension {kind}: {body:02x?}"
        );
    }
    // An empty key_share list is allowed (the server picks the group in a
    // HelloRetryRequest).
    let empty_shares = Hello::typical("a.example.com").set(51, vec16(&[]));
    assert!(parse(&empty_shares.bytes(), LIMIT).is_ok());
}

#[test]
fn bytes_left_over_in_the_message_or_its_record_are_malformed() {
    // Inside the extensions block, after the last extension.
    let mut trailing = Hello::typical("a.example.com");
    trailing.block_trailer = vec![0, 0, 0];
    malformed(&trailing);
    // Inside the handshake message, after the extensions block.
    let mut message = Hello::typical("a.example.com").message();
    message.push(0);
    let body = message.len() - 4;
    message[1..4].copy_from_slice(&u32::try_from(body).unwrap().to_be_bytes()[1..]);
    assert_eq!(parse(&record(&message), LIMIT), Err(Inspect::Malformed));
    // Inside the record that completes the hello, after the message.
    let mut message = Hello::typical("a.example.com").message();
    message.extend_from_slice(&[2, 0, 0, 0]);
    assert_eq!(parse(&record(&message), LIMIT), Err(Inspect::Malformed));
    // ...also when the hello spans several records.
    let message = Hello::typical("a.example.com").message();
    let mut split = record(&message[..100]);
    split.extend(record(&[&message[100..], &[0][..]].concat()));
    assert_eq!(parse(&split, LIMIT), Err(Inspect::Malformed));
}

// ----------------------------------------------------- incremental reading

/// Feeds `stream` in chunks of the given sizes (cycled), as `inspect` does
/// after each read, and returns the first answer that is not `Incomplete`
/// with how many bytes had been fed.
fn feed_in_chunks(
    stream: &[u8],
    sizes: &[usize],
    limit: usize,
) -> (Result<ClientHello, Inspect>, usize) {
    let mut reader = Reassembler::new(limit);
    let mut fed = 0;
    let mut sizes = sizes.iter().cycle();
    loop {
        fed = (fed + sizes.next().unwrap()).min(stream.len());
        let answer = reader.feed(&stream[..fed]);
        if answer != Err(Inspect::Incomplete) || fed == stream.len() {
            return (answer, fed);
        }
    }
}

#[test]
fn the_reassembler_agrees_with_parse_however_the_stream_is_cut() {
    let hello = Hello::typical("a.example.com");
    let message = hello.message();
    let mut streams = vec![hello.bytes(), records(&message, 1), records(&message, 7)];
    streams.push(common::capture("openssl_two_records.bin"));
    streams.push(common::capture("chromium_pq.bin"));
    for stream in &streams {
        let whole = parse(stream, LIMIT).unwrap();
        for sizes in [&[1][..], &[2, 3], &[5], &[6], &[64, 1, 13], &[4096]] {
            let (answer, fed) = feed_in_chunks(stream, sizes, LIMIT);
            assert_eq!(answer.as_ref(), Ok(&whole), "chunks {sizes:?}");
            assert_eq!(fed, stream.len());
        }
    }
    // Refusals come at the same byte as the one-shot parser finds them.
    let mut broken = records(
        &Hello::typical("a.example.com").with(0, host("b")).message(),
        3,
    );
    for sizes in [&[1][..], &[7, 2]] {
        let (answer, _) = feed_in_chunks(&broken, sizes, LIMIT);
        assert_eq!(answer, Err(Inspect::Malformed));
    }
    broken[0] = 0x17;
    assert_eq!(
        feed_in_chunks(&broken, &[1], LIMIT),
        (Err(Inspect::NotTls), 1)
    );
}

/// `needs` is what `inspect` lets accumulate before it wakes: it must never
/// ask for more than a valid hello still has to send.
#[test]
fn needs_never_asks_for_more_than_a_valid_hello_sends() {
    let message = Hello::typical("a.example.com").message();
    let mut streams = vec![record(&message), records(&message, 1), records(&message, 7)];
    streams.push(common::capture("openssl_two_records.bin"));
    for stream in &streams {
        let mut reader = Reassembler::new(LIMIT);
        for cut in 0..stream.len() {
            assert_eq!(reader.feed(&stream[..cut]), Err(Inspect::Incomplete));
            assert!(reader.needs() <= stream.len(), "cut {cut}");
            assert!(reader.needs() > 0);
        }
    }
    // In one record, once the handshake header is in, exactly the rest.
    let whole = record(&message);
    let mut reader = Reassembler::new(LIMIT);
    assert_eq!(reader.feed(&whole[..9]), Err(Inspect::Incomplete));
    assert_eq!(reader.needs(), whole.len());
}

#[test]
fn a_reassembler_keeps_its_answer() {
    let bytes = records(&Hello::typical("a.example.com").message(), 50);
    let mut reader = Reassembler::new(LIMIT);
    let hello = reader.feed(&bytes).unwrap();
    let mut more = bytes.clone();
    more.extend_from_slice(&[23, 3, 3, 0, 1, 0]);
    assert_eq!(reader.feed(&more), Ok(hello));

    let mut reader = Reassembler::new(LIMIT);
    assert_eq!(reader.feed(b"GET /"), Err(Inspect::NotTls));
    assert_eq!(reader.feed(&bytes), Err(Inspect::NotTls));
}

#[test]
fn one_byte_records_fill_the_largest_cap_and_still_parse() {
    const MAX: usize = 256 * 1024;
    // A hello padded so that, one handshake byte per record (6 stream bytes
    // each), it just fits the largest configurable cap.
    let mut hello = Hello::typical("big.example.com");
    let base = hello.message().len();
    let padding = MAX / 6 - base - 4;
    hello = hello.with(21, vec![0; padding]);
    let stream = records(&hello.message(), 1);
    assert!(
        stream.len() <= MAX && stream.len() > MAX - 12,
        "{}",
        stream.len()
    );
    let (answer, fed) = feed_in_chunks(&stream, &[6], MAX);
    assert_eq!(name_of(&answer.unwrap()), Some("big.example.com"));
    assert_eq!(fed, stream.len());
    // One record short of the cap's room, the same hello is too large.
    let (answer, _) = feed_in_chunks(&stream, &[6], stream.len() - 1);
    assert_eq!(answer, Err(Inspect::TooLarge));
}

// ------------------------------------------------------ through the relay

/// Sends `bytes` through a relay whose route allows both names the tests
/// use, and returns the close reason and how many bytes reached the backend.
async fn relay_verdict(bytes: &[u8]) -> (String, usize) {
    let received = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let (r, a) = (received.clone(), accepted.clone());
    let backend = common::raw_backend(move |mut stream| {
        let (r, a) = (r.clone(), a.clone());
        async move {
            a.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                r.fetch_add(n, Ordering::SeqCst);
            }
        }
    })
    .await;
    let relay = common::Relay::start(&common::simple_config(
        &["a.example.com", "b.example.com"],
        backend,
        "",
    ))
    .await;
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let peer = client.local_addr().unwrap();
    client.write_all(bytes).await.unwrap();
    let line = relay.closed_line(peer).await;
    // The relay has closed: the client reads the end of the stream (or a
    // reset), never a byte from a backend.
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(common::WAIT, client.read_to_end(&mut rest))
        .await
        .expect("the relay closed the connection");
    assert!(rest.is_empty() || rest[0] == 0x15, "got {rest:02x?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "a backend was dialled");
    (
        line["close"].as_str().unwrap().to_owned(),
        received.load(Ordering::SeqCst),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_relay_a_two_name_hello_is_malformed_and_reaches_no_backend() {
    let two = Hello::typical("x").set(
        0,
        server_name(&[
            name_entry(0, b"a.example.com"),
            name_entry(0, b"b.example.com"),
        ]),
    );
    assert_eq!(
        relay_verdict(&two.bytes()).await,
        ("malformed".to_owned(), 0)
    );
    let two_extensions = Hello::typical("a.example.com").with(0, host("b.example.com"));
    assert_eq!(
        relay_verdict(&two_extensions.bytes()).await,
        ("malformed".to_owned(), 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_relay_an_empty_host_name_is_malformed_not_unmatched() {
    let empty = Hello::typical("x").set(0, host(""));
    assert_eq!(
        relay_verdict(&empty.bytes()).await,
        ("malformed".to_owned(), 0)
    );
}

/// Writes `bytes` to the relay one 6-byte record per segment, pausing after
/// each so that the relay reads them one or a few at a time (and so paces
/// its reads after the first 32 and raises SO_RCVLOWAT).
async fn trickle(relay: &common::Relay, bytes: &[u8]) -> (TcpStream, std::net::SocketAddr) {
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    client.set_nodelay(true).unwrap();
    let peer = client.local_addr().unwrap();
    for record in bytes.chunks(6) {
        if client.write_all(record).await.is_err() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_micros(500)).await;
    }
    (client, peer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_trickled_in_one_byte_records_is_routed_and_relaying_is_not_held_back() {
    let hello = records(&Hello::typical("a.example.com").message(), 1);
    let expected = hello.len();
    // The backend reads the replayed hello, then echoes one message: the
    // relay must pass small writes both ways once the hello is through
    // (its SO_RCVLOWAT is back to 1).
    let backend = common::raw_backend(move |mut stream| async move {
        let mut got = vec![0u8; expected];
        stream.read_exact(&mut got).await.unwrap();
        let mut ping = [0u8; 1];
        stream.read_exact(&mut ping).await.unwrap();
        stream.write_all(&ping).await.unwrap();
    })
    .await;
    let relay = common::Relay::start(&common::simple_config(&["a.example.com"], backend, "")).await;
    let (mut client, peer) = trickle(&relay, &hello).await;
    client.write_all(b"!").await.unwrap();
    let mut pong = [0u8; 1];
    tokio::time::timeout(common::WAIT, client.read_exact(&mut pong))
        .await
        .expect("the one-byte echo came back")
        .unwrap();
    assert_eq!(&pong, b"!");
    drop(client);
    let line = relay.closed_line(peer).await;
    assert_eq!(line["sni"], "a.example.com");
    assert_eq!(line["close"], "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_hello_past_the_cap_is_too_large_and_one_cut_short_times_out() {
    let relay = common::Relay::start(&common::simple_config(
        &["a.example.com"],
        common::closed_port(),
        "max_client_hello_bytes = 512\nclient_hello_timeout = \"3s\"",
    ))
    .await;
    // A hello whose one-byte records cannot fit 512 bytes: refused once
    // 512 bytes are in, however slowly they came.
    let big = records(
        &Hello::typical("a.example.com")
            .with(21, vec![0; 200])
            .message(),
        1,
    );
    let (_client, peer) = trickle(&relay, &big[..600]).await;
    assert_eq!(relay.closed_line(peer).await["close"], "too_large");
    // One that would fit, cut short: the relay waits for the rest until
    // the hello deadline.
    let minimal = Hello {
        session_id: Vec::new(),
        ciphers: vec![0x13, 0x01],
        compression: vec![0],
        extensions: Some(vec![(0, host("a.example.com"))]),
        block_trailer: Vec::new(),
    };
    let small = records(&minimal.message(), 1);
    assert!((300..512).contains(&small.len()), "{}", small.len());
    let (_client, peer) = trickle(&relay, &small[..300]).await;
    assert_eq!(relay.closed_line(peer).await["close"], "hello_timeout");
}

// ------------------------------------------------ ECH and offered versions

/// An outer ECHClientHello (HKDF-SHA256, AES-128-GCM) with this config id,
/// `enc` and `payload`.
fn ech_outer(config_id: u8, enc: &[u8], payload: &[u8]) -> Vec<u8> {
    [
        &[0x00, 0x00, 0x01, 0x00, 0x01, config_id][..],
        &vec16(enc),
        &vec16(payload),
    ]
    .concat()
}

#[test]
fn the_ech_extension_is_read_as_the_draft_frames_it() {
    use snirelay::wire::client_hello::Ech;
    let with = |body: Vec<u8>| {
        parse(
            &Hello::typical("a.example.com").with(0xfe0d, body).bytes(),
            LIMIT,
        )
    };
    assert_eq!(
        with(ech_outer(42, &[9; 32], &[1; 200])).unwrap().ech,
        Some(Ech::Outer { config_id: 42 })
    );
    // An empty enc is how a second (post-HelloRetryRequest) hello says it.
    assert_eq!(
        with(ech_outer(3, &[], &[1; 16])).unwrap().ech,
        Some(Ech::Outer { config_id: 3 })
    );
    assert_eq!(with(vec![1]).unwrap().ech, Some(Ech::Inner));
    assert_eq!(
        parse(&Hello::typical("a.example.com").bytes(), LIMIT)
            .unwrap()
            .ech,
        None
    );
    // payload<1..2^16-1> is never empty; nothing follows the payload or an
    // inner's type; only types 0 and 1 exist; every field is complete.
    for broken in [
        ech_outer(1, &[9; 32], &[]),
        [ech_outer(1, &[9; 32], &[1]), vec![0]].concat(),
        vec![1, 0],
        vec![2],
        vec![],
        vec![0x00, 0x00, 0x01, 0x00],
        ech_outer(1, &[9; 32], &[1; 4])[..40].to_vec(),
    ] {
        assert_eq!(
            with(broken.clone()),
            Err(Inspect::Malformed),
            "{broken:02x?}"
        );
    }
}

#[test]
fn the_version_offered_is_the_highest_known_one() {
    let version = |hello: Hello| parse(&hello.bytes(), LIMIT).unwrap().version;
    let typical = || Hello::typical("a.example.com");
    // supported_versions 1.3, 1.2 (typical).
    assert_eq!(version(typical()), Some(0x0304));
    // GREASE and pre-standard drafts are not versions one can be refused on.
    assert_eq!(
        version(typical().set(43, vec8(&[0x7a, 0x7a, 0x03, 0x03, 0x7f, 0x1c]))),
        Some(0x0303)
    );
    assert_eq!(version(typical().set(43, vec8(&[0x0a, 0x0a]))), None);
    // Without the extension: legacy_version (0x0303 in these hellos).
    let mut legacy = typical();
    legacy
        .extensions
        .as_mut()
        .unwrap()
        .retain(|(k, _)| *k != 43);
    assert_eq!(version(legacy), Some(0x0303));
}
