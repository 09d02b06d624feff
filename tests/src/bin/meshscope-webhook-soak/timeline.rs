//! The soak's timeline: its phases, when things happen, and the policy of
//! the flip namespace as the soak changed it.

use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Steady,
    ApiOutage,
    PolicyFlip,
    Steady2,
    Sigterm,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Steady => "steady + cert rotation",
            Phase::ApiOutage => "API server killed, restarted",
            Phase::PolicyFlip => "policy flip warn/enforce/warn",
            Phase::Steady2 => "steady again",
            Phase::Sigterm => "SIGTERM under load",
        }
    }
}

/// Seconds into the load at which things happen (scaled to --duration).
pub struct Plan {
    pub kill: f64,
    pub restart: f64,
    pub flip_phase: f64,
    pub flips: [f64; 2],
    pub steady2: f64,
    pub end: f64,
}

impl Plan {
    pub fn new(duration: f64) -> Plan {
        let s = duration / 60.0;
        Plan {
            kill: 15.0 * s,
            restart: 25.0 * s,
            flip_phase: 35.0 * s,
            flips: [38.0 * s, 45.0 * s],
            steady2: 52.0 * s,
            end: duration,
        }
    }

    pub fn phase(&self, t: f64, sigterm: bool) -> Phase {
        if sigterm {
            Phase::Sigterm
        } else if t < self.kill {
            Phase::Steady
        } else if t < self.flip_phase {
            Phase::ApiOutage
        } else if t < self.steady2 {
            Phase::PolicyFlip
        } else {
            Phase::Steady2
        }
    }
}

/// What the policy of the flip namespace is, as the soak changed it.
#[derive(Default)]
pub struct FlipState {
    /// (started, done, now enforce) of each label change.
    pub changes: Vec<(Instant, Instant, bool)>,
}

impl FlipState {
    /// The expected flip policy for a request sent at `t`, and the other
    /// one if `t` is within a change or the second after it.
    pub fn at(&self, t: Instant) -> (bool, Option<bool>) {
        let mut enforce = false;
        for &(start, done, to) in &self.changes {
            if t < start {
                break;
            }
            if t < done + Duration::from_secs(1) {
                return (to, Some(enforce));
            }
            enforce = to;
        }
        (enforce, None)
    }
}
