//! `meshscope-bench-baseline-webhook`: the baseline of the webhook
//! benchmark (tests/bench/webhook). Bench code, not product code.
//!
//! The same stack as `meshscope-webhook` (tokio multi-thread runtime,
//! rustls with ring, TLS 1.3 and 1.2, ALPN h2 and http/1.1, hyper-util's
//! auto connection builder, an axum router) with the same certificate, but
//! the handler only reads the body and answers a fixed, allowed
//! AdmissionReview: no JSON parsing, no policy, no metrics, no logging.
//! What the webhook costs on top of this is what the benchmark reports.
//!
//!   meshscope-bench-baseline-webhook --listen 127.0.0.1:PORT --tls-cert CRT --tls-key KEY

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use axum::body::{to_bytes, Body};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// What every request gets (the shape kube-apiserver expects).
const RESPONSE: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"7d1c2e0a-1b4f-4a43-9c1e-0e6f5a2b9c01","allowed":true,"status":{"metadata":{},"code":200}}}"#;

/// As the webhook's `MAX_BODY_BYTES`.
const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

struct Args {
    listen: SocketAddr,
    cert: PathBuf,
    key: PathBuf,
}

fn parse_args() -> Result<Args> {
    let mut listen = None;
    let mut cert = None;
    let mut key = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => listen = Some(value()?.parse().context("--listen")?),
            "--tls-cert" => cert = Some(PathBuf::from(value()?)),
            "--tls-key" => key = Some(PathBuf::from(value()?)),
            _ => bail!(
                "usage: meshscope-bench-baseline-webhook --listen ADDR --tls-cert CRT --tls-key KEY"
            ),
        }
    }
    Ok(Args {
        listen: listen.context("--listen is required")?,
        cert: cert.context("--tls-cert is required")?,
        key: key.context("--tls-key is required")?,
    })
}

/// The webhook's `tls::server_config`, minus the error types.
fn server_config(args: &Args) -> Result<ServerConfig> {
    let cert_pem = std::fs::read(&args.cert).with_context(|| args.cert.display().to_string())?;
    let key_pem = std::fs::read(&args.key).with_context(|| args.key.display().to_string())?;
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&cert_pem).collect::<Result<_, _>>()?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

async fn admit(body: Body) -> Response {
    match to_bytes(body, MAX_BODY_BYTES).await {
        Ok(_) => ([(header::CONTENT_TYPE, "application/json")], RESPONSE).into_response(),
        Err(_) => StatusCode::BAD_REQUEST.into_response(),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // One line, `error: ...`, exit 2, as every binary of the project says
    // an error.
    match serve(parse_args()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn serve(args: Result<Args>) -> Result<()> {
    let args = args?;
    let acceptor = TlsAcceptor::from(Arc::new(server_config(&args)?));
    let app = Router::new()
        .route("/validate", post(admit))
        .route("/mutate", post(admit));
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    eprintln!("baseline webhook listening on {}", listener.local_addr()?);
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                eprintln!("accept failed: {e}");
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = TowerToHyperService::new(app);
            let _ = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .await;
        });
    }
}
