//! End-to-end relay behaviour through real sockets on loopback: the relay
//! runs as a child process, clients and backends are rustls or raw TCP.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn echo_roundtrip<S>(tls: &mut S, message: &[u8])
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    tls.write_all(message).await.unwrap();
    tls.flush().await.unwrap();
    let mut back = vec![0u8; message.len()];
    tls.read_exact(&mut back).await.unwrap();
    assert_eq!(back, message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_handshake_and_data_pass_through_unchanged() {
    let pki = Pki::new(&["app.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let relay = Relay::start(&simple_config(&["*.example.com"], backend, "")).await;

    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let local = tcp.local_addr().unwrap();
    let mut tls = tls_connect(pki.client_config(), "app.example.com", tcp)
        .await
        .expect("mutual TLS handshake through the relay");
    assert_eq!(
        tls.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3)
    );
    echo_roundtrip(&mut tls, b"ping through the relay").await;
    echo_roundtrip(&mut tls, &[7u8; 20_000]).await;
    tls.shutdown().await.unwrap();
    let mut rest = Vec::new();
    let _ = tls.read_to_end(&mut rest).await;
    drop(tls);

    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "done");
    assert_eq!(line["sni"], "app.example.com");
    assert_eq!(line["route"], "*.example.com");
    assert_eq!(line["backend"], "b");
    assert_eq!(line["backend.addr"], backend.to_string());
    assert_eq!(line["listener"], "tls");
    assert!(line["bytes.up"].as_u64().unwrap() > 20_000);
    assert!(line["bytes.down"].as_u64().unwrap() > 20_000);
    assert!(line["conn_id"].as_u64().is_some());
    assert!(line["duration_ms"].as_u64().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_sent_one_byte_per_segment_is_routed() {
    let pki = Pki::new(&["slow.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let relay = Relay::start(&simple_config(&["slow.example.com"], backend, "")).await;

    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let local = tcp.local_addr().unwrap();
    let trickle = Trickle { inner: tcp, max: 1 };
    let handshake = tls_connect(pki.client_config(), "slow.example.com", trickle);
    let Ok(result) = tokio::time::timeout(WAIT, handshake).await else {
        panic!(
            "handshake with 1-byte writes hung; log: {:#?}",
            relay.log_lines()
        );
    };
    let mut tls = result.expect("handshake with 1-byte writes");
    echo_roundtrip(&mut tls, b"one byte at a time").await;
    drop(tls);
    assert_eq!(relay.closed_line(local).await["sni"], "slow.example.com");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_split_across_tls_records_is_routed() {
    let pki = Pki::new(&["split.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let relay = Relay::start(&simple_config(&["split.example.com"], backend, "")).await;

    // rustls fragments handshake messages to its max fragment size, so this
    // ClientHello travels in several records.
    let mut config = pki.client_config();
    config.max_fragment_size = Some(256);
    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let local = tcp.local_addr().unwrap();
    let mut tls = tls_connect(config, "split.example.com", tcp)
        .await
        .expect("handshake with a fragmented hello");
    echo_roundtrip(&mut tls, b"records").await;
    drop(tls);
    assert_eq!(relay.closed_line(local).await["sni"], "split.example.com");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captured_hellos_reach_the_backend_byte_for_byte() {
    // A recording backend: everything it receives goes back to the test.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let backend = raw_backend(move |mut stream| {
        let tx = tx.clone();
        async move {
            let mut got = Vec::new();
            let _ = stream.read_to_end(&mut got).await;
            tx.send(got).unwrap();
        }
    })
    .await;
    let relay = Relay::start(&simple_config(
        &[
            "split.example.com",
            "chrome.example.com",
            "curl.example.com",
        ],
        backend,
        "",
    ))
    .await;
    for (file, sni) in [
        ("openssl_two_records.bin", "split.example.com"),
        ("chromium_pq.bin", "chrome.example.com"),
        ("curl.bin", "curl.example.com"),
    ] {
        let hello = capture(file);
        let mut client = TcpStream::connect(relay.addr()).await.unwrap();
        let local = client.local_addr().unwrap();
        client.write_all(&hello).await.unwrap();
        client.write_all(b"trailing bytes").await.unwrap();
        client.shutdown().await.unwrap();
        let got = tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap()
            .unwrap();
        let mut expected = hello.clone();
        expected.extend_from_slice(b"trailing bytes");
        assert_eq!(got, expected, "{file}");
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        let line = relay.closed_line(local).await;
        assert_eq!(line["sni"], sni, "{file}");
        assert_eq!(line["close"], "done", "{file}");
        assert_eq!(line["bytes.up"], expected.len() as u64, "{file}");
    }
    // The chromium capture carries a GREASE encrypted_client_hello extension.
    let chrome = relay
        .closed_lines()
        .into_iter()
        .find(|l| l["sni"] == "chrome.example.com")
        .unwrap();
    assert_eq!(chrome["ech"], true);
    assert_eq!(chrome["alpn"], "h2,http/1.1");
}

/// Reads until EOF or reset, returning what arrived and how long it took.
async fn read_until_closed(stream: &mut TcpStream) -> (Vec<u8>, Duration) {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(WAIT, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!("connection still open after {WAIT:?}"),
        }
    }
    (got, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_tls_bytes_are_closed_without_reaching_the_backend() {
    let backend = raw_backend(|_| async { panic!("a non-TLS client reached the backend") }).await;
    let relay = Relay::start(&simple_config(&["example.com"], backend, "")).await;
    for junk in [
        &b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"[..],
        b"SSH-2.0-OpenSSH_9.2\r\n",
        // An SSLv2-framed ClientHello.
        &[
            0x80, 0x2e, 0x01, 0x00, 0x02, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10,
        ][..],
        // A TLS alert record where a handshake must be.
        &[0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x28][..],
    ] {
        let mut client = TcpStream::connect(relay.addr()).await.unwrap();
        let local = client.local_addr().unwrap();
        client.write_all(junk).await.unwrap();
        let (got, _) = read_until_closed(&mut client).await;
        assert!(got.is_empty(), "relay answered non-TLS with {got:?}");
        assert_eq!(relay.closed_line(local).await["close"], "not_tls");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_hello_then_silence_is_closed_at_the_hello_timeout() {
    let backend = raw_backend(|_| async { panic!("a truncated hello reached the backend") }).await;
    let relay = Relay::start(&simple_config(
        &["www.example.com"],
        backend,
        r#"client_hello_timeout = "1s""#,
    ))
    .await;
    let hello = capture("openssl_sni.bin");
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(&hello[..100]).await.unwrap();
    let (got, took) = read_until_closed(&mut client).await;
    assert!(got.is_empty());
    assert!(took >= Duration::from_millis(900), "closed early: {took:?}");
    assert!(took < Duration::from_millis(2500), "closed late: {took:?}");
    assert_eq!(relay.closed_line(local).await["close"], "hello_timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmatched_sni_gets_exactly_an_unrecognized_name_alert() {
    let backend = raw_backend(|_| async { panic!("an unmatched name reached the backend") }).await;
    let relay = Relay::start(&simple_config(
        &["*.example.org", "example.org"],
        backend,
        "",
    ))
    .await;

    // www.example.com is not allowed; neither is a look-alike name.
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(&capture("openssl_sni.bin")).await.unwrap();
    let (got, _) = read_until_closed(&mut client).await;
    assert_eq!(got, [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70]);
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "unmatched");
    assert_eq!(line["sni"], "www.example.com");

    // A real TLS client reports the alert as such.
    let pki = Pki::new(&["badexample.org"]);
    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let error = tls_connect(pki.client_config(), "badexample.org", tcp)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .to_lowercase()
            .contains("unrecognisedname")
            || error
                .to_string()
                .to_lowercase()
                .contains("unrecognizedname"),
        "unexpected client error: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_sni_is_rejected_or_sent_to_the_no_sni_backend() {
    let backend =
        raw_backend(|_| async { panic!("a hello without SNI reached the backend") }).await;
    let relay = Relay::start(&simple_config(&["example.com"], backend, "")).await;
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client
        .write_all(&capture("openssl_no_sni.bin"))
        .await
        .unwrap();
    let (got, _) = read_until_closed(&mut client).await;
    assert_eq!(got, [0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x70]);
    assert_eq!(relay.closed_line(local).await["close"], "no_sni");
    drop(relay);

    let fallback = raw_backend(|mut stream| async move {
        let mut got = vec![0u8; 5];
        stream.read_exact(&mut got).await.unwrap();
        stream.write_all(b"fallback").await.unwrap();
    })
    .await;
    let config = format!(
        "{}\n[backend.fallback]\naddresses = [\"{fallback}\"]\n",
        simple_config(&["example.com"], backend, r#"no_sni = "fallback""#)
    );
    let relay = Relay::start(&config).await;
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client
        .write_all(&capture("openssl_no_sni.bin"))
        .await
        .unwrap();
    let (got, _) = read_until_closed(&mut client).await;
    assert_eq!(got, b"fallback");
    let line = relay.closed_line(local).await;
    assert_eq!(line["route"], "no_sni");
    assert_eq!(line["backend"], "fallback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_down_closes_the_client_promptly() {
    let relay = Relay::start(&simple_config(&["www.example.com"], closed_port(), "")).await;
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(&capture("openssl_sni.bin")).await.unwrap();
    let (got, took) = read_until_closed(&mut client).await;
    assert!(got.is_empty());
    // connect_timeout is 2 s; a refused port must not wait for it.
    assert!(took < Duration::from_secs(2), "took {took:?}");
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "connect_failed");
    assert_eq!(line["level"], "WARN");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_holed_backend_closes_the_client_at_connect_timeout() {
    // Connects to it hang until the relay gives up.
    let hole = BlackHole::new();
    let hole_addr = hole.addr;
    let config = simple_config(&["www.example.com"], hole_addr, "")
        .replace(r#"connect_timeout = "2s""#, r#"connect_timeout = "700ms""#);
    let relay = Relay::start(&config).await;
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(&capture("openssl_sni.bin")).await.unwrap();
    let (got, took) = read_until_closed(&mut client).await;
    assert!(got.is_empty());
    assert!(took >= Duration::from_millis(600), "took {took:?}");
    assert!(took < Duration::from_millis(2000), "took {took:?}");
    assert_eq!(relay.closed_line(local).await["close"], "connect_failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_half_close_reaches_the_backend_and_the_reply_still_flows() {
    // The backend reads to EOF (the client's FIN), then answers and closes.
    let backend = raw_backend(|mut stream| async move {
        let mut got = Vec::new();
        stream.read_to_end(&mut got).await.unwrap();
        let reply = format!("got {} bytes", got.len());
        stream.write_all(reply.as_bytes()).await.unwrap();
    })
    .await;
    let relay = Relay::start(&simple_config(&["www.example.com"], backend, "")).await;
    let hello = capture("openssl_sni.bin");
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(&hello).await.unwrap();
    client.write_all(b"request").await.unwrap();
    client.shutdown().await.unwrap();
    let (got, _) = read_until_closed(&mut client).await;
    assert_eq!(got, format!("got {} bytes", hello.len() + 7).as_bytes());
    assert_eq!(relay.closed_line(local).await["close"], "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_half_close_reaches_the_client_and_the_client_can_still_send() {
    // The backend answers and sends FIN at once, then keeps reading.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let backend = raw_backend(move |mut stream| {
        let tx = tx.clone();
        async move {
            stream.write_all(b"early answer").await.unwrap();
            stream.shutdown().await.unwrap();
            let mut got = Vec::new();
            stream.read_to_end(&mut got).await.unwrap();
            tx.send(got).unwrap();
        }
    })
    .await;
    let relay = Relay::start(&simple_config(&["www.example.com"], backend, "")).await;
    let hello = capture("openssl_sni.bin");
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(&hello).await.unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    assert_eq!(answer, b"early answer");
    // The backend's FIN arrived; the other direction is still open.
    client.write_all(b"after the backend's FIN").await.unwrap();
    client.shutdown().await.unwrap();
    let got = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(got.ends_with(b"after the backend's FIN"));
    let line = relay.closed_line(local).await;
    assert_eq!(line["close"], "done");
    assert_eq!(line["bytes.down"], 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_relayed_connection_is_closed_at_the_idle_timeout() {
    let backend = raw_backend(|mut stream| async move {
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink).await;
    })
    .await;
    let relay = Relay::start(&simple_config(
        &["www.example.com"],
        backend,
        r#"idle_timeout = "1s""#,
    ))
    .await;
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(&capture("openssl_sni.bin")).await.unwrap();
    let (got, took) = read_until_closed(&mut client).await;
    assert!(got.is_empty());
    assert!(took >= Duration::from_millis(900), "closed early: {took:?}");
    assert!(took < Duration::from_millis(3000), "closed late: {took:?}");
    assert_eq!(relay.closed_line(local).await["close"], "idle_timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_mebibyte_each_way_arrives_intact() {
    const SIZE: usize = 1 << 20;
    fn pattern(seed: u32) -> Vec<u8> {
        // xorshift: cheap, deterministic, not compressible into runs.
        let mut x = seed;
        (0..SIZE)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }
    let pki = Pki::new(&["bulk.example.com"]);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let backend = tls_backend(&pki, move |tls| {
        let tx = tx.clone();
        async move {
            let (mut read, mut write) = tokio::io::split(tls);
            let send = async {
                write.write_all(&pattern(2)).await.unwrap();
                write.flush().await.unwrap();
            };
            let receive = async {
                let mut got = vec![0u8; SIZE];
                read.read_exact(&mut got).await.unwrap();
                got
            };
            let ((), got) = tokio::join!(send, receive);
            tx.send(got).unwrap();
            let mut tls = read.unsplit(write);
            let _ = tls.shutdown().await;
        }
    })
    .await;
    let relay = Relay::start(&simple_config(&["bulk.example.com"], backend, "")).await;
    let tcp = TcpStream::connect(relay.addr()).await.unwrap();
    let local = tcp.local_addr().unwrap();
    let tls = tls_connect(pki.client_config(), "bulk.example.com", tcp)
        .await
        .unwrap();
    let (mut read, mut write) = tokio::io::split(tls);
    let send = async {
        write.write_all(&pattern(1)).await.unwrap();
        write.flush().await.unwrap();
    };
    let receive = async {
        let mut got = vec![0u8; SIZE];
        read.read_exact(&mut got).await.unwrap();
        got
    };
    let ((), downloaded) = tokio::join!(send, receive);
    assert!(downloaded == pattern(2), "download corrupted");
    let uploaded = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(uploaded == pattern(1), "upload corrupted");
    drop((read, write));
    let line = relay.closed_line(local).await;
    assert!(line["bytes.up"].as_u64().unwrap() > SIZE as u64);
    assert!(line["bytes.down"].as_u64().unwrap() > SIZE as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_send_nothing_are_not_logged() {
    let backend = raw_backend(|_| async {}).await;
    let relay = Relay::start(&simple_config(&["www.example.com"], backend, "")).await;
    let mut silent_ports = Vec::new();
    for _ in 0..20 {
        let stream = TcpStream::connect(relay.addr()).await.unwrap();
        silent_ports.push(stream.local_addr().unwrap());
        drop(stream);
    }
    // A connection after them that does send: once its line is written, the
    // silent ones (accepted earlier) are closed too.
    let mut client = TcpStream::connect(relay.addr()).await.unwrap();
    let local = client.local_addr().unwrap();
    client.write_all(b"GET /").await.unwrap();
    relay.closed_line(local).await;
    let lines = relay.closed_lines();
    assert_eq!(lines.len(), 1, "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_listener_serves_ipv4_and_ipv6_addresses() {
    let pki = Pki::new(&["dual.example.com"]);
    let backend = tls_echo_backend(&pki).await;
    let config = simple_config(&["dual.example.com"], backend, "").replace(
        r#"listen = ["127.0.0.1:0"]"#,
        r#"listen = ["127.0.0.1:0", "[::1]:0"]"#,
    );
    let relay = Relay::start(&config).await;
    let addrs = &relay.listening["tls"];
    assert_eq!(addrs.len(), 2);
    assert!(addrs[0].is_ipv4() && addrs[1].is_ipv6(), "{addrs:?}");
    for &addr in addrs {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let local = tcp.local_addr().unwrap();
        let mut tls = tls_connect(pki.client_config(), "dual.example.com", tcp)
            .await
            .unwrap();
        echo_roundtrip(&mut tls, addr.to_string().as_bytes()).await;
        drop(tls);
        assert_eq!(
            relay.closed_line(local).await["client.peer"],
            local.to_string()
        );
    }
}
