//! One simulated proxy of a [`Sim`](super::Sim) ([`Proxy`]): what its
//! stream task shares with the tests, behind locks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use tokio::sync::mpsc;

use super::node::ProxySpec;
use super::refs::{DanglingRef, Episode};
use super::resources::ClusterType;
use super::snapshot::ProxyConfig;
use super::state::{ClusterChange, Push, XdsState};

#[derive(Debug, Default)]
pub(super) struct Conn {
    /// The stream is open (its response headers arrived).
    pub(super) connected: bool,
    /// The stream has ended (an error or closed by istiod).
    pub(super) ended: bool,
    pub(super) errors: Vec<String>,
    pub(super) open_attempts: u32,
}

pub(super) struct ProxyShared {
    pub(super) spec: ProxySpec,
    pub(super) key: String,
    pub(super) state: Mutex<XdsState>,
    pub(super) conn: Mutex<Conn>,
    pub(super) held: Mutex<Held>,
}

/// ACKs held back (see [`Proxy::hold_acks`]).
#[derive(Default)]
pub(super) struct Held {
    pub(super) on: bool,
    pub(super) queue: Vec<DiscoveryRequest>,
    pub(super) tx: Option<mpsc::UnboundedSender<DiscoveryRequest>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Is a stream open or ended, and what went wrong.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnStatus {
    pub connected: bool,
    pub ended: bool,
    pub errors: Vec<String>,
    /// How many times the stream was opened (retries on istiod's rate
    /// limit included).
    pub open_attempts: u32,
}

/// One simulated proxy of a [`Sim`](super::Sim). Cheap to clone.
#[derive(Clone)]
pub struct Proxy {
    pub(super) inner: Arc<ProxyShared>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("proxy", &self.inner.key)
            .finish()
    }
}

impl Proxy {
    pub fn spec(&self) -> &ProxySpec {
        &self.inner.spec
    }

    /// From now on the proxy does not answer pushes (no ACK, no new
    /// subscription), as an Envoy that is busy or stuck: istiod's sent and
    /// ACKed nonces then differ.
    pub fn hold_acks(&self) {
        lock(&self.inner.held).on = true;
    }

    /// Sends every held answer, in order, and answers pushes again.
    pub fn release_acks(&self) {
        let mut held = lock(&self.inner.held);
        held.on = false;
        let queue = std::mem::take(&mut held.queue);
        if let Some(tx) = &held.tx {
            for r in queue {
                let _ = tx.send(r);
            }
        }
        drop(held);
        lock(&self.inner.state).mark_acked(Instant::now());
    }

    /// `ns/name`.
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    pub fn snapshot(&self) -> ProxyConfig {
        ProxyConfig::from_state(&self.inner.key, &lock(&self.inner.state))
    }

    /// Responses received at or after `t`, oldest first.
    pub fn pushes_since(&self, t: Instant) -> Vec<Push> {
        let st = lock(&self.inner.state);
        let from = st.pushes.partition_point(|p| p.at < t);
        st.pushes[from..].to_vec()
    }

    /// Every response received, oldest first.
    pub fn pushes(&self) -> Vec<Push> {
        lock(&self.inner.state).pushes.clone()
    }

    /// Every dangling reference found after a push (a listener or route
    /// naming a cluster the proxy's CDS did not hold), one per push it was
    /// found after; empty unless the [`Sim`](super::Sim) was made with
    /// [`SimOptions::references`](super::SimOptions::references).
    pub fn dangling(&self) -> Vec<DanglingRef> {
        let st = lock(&self.inner.state);
        let mut out = st.dangling().to_vec();
        for d in &mut out {
            d.proxy = self.inner.key.clone();
        }
        out
    }

    /// The dangling references from the push that made each to the push
    /// that ended it
    /// ([`refs::Episode::cause`](super::refs::Episode::cause) says why).
    pub fn dangling_episodes(&self) -> Vec<Episode> {
        lock(&self.inner.state).references().episodes().to_vec()
    }

    /// `lds/<listener>` and `rds/<route config>` → the clusters each names,
    /// now.
    pub fn referenced_clusters(&self) -> BTreeMap<String, BTreeSet<String>> {
        lock(&self.inner.state).references().referenced()
    }

    /// Per resource, cluster-like names in its bytes that the decoder does
    /// not read as references (a field [`refs`](super::refs) does not know).
    pub fn undecoded_mentions(&self) -> BTreeMap<String, BTreeSet<String>> {
        lock(&self.inner.state).references().undecoded().clone()
    }

    /// The CDS pushes that added or removed clusters, oldest first, with
    /// their ACKs; empty unless the [`Sim`](super::Sim) was made with
    /// [`SimOptions::references`](super::SimOptions::references).
    pub fn cluster_changes(&self) -> Vec<ClusterChange> {
        lock(&self.inner.state).cluster_changes()
    }

    /// How many pushes were checked for dangling references.
    pub fn pushes_checked(&self) -> u64 {
        lock(&self.inner.state).references().checked()
    }

    /// The current CDS cluster names, sorted.
    pub fn cluster_names(&self) -> Vec<String> {
        lock(&self.inner.state).types["cds"]
            .resources
            .keys()
            .cloned()
            .collect()
    }

    /// Cluster name → discovery type (EDS, STRICT_DNS, ORIGINAL_DST, ...).
    pub fn cluster_types(&self) -> BTreeMap<String, ClusterType> {
        lock(&self.inner.state).cluster_types.clone()
    }

    /// The current EDS (`"eds"`) or RDS (`"rds"`) subscription.
    pub fn subscribed(&self, ty: &str) -> BTreeSet<String> {
        lock(&self.inner.state)
            .subscribed(ty)
            .cloned()
            .unwrap_or_default()
    }

    pub fn ready(&self) -> bool {
        lock(&self.inner.state).ready()
    }

    pub fn status(&self) -> ConnStatus {
        let c = lock(&self.inner.conn);
        let mut errors = c.errors.clone();
        errors.extend(lock(&self.inner.state).decode_errors.iter().cloned());
        ConnStatus {
            connected: c.connected,
            ended: c.ended,
            errors,
            open_attempts: c.open_attempts,
        }
    }

    pub fn is_connected(&self) -> bool {
        lock(&self.inner.conn).connected
    }

    /// Stream errors and resource decode errors, oldest first.
    pub fn errors(&self) -> Vec<String> {
        self.status().errors
    }

    /// When this proxy last received a response.
    pub fn last_received(&self) -> Option<Instant> {
        lock(&self.inner.state).last_rx()
    }

    pub(super) fn record_error(&self, e: String) {
        let mut c = lock(&self.inner.conn);
        c.errors.push(e);
        c.connected = false;
        c.ended = true;
    }
}
