//! The plain-HTTP admin server: probes and metrics, on their own port so
//! the kubelet and Prometheus need no certificates.

use std::borrow::Cow;
use std::sync::Arc;

use axum::extract::State as Extract;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::state::{Freshness, State};

/// `text/plain; version=0.0.4; charset=utf-8`: the format
/// [`Metrics::render`](crate::metrics::Metrics::render) writes.
pub const PROMETHEUS_CONTENT_TYPE: &str =
    prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

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
/// Stale caches keep it ready (decisions still come from them: an unready
/// webhook would only be skipped, through `failurePolicy: Ignore`) and say
/// so in the body; `meshscope_webhook_cache_stale` is the signal to alert
/// on.
async fn readyz(Extract(state): Extract<Arc<State>>) -> impl IntoResponse {
    if state.is_ready() {
        match state.freshness() {
            Freshness::Stale(watch) => (
                StatusCode::OK,
                Cow::Owned(format!(
                    "ok, but stale: the {watch} watch is failing; decisions come from the last state it saw\n"
                )),
            ),
            Freshness::NotServed(watch) => (
                StatusCode::OK,
                Cow::Owned(format!(
                    "ok, but the API server does not serve {}: everything is allowed without checks\n",
                    crate::state::served_name(watch)
                )),
            ),
            _ => (StatusCode::OK, Cow::Borrowed("ok\n")),
        }
    } else if state.is_synced() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Cow::Borrowed("shutting down\n"),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Cow::Borrowed("caches not synced\n"),
        )
    }
}

async fn metrics(Extract(state): Extract<Arc<State>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)],
        state.render_metrics(),
    )
}
