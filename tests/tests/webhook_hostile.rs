//! meshscope-webhook against hostile clients: the built binary, over real
//! TLS on loopback, watching the harness's kube-apiserver (as the install's
//! ServiceAccount), with short limits set by flag so that each test takes a
//! few seconds. Each test checks that the limit holds (the connection is cut
//! off in time, memory and file descriptors stay bounded) and that a
//! well-behaved /validate request is still answered promptly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use meshscope_e2e::cluster::{bin_dir, Cluster};
use meshscope_e2e::setup::{webhook_files, WebhookFiles};
use meshscope_test_support::net::{admin_get, free_port, rss_kib};

/// How long a read of the admin port may stall.
const ADMIN_READ: Duration = Duration::from_secs(10);
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
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

struct Webhook {
    child: Child,
    addr: SocketAddr,
    admin_port: u16,
    tls: Arc<ClientConfig>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Webhook {
    /// Starts the binary with `flags` and waits for /readyz.
    fn start(flags: &[&str]) -> Webhook {
        let c = Cluster::shared();
        let WebhookFiles {
            dir,
            pki,
            kubeconfig,
        } = webhook_files(c);
        let log = dir.path().join("webhook.log");
        let bin = bin_dir().join("meshscope-webhook");
        assert!(
            bin.exists(),
            "{} is missing: cargo build --workspace",
            bin.display()
        );
        let mut attempt = 0;
        let (child, port, admin_port) = loop {
            let (port, admin_port) = (free_port(), free_port());
            let mut child = Command::new(&bin)
                .env_clear()
                .env("KUBECONFIG", &kubeconfig)
                .arg(format!("--listen=127.0.0.1:{port}"))
                .arg(format!("--admin-listen=127.0.0.1:{admin_port}"))
                .arg(format!(
                    "--tls-cert={}",
                    dir.path().join("tls.crt").display()
                ))
                .arg(format!(
                    "--tls-key={}",
                    dir.path().join("tls.key").display()
                ))
                .arg("--log-level=info,meshscope_webhook=debug")
                .args(flags)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("meshscope-webhook starts");
            match wait_ready(&mut child, admin_port, &log) {
                Ok(()) => break (child, port, admin_port),
                Err(why) if why.contains("cannot listen") && attempt < 3 => attempt += 1,
                Err(why) => panic!("meshscope-webhook did not start: {why}"),
            }
        };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let mut tls =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Webhook {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            admin_port,
            tls: Arc::new(tls),
            log,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn metrics(&self) -> String {
        admin_get(self.admin_port, "/metrics", ADMIN_READ).1
    }

    /// One metric's value (a line `name value`, labels included in `name`).
    fn metric(&self, name: &str) -> f64 {
        let text = self.metrics();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    }

    async fn tls(&self) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(self.addr).await.unwrap();
        TlsConnector::from(self.tls.clone())
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .unwrap()
    }

    /// A well-behaved POST /validate on a new connection: its status and
    /// how long it took, handshake included.
    async fn validate(&self) -> (u16, Duration) {
        let started = Instant::now();
        let mut s = self.tls().await;
        let body = review();
        s.write_all(request_head(body.len()).as_bytes())
            .await
            .unwrap();
        s.write_all(body.as_bytes()).await.unwrap();
        let (status, text) = read_response(&mut s).await;
        assert!(
            text.contains("\"allowed\":true"),
            "not an allowed review: {text}"
        );
        (status, started.elapsed())
    }

    /// Asserts that a well-behaved request is answered within a second.
    async fn still_serves(&self) {
        let (status, took) = self.validate().await;
        assert_eq!(status, 200);
        assert!(
            took < Duration::from_secs(1),
            "a well-behaved request took {took:?}"
        );
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- meshscope-webhook log ---\n{}", self.log_text());
        }
    }
}

fn wait_ready(child: &mut Child, admin_port: u16, log: &PathBuf) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(status) = child.try_wait().unwrap() {
            return Err(format!("exited ({status}):\n{text}"));
        }
        if text.contains("meshscope-webhook starting")
            && admin_get(admin_port, "/readyz", ADMIN_READ).0 == 200
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err(format!("not ready after 90s:\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A DELETE review: allowed whatever the caches hold.
fn review() -> String {
    let path =
        meshscope_e2e::cluster::repo_root().join("tests/fixtures/admission/deployment-delete.json");
    std::fs::read_to_string(path).unwrap()
}

fn request_head(len: usize) -> String {
    format!(
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    )
}

/// Reads until the server closes: the status code and the whole text.
async fn read_response<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> (u16, String) {
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
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
