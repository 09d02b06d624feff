//! HTTPS for the admission server: rustls (ring, TLS 1.2 and 1.3 only)
//! over a plain accept loop, with the certificate re-read for every new
//! connection so that a renewed Secret (kubelet swaps the files
//! atomically, cert-manager renews them) is picked up without a restart.
//!
//! Re-reading two small files per connection costs next to nothing at
//! admission rates (the API server keeps its connections open), and a
//! broken pair on disk never replaces the last good one.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{header, HeaderValue, Request};
use axum::Router;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;
use tracing::{debug, info, warn};

use crate::limits::{Connections, Limits, Registration};
use crate::metrics::{Metrics, Timeout};
/// In-flight requests get this long to finish after SIGTERM (the Deployment
/// allows 30s before SIGKILL).
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no certificate in {0}")]
    NoCertificate(PathBuf),
    #[error("invalid PEM in {path}: {reason}")]
    Pem { path: PathBuf, reason: String },
    #[error("unusable certificate or key: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The rustls config for one certificate chain and key (PEM).
pub fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &Path,
    key_path: &Path,
) -> Result<ServerConfig, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem {
            path: cert_path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(cert_path.to_path_buf()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Pem {
        path: key_path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

struct Loaded {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    config: Arc<ServerConfig>,
}

/// The serving certificate, reloaded from its files when they change.
pub struct CertReloader {
    cert: PathBuf,
    key: PathBuf,
    current: Mutex<Option<Loaded>>,
}

impl CertReloader {
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        CertReloader {
            cert: cert.into(),
            key: key.into(),
            current: Mutex::new(None),
        }
    }

    /// The config for a new connection: the files as they are now, or the
    /// last good pair when they cannot be used.
    pub async fn config(&self, metrics: &Metrics) -> Result<Arc<ServerConfig>, TlsError> {
        let read = |p: PathBuf| async move {
            tokio::fs::read(&p)
                .await
                .map_err(|source| TlsError::Read { path: p, source })
        };
        let files = match (read(self.cert.clone()).await, read(self.key.clone()).await) {
            (Ok(c), Ok(k)) => Ok((c, k)),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let (cert_pem, key_pem) = match files {
            Ok(f) => f,
            Err(e) => return self.fallback(&current, e, metrics),
        };
        if let Some(l) = current.as_ref() {
            if l.cert_pem == cert_pem && l.key_pem == key_pem {
                return Ok(l.config.clone());
            }
        }
        match server_config(&cert_pem, &key_pem, &self.cert, &self.key) {
            Ok(c) => {
                let config = Arc::new(c);
                let first = current.is_none();
                *current = Some(Loaded {
                    cert_pem,
                    key_pem,
                    config: config.clone(),
                });
                metrics.tls_reload();
                if first {
                    info!(cert = %self.cert.display(), "serving certificate loaded");
                } else {
                    info!(cert = %self.cert.display(), "serving certificate changed; reloaded");
                }
                Ok(config)
            }
            // Mid-rotation (a new cert next to the old key) or broken files.
            Err(e) => self.fallback(&current, e, metrics),
        }
    }

    fn fallback(
        &self,
        current: &Option<Loaded>,
        error: TlsError,
        metrics: &Metrics,
    ) -> Result<Arc<ServerConfig>, TlsError> {
        metrics.tls_error();
        match current {
            Some(l) => {
                warn!(%error, "cannot load the serving certificate; keeping the previous one");
                Ok(l.config.clone())
            }
            None => Err(error),
        }
    }
}

/// A connection idle or evicted gets this long to finish closing (an
/// HTTP/2 client that opened a stream as the GOAWAY left still gets its
/// answer).
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// At the cap, how long a new connection waits for the one closed for it.
const EVICT_WAIT: Duration = Duration::from_secs(1);
/// After SIGTERM, HTTP/1.1 connections stay open this long, answering with
/// `Connection: close`, before the idle ones are closed: a client that is
/// sending learns to stop from an answer instead of from a closed socket.
const DRAIN_LINGER: Duration = Duration::from_secs(1);
/// How often a busy connection looks again whether it has gone idle.
const IDLE_RECHECK: Duration = Duration::from_secs(1);

/// Serves `app` over TLS until `shutdown` resolves, then waits up to
/// [`DRAIN_TIMEOUT`] for the connections in flight. The limits are
/// `state.limits` (see [`crate::limits`]).
pub async fn serve(
    listener: TcpListener,
    certs: Arc<CertReloader>,
    state: Arc<crate::state::State>,
    app: Router,
    shutdown: impl Future<Output = ()>,
) {
    let limits = state.limits;
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let connections = Arc::new(Connections::default());
    let (drain_tx, drain_rx) = watch::channel(false);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
    let shared = Arc::new(Shared {
        certs,
        state,
        app,
        builder,
        limits,
    });
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(error) => {
                    // Out of file descriptors and the like: back off a little.
                    warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let metrics = &shared.state.metrics;
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                let evicted = connections.close_longest_idle();
                let waited = if evicted {
                    metrics.connection_evicted();
                    tokio::time::timeout(EVICT_WAIT, permits.clone().acquire_owned())
                        .await
                        .ok()
                        .and_then(Result::ok)
                } else {
                    None
                };
                match waited {
                    Some(p) => p,
                    None => {
                        metrics.connection_rejected();
                        debug!(%peer, "connection cap reached and no connection idle; refused");
                        drop(tcp);
                        continue;
                    }
                }
            }
        };
        let registration = connections.register();
        metrics.connection_opened();
        tokio::spawn(connection(
            shared.clone(),
            tcp,
            peer,
            registration,
            permit,
            drain_rx.clone(),
        ));
    }
    drop(listener);
    info!(open = connections.len(), "draining in-flight requests");
    let _ = drain_tx.send(true);
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    tokio::select! {
        _ = permits.acquire_many(all) => info!("drained"),
        _ = tokio::time::sleep(DRAIN_TIMEOUT) => warn!(
            open = connections.len(),
            "drain timed out; exiting with requests in flight"
        ),
    }
}

/// What every connection task needs.
struct Shared {
    certs: Arc<CertReloader>,
    state: Arc<crate::state::State>,
    app: Router,
    builder: auto::Builder<TokioExecutor>,
    limits: Limits,
}

/// Counts the connection as closed when its task ends, however it ends.
struct Open(Arc<crate::state::State>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.metrics.connection_closed();
    }
}

async fn connection(
    shared: Arc<Shared>,
    tcp: TcpStream,
    peer: SocketAddr,
    registration: Registration,
    _permit: OwnedSemaphorePermit,
    mut drain: watch::Receiver<bool>,
) {
    let _open = Open(shared.state.clone());
    let metrics = &shared.state.metrics;
    let limits = shared.limits;
    let config = match shared.certs.config(metrics).await {
        Ok(c) => c,
        Err(error) => {
            warn!(%error, %peer, "no usable serving certificate; connection dropped");
            return;
        }
    };
    let accept = tokio::time::timeout(
        limits.handshake_timeout,
        TlsAcceptor::from(config).accept(tcp),
    );
    // Until the handshake is done the connection is idle: the cap may
    // close it, and so does shutdown.
    let stream = tokio::select! {
        r = accept => match r {
            Ok(Ok(s)) => s,
            Ok(Err(error)) => {
                metrics.handshake_error();
                debug!(%error, %peer, "TLS handshake failed");
                return;
            }
            Err(_) => {
                metrics.timed_out(Timeout::Handshake);
                debug!(%peer, "TLS handshake timed out");
                return;
            }
        },
        _ = registration.close.notified() => {
            debug!(%peer, "closed while handshaking to make room under the connection cap");
            return;
        }
        _ = drain.wait_for(|d| *d) => return,
    };
    let http1 = stream.get_ref().1.alpn_protocol() != Some(b"h2");

    let activity = registration.activity.clone();
    let app = shared.app.clone();
    let draining = drain.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let in_flight = activity.begin();
        let answer = app.clone().oneshot(req);
        let close = http1 && *draining.borrow();
        async move {
            let mut res = answer.await?;
            if close {
                res.headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            drop(in_flight);
            Ok::<_, Infallible>(res)
        }
    });
    let conn = shared
        .builder
        .serve_connection_with_upgrades(TokioIo::new(stream), service);
    tokio::pin!(conn);

    let far = || Instant::now() + Duration::from_secs(86_400);
    // Set once the connection is asked to close: it gets until then.
    let mut closing: Option<Instant> = None;
    // After SIGTERM an HTTP/1.1 connection lingers until then.
    let mut linger: Option<Instant> = None;
    loop {
        let idle_check = match registration.activity.idle_since() {
            Some(since) => since + limits.idle_timeout,
            None => Instant::now() + IDLE_RECHECK.min(limits.idle_timeout),
        };
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(error) = r {
                    let header_timeout = error
                        .downcast_ref::<hyper::Error>()
                        .is_some_and(hyper::Error::is_timeout);
                    if header_timeout {
                        metrics.timed_out(Timeout::Header);
                        debug!(%peer, "request head not received in time; connection closed");
                    } else {
                        debug!(%error, %peer, "connection ended with an error");
                    }
                }
                return;
            }
            _ = tokio::time::sleep_until(idle_check.into()), if closing.is_none() && linger.is_none() => {
                let idle = registration.activity.idle_since();
                if idle.is_some_and(|t| t.elapsed() >= limits.idle_timeout) {
                    metrics.timed_out(Timeout::Idle);
                    debug!(%peer, "idle connection closed");
                    conn.as_mut().graceful_shutdown();
                    closing = Some(Instant::now() + CLOSE_GRACE);
                }
            }
            _ = registration.close.notified(), if closing.is_none() => {
                if registration.activity.idle_since().is_some() {
                    debug!(%peer, "idle connection closed to make room under the connection cap");
                    // Nothing in flight: nothing is lost by dropping it now,
                    // and its slot is free at once.
                    return;
                }
            }
            _ = drain.wait_for(|d| *d), if closing.is_none() && linger.is_none() => {
                if http1 {
                    linger = Some(Instant::now() + DRAIN_LINGER);
                } else {
                    conn.as_mut().graceful_shutdown();
                    closing = Some(Instant::now() + DRAIN_TIMEOUT);
                }
            }
            _ = tokio::time::sleep_until(linger.unwrap_or_else(far).into()), if closing.is_none() && linger.is_some() => {
                conn.as_mut().graceful_shutdown();
                closing = Some(Instant::now() + DRAIN_TIMEOUT);
            }
            _ = tokio::time::sleep_until(closing.unwrap_or_else(far).into()), if closing.is_some() => {
                debug!(%peer, "connection did not close in time; dropped");
                return;
            }
        }
    }
}
