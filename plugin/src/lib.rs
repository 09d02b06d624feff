//! `kubectl meshscope`: the command implementations. Every decision is made
//! by `meshscope_shared`; this crate reads inputs, calls it, and prints.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod args;
pub mod cmd;
pub mod complete;
pub mod detect;
pub mod duration;
pub mod input;
pub mod interrupt;
pub mod istiod;
pub mod live;
pub mod output;
pub mod prometheus;
pub mod selector;
pub mod webhook_cmd;

use std::collections::BTreeSet;
use std::io::Write;

use anyhow::{anyhow, bail, Context, Result};
use clap::CommandFactory;
use meshscope_shared as scope;
use scope::detect::{DomainSource, TrafficDomain};
use scope::observe::Observations;
use scope::recommend::{self, RecommendOptions};
use scope::snapshot::{WorkloadId, WorkloadKind};
use scope::{IstioVersion, MeshConfig, MeshSnapshot, Options};

use args::{Cli, Command, Common};
use selector::Selector;

/// How a successful run ended, for the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Ok,
    /// Exit 1: findings at or above `--fail-on`, or objects that failed.
    Findings,
}

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> Result<Outcome> {
    let common = cli.command.common();
    let _settings = output::Settings {
        no_headers: common.is_some_and(|c| c.no_headers),
        quiet: common.is_some_and(|c| c.quiet),
    }
    .install();
    if let Some(c) = common {
        input::check_stdin(c)?;
    }
    match cli.command {
        Command::Recommend(a) => cmd::recommend::cmd_recommend(a, out, err),
        Command::Apply(a) => cmd::apply::cmd_apply(a, out, err),
        Command::Diff(a) => cmd::diff::cmd_diff(a, out, err),
        Command::Verify(a) => cmd::verify::cmd_verify(a, out, err),
        Command::Audit(a) => cmd::audit::cmd_audit(a, out, err),
        Command::Explain(a) => cmd::explain::cmd_explain(a, out, err),
        Command::Impact(a) => cmd::impact::cmd_impact(a, out, err),
        Command::Codes(a) => cmd::codes::cmd_codes(a, out),
        Command::Version(a) => cmd::version::cmd_version(a, out, err),
        Command::Webhook(a) => webhook_cmd::cmd_webhook(a, out, err),
        Command::Completion(a) => {
            let mut cmd = Cli::command();
            clap_complete::generate(a.shell, &mut cmd, "kubectl-meshscope", out);
            Ok(Outcome::Ok)
        }
    }
}

/// The mesh and the traffic, loaded once per command.
pub struct World {
    pub snap: MeshSnapshot,
    pub obs: Option<Observations>,
    /// `None` means every namespace.
    pub namespaces: Option<BTreeSet<String>>,
    pub selector: Option<Selector>,
    /// The cluster connection, in live mode.
    pub live: Option<LiveCtx>,
}

pub struct LiveCtx {
    pub rt: tokio::runtime::Runtime,
    pub live: live::Live,
}

/// `--istio-version`, checked against the releases meshscope knows.
pub(crate) fn version_flag(c: &Common) -> Result<Option<IstioVersion>> {
    c.istio_version
        .as_deref()
        .map(scope::detect::known_version)
        .transpose()
        .map_err(|e| anyhow!("--istio-version: {e}"))
}

/// The engine's options: the flags, else what the pods say (the Istio
/// version of istiod's and the proxies' images, the cluster domain of
/// their `--domain`), else the defaults. Disagreements are said once.
fn options(
    c: &Common,
    inputs: &scope::Inputs,
    istiod: &[scope::inputs::Pod],
    err: &mut dyn Write,
) -> Result<(Options, DomainSource)> {
    let flag = version_flag(c)?;
    // Offline dumps may hold istiod's pods themselves.
    let listed = scope::detect::istiod_pods(&inputs.pods);
    let istiod = if istiod.is_empty() {
        &listed[..]
    } else {
        istiod
    };
    let evidence = scope::detect::Evidence::from_pods(&inputs.pods, istiod);
    let (istio, notes) = evidence.version(flag);
    for n in notes {
        writeln!(err, "note: {n}")?;
    }
    let (cluster_domain, note) = evidence.cluster_domain(c.cluster_domain.as_deref());
    if let Some(n) = note {
        writeln!(err, "note: {n}")?;
    }
    let source = evidence.domain_source(c.cluster_domain.as_deref());
    let options = Options {
        istio,
        cluster_domain,
        inject_by_default: c.inject_by_default,
    };
    Ok((options, source))
}

/// The snapshot of `inputs`, with `--mesh-config` when given.
fn build_snapshot(c: &Common, inputs: &scope::Inputs, options: Options) -> Result<MeshSnapshot> {
    Ok(match &c.mesh_config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --mesh-config {}", path.display()))?;
            let mesh = mesh_from_file(&text)
                .with_context(|| format!("in --mesh-config {}", path.display()))?;
            MeshSnapshot::build_with_mesh(inputs, options, mesh)
        }
        None => MeshSnapshot::build(inputs, options)?,
    })
}

/// Checks the traffic's cluster domain against the snapshot's: adopts it
/// when nothing chose one (the snapshot is built again; the observations
/// name hosts and pods, which do not depend on it), says when it differs.
fn check_traffic_domain(
    c: &Common,
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
            *snap = build_snapshot(c, inputs, options)?;
        }
        TrafficDomain::Differs(warning) => writeln!(err, "warning: {warning}")?,
    }
    Ok(())
}

impl World {
    pub fn load(c: &Common, err: &mut dyn Write) -> Result<World> {
        if c.manifests.is_empty() {
            return Self::load_live(c, err);
        }
        if c.from_pod_logs || c.prometheus.is_some() {
            bail!("--from-pod-logs and --prometheus read from a cluster; they cannot be combined with --manifests");
        }
        version_flag(c)?;
        let inputs = input::load_manifests(&c.manifests)?;
        if let Some(note) = inputs.skipped_note() {
            // A typo or a wrong API group is a mistake to fix; other kinds
            // (Secrets, Roles, ...) are only not needed.
            let level = if inputs.skipped_mistakes > 0 {
                "warning"
            } else {
                "note"
            };
            writeln!(err, "{level}: {note}")?;
        }
        if inputs.is_empty() {
            bail!("--manifests: no Kubernetes or Istio objects found in the given paths");
        }
        let (options, domain_source) = options(c, &inputs, &[], err)?;
        let mut snap = build_snapshot(c, &inputs, options)?;
        let namespaces = match (&c.namespace, c.all_namespaces) {
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
        let selector = c.selector.as_deref().map(Selector::parse).transpose()?;
        let obs = if c.access_logs.is_empty() {
            None
        } else {
            let obs = input::read_access_logs(&snap, &c.access_logs, c.strict, err)?;
            Some(obs)
        };
        check_traffic_domain(c, &inputs, &mut snap, obs.as_ref(), domain_source, err)?;
        Ok(World {
            snap,
            obs,
            namespaces,
            selector,
            live: None,
        })
    }

    fn load_live(c: &Common, err: &mut dyn Write) -> Result<World> {
        version_flag(c)?;
        let selector = c.selector.as_deref().map(Selector::parse).transpose()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        let live = rt.block_on(live::Live::connect(&c.connect_options()))?;
        let namespaces = if c.all_namespaces {
            None
        } else {
            Some(BTreeSet::from([c
                .namespace
                .clone()
                .unwrap_or_else(|| live.default_namespace.clone())]))
        };
        // Every permission checked in one pass; what cannot be read
        // cluster-wide narrows the result, and is said.
        // explain and impact read every namespace, but -n suffices.
        let fallback = c.namespace.as_deref().filter(|_| c.all_namespaces);
        let read =
            rt.block_on(live.read(namespaces.as_ref(), fallback, &c.purpose, c.from_pod_logs))?;
        for limitation in &read.limitations {
            writeln!(err, "warning: {limitation}")?;
        }
        for note in live.take_notes() {
            writeln!(err, "note: {note}")?;
        }
        let inputs = read.inputs;
        let istiod = rt.block_on(detect::istiod_pods(&live));
        let (options, domain_source) = options(c, &inputs, &istiod, err)?;
        let mut snap = build_snapshot(c, &inputs, options)?;
        // A typo in -n must not read as a clean namespace.
        for ns in namespaces.iter().flatten() {
            if !snap.namespaces.contains_key(ns) {
                bail!(
                    "namespace {ns:?} not found in the cluster at {}",
                    live.server
                );
            }
        }
        let mut obs: Option<Observations> = None;
        let mut add = |o: Observations| match &mut obs {
            Some(cur) => cur.merge(o),
            None => obs = Some(o),
        };
        if !c.access_logs.is_empty() {
            add(input::read_access_logs(
                &snap,
                &c.access_logs,
                c.strict,
                err,
            )?);
        }
        if c.from_pod_logs {
            let since = live::parse_duration(c.since.as_deref().unwrap_or("24h"))?;
            let only = match c.pod_logs {
                args::PodLogScope::Listed => None,
                args::PodLogScope::Namespace => Some(
                    c.namespace
                        .clone()
                        .unwrap_or_else(|| live.default_namespace.clone()),
                ),
            };
            let pods: Vec<usize> = (0..snap.pods.len())
                .filter(|p| {
                    let pod = &snap.pods[*p];
                    pod.injection.sidecar
                        && namespaces
                            .as_ref()
                            .is_none_or(|n| n.contains(&pod.namespace))
                        && only.as_ref().is_none_or(|n| *n == pod.namespace)
                })
                .collect();
            let (o, failed) = rt.block_on(live.pod_logs(&snap, &pods, since, &inputs.pods, err));
            for (pod, why) in &failed {
                writeln!(
                    err,
                    "warning: cannot read the istio-proxy log of {pod}: {why}"
                )?;
            }
            add(o);
        }
        if let Some(url) = &c.prometheus {
            let since = live::parse_duration(c.since.as_deref().unwrap_or("7d"))?;
            let o = prometheus::observe(&snap, url, since)?;
            add(o);
        }
        check_traffic_domain(c, &inputs, &mut snap, obs.as_ref(), domain_source, err)?;
        Ok(World {
            snap,
            obs,
            namespaces,
            selector,
            live: Some(LiveCtx { rt, live }),
        })
    }

    pub fn in_scope(&self, w: WorkloadId) -> bool {
        let wl = &self.snap.workloads[w];
        self.namespaces
            .as_ref()
            .is_none_or(|s| s.contains(&wl.namespace))
            && self.selector.as_ref().is_none_or(|s| s.matches(&wl.labels))
    }

    /// Prints what ingestion counted, to stderr.
    pub fn report_ingest(&self, err: &mut dyn Write) -> Result<()> {
        if output::Settings::current().quiet {
            return Ok(());
        }
        if let Some(obs) = &self.obs {
            let s = &obs.stats;
            writeln!(
                err,
                "access logs: {} lines, {} access-log lines, {} other proxy output skipped, {} malformed, {} unattributed",
                s.lines, s.access_lines, s.not_access_log, s.malformed, s.unattributed
            )?;
            if s.unattributed > 0 {
                let samples: Vec<String> = obs
                    .unattributed_samples
                    .iter()
                    .take(5)
                    .map(|(k, v)| format!("{k} ({v})"))
                    .collect();
                writeln!(
                    err,
                    "  lines whose source matched no pod in the snapshot: {}",
                    samples.join(", ")
                )?;
            }
        }
        Ok(())
    }
}

/// A `--mesh-config` file is either the mesh YAML itself or the whole
/// `istio` ConfigMap.
fn mesh_from_file(text: &str) -> Result<MeshConfig> {
    let v: serde_yaml::Value = serde_yaml::from_str(text).context("invalid YAML")?;
    if v.get("kind").and_then(|k| k.as_str()) == Some("ConfigMap") {
        let mesh = v
            .get("data")
            .and_then(|d| d.get("mesh"))
            .and_then(|m| m.as_str())
            .unwrap_or("");
        return Ok(MeshConfig::from_yaml(mesh)?);
    }
    Ok(MeshConfig::from_yaml(text)?)
}

pub(crate) fn find_workload(
    snap: &MeshSnapshot,
    spec: &str,
    ns: Option<&str>,
) -> Result<WorkloadId> {
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

// === shared by recommend and apply ===

/// Why `--workload X` gave no Sidecar, with what would change that.
pub(crate) fn why_nothing(world: &World, recs: &[recommend::Recommendation]) -> String {
    match recs.first().map(|r| &r.outcome) {
        Some(o @ recommend::Outcome::Skipped(why)) if o.is_no_evidence() => format!(
            "{why}; give a traffic source (--access-log, --from-pod-logs or --prometheus), or --allow-idle for a closed scope"
        ),
        Some(recommend::Outcome::Skipped(why)) => why.clone(),
        Some(recommend::Outcome::UserOwned { sidecar, .. }) => format!(
            "it is scoped by user-owned Sidecar {}, which meshscope never replaces",
            world.snap.sidecars[*sidecar].key()
        ),
        _ => "nothing was recommended".to_string(),
    }
}

pub(crate) fn recommendations(
    world: &World,
    workloads: &[WorkloadId],
    opts: &RecommendOptions,
) -> Vec<recommend::Recommendation> {
    let empty = Observations::default();
    let obs = world.obs.as_ref().unwrap_or(&empty);
    recommend::recommend(&world.snap, obs, workloads, opts)
}

/// Loads the world and computes the recommendations `recommend` and
/// `apply` share.
pub fn recommend_world(
    common: &Common,
    flags: &args::RecommendFlags,
    prune_hosts: bool,
    err: &mut dyn Write,
) -> Result<(World, Vec<recommend::Recommendation>)> {
    let version: IstioVersion = version_flag(common)?.unwrap_or_default();
    for h in &flags.include {
        scope::host::HostEntry::parse(h, version).map_err(|e| anyhow!("--include: {e}"))?;
    }
    let world = World::load(common, err)?;
    world.report_ingest(err)?;
    if world.obs.is_none() {
        writeln!(
            err,
            "warning: no traffic source given (--access-log, --from-pod-logs or --prometheus); every workload is \"no evidence\" unless --allow-idle closes it"
        )?;
    }
    let snap = &world.snap;
    let mut targets: Vec<WorkloadId> = Vec::new();
    if let Some(spec) = &flags.workload {
        let ns = common.namespace.clone().or_else(|| {
            world
                .live
                .as_ref()
                .map(|l| l.live.default_namespace.clone())
        });
        let w = find_workload(snap, spec, ns.as_deref())?;
        let wl = &snap.workloads[w];
        if !wl.injection.sidecar {
            bail!(
                "{} has no Envoy sidecar ({}), so a Sidecar would not apply to it",
                wl.key(),
                wl.injection.reason
            );
        }
        targets.push(w);
    } else {
        targets.extend(snap.sidecar_workloads().filter(|w| world.in_scope(*w)));
    }
    let opts = RecommendOptions {
        include: flags.include.clone(),
        allow_idle: flags.allow_idle,
        prune: prune_hosts,
        per_namespace: flags.per_namespace,
    };
    let recs = recommendations(&world, &targets, &opts);
    Ok((world, recs))
}
