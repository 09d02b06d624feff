//! The simulator ([`Sim`]): many proxies' ADS streams over a few HTTP/2
//! connections on a tokio runtime of its own, each stream a task that
//! feeds the proxy's [`XdsState`] and sends what it answers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use tokio::sync::{mpsc, Semaphore};
use tonic::transport::{Channel, Endpoint};

use super::node::ProxySpec;
use super::proxy::{lock, Conn, Held, Proxy, ProxyShared};
use super::snapshot::ProxyConfig;
use super::state::XdsState;

/// Connection options for [`Sim::connect_with`].
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// At most this many proxies open their stream and wait for their
    /// first response at the same time.
    pub concurrency: usize,
    /// Streams per HTTP/2 connection.
    pub proxies_per_channel: usize,
    /// The gRPC decode limit for one response.
    pub max_decoding_message_size: usize,
    pub connect_timeout: Duration,
    /// Tokio worker threads.
    pub worker_threads: usize,
    /// Open at most this many streams per second (0: no limit). istiod
    /// admits `PILOT_MAX_REQUESTS_PER_SECOND` new streams per second (25 on
    /// 2 cores) and refuses the rest after 1 s; refused openings are retried.
    pub connect_rate: f64,
    /// Tries to open a stream that istiod refuses with `ResourceExhausted`
    /// or `Unavailable`, before giving up and recording the error.
    pub open_attempts: u32,
    /// Track dangling references ([`XdsState::track_references`]). Off by
    /// default: it decodes every RDS resource, which benchmarks do not
    /// need.
    pub references: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            concurrency: 64,
            proxies_per_channel: 100,
            max_decoding_message_size: 256 << 20,
            connect_timeout: Duration::from_secs(10),
            worker_threads: 2,
            connect_rate: 0.0,
            open_attempts: 200,
            references: false,
        }
    }
}

/// Many simulated proxies connected to one istiod. Dropping it closes the
/// streams (istiod then forgets the proxies).
pub struct Sim {
    rt: Option<tokio::runtime::Runtime>,
    proxies: Vec<Proxy>,
    by_key: BTreeMap<String, usize>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("proxies", &self.proxies.len())
            .finish()
    }
}

/// `http://` is added to an address without a scheme.
fn endpoint_uri(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

impl Sim {
    /// Connect `specs` to istiod's plaintext gRPC address (`--grpcAddr`,
    /// e.g. `127.0.0.1:15010` or `http://127.0.0.1:15010`), with at most
    /// `concurrency` proxies starting at once. Returns when the HTTP/2
    /// connections are up and the streams are being opened; fails if a
    /// connection cannot be made. Stream errors are recorded per proxy.
    pub fn connect_many(addr: &str, specs: Vec<ProxySpec>, concurrency: usize) -> Result<Sim> {
        Sim::connect_with(
            addr,
            specs,
            SimOptions {
                concurrency,
                ..SimOptions::default()
            },
        )
    }

    /// [`connect_with`](Self::connect_with), then until the config settles
    /// (1.5 s without a push, 90 s at most): how a test with simulated
    /// sidecars starts. Panics, naming the step, when either fails.
    pub fn connect_settled(addr: &str, specs: Vec<ProxySpec>, opts: SimOptions) -> Sim {
        let sim = Sim::connect_with(addr, specs, opts).expect("sidecars connect");
        sim.wait_stable(Duration::from_millis(1500), Duration::from_secs(90))
            .expect("config settles");
        sim
    }

    /// [`connect_settled`](Self::connect_settled) with `concurrency` and
    /// the other options' defaults.
    pub fn connect_many_settled(addr: &str, specs: Vec<ProxySpec>, concurrency: usize) -> Sim {
        let opts = SimOptions {
            concurrency,
            ..SimOptions::default()
        };
        Sim::connect_settled(addr, specs, opts)
    }

    /// One proxy.
    pub fn connect(addr: &str, spec: ProxySpec) -> Result<Sim> {
        Sim::connect_many(addr, vec![spec], 1)
    }

    pub fn connect_with(addr: &str, specs: Vec<ProxySpec>, opts: SimOptions) -> Result<Sim> {
        let mut by_key = BTreeMap::new();
        for (i, s) in specs.iter().enumerate() {
            if by_key.insert(s.key(), i).is_some() {
                bail!("proxy {} is listed twice", s.key());
            }
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(opts.worker_threads.max(1))
            .thread_name("xds-sim")
            .enable_all()
            .build()
            .context("starting the tokio runtime")?;
        let uri = endpoint_uri(addr);
        let per = opts.proxies_per_channel.max(1);
        let channels = specs.len().div_ceil(per).max(1);
        let endpoint = Endpoint::from_shared(uri.clone())
            .with_context(|| format!("bad istiod address {addr:?}"))?
            .connect_timeout(opts.connect_timeout)
            .tcp_nodelay(true)
            .initial_stream_window_size(Some(4 << 20))
            .initial_connection_window_size(Some(32 << 20));
        let chans: Vec<Channel> = rt.block_on(async {
            let mut v = Vec::with_capacity(channels);
            for _ in 0..channels {
                let ch = endpoint
                    .connect()
                    .await
                    .with_context(|| format!("connecting to istiod at {uri}"))?;
                v.push(ch);
            }
            Ok::<_, anyhow::Error>(v)
        })?;
        let sem = Arc::new(Semaphore::new(opts.concurrency.max(1)));
        let stop = Arc::new(AtomicBool::new(false));
        let run_opts = Arc::new(RunOpts {
            max_decoding: opts.max_decoding_message_size,
            open_attempts: opts.open_attempts.max(1),
            pacer: Pacer::new(opts.connect_rate),
            references: opts.references,
        });
        let mut proxies = Vec::with_capacity(specs.len());
        for (i, spec) in specs.into_iter().enumerate() {
            let p = Proxy {
                inner: Arc::new(ProxyShared {
                    key: spec.key(),
                    state: Mutex::new(new_state(&spec, opts.references)),
                    spec,
                    conn: Mutex::new(Conn::default()),
                    held: Mutex::new(Held::default()),
                }),
            };
            rt.spawn(run_proxy(
                chans[i / per].clone(),
                run_opts.clone(),
                p.clone(),
                sem.clone(),
                stop.clone(),
            ));
            proxies.push(p);
        }
        Ok(Sim {
            rt: Some(rt),
            proxies,
            by_key,
            stop,
        })
    }

    pub fn proxies(&self) -> &[Proxy] {
        &self.proxies
    }

    /// The proxy `ns/name`.
    pub fn get(&self, key: &str) -> Option<&Proxy> {
        self.by_key.get(key).map(|i| &self.proxies[*i])
    }

    pub fn len(&self) -> usize {
        self.proxies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.proxies.is_empty()
    }

    pub fn snapshots(&self) -> Vec<ProxyConfig> {
        self.proxies.iter().map(Proxy::snapshot).collect()
    }

    /// When any proxy last received a response.
    pub fn last_received(&self) -> Option<Instant> {
        self.proxies.iter().filter_map(Proxy::last_received).max()
    }

    /// After a change made at `t0`: wait until some proxy has received a
    /// push since then, then until the config is stable again
    /// ([`wait_stable`](Self::wait_stable)). Without the first wait, a
    /// change istiod has not pushed yet looks stable.
    pub fn wait_push_after(
        &self,
        t0: Instant,
        quiet: Duration,
        timeout: Duration,
    ) -> Result<Instant> {
        let deadline = Instant::now() + timeout;
        while self.last_received().is_none_or(|t| t < t0) {
            if Instant::now() > deadline {
                bail!("no push within {timeout:?} of the change");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.wait_stable(quiet, deadline.saturating_duration_since(Instant::now()))
    }

    /// Wait until no proxy has received anything for `quiet`, and every
    /// proxy has CDS and LDS and the EDS and RDS it subscribed to. Returns
    /// the time of the last response received. Fails after `timeout`, or
    /// as soon as a proxy's stream has ended.
    pub fn wait_stable(&self, quiet: Duration, timeout: Duration) -> Result<Instant> {
        let start = Instant::now();
        let tick = (quiet / 4).clamp(Duration::from_millis(2), Duration::from_millis(25));
        loop {
            if let Some(p) = self.proxies.iter().find(|p| lock(&p.inner.conn).ended) {
                bail!(
                    "proxy {}: xDS stream ended: {}",
                    p.key(),
                    lock(&p.inner.conn).errors.join("; ")
                );
            }
            let ready = self.proxies.iter().all(Proxy::ready);
            let last = self.last_received();
            if let (true, Some(last)) = (ready, last) {
                if last.elapsed() >= quiet {
                    return Ok(last);
                }
            }
            if start.elapsed() >= timeout {
                let waiting: Vec<String> = self
                    .proxies
                    .iter()
                    .filter(|p| !p.ready())
                    .take(5)
                    .map(|p| {
                        let st = lock(&p.inner.state);
                        format!("{} waits for {}", p.key(), st.waiting_for().join(", "))
                    })
                    .collect();
                let not_ready = self.proxies.iter().filter(|p| !p.ready()).count();
                if not_ready == 0 {
                    bail!(
                        "xDS config not stable after {timeout:?}: pushes still arriving (last {:?} ago)",
                        last.map(|l| l.elapsed())
                    );
                }
                bail!(
                    "xDS config not complete after {timeout:?}: {not_ready} of {} proxies not ready ({})",
                    self.proxies.len(),
                    waiting.join("; ")
                );
            }
            std::thread::sleep(tick);
        }
    }

    /// Close every stream and stop the runtime (waits up to 2 s).
    pub fn close(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Spaces out stream openings: at most `rate` per second.
struct Pacer {
    interval: Duration,
    next: tokio::sync::Mutex<tokio::time::Instant>,
}

impl Pacer {
    fn new(rate: f64) -> Option<Arc<Pacer>> {
        (rate > 0.0 && rate.is_finite()).then(|| {
            Arc::new(Pacer {
                interval: Duration::from_secs_f64(1.0 / rate),
                next: tokio::sync::Mutex::new(tokio::time::Instant::now()),
            })
        })
    }

    async fn wait(&self) {
        let slot = {
            let mut next = self.next.lock().await;
            let slot = (*next).max(tokio::time::Instant::now());
            *next = slot + self.interval;
            slot
        };
        tokio::time::sleep_until(slot).await;
    }
}

/// A status on opening the stream that is worth another try: istiod's
/// connection rate limit (`PILOT_MAX_REQUESTS_PER_SECOND`, by default
/// 15 + 5 × cores per second with a 1 s wait, then `ResourceExhausted`), or
/// istiod not ready yet.
fn retryable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::ResourceExhausted | tonic::Code::Unavailable
    )
}

/// A small per-proxy jitter (0..=`max_ms` ms) without a random source.
fn jitter(key: &str, attempt: u32, max_ms: u64) -> Duration {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ u64::from(attempt);
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    Duration::from_millis(h % (max_ms + 1))
}

struct RunOpts {
    max_decoding: usize,
    open_attempts: u32,
    pacer: Option<Arc<Pacer>>,
    references: bool,
}

fn new_state(spec: &ProxySpec, references: bool) -> XdsState {
    let mut st = XdsState::new(spec.node());
    if references {
        st.track_references();
    }
    st
}

async fn run_proxy(
    channel: Channel,
    opts: Arc<RunOpts>,
    proxy: Proxy,
    sem: Arc<Semaphore>,
    stop: Arc<AtomicBool>,
) {
    let mut permit = match sem.acquire_owned().await {
        Ok(p) => Some(p),
        Err(_) => return,
    };
    let mut client =
        AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(opts.max_decoding);
    let mut attempt = 0u32;
    let (tx, mut inbound) = loop {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        if let Some(p) = &opts.pacer {
            p.wait().await;
        }
        attempt += 1;
        lock(&proxy.inner.conn).open_attempts = attempt;
        let (tx, rx) = mpsc::unbounded_channel::<DiscoveryRequest>();
        // Queue the first requests before opening the stream: istiod sends
        // the response headers only with its first response. A retry starts
        // from a fresh state (nothing was received), node included.
        {
            let mut st = lock(&proxy.inner.state);
            if attempt > 1 {
                *st = new_state(&proxy.inner.spec, opts.references);
            }
            for r in st.initial_requests() {
                let _ = tx.send(r);
            }
        }
        let requests =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
        match client.stream_aggregated_resources(requests).await {
            Ok(r) => break (tx, r.into_inner()),
            Err(status) if retryable(&status) && attempt < opts.open_attempts => {
                let backoff = Duration::from_millis(100 * u64::from(attempt.min(10)));
                tokio::time::sleep(backoff + jitter(&proxy.inner.key, attempt, 250)).await;
            }
            Err(status) => {
                proxy.record_error(format!(
                    "opening the ADS stream (attempt {attempt}): {status}"
                ));
                return;
            }
        }
    };
    lock(&proxy.inner.conn).connected = true;
    lock(&proxy.inner.held).tx = Some(tx.clone());
    loop {
        match inbound.message().await {
            Ok(Some(resp)) => {
                let now = Instant::now();
                let reqs = lock(&proxy.inner.state).on_response(&resp, now);
                drop(resp);
                {
                    let mut held = lock(&proxy.inner.held);
                    if held.on {
                        held.queue.extend(reqs);
                        permit.take();
                        continue;
                    }
                }
                for r in reqs {
                    if tx.send(r).is_err() {
                        proxy.record_error("the request stream closed".into());
                        return;
                    }
                }
                lock(&proxy.inner.state).mark_acked(Instant::now());
                // The first response lets the next proxy start.
                permit.take();
            }
            Ok(None) => {
                proxy.record_error("istiod closed the ADS stream".into());
                return;
            }
            Err(status) => {
                proxy.record_error(format!("ADS stream error: {status}"));
                return;
            }
        }
    }
}
