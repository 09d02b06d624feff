//! The soak's clients: TLS connections that check the certificate each
//! new one is served, and AdmissionReviews sent over HTTP/1.1 and HTTP/2.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::mix::{Kind, Verdict};
use crate::records::Outcome;

pub struct Tls {
    config: Arc<ClientConfig>,
    addr: std::net::SocketAddr,
    /// DER of every certificate generation, by number.
    pub generations: Mutex<Vec<Vec<u8>>>,
    /// The generation whose files are in place now.
    pub current: AtomicUsize,
    pub connects: AtomicU64,
    pub connect_errors: AtomicU64,
    /// New connections that got an older certificate than was in place.
    pub stale_certs: AtomicU64,
    /// Generations seen by new connections.
    pub seen: Mutex<BTreeMap<usize, u64>>,
}

type Stream = tokio_rustls::client::TlsStream<TcpStream>;

impl Tls {
    /// Connections to `127.0.0.1:port` trusting `config`'s roots, the
    /// certificate of generation 0 (`first`, DER) in place.
    pub fn new(config: ClientConfig, port: u16, first: Vec<u8>) -> Tls {
        Tls {
            config: Arc::new(config),
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            generations: Mutex::new(vec![first]),
            current: AtomicUsize::new(0),
            connects: AtomicU64::new(0),
            connect_errors: AtomicU64::new(0),
            stale_certs: AtomicU64::new(0),
            seen: Mutex::new(BTreeMap::new()),
        }
    }

    pub async fn connect(&self, alpn: &'static [u8]) -> Result<Stream> {
        let gen_before = self.current.load(Ordering::SeqCst);
        let mut config = (*self.config).clone();
        config.alpn_protocols = vec![alpn.to_vec()];
        let connect = async {
            let tcp = TcpStream::connect(self.addr).await?;
            tcp.set_nodelay(true)?;
            let s = TlsConnector::from(Arc::new(config))
                .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
                .await?;
            Ok::<_, std::io::Error>(s)
        };
        let s = match tokio::time::timeout(Duration::from_secs(3), connect).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                self.connect_errors.fetch_add(1, Ordering::Relaxed);
                return Err(e.into());
            }
            Err(_) => {
                self.connect_errors.fetch_add(1, Ordering::Relaxed);
                bail!("connect timed out");
            }
        };
        self.connects.fetch_add(1, Ordering::Relaxed);
        let der = s
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec())
            .unwrap_or_default();
        let gens = self.generations.lock().unwrap();
        let got = gens.iter().position(|g| *g == der).unwrap_or(usize::MAX);
        drop(gens);
        if got < gen_before {
            self.stale_certs.fetch_add(1, Ordering::Relaxed);
        }
        *self.seen.lock().unwrap().entry(got).or_default() += 1;
        Ok(s)
    }
}

pub struct Job {
    pub kind: Kind,
    pub uid: String,
    pub body: Bytes,
    pub sent: Instant,
}

fn request(job: &Job) -> Request<Full<Bytes>> {
    Request::post("/validate")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(job.body.clone()))
        .unwrap()
}

/// Refused (never processed) or reset (sent, no answer), from a client error.
fn classify(e: &hyper::Error) -> Outcome {
    if e.is_canceled() {
        return Outcome::Refused;
    }
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(h2e) = s.downcast_ref::<h2::Error>() {
            if h2e.reason() == Some(h2::Reason::REFUSED_STREAM) {
                return Outcome::Refused;
            }
        }
        src = s.source();
    }
    Outcome::Reset
}

pub async fn send_h1(
    tls: &Tls,
    conn: &mut Option<http1::SendRequest<Full<Bytes>>>,
    job: &Job,
) -> (Outcome, Vec<u8>) {
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        *conn = None;
        match tls.connect(b"http/1.1").await {
            Ok(s) => match http1::handshake(TokioIo::new(s)).await {
                Ok((send, c)) => {
                    tokio::spawn(c);
                    *conn = Some(send);
                }
                Err(_) => return (Outcome::Refused, vec![]),
            },
            Err(_) => return (Outcome::Refused, vec![]),
        }
    }
    let send = conn.as_mut().unwrap();
    if send.ready().await.is_err() {
        *conn = None;
        return (Outcome::Refused, vec![]);
    }
    match send.send_request(request(job)).await {
        Ok(res) => {
            let status = res.status().as_u16();
            let close = res
                .headers()
                .get("connection")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
            let body = res.into_body().collect().await;
            if close {
                *conn = None;
            }
            match body {
                Ok(b) => (
                    Outcome::Answered {
                        status,
                        verdict: Verdict::Right,
                    },
                    b.to_bytes().to_vec(),
                ),
                Err(_) => {
                    *conn = None;
                    (Outcome::Reset, vec![])
                }
            }
        }
        Err(e) => {
            *conn = None;
            (classify(&e), vec![])
        }
    }
}

pub struct H2Pool {
    pub slots: Vec<tokio::sync::Mutex<Option<http2::SendRequest<Full<Bytes>>>>>,
}

pub async fn send_h2(tls: &Tls, pool: &H2Pool, slot: usize, job: &Job) -> (Outcome, Vec<u8>) {
    let send = {
        let mut s = pool.slots[slot].lock().await;
        if s.as_ref().is_none_or(|c| c.is_closed()) {
            *s = None;
            let Ok(stream) = tls.connect(b"h2").await else {
                return (Outcome::Refused, vec![]);
            };
            match http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await {
                Ok((send, c)) => {
                    tokio::spawn(c);
                    *s = Some(send);
                }
                Err(_) => return (Outcome::Refused, vec![]),
            }
        }
        s.as_ref().unwrap().clone()
    };
    let mut send = send;
    if send.ready().await.is_err() {
        return (Outcome::Refused, vec![]);
    }
    match send.send_request(request(job)).await {
        Ok(res) => {
            let status = res.status().as_u16();
            match res.into_body().collect().await {
                Ok(b) => (
                    Outcome::Answered {
                        status,
                        verdict: Verdict::Right,
                    },
                    b.to_bytes().to_vec(),
                ),
                Err(_) => (Outcome::Reset, vec![]),
            }
        }
        Err(e) => (classify(&e), vec![]),
    }
}
