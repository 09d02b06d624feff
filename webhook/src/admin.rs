//! The plain-HTTP admin server: probes and metrics, on their own port so
//! the kubelet and Prometheus need no certificates.

use std::sync::Arc;

use axum::extract::State as Extract;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::state::State;

pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `/healthz`, `/readyz` and `/metrics`.
pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(state)
}

/// Alive as long as the process answers.
async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready once every cache has completed its first list, until shutdown.
async fn readyz(Extract(state): Extract<Arc<State>>) -> impl IntoResponse {
    if state.is_ready() {
        (StatusCode::OK, "ok\n")
    } else if state.is_synced() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced\n")
    }
}

async fn metrics(Extract(state): Extract<Arc<State>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)],
        state.render_metrics(),
    )
}
