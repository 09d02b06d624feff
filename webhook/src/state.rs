//! What the webhook knows about the cluster: watch caches of Namespaces,
//! Sidecars (all namespaces) and the mesh ConfigMap, folded into one
//! `Arc<MeshSnapshot>` that every request reads without locking for long.
//!
//! ```text
//!  watch(namespaces) ─┐
//!  watch(sidecars)   ─┼─► stores ──(dirty)──► rebuild ──► Arc<MeshSnapshot>
//!  watch(istio CM)   ─┘        each watch restarts every --resync-seconds
//! ```
//!
//! Until all three have listed once the webhook is not ready, and requests
//! are allowed unchecked (with a warning): the webhook must never be the
//! reason a cluster cannot deploy. A watch that keeps failing makes the
//! caches stale: decisions still come from them, with a warning, and
//! `/readyz` and `/metrics` say so.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::Store;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use meshscope_shared::admission::Config;
use meshscope_shared::istio::{Sidecar, NETWORKING_GROUP};
use meshscope_shared::snapshot::NamespaceInfo;
use meshscope_shared::{Inputs, MeshConfig, MeshSnapshot, Options};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::limits::Limits;
use crate::metrics::Metrics;

/// A watch that has kept failing this long makes the caches stale
/// (`--stale-after-seconds`).
pub const STALE_AFTER: Duration = Duration::from_secs(30);
/// A failing watch retries at least this often ([`RETRY_MAX`]), so an
/// error older than this means the watch recovered.
const ERROR_MEMORY: Duration = Duration::from_secs(70);
/// The first retry of a failed watch, doubled on each failure up to
/// [`RETRY_MAX`]: an API server that is back is seen within seconds.
const RETRY_MIN: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// Bursts of events (the initial lists) make one rebuild.
const DEBOUNCE: Duration = Duration::from_millis(20);
/// How long a request may wait for a namespace the caches do not know yet.
const NAMESPACE_LOOKUP_TIMEOUT: Duration = Duration::from_secs(1);

pub const WATCH_NAMESPACES: &str = "namespaces";
pub const WATCH_SIDECARS: &str = "sidecars";
pub const WATCH_MESH_CONFIG: &str = "meshconfig";
const WATCHES: [&str; 3] = [WATCH_NAMESPACES, WATCH_SIDECARS, WATCH_MESH_CONFIG];

/// The resource a watch lists, as the API server names it.
pub fn served_name(watch: &str) -> &'static str {
    match watch {
        WATCH_SIDECARS => "sidecars.networking.istio.io",
        WATCH_NAMESPACES => "namespaces",
        _ => "configmaps",
    }
}

/// Whether decisions can be trusted right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Freshness {
    Fresh,
    /// Not every cache has completed its first list.
    NotSynced,
    /// This watch has been failing for a while, or has not re-listed in time.
    Stale(&'static str),
    /// The API server answers this watch's list with 404: the resource is
    /// not served (Istio's CRDs deleted, or never installed). The caches
    /// describe a cluster that no longer exists, and no fix that writes
    /// the resource can work.
    NotServed(&'static str),
}

#[derive(Clone, Copy, Debug, Default)]
struct WatchHealth {
    /// The last completed (re-)list.
    listed: Option<Instant>,
    /// The first error of the current failure streak.
    failing_since: Option<Instant>,
    last_error: Option<Instant>,
    /// The last error was a 404 for the resource itself.
    not_served: bool,
}

/// Shared by the admission handlers, the admin server and the watches.
pub struct State {
    pub config: Config,
    pub metrics: Metrics,
    snapshot: RwLock<Arc<MeshSnapshot>>,
    watches: Mutex<BTreeMap<&'static str, WatchHealth>>,
    synced: AtomicBool,
    draining: AtomicBool,
    /// For namespaces created after the last sync; `None` in tests.
    client: Option<Client>,
    options: Options,
    /// Caches that have not re-listed within twice this are stale.
    resync: Duration,
    /// A watch failing for this long makes the caches stale.
    stale_after: Duration,
    /// The HTTPS server's limits (the body limit and read timeout are
    /// applied by the handlers).
    pub limits: Limits,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl State {
    /// Empty and not synced; `run_watches` fills it.
    pub fn new(config: Config, options: Options, client: Option<Client>, resync: Duration) -> Self {
        State {
            config,
            metrics: Metrics::default(),
            snapshot: RwLock::new(Arc::new(MeshSnapshot::build_with_mesh(
                &Inputs::default(),
                options.clone(),
                MeshConfig::default(),
            ))),
            watches: Mutex::new(BTreeMap::new()),
            synced: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            client,
            options,
            resync,
            stale_after: STALE_AFTER,
            limits: Limits::default(),
        }
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    pub fn with_stale_after(mut self, stale_after: Duration) -> Self {
        self.stale_after = stale_after;
        self
    }

    /// A synced state over a fixed snapshot (tests, and tools that have
    /// the objects already).
    pub fn with_snapshot(config: Config, snapshot: MeshSnapshot) -> Self {
        let s = State::new(
            config,
            snapshot.options.clone(),
            None,
            Duration::from_secs(300),
        );
        s.set_snapshot(snapshot);
        s.synced.store(true, Ordering::SeqCst);
        s
    }

    pub fn snapshot(&self) -> Arc<MeshSnapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_snapshot(&self, snap: MeshSnapshot) {
        self.metrics
            .cache_objects(WATCH_NAMESPACES, snap.namespaces.len());
        self.metrics
            .cache_objects(WATCH_SIDECARS, snap.sidecars.len());
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(snap);
    }

    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// Ready to take traffic: synced and not shutting down.
    pub fn is_ready(&self) -> bool {
        self.is_synced() && !self.draining.load(Ordering::SeqCst)
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn freshness(&self) -> Freshness {
        self.freshness_at(Instant::now())
    }

    fn freshness_at(&self, now: Instant) -> Freshness {
        if !self.is_synced() {
            return Freshness::NotSynced;
        }
        let late = self.resync * 2 + self.stale_after;
        let watches = lock(&self.watches);
        if let Some((name, _)) = watches
            .iter()
            .find(|(_, h)| h.not_served && h.failing_since.is_some())
        {
            return Freshness::NotServed(name);
        }
        for (name, h) in watches.iter() {
            let failing = h
                .failing_since
                .is_some_and(|t| now.saturating_duration_since(t) > self.stale_after)
                && h.last_error
                    .is_some_and(|t| now.saturating_duration_since(t) < ERROR_MEMORY);
            let overdue = h
                .listed
                .is_some_and(|t| now.saturating_duration_since(t) > late);
            if failing || overdue {
                return Freshness::Stale(name);
            }
        }
        Freshness::Fresh
    }

    /// Records a failed watch call (at `at`, normally now; `not_served`:
    /// the API server answered 404 for the resource).
    pub fn watch_failed(&self, watch: &'static str, at: Instant, not_served: bool) {
        let mut w = lock(&self.watches);
        let h = w.entry(watch).or_default();
        h.failing_since.get_or_insert(at);
        h.last_error = Some(at);
        h.not_served = not_served;
    }

    fn watch_ok(&self, watch: &'static str, listed: bool) {
        let mut w = lock(&self.watches);
        let h = w.entry(watch).or_default();
        h.failing_since = None;
        h.not_served = false;
        if listed {
            h.listed = Some(Instant::now());
        }
    }

    fn all_listed(&self) -> bool {
        let w = lock(&self.watches);
        WATCHES
            .iter()
            .all(|n| w.get(n).is_some_and(|h| h.listed.is_some()))
    }

    /// The labels of a namespace the caches do not know yet (created after
    /// the last event), straight from the API server.
    pub async fn lookup_namespace(&self, ns: &str) -> Option<NamespaceInfo> {
        let api: Api<Namespace> = Api::all(self.client.clone()?);
        match tokio::time::timeout(NAMESPACE_LOOKUP_TIMEOUT, api.get_opt(ns)).await {
            Ok(Ok(Some(n))) => Some(NamespaceInfo {
                labels: n.metadata.labels.unwrap_or_default(),
            }),
            Ok(Ok(None)) => None,
            Ok(Err(error)) => {
                warn!(%error, %ns, "namespace lookup failed; using the default policy");
                None
            }
            Err(_) => {
                warn!(%ns, "namespace lookup timed out; using the default policy");
                None
            }
        }
    }

    /// The render of `/metrics`.
    pub fn render_metrics(&self) -> String {
        let stale = matches!(self.freshness(), Freshness::Stale(_));
        self.metrics.render(self.is_synced(), stale)
    }
}

// === watches ===

/// The snapshot the decisions read, from the cached objects.
pub fn build_snapshot(
    namespaces: &[Arc<Namespace>],
    sidecars: &[Arc<DynamicObject>],
    config_maps: &[Arc<ConfigMap>],
    options: &Options,
) -> MeshSnapshot {
    let mut inputs = Inputs {
        namespaces: namespaces.iter().map(|n| (**n).clone()).collect(),
        mesh_config_maps: config_maps.iter().map(|c| (**c).clone()).collect(),
        ..Default::default()
    };
    for obj in sidecars {
        match serde_json::to_value(&**obj).and_then(serde_json::from_value::<Sidecar>) {
            Ok(sc) => inputs.sidecars.push(sc),
            Err(error) => {
                let name = obj.metadata.name.as_deref().unwrap_or_default();
                let ns = obj.metadata.namespace.as_deref().unwrap_or_default();
                warn!(%error, %ns, %name, "unreadable Sidecar left out");
            }
        }
    }
    match MeshSnapshot::build(&inputs, options.clone()) {
        Ok(s) => s,
        Err(error) => {
            warn!(%error, "invalid mesh config; using Istio's defaults");
            MeshSnapshot::build_with_mesh(&inputs, options.clone(), MeshConfig::default())
        }
    }
}

/// Runs the three watches and the rebuild loop until the process exits.
pub async fn run_watches(state: Arc<State>, client: Client, istio_namespace: String) {
    let dirty = Arc::new(Notify::new());
    let resync = state.resync;

    let ns_writer: Writer<Namespace> = Writer::new(());
    let ns_store = ns_writer.as_reader();
    let cm_writer: Writer<ConfigMap> = Writer::new(());
    let cm_store = cm_writer.as_reader();

    let ns_api: Api<Namespace> = Api::all(client.clone());
    tokio::spawn(watch(
        state.clone(),
        WATCH_NAMESPACES,
        ns_api,
        watcher::Config::default(),
        ns_writer,
        dirty.clone(),
        resync,
    ));
    let cm_api: Api<ConfigMap> = Api::namespaced(client.clone(), &istio_namespace);
    tokio::spawn(watch(
        state.clone(),
        WATCH_MESH_CONFIG,
        cm_api,
        watcher::Config::default().fields("metadata.name=istio"),
        cm_writer,
        dirty.clone(),
        resync,
    ));

    // Sidecars are a CRD: find the version the API server prefers.
    let ar = loop {
        match kube::discovery::group(&client, NETWORKING_GROUP).await {
            Ok(g) => match g.recommended_kind("Sidecar") {
                Some((ar, _)) => break ar,
                None => warn!(
                    "the API server does not serve {NETWORKING_GROUP} Sidecar; is Istio installed?"
                ),
            },
            Err(error) => warn!(%error, "cannot discover {NETWORKING_GROUP}; is Istio installed?"),
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    };
    info!(version = %ar.version, "watching Sidecars");
    let sc_writer: Writer<DynamicObject> = Writer::new(ar.clone());
    let sc_store = sc_writer.as_reader();
    let sc_api: Api<DynamicObject> = Api::all_with(client, &ar);
    tokio::spawn(watch(
        state.clone(),
        WATCH_SIDECARS,
        sc_api,
        watcher::Config::default(),
        sc_writer,
        dirty.clone(),
        resync,
    ));

    rebuild(state, dirty, ns_store, sc_store, cm_store).await;
}

async fn rebuild(
    state: Arc<State>,
    dirty: Arc<Notify>,
    namespaces: Store<Namespace>,
    sidecars: Store<DynamicObject>,
    config_maps: Store<ConfigMap>,
) {
    loop {
        dirty.notified().await;
        tokio::time::sleep(DEBOUNCE).await;
        if !state.all_listed() {
            continue;
        }
        let started = Instant::now();
        let snap = build_snapshot(
            &namespaces.state(),
            &sidecars.state(),
            &config_maps.state(),
            &state.options,
        );
        state
            .metrics
            .cache_objects(WATCH_MESH_CONFIG, config_maps.state().len());
        debug!(
            namespaces = snap.namespaces.len(),
            sidecars = snap.sidecars.len(),
            elapsed_us = started.elapsed().as_micros() as u64,
            "snapshot rebuilt"
        );
        state.set_snapshot(snap);
        if !state.synced.swap(true, Ordering::SeqCst) {
            info!("caches synced; ready");
        }
    }
}

/// One resource's watch, restarted every `resync` so that the cache is
/// re-listed from scratch (the store swaps in the new list at `InitDone`).
///
/// A failed call also restarts it, after a short backoff (doubling from
/// [`RETRY_MIN`] to [`RETRY_MAX`]): kube's watcher would resume the watch
/// from its resource version and, with nothing changed, never say that it
/// is back, so the caches would look stale long after the API server
/// returned. A fresh list says so, and catches up on everything missed.
async fn watch<K>(
    state: Arc<State>,
    name: &'static str,
    api: Api<K>,
    config: watcher::Config,
    mut writer: Writer<K>,
    dirty: Arc<Notify>,
    resync: Duration,
) where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    let mut retry = RETRY_MIN;
    loop {
        let stream = watcher::watcher(api.clone(), config.clone());
        let deadline = tokio::time::sleep(resync);
        tokio::pin!(deadline);
        let mut stream: std::pin::Pin<Box<dyn Stream<Item = _> + Send>> = Box::pin(stream);
        loop {
            tokio::select! {
                _ = &mut deadline => {
                    debug!(watch = name, "resync");
                    break;
                }
                ev = stream.next() => match ev {
                    Some(Ok(ev)) => {
                        // managedFields are never read and are often the
                        // largest part of an object: not kept in the caches.
                        let ev = ev.modify(|o| o.meta_mut().managed_fields = None);
                        writer.apply_watcher_event(&ev);
                        let listed = matches!(ev, Event::InitDone);
                        // Init comes before the list call is made: it says
                        // nothing about the API server being reachable.
                        if !matches!(ev, Event::Init) {
                            state.watch_ok(name, listed);
                        }
                        if listed {
                            retry = RETRY_MIN;
                        }
                        if listed || matches!(ev, Event::Apply(_) | Event::Delete(_)) {
                            dirty.notify_one();
                        }
                    }
                    Some(Err(error)) => {
                        warn!(watch = name, %error, retry_ms = retry.as_millis() as u64, "watch failed; re-listing");
                        state.watch_failed(name, Instant::now(), not_served(&error));
                        tokio::time::sleep(retry).await;
                        retry = (retry * 2).min(RETRY_MAX);
                        break;
                    }
                    None => break,
                }
            }
        }
    }
}

/// Whether a watch failed because the API server does not serve the
/// resource at all (404 on its list or watch).
fn not_served(e: &watcher::Error) -> bool {
    let api = match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => match e {
            kube::Error::Api(a) => Some(a.code),
            _ => None,
        },
        watcher::Error::WatchError(a) => Some(a.code),
        _ => None,
    };
    api == Some(404)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synced() -> State {
        let snap = MeshSnapshot::build_with_mesh(
            &Inputs::default(),
            Options::default(),
            MeshConfig::default(),
        );
        State::with_snapshot(Config::default(), snap)
    }

    #[test]
    fn a_new_state_is_not_synced_and_not_ready() {
        let s = State::new(
            Config::default(),
            Options::default(),
            None,
            Duration::from_secs(60),
        );
        assert_eq!(s.freshness(), Freshness::NotSynced);
        assert!(!s.is_ready());
    }

    #[test]
    fn a_watch_failing_for_long_makes_the_caches_stale_until_it_recovers() {
        let s = synced();
        let now = Instant::now();
        s.watch_failed(WATCH_SIDECARS, now, false);
        assert_eq!(
            s.freshness_at(now + Duration::from_secs(5)),
            Freshness::Fresh
        );
        s.watch_failed(WATCH_SIDECARS, now + Duration::from_secs(40), false);
        assert_eq!(
            s.freshness_at(now + Duration::from_secs(41)),
            Freshness::Stale(WATCH_SIDECARS)
        );
        // No error for a long time: the watch reconnected.
        assert_eq!(
            s.freshness_at(now + Duration::from_secs(200)),
            Freshness::Fresh
        );
        s.watch_ok(WATCH_SIDECARS, false);
        assert_eq!(
            s.freshness_at(now + Duration::from_secs(41)),
            Freshness::Fresh
        );
    }

    /// issue #35 item 19: a watch the API server answers 404 (the Sidecar
    /// CRD deleted) is said to be not served at once, not stale behind an
    /// unreachable API server, until it lists again.
    #[test]
    fn a_resource_no_longer_served_is_said_at_once() {
        let s = synced();
        let now = Instant::now();
        s.watch_failed(WATCH_SIDECARS, now, true);
        assert_eq!(s.freshness_at(now), Freshness::NotServed(WATCH_SIDECARS));
        s.watch_ok(WATCH_SIDECARS, true);
        assert_eq!(s.freshness_at(now), Freshness::Fresh);
    }

    #[test]
    fn a_cache_that_stops_relisting_is_stale() {
        let s = synced();
        s.watch_ok(WATCH_NAMESPACES, true);
        let later =
            Instant::now() + Duration::from_secs(300 * 2) + STALE_AFTER + Duration::from_secs(1);
        assert_eq!(s.freshness_at(later), Freshness::Stale(WATCH_NAMESPACES));
    }

    #[test]
    fn draining_makes_the_webhook_unready() {
        let s = synced();
        assert!(s.is_ready());
        s.start_draining();
        assert!(!s.is_ready());
    }
}
