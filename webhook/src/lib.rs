//! `meshscope-webhook`: an HTTPS admission server that warns on or rejects
//! unscoped Istio workloads and DNS ServiceEntries without `exportTo`, and
//! warns about conflicting or overly broad Sidecars.
//!
//! ```text
//!  kube-apiserver ──HTTPS──► tls::serve ──► router ──► admission::{validate,mutate}
//!                                                         │ meshscope_shared::admission::review
//!  kube-apiserver ◄─watch── state::run_watches ──► State (Arc<MeshSnapshot>)
//!  kubelet, Prometheus ──HTTP──► admin::router (/healthz, /readyz, /metrics)
//! ```
//!
//! Every decision is made by `meshscope_shared::admission`, with the same
//! functions `kubectl meshscope audit` uses.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod admin;
pub mod admission;
pub mod args;
pub mod limits;
pub mod metrics;
pub mod state;
pub mod tls;

use std::sync::Arc;

use anyhow::Context;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use meshscope_shared::Options;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::info;

pub use args::Args;
pub use state::State;

pub const VALIDATE_PATH: &str = "/validate";
pub const MUTATE_PATH: &str = "/mutate";

/// The admission routes; anything else is a 404 (and a wrong method a 405).
pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route(VALIDATE_PATH, post(admission::validate))
        .route(MUTATE_PATH, post(admission::mutate))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                Json(json!({"error": "not found: meshscope-webhook serves POST /validate and POST /mutate"})),
            )
        })
        .with_state(state)
}

/// Logs to stderr with the filter from `--log-level`.
pub fn init_tracing(filter: &str) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .with_context(|| format!("invalid --log-level {filter:?}"))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init()
        .map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}

/// Runs the webhook until SIGTERM or SIGINT, then drains and returns.
pub async fn serve(args: Args) -> anyhow::Result<()> {
    let resync = args.resync();
    let limits = args.limits();
    let Args {
        listen,
        admin_listen,
        tls_cert,
        tls_key,
        default_policy,
        mutate_serviceentry_exportto,
        log_level: _,
        inject_by_default,
        istio_namespace,
        resync_seconds: _,
        stale_after_seconds,
        max_connections: _,
        handshake_timeout_seconds: _,
        header_read_timeout_seconds: _,
        body_read_timeout_seconds: _,
        idle_timeout_seconds: _,
        max_body_bytes: _,
    } = args;

    let certs = Arc::new(tls::CertReloader::new(&tls_cert, &tls_key));
    let config = meshscope_shared::admission::Config {
        default_policy,
        mutate_service_entry_export_to: mutate_serviceentry_exportto,
    };
    let options = Options {
        inject_by_default,
        ..Options::default()
    };
    let client = kube::Client::try_default()
        .await
        .context("cannot configure the Kubernetes client (in-cluster or KUBECONFIG)")?;
    let state = Arc::new(
        State::new(config, options, Some(client.clone()), resync)
            .with_limits(limits)
            .with_stale_after(stale_after_seconds),
    );
    // Fail early on a missing or broken certificate; later changes are
    // picked up per connection.
    certs
        .config(&state.metrics)
        .await
        .context("cannot load the serving certificate")?;

    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let admin_listener = TcpListener::bind(admin_listen)
        .await
        .with_context(|| format!("cannot listen on {admin_listen}"))?;
    info!(
        listen = %listener.local_addr()?,
        admin = %admin_listener.local_addr()?,
        default_policy = %default_policy,
        mutate_serviceentry_exportto,
        max_connections = limits.max_connections,
        header_read_timeout_ms = limits.header_read_timeout.as_millis() as u64,
        body_read_timeout_ms = limits.body_read_timeout.as_millis() as u64,
        idle_timeout_ms = limits.idle_timeout.as_millis() as u64,
        max_body_bytes = limits.max_body_bytes,
        "meshscope-webhook starting"
    );

    tokio::spawn(state::run_watches(state.clone(), client, istio_namespace));

    let (stop_tx, stop_rx) = watch::channel(false);
    let signal_state = state.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        info!("shutdown signal received");
        signal_state.start_draining();
        let _ = stop_tx.send(true);
    });

    let admin = axum::serve(admin_listener, admin::router(state.clone()))
        .with_graceful_shutdown(stopped(stop_rx.clone()));
    let admin = tokio::spawn(async move { admin.await });
    tls::serve(
        listener,
        certs,
        state.clone(),
        router(state),
        stopped(stop_rx),
    )
    .await;
    admin
        .await
        .context("admin server task")?
        .context("admin server")?;
    info!("stopped");
    Ok(())
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the server");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
