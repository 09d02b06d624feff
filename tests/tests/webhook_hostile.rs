//! meshscope-webhook against hostile clients: the built binary, over real
//! TLS on loopback, watching the harness's kube-apiserver (as the install's
//! ServiceAccount), with short limits set by flag so that each test takes a
//! few seconds. Each test checks that the limit holds (the connection is cut
//! off in time, memory and file descriptors stay bounded) and that a
//! well-behaved /validate request is still answered promptly.

use std::time::{Duration, Instant};

use meshscope_e2e::webhook_process::{read_response, request_head, Webhook};
use meshscope_test_support::net::rss_kib;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The test process may need more descriptors than a default soft limit.
fn raise_fd_limit(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// The webhook's resident memory, in KiB.
fn webhook_rss(wh: &Webhook) -> u64 {
    rss_kib(wh.pid()).expect("the webhook's VmRSS")
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Waits for the server to close `s` (EOF or an error), returning when.
async fn closed_after<S: tokio::io::AsyncRead + Unpin>(s: &mut S, started: Instant) -> Duration {
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return started.elapsed(),
            Ok(_) => {}
        }
    }
}

// === tests ===

#[tokio::test]
async fn a_request_head_trickled_in_is_cut_off_at_the_header_timeout() {
    meshscope_e2e::needs_cluster!();
    let wh = Webhook::start(&["--header-read-timeout-seconds=1"]);
    let mut s = wh.tls().await;
    let started = Instant::now();
    s.write_all(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // One byte every 100 ms, steadily, well below any read timeout of its
    // own; the head never completes.
    let (mut rd, mut wr) = tokio::io::split(s);
    let trickle = tokio::spawn(async move {
        for _ in 0..60 {
            if wr.write_all(b"X").await.is_err() || wr.flush().await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let took = closed_after(&mut rd, started).await;
    trickle.abort();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
        "closed after {took:?}, the header timeout is 1 s"
    );
    assert_eq!(
        wh.metric("meshscope_webhook_timeouts_total{phase=\"header\"}"),
        1.0
    );
    wh.still_serves().await;
}

#[tokio::test]
async fn a_body_trickled_in_gets_408_at_the_body_timeout() {
    meshscope_e2e::needs_cluster!();
    let wh = Webhook::start(&["--body-read-timeout-seconds=1"]);
    let mut s = wh.tls().await;
    let started = Instant::now();
    s.write_all(request_head(4096).as_bytes()).await.unwrap();
    let (mut rd, mut wr) = tokio::io::split(s);
    let trickle = tokio::spawn(async move {
        for _ in 0..60 {
            if wr.write_all(b" ").await.is_err() || wr.flush().await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let (status, text) = read_response(&mut rd).await;
    let took = started.elapsed();
    trickle.abort();
    assert_eq!(status, 408, "{text}");
    assert!(text.contains("did not arrive within 1s"), "{text}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
        "answered after {took:?}, the body timeout is 1 s"
    );
    assert_eq!(
        wh.metric("meshscope_webhook_timeouts_total{phase=\"body\"}"),
        1.0
    );
    wh.still_serves().await;
}

#[tokio::test]
async fn two_thousand_idle_connections_hold_at_most_the_cap_and_leave_room_for_a_real_request() {
    meshscope_e2e::needs_cluster!();
    const IDLE: usize = 2000;
    const CAP: usize = 200;
    raise_fd_limit(IDLE as u64 + 512);
    let wh = Webhook::start(&[
        "--max-connections=200",
        "--idle-timeout-seconds=60",
        "--header-read-timeout-seconds=60",
        "--handshake-timeout-seconds=60",
    ]);
    let base_fds = open_fds(wh.pid());
    let base_rss = webhook_rss(&wh);
    // Half complete the handshake and send nothing, half never start it.
    let mut idle: Vec<Box<dyn std::any::Any + Send>> = Vec::new();
    for i in 0..IDLE {
        if i % 2 == 0 {
            let tcp = TcpStream::connect(wh.addr).await.unwrap();
            let connector = TlsConnector::from(wh.tls.clone());
            let name = ServerName::try_from("127.0.0.1").unwrap();
            // An evicted connection may fail its handshake: that is the cap.
            let connect =
                tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp));
            if let Ok(Ok(s)) = connect.await {
                idle.push(Box::new(s));
            }
        } else if let Ok(s) = TcpStream::connect(wh.addr).await {
            idle.push(Box::new(s));
        }
        if i % 250 == 249 {
            let fds = open_fds(wh.pid());
            assert!(
                fds <= base_fds + CAP + 16,
                "{fds} descriptors open after {} idle connections (cap {CAP}, {base_fds} at start)",
                i + 1
            );
        }
    }
    let fds = open_fds(wh.pid());
    let open = wh.metric("meshscope_webhook_connections_open");
    assert!(open <= CAP as f64, "{open} connections open, cap {CAP}");
    assert!(fds <= base_fds + CAP + 16, "{fds} descriptors, cap {CAP}");
    assert!(wh.metric("meshscope_webhook_connections_evicted_total") >= (IDLE - CAP) as f64 * 0.9);
    // A well-behaved client gets a slot (the longest-idle one is closed).
    for _ in 0..5 {
        wh.still_serves().await;
    }
    let rss = webhook_rss(&wh);
    assert!(
        rss < base_rss + 64 * 1024,
        "RSS grew from {base_rss} KiB to {rss} KiB"
    );
    eprintln!(
        "{IDLE} idle connections: {fds} descriptors ({base_fds} at start), RSS {base_rss} -> {rss} KiB"
    );
    drop(idle);
}

#[tokio::test]
async fn an_oversized_body_is_refused_without_being_held_in_memory() {
    meshscope_e2e::needs_cluster!();
    let wh = Webhook::start(&["--max-body-bytes=1048576"]);
    let before = webhook_rss(&wh);

    // Declared too large: refused before a byte of it is read.
    let mut s = wh.tls().await;
    let started = Instant::now();
    s.write_all(request_head(200 * 1024 * 1024).as_bytes())
        .await
        .unwrap();
    let (status, text) = read_response(&mut s).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("more than the limit of 1048576"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(1));

    // Chunked, so no length to refuse up front: 64 MiB are offered, the
    // server reads to its limit and answers.
    let mut s = wh.tls().await;
    s.write_all(
        b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let (mut rd, mut wr) = tokio::io::split(s);
    let writer = tokio::spawn(async move {
        let chunk = vec![b' '; 64 * 1024];
        let head = format!("{:x}\r\n", chunk.len());
        for _ in 0..1024 {
            if wr.write_all(head.as_bytes()).await.is_err()
                || wr.write_all(&chunk).await.is_err()
                || wr.write_all(b"\r\n").await.is_err()
            {
                return;
            }
        }
    });
    let (status, text) = read_response(&mut rd).await;
    writer.abort();
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("cannot read the request body"), "{text}");
    let after = webhook_rss(&wh);
    assert!(
        after < before + 32 * 1024,
        "RSS grew from {before} KiB to {after} KiB for a 1 MiB limit"
    );
    assert_eq!(wh.metric("meshscope_webhook_bad_requests_total"), 2.0);
    wh.still_serves().await;
}

#[tokio::test]
async fn handshake_garbage_and_silent_handshakes_are_dropped_and_the_server_keeps_serving() {
    meshscope_e2e::needs_cluster!();
    let wh = Webhook::start(&["--handshake-timeout-seconds=1"]);
    // Random bytes instead of a ClientHello, and a ClientHello-looking
    // record header followed by random bytes.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut tasks = Vec::new();
    for i in 0..200 {
        let mut garbage: Vec<u8> = (0..2048).map(|_| next() as u8).collect();
        if i % 2 == 1 {
            garbage[..5].copy_from_slice(&[0x16, 0x03, 0x01, 0x02, 0x00]);
        }
        let addr = wh.addr;
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let _ = s.write_all(&garbage).await;
            let started = Instant::now();
            closed_after(&mut s, started).await
        }));
    }
    for t in tasks {
        let took = t.await.unwrap();
        assert!(took < Duration::from_secs(2), "garbage held for {took:?}");
    }
    assert!(wh.metric("meshscope_webhook_tls_handshake_errors_total") >= 190.0);

    // Connecting and saying nothing is cut off at the handshake timeout.
    let mut silent = TcpStream::connect(wh.addr).await.unwrap();
    let started = Instant::now();
    let took = closed_after(&mut silent, started).await;
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(2500),
        "a silent handshake was held {took:?}"
    );
    assert_eq!(
        wh.metric("meshscope_webhook_timeouts_total{phase=\"handshake\"}"),
        1.0
    );
    wh.still_serves().await;
    assert!(wh.metric("meshscope_webhook_connections_open") <= 1.0);
}
