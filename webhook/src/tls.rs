//! HTTPS for the admission server: rustls (ring, TLS 1.2 and 1.3 only)
//! over a plain accept loop, with the certificate re-read for every new
//! connection so that a renewed Secret (kubelet swaps the files
//! atomically, cert-manager renews them) is picked up without a restart.
//!
//! Re-reading two small files per connection costs next to nothing at
//! admission rates (the API server keeps its connections open), and a
//! broken pair on disk never replaces the last good one.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;

/// A TLS handshake that takes longer than this is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
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

/// Serves `app` over TLS until `shutdown` resolves, then waits up to
/// [`DRAIN_TIMEOUT`] for the connections in flight.
pub async fn serve(
    listener: TcpListener,
    certs: Arc<CertReloader>,
    state: Arc<crate::state::State>,
    app: Router,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
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
        let certs = certs.clone();
        let state = state.clone();
        let app = app.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let config = match certs.config(&state.metrics).await {
                Ok(c) => c,
                Err(error) => {
                    warn!(%error, %peer, "no usable serving certificate; connection dropped");
                    return;
                }
            };
            let accept = TlsAcceptor::from(config).accept(tcp);
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, accept).await {
                Ok(Ok(s)) => s,
                Ok(Err(error)) => {
                    debug!(%error, %peer, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let service = TowerToHyperService::new(app);
            let conn = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            if let Err(error) = watcher.watch(conn).await {
                debug!(%error, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    info!("draining in-flight requests");
    tokio::select! {
        _ = graceful.shutdown() => info!("drained"),
        _ = tokio::time::sleep(DRAIN_TIMEOUT) => warn!("drain timed out; exiting with requests in flight"),
    }
}
