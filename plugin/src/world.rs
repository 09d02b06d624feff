//! The world: the `shared` inputs of one command (the snapshot and the
//! observed traffic), built from files or from a cluster, as a
//! [`MeshRequest`] asks. The one module that builds them.

/// Every finding in a loaded world ([`World::findings`]).
mod audit;
/// The observe loop over the traffic sources.
mod observe;
/// Recommending in a loaded world ([`World::recommend`]).
mod recommend;

use std::collections::BTreeSet;
use std::io::Write;

use anyhow::{anyhow, bail, Context, Result};
use meshscope_shared as scope;
use scope::detect::{DomainSource, TrafficDomain};
use scope::observe::Observations;
use scope::snapshot::{WorkloadId, WorkloadKind};
use scope::{MeshSnapshot, Options};

use crate::input;
use crate::live;
use crate::output::Printer;
use crate::request::{GatewayRead, MeshRequest, PodLogScope};
use crate::selector::Selector;

/// The mesh and the traffic, loaded once per command.
pub struct World {
    pub snap: MeshSnapshot,
    pub obs: Option<Observations>,
    /// `None` means every namespace.
    pub namespaces: Option<BTreeSet<String>>,
    pub selector: Option<Selector>,
    /// The cluster connection, in live mode (shared with the next pass's
    /// world in watch mode).
    pub live: Option<std::sync::Arc<LiveCtx>>,
    /// What the workloads' manifests name (`--from-manifest-hints`).
    pub hints: Option<scope::hints::ManifestHints>,
    /// Which kinds an offline input held (`None` in live mode, which reads
    /// every kind).
    pub kinds: Option<scope::inputs::InputKinds>,
    /// Gateways were asked for but RBAC forbids listing them: what needs
    /// them (MS0020) is left out.
    pub gateways_unknown: bool,
}

/// Lists the Gateways `m` asks for into `inputs`; whether they stay
/// unknown (forbidden, and only wanted if allowed, which is said).
fn read_gateways(
    m: &MeshRequest,
    live: &live::Live,
    rt: &tokio::runtime::Runtime,
    inputs: &mut scope::Inputs,
    err: &mut dyn Write,
) -> Result<bool> {
    if m.gateways == GatewayRead::No {
        return Ok(false);
    }
    let unknown = match rt.block_on(live.gateways(m.gateways == GatewayRead::Needed))? {
        Some(gateways) => {
            for g in gateways {
                inputs.add(g)?;
            }
            false
        }
        None => {
            writeln!(
                err,
                "warning: gateways unknown: cannot list gateways.networking.istio.io in all namespaces, so the discoverySelectors advice (MS0020) and the routes of Istio Gateways are left out; grant {}",
                live::READER_FILE
            )?;
            true
        }
    };
    match rt.block_on(live.envoy_filters())? {
        Some(filters) => {
            for f in filters {
                inputs.add(f)?;
            }
        }
        None => writeln!(
            err,
            "warning: envoyfilters unknown: cannot list envoyfilters.networking.istio.io in all namespaces, so the Services they name are left out of gateways' filtered clusters; grant {}",
            live::READER_FILE
        )?,
    }
    Ok(unknown)
}

pub struct LiveCtx {
    pub rt: tokio::runtime::Runtime,
    pub live: live::Live,
}

impl LiveCtx {
    /// An async runtime and a connection to the cluster `m` names.
    pub fn connect(m: &MeshRequest) -> Result<LiveCtx> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        let live = rt.block_on(live::Live::connect(&m.connect))?;
        Ok(LiveCtx { rt, live })
    }
}

/// Where `apply --watch` has read its traffic sources to, carried from
/// one pass to the next: each pass reads only what is new. A pass that
/// fails, or whose writes istiod did not confirm, puts back the cursor it
/// started from, so that the next pass reads the same traffic again.
#[derive(Clone, Debug, Default)]
pub struct Cursor {
    pub logs: live::LogCursor,
    pub files: input::tail::FileOffsets,
    /// When the previous pass asked Prometheus.
    pub prometheus: Option<std::time::Instant>,
    /// `ns/workload` -> when Prometheus first showed it calling outside
    /// its scope on a new series, this pass.
    pub prometheus_first_outside: std::collections::BTreeMap<String, k8s_openapi::jiff::Timestamp>,
    /// How far back a first read asks Prometheus at most (`--prune-after`:
    /// a host not called for that long is narrowed away, so an older call
    /// would only bring it back).
    pub lookback: Option<std::time::Duration>,
    /// Whether a pass read through this cursor. The first read skips the
    /// log lines the managed Sidecars already account for
    /// (`meshscope_shared::watch::applied`).
    read_before: bool,
}

impl Cursor {
    /// A cursor that has read nothing, looking back at most `lookback`.
    pub fn new(lookback: Option<std::time::Duration>) -> Cursor {
        Cursor {
            lookback,
            ..Cursor::default()
        }
    }
}

/// The engine's options: the flags, else what the pods say (the Istio
/// version of istiod's and the proxies' images, the cluster domain of
/// their `--domain`), else the defaults. Disagreements are said once.
fn options(
    m: &MeshRequest,
    inputs: &scope::Inputs,
    istiod: &[scope::inputs::Pod],
    err: &mut dyn Write,
) -> Result<(Options, DomainSource)> {
    // Offline dumps may hold istiod's pods themselves.
    let listed = scope::detect::istiod_pods(&inputs.pods);
    let istiod = if istiod.is_empty() {
        &listed[..]
    } else {
        istiod
    };
    let evidence = scope::detect::Evidence::from_pods(&inputs.pods, istiod);
    let (istio, notes) = evidence.version(m.istio_version);
    for n in notes {
        writeln!(err, "note: {n}")?;
    }
    let (cluster_domain, note) = evidence.cluster_domain(m.cluster_domain.as_deref());
    if let Some(n) = note {
        writeln!(err, "note: {n}")?;
    }
    let source = evidence.domain_source(m.cluster_domain.as_deref());
    let options = Options {
        istio,
        cluster_domain,
        inject_by_default: m.inject_by_default,
    };
    Ok((options, source))
}

/// The snapshot of `inputs`, with `--mesh-config` when given.
fn build_snapshot(
    m: &MeshRequest,
    inputs: &scope::Inputs,
    options: Options,
) -> Result<MeshSnapshot> {
    Ok(match &m.mesh_config {
        Some(path) => {
            let mesh = input::read_mesh_config(path)?;
            MeshSnapshot::build_with_mesh(inputs, options, mesh)
        }
        None => MeshSnapshot::build(inputs, options)?,
    })
}

/// Checks the traffic's cluster domain against the snapshot's: adopts it
/// when nothing chose one (the snapshot is built again from the same
/// inputs and mesh config; the observations name hosts and pods, which do
/// not depend on it), says when it differs.
fn check_traffic_domain(
    inputs: &scope::Inputs,
    snap: &mut MeshSnapshot,
    obs: Option<&Observations>,
    source: DomainSource,
    err: &mut dyn Write,
) -> Result<()> {
    let Some(obs) = obs else { return Ok(()) };
    let seen = obs.cluster_domains();
    match scope::detect::traffic_domain(&seen, &snap.options.cluster_domain, source) {
        TrafficDomain::Agrees => {}
        TrafficDomain::Adopt { domain, note } => {
            writeln!(err, "note: {note}")?;
            let options = Options {
                cluster_domain: domain,
                ..snap.options.clone()
            };
            *snap = MeshSnapshot::build_with_mesh(inputs, options, snap.mesh.clone());
        }
        TrafficDomain::Differs(warning) => writeln!(err, "warning: {warning}")?,
    }
    Ok(())
}

/// The slack a watch pass adds to Prometheus' window: `increase()` needs
/// two samples of a series in the window, so a scrape interval's worth.
const PROMETHEUS_SLACK: std::time::Duration = std::time::Duration::from_secs(30);

/// How far back a watch pass asks Prometheus: since the previous pass,
/// with [`PROMETHEUS_SLACK`], or `--since` on the first pass; and the time
/// since the previous pass alone (the whole window on the first).
fn prometheus_window(
    m: &MeshRequest,
    last: &mut Option<std::time::Instant>,
    lookback: Option<std::time::Duration>,
) -> (std::time::Duration, std::time::Duration) {
    let now = std::time::Instant::now();
    match last.replace(now) {
        Some(t) => {
            let since = now.duration_since(t);
            (since + PROMETHEUS_SLACK, since)
        }
        None => {
            let w = m
                .prometheus_window()
                .min(lookback.unwrap_or(std::time::Duration::MAX));
            (w, w)
        }
    }
}

/// The manifest hints of the snapshot's workloads, when asked for.
fn hints(
    m: &MeshRequest,
    inputs: &scope::Inputs,
    snap: &MeshSnapshot,
) -> Option<scope::hints::ManifestHints> {
    m.manifest_hints
        .then(|| scope::hints::ManifestHints::collect(inputs, snap))
}

/// The objects of `-f`, when given: read like `--manifests`, kept apart
/// until they are laid over the cluster's.
fn load_planned(m: &MeshRequest, err: &mut dyn Write) -> Result<Option<scope::Inputs>> {
    if m.planned.is_empty() {
        return Ok(None);
    }
    let inputs = scope::Inputs {
        manifest_hints: m.manifest_hints,
        ..Default::default()
    };
    let planned = input::load_objects_into("-f", &m.planned, inputs)?;
    if let Some(note) = planned.skipped_note() {
        writeln!(err, "note: -f: {note}")?;
    }
    if planned.is_empty() {
        bail!("-f: no Kubernetes or Istio objects found in the given paths");
    }
    Ok(Some(planned))
}

/// The namespaces a live command looks at without `-A`: `-n`, else those
/// the objects of `-f` land in, else the context's.
fn look_in(m: &MeshRequest, planned: Option<&scope::Inputs>, default_ns: &str) -> BTreeSet<String> {
    let from_files = match (&m.namespace, planned) {
        (None, Some(p)) => scope::planned::namespaces(p, default_ns),
        _ => Vec::new(),
    };
    if from_files.is_empty() {
        BTreeSet::from([default_ns.to_string()])
    } else {
        from_files.into_iter().collect()
    }
}

/// Adds `o` to the observations so far.
impl World {
    pub fn load(m: &MeshRequest, err: &mut dyn Write) -> Result<World> {
        if m.is_live() {
            Self::load_live(m, err)
        } else {
            Self::load_files(m, err)
        }
    }

    fn load_files(m: &MeshRequest, err: &mut dyn Write) -> Result<World> {
        let inputs = scope::Inputs {
            manifest_hints: m.manifest_hints,
            ..Default::default()
        };
        let inputs = input::load_manifests_into(&m.manifests, inputs)?;
        if let Some(note) = inputs.skipped_note() {
            writeln!(
                err,
                "{}: {note}",
                scope::notes::skipped_kinds_level(&inputs)
            )?;
        }
        if inputs.is_empty() {
            bail!("--manifests: no Kubernetes or Istio objects found in the given paths");
        }
        let (options, domain_source) = options(m, &inputs, &[], err)?;
        let mut snap = build_snapshot(m, &inputs, options)?;
        let namespaces = match (&m.namespace, m.all_namespaces) {
            (_, true) | (None, false) => None,
            (Some(ns), false) => {
                if !snap.namespaces.contains_key(ns) {
                    writeln!(
                        err,
                        "warning: namespace {ns:?} does not appear in the input"
                    )?;
                }
                Some(BTreeSet::from([ns.clone()]))
            }
        };
        let reading = observe::Reading {
            m,
            ctx: None,
            snap: &snap,
            inputs: &inputs,
            namespaces: namespaces.as_ref(),
        };
        let obs = World::observe(&reading, None, err)?;
        check_traffic_domain(&inputs, &mut snap, obs.as_ref(), domain_source, err)?;
        let hints = hints(m, &inputs, &snap);
        Ok(World {
            snap,
            obs,
            namespaces,
            selector: m.selector.clone(),
            live: None,
            hints,
            kinds: Some(inputs.kinds(m.mesh_config.is_some())),
            gateways_unknown: false,
        })
    }

    fn load_live(m: &MeshRequest, err: &mut dyn Write) -> Result<World> {
        Self::load_live_in(m, std::sync::Arc::new(LiveCtx::connect(m)?), None, err)
    }

    /// The world of a live cluster through `ctx`; with a `cursor`, only the
    /// traffic since it (watch mode), which moves it on.
    pub fn load_live_in(
        m: &MeshRequest,
        ctx: std::sync::Arc<LiveCtx>,
        cursor: Option<&mut Cursor>,
        err: &mut dyn Write,
    ) -> Result<World> {
        let (rt, live) = (&ctx.rt, &ctx.live);
        let default_ns = m
            .namespace
            .clone()
            .unwrap_or_else(|| live.default_namespace.clone());
        let planned = load_planned(m, err)?;
        let namespaces = if m.all_namespaces {
            None
        } else {
            Some(look_in(m, planned.as_ref(), &default_ns))
        };
        // Every permission checked in one pass; what cannot be read
        // cluster-wide narrows the result, and is said.
        // explain, impact and verify read every namespace, but the
        // answer's namespace suffices.
        let fallback = m.narrowable.then_some(default_ns.as_str());
        let read = rt.block_on(live.read(
            namespaces.as_ref(),
            fallback,
            &m.purpose.in_context(&live.default_namespace),
            m.reads_pod_logs(),
            m.manifest_hints,
        ))?;
        for limitation in &read.limitations {
            writeln!(err, "warning: {limitation}")?;
        }
        for note in live.take_notes() {
            writeln!(err, "note: {note}")?;
        }
        let mut inputs = read.inputs;
        let gateways_unknown = read_gateways(m, live, rt, &mut inputs, err)?;
        if let Some(planned) = planned {
            let laid = scope::planned::overlay(&mut inputs, planned, &default_ns);
            writeln!(err, "note: {}", laid.note())?;
        }
        let istiod = rt.block_on(crate::detect::istiod_pods(live));
        let (options, domain_source) = options(m, &inputs, &istiod, err)?;
        let mut snap = build_snapshot(m, &inputs, options)?;
        // A typo in -n must not read as a clean namespace.
        for ns in namespaces.iter().flatten() {
            if !snap.namespaces.contains_key(ns) {
                bail!(
                    "namespace {ns:?} not found in the cluster at {}",
                    live.server
                );
            }
        }
        let reading = observe::Reading {
            m,
            ctx: Some(&ctx),
            snap: &snap,
            inputs: &inputs,
            namespaces: namespaces.as_ref(),
        };
        let obs = World::observe(&reading, cursor, err)?;
        check_traffic_domain(&inputs, &mut snap, obs.as_ref(), domain_source, err)?;
        let hints = hints(m, &inputs, &snap);
        Ok(World {
            snap,
            obs,
            namespaces,
            selector: m.selector.clone(),
            live: Some(ctx),
            hints,
            kinds: None,
            gateways_unknown,
        })
    }

    /// The cluster connection, for a command that needs one (its request
    /// was checked for it; an offline world is an error, not a panic).
    pub fn live_ctx(&self) -> Result<&LiveCtx> {
        self.live.as_deref().ok_or_else(|| {
            anyhow!("this command needs a cluster, and was given manifest files: drop --manifests")
        })
    }

    /// The mesh after a write, as `mesh` gives it, every namespace, no
    /// traffic: a read only (the writes' permissions were checked before
    /// them).
    pub fn read_again(mesh: &MeshRequest, err: &mut dyn Write) -> Result<World> {
        let mut again = mesh.clone();
        again.purpose = live::Purpose::Read;
        again.pod_logs = PodLogScope::Listed;
        again.all_namespaces = true;
        again.sources.clear();
        World::load(&again, err)
    }

    pub fn in_scope(&self, w: WorkloadId) -> bool {
        let wl = &self.snap.workloads[w];
        self.namespaces
            .as_ref()
            .is_none_or(|s| s.contains(&wl.namespace))
            && self.selector.as_ref().is_none_or(|s| s.matches(&wl.labels))
    }

    /// Where the mesh was read, for messages: ` in the cluster at URL`, or
    /// ` in the input` for files.
    pub fn source(&self) -> String {
        match &self.live {
            Some(ctx) => format!(" in the cluster at {}", ctx.live.server),
            None => " in the input".to_string(),
        }
    }

    /// The namespace the context names, in live mode.
    pub fn default_namespace(&self) -> Option<String> {
        self.live.as_ref().map(|l| l.live.default_namespace.clone())
    }

    /// Prints what ingestion counted, to stderr (a summary: not with -q).
    pub fn report_ingest(&self, p: &mut Printer<'_>) -> Result<()> {
        if let Some(obs) = &self.obs {
            for line in scope::notes::ingest_summary(obs) {
                p.summary(format_args!("{line}"))?;
            }
        }
        Ok(())
    }

    /// Warns of the kinds the results depend on that an offline input
    /// lacks, then names the `kubectl get` that dumps them all into
    /// `kubectl meshscope COMMAND`; `findings` are audit's.
    pub fn warn_missing_kinds(
        &self,
        command: &str,
        findings: Option<&[scope::audit::Finding]>,
        err: &mut dyn Write,
    ) -> Result<()> {
        let Some(kinds) = &self.kinds else {
            return Ok(());
        };
        let missing = scope::notes::missing_kinds(kinds, &self.snap, findings);
        for m in &missing {
            writeln!(err, "warning: {m}")?;
        }
        if !missing.is_empty() {
            let dump = scope::notes::dump_command(command);
            writeln!(err, "note: every kind the results read: {dump}")?;
        }
        Ok(())
    }

    /// The workload `spec` (NAME or KIND/NAME) names, in `ns` when given.
    pub fn find_workload(&self, spec: &str, ns: Option<&str>) -> Result<WorkloadId> {
        find_workload(&self.snap, spec, ns)
    }
}

pub fn find_workload(snap: &MeshSnapshot, spec: &str, ns: Option<&str>) -> Result<WorkloadId> {
    let (kind, name) = match spec.split_once('/') {
        Some((k, n)) => (
            Some(WorkloadKind::parse(k).ok_or_else(|| {
                anyhow!("unknown workload kind {k:?} (expected deployment, statefulset, daemonset, replicaset, job, cronjob or pod)")
            })?),
            n,
        ),
        None => (None, spec),
    };
    let hits: Vec<WorkloadId> = (0..snap.workloads.len())
        .filter(|w| {
            let wl = &snap.workloads[*w];
            wl.name == name
                && kind.as_ref().is_none_or(|k| &wl.kind == k)
                && ns.is_none_or(|n| wl.namespace == n)
        })
        .collect();
    match hits.as_slice() {
        [w] => Ok(*w),
        [] => bail!(
            "workload {spec:?} not found{}",
            ns.map(|n| format!(" in namespace {n}")).unwrap_or_default()
        ),
        many => bail!(
            "workload {spec:?} is ambiguous ({}); use -n and KIND/NAME",
            many.iter()
                .map(|w| snap.workloads[*w].key())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
