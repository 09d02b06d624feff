//! A `meshscope-webhook` binary running on loopback, over real TLS,
//! watching the test control plane as the install's ServiceAccount: the
//! workspace's build (`Webhook::start`) or another build of it, such as
//! the binary unpacked from a release image (`Webhook::start_binary`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use meshscope_test_support::net::{admin_get, free_port};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::cluster::{bin_dir, Cluster};
use crate::setup::{webhook_files, WebhookFiles};

/// How long a read of the admin port may stall.
const ADMIN_READ: Duration = Duration::from_secs(10);

pub struct Webhook {
    child: Child,
    pub addr: SocketAddr,
    admin_port: u16,
    pub tls: Arc<ClientConfig>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Webhook {
    /// Starts the workspace's binary with `flags` and waits for /readyz.
    pub fn start(flags: &[&str]) -> Webhook {
        let bin = bin_dir().join("meshscope-webhook");
        assert!(
            bin.exists(),
            "{} is missing: cargo build --workspace",
            bin.display()
        );
        Webhook::start_binary(&bin, flags)
    }

    /// Starts the binary `bin` with `flags` and waits for /readyz.
    pub fn start_binary(bin: &Path, flags: &[&str]) -> Webhook {
        let c = Cluster::shared();
        let WebhookFiles {
            dir,
            pki,
            kubeconfig,
        } = webhook_files(c);
        let log = dir.path().join("webhook.log");
        let mut attempt = 0;
        let (child, port, admin_port) = loop {
            let (port, admin_port) = (free_port(), free_port());
            let mut child = Command::new(bin)
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

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn metrics(&self) -> String {
        admin_get(self.admin_port, "/metrics", ADMIN_READ).1
    }

    /// One metric's value (a line `name value`, labels included in `name`).
    pub fn metric(&self, name: &str) -> f64 {
        let text = self.metrics();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    }

    pub async fn tls(&self) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(self.addr).await.unwrap();
        TlsConnector::from(self.tls.clone())
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .unwrap()
    }

    /// A well-behaved POST /validate on a new connection: its status and
    /// how long it took, handshake included.
    pub async fn validate(&self) -> (u16, Duration) {
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
    pub async fn still_serves(&self) {
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
pub fn review() -> String {
    let path = crate::cluster::repo_root().join("tests/fixtures/admission/deployment-delete.json");
    std::fs::read_to_string(path).unwrap()
}

pub fn request_head(len: usize) -> String {
    format!(
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    )
}

/// Reads until the server closes: the status code and the whole text.
pub async fn read_response<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> (u16, String) {
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
