//! What the soak's phases and tasks share.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::client::Tls;
use crate::mix::Kind;
use crate::records::Observed;
use crate::timeline::{FlipState, Plan};

/// The soak's state once the webhook is ready: the connections, the
/// bodies to send, the plan and the clock, and what the tasks learn.
pub struct Soak {
    pub tls: Arc<Tls>,
    /// Bodies with a `{uid}` placeholder each, by kind.
    pub bodies: BTreeMap<Kind, String>,
    pub plan: Arc<Plan>,
    pub flip: Arc<Mutex<FlipState>>,
    /// When SIGTERM was sent.
    pub sigterm_at: Arc<Mutex<Option<Instant>>>,
    /// The webhook has exited.
    pub exited: Arc<AtomicBool>,
    pub observed: Arc<Mutex<Observed>>,
    /// The webhook's process id.
    pub pid: u32,
    /// When the load began.
    pub start: Instant,
}
