//! What the soak records of each request, and what it observed of the
//! webhook while its API server was down.

use std::time::{Duration, Instant};

use crate::mix::{Kind, Verdict};
use crate::timeline::Phase;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Answered {
        status: u16,
        verdict: Verdict,
    },
    /// Never reached the server: no connection could be made, or the
    /// server refused the stream before processing it (HTTP/2 GOAWAY).
    Refused,
    /// Sent, and the connection failed before an answer.
    Reset,
}

pub struct Record {
    pub phase: Phase,
    pub kind: Kind,
    pub sent: Instant,
    pub latency: Duration,
    pub outcome: Outcome,
    pub after_sigterm: bool,
    /// For answered reviews: whether the request was denied.
    pub denied: Option<bool>,
}

#[derive(Default, Clone, serde::Serialize)]
pub struct PhaseStats {
    pub sent: u64,
    pub answered: u64,
    pub expected_denials: u64,
    pub bad_requests_400: u64,
    pub unexpected_non_2xx: u64,
    pub wrong: u64,
    pub unchecked: u64,
    pub from_stale: u64,
    pub refused: u64,
    pub resets: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Default, serde::Serialize)]
pub struct Observed {
    pub stale_seen_after_kill_s: Option<f64>,
    pub readyz_stale_body: Option<String>,
    pub metrics_stale_gauge_seen: bool,
    pub fresh_again_after_restart_s: Option<f64>,
    pub apiserver_ready_after_restart_s: Option<f64>,
    pub readyz_non_200_during_outage: u64,
}
