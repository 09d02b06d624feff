//! `kubectl meshscope`: the command implementations. Every decision is made
//! by `meshscope_shared`; this crate reads inputs, calls it, and prints.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod args;
pub mod cmd;
pub mod input;
pub mod istiod;
pub mod live;
pub mod output;
pub mod prometheus;
pub mod selector;
pub mod webhook_cmd;

use std::collections::{BTreeSet, HashMap};
use std::io::Write;

use anyhow::{anyhow, bail, Context, Result};
use clap::CommandFactory;
use meshscope_shared as scope;
use scope::audit::{self, AuditScope, Severity};
use scope::explain::{self, Target};
use scope::observe::Observations;
use scope::recommend::{self, Action, Outcome as RecOutcome, RecommendOptions};
use scope::snapshot::{Listener, WorkloadId, WorkloadKind};
use scope::{IstioVersion, MeshConfig, MeshSnapshot, Options};

use args::{Cli, Command, Common, FailOn, RecommendOutput, ReportOutput};
use output::{bytes, Table};
use selector::Selector;

/// How a successful run ended, for the exit code.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Ok,
    /// Exit 1: findings at or above `--fail-on`, or objects that failed.
    Findings,
}

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> Result<Outcome> {
    match cli.command {
        Command::Recommend(a) => cmd_recommend(a, out, err),
        Command::Apply(a) => cmd::apply::cmd_apply(a, out, err),
        Command::Verify(a) => cmd::verify::cmd_verify(a, out, err),
        Command::Audit(a) => cmd_audit(a, out, err),
        Command::Explain(a) => cmd_explain(a, out, err),
        Command::Impact(a) => cmd_impact(a, out, err),
        Command::Codes(a) => cmd_codes(a, out),
        Command::Version => {
            writeln!(out, "kubectl-meshscope {VERSION}")?;
            Ok(Outcome::Ok)
        }
        Command::Webhook(a) => webhook_cmd::cmd_webhook(a, out),
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

fn options(c: &Common) -> Result<Options> {
    let istio: IstioVersion = c
        .istio_version
        .parse()
        .map_err(|e: scope::Error| anyhow!("--istio-version: {e}"))?;
    Ok(Options {
        istio,
        cluster_domain: c.cluster_domain.clone(),
        inject_by_default: c.inject_by_default,
    })
}

impl World {
    pub fn load(c: &Common, err: &mut dyn Write) -> Result<World> {
        if c.manifests.is_empty() {
            return Self::load_live(c, err);
        }
        if c.from_pod_logs || c.prometheus.is_some() {
            bail!("--from-pod-logs and --prometheus read from a cluster; they cannot be combined with --manifests");
        }
        let options = options(c)?;
        let inputs = input::load_manifests(&c.manifests)?;
        if inputs.is_empty() {
            bail!("--manifests: no Kubernetes or Istio objects found in the given paths");
        }
        let snap = match &c.mesh_config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read --mesh-config {}", path.display()))?;
                let mesh = mesh_from_file(&text)
                    .with_context(|| format!("in --mesh-config {}", path.display()))?;
                MeshSnapshot::build_with_mesh(&inputs, options, mesh)
            }
            None => MeshSnapshot::build(&inputs, options)?,
        };
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
        Ok(World {
            snap,
            obs,
            namespaces,
            selector,
            live: None,
        })
    }

    fn load_live(c: &Common, err: &mut dyn Write) -> Result<World> {
        let options = options(c)?;
        let selector = c.selector.as_deref().map(Selector::parse).transpose()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        let live = rt.block_on(live::Live::connect(c))?;
        let namespaces = if c.all_namespaces {
            None
        } else {
            Some(BTreeSet::from([c
                .namespace
                .clone()
                .unwrap_or_else(|| live.default_namespace.clone())]))
        };
        let inputs = rt.block_on(live.inputs(namespaces.as_ref()))?;
        let snap = match &c.mesh_config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read --mesh-config {}", path.display()))?;
                MeshSnapshot::build_with_mesh(&inputs, options, mesh_from_file(&text)?)
            }
            None => MeshSnapshot::build(&inputs, options)?,
        };
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
            let pods: Vec<usize> = (0..snap.pods.len())
                .filter(|p| {
                    let pod = &snap.pods[*p];
                    pod.injection.sidecar
                        && namespaces
                            .as_ref()
                            .is_none_or(|n| n.contains(&pod.namespace))
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

// === recommend ===

fn recommendations(
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
    let version: IstioVersion = common.istio_version.parse().unwrap_or_default();
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

fn cmd_recommend(
    a: args::RecommendArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Outcome> {
    let (world, recs) = recommend_world(&a.common, &a.rec, a.prune, err)?;
    let snap = &world.snap;
    let objects: Vec<&scope::istio::Sidecar> = recs.iter().filter_map(|r| r.sidecar()).collect();
    // `recommend --workload X | kubectl apply -f -` with nothing to apply
    // fails in kubectl with a puzzling message: say why here instead.
    if let (Some(spec), true) = (&a.rec.workload, objects.is_empty()) {
        let why = match recs.first().map(|r| &r.outcome) {
            Some(o @ RecOutcome::Skipped(why)) if o.is_no_evidence() => format!(
                "{why}; give a traffic source (--access-log, --from-pod-logs or --prometheus), or --allow-idle for a closed scope"
            ),
            Some(RecOutcome::Skipped(why)) => why.clone(),
            Some(RecOutcome::UserOwned { sidecar, .. }) => format!(
                "it is scoped by user-owned Sidecar {}, which meshscope never replaces",
                snap.sidecars[*sidecar].key()
            ),
            _ => "nothing was recommended".to_string(),
        };
        bail!("no Sidecar recommended for {spec}: {why}");
    }
    match a.output {
        RecommendOutput::Yaml => {
            for o in &objects {
                writeln!(out, "---")?;
                output::yaml(out, o)?;
            }
        }
        RecommendOutput::Json => {
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
            output::json(out, &list)?;
        }
        RecommendOutput::Table => {
            let mut t = Table::new([
                "NAMESPACE",
                "WORKLOAD",
                "ACTION",
                "DEPENDENCIES",
                "SERVICES",
                "XDS (PROTOBUF)",
                "NOTES",
            ]);
            for r in &recs {
                let wl = &snap.workloads[r.workloads[0]];
                let who = if a.rec.per_namespace {
                    format!("({} workloads)", r.workloads.len())
                } else {
                    format!("{}/{}", wl.kind.as_str().to_ascii_lowercase(), wl.name)
                };
                let (action, mut notes) = match &r.outcome {
                    RecOutcome::Sidecar { action, added, .. } => (
                        match action {
                            Action::Create => "create".to_string(),
                            Action::Update => format!("update (+{})", added.len()),
                            Action::Unchanged => "unchanged".to_string(),
                        },
                        Vec::new(),
                    ),
                    RecOutcome::UserOwned { sidecar, missing } => (
                        "skip".to_string(),
                        vec![format!(
                            "user-owned Sidecar {} applies{}",
                            snap.sidecars[*sidecar].key(),
                            if missing.is_empty() {
                                String::new()
                            } else {
                                format!("; it lacks {}", missing.join(", "))
                            }
                        )],
                    ),
                    RecOutcome::Skipped(why) => ("skip".to_string(), vec![why.clone()]),
                };
                if !r.not_visible.is_empty() {
                    notes.push(format!("not exported here: {}", r.not_visible.join(", ")));
                }
                if let Some(obs) = &world.obs {
                    let un: Vec<String> = obs
                        .unregistered
                        .iter()
                        .filter(|u| r.workloads.contains(&u.workload))
                        .map(|u| format!("{} ({})", u.address, u.requests))
                        .collect();
                    if !un.is_empty() {
                        notes.push(format!("unregistered: {}", un.join(", ")));
                    }
                }
                let (svc, cfg) = match &r.after {
                    Some(after) => (
                        format!("{} -> {}", r.before.services, after.services),
                        format!("{} -> {}", bytes(r.before.bytes), bytes(after.bytes)),
                    ),
                    None => (r.before.services.to_string(), bytes(r.before.bytes)),
                };
                t.row([
                    r.namespace.clone(),
                    who,
                    action,
                    if r.dependencies.is_empty() {
                        "-".into()
                    } else {
                        r.dependencies.join(",")
                    },
                    svc,
                    cfg,
                    notes.join("; "),
                ]);
            }
            t.write(out)?;
        }
    }
    summarize_recommendations(&world, &recs, err)?;
    Ok(Outcome::Ok)
}

/// The recommendation summary, on stderr.
pub fn summarize_recommendations(
    world: &World,
    recs: &[recommend::Recommendation],
    err: &mut dyn Write,
) -> Result<()> {
    let snap = &world.snap;
    let mut created = 0;
    let mut updated = 0;
    let mut unchanged = 0;
    let mut user_owned = 0;
    let mut no_evidence = 0;
    let mut other_skips = Vec::new();
    for r in recs {
        match &r.outcome {
            RecOutcome::Sidecar { action, .. } => match action {
                Action::Create => created += 1,
                Action::Update => updated += 1,
                Action::Unchanged => unchanged += 1,
            },
            RecOutcome::UserOwned { sidecar, missing } => {
                user_owned += 1;
                writeln!(
                    err,
                    "note: {} is scoped by user-owned Sidecar {}, which is kept{}",
                    snap.workloads[r.workloads[0]].key(),
                    snap.sidecars[*sidecar].key(),
                    if missing.is_empty() {
                        String::new()
                    } else {
                        format!("; observed hosts it lacks: {}", missing.join(", "))
                    }
                )?;
            }
            o @ RecOutcome::Skipped(_) if o.is_no_evidence() => no_evidence += 1,
            RecOutcome::Skipped(why) => {
                other_skips.push(format!("{}: {why}", snap.workloads[r.workloads[0]].key()))
            }
        }
    }
    for s in &other_skips {
        writeln!(err, "skipped {s}")?;
    }
    if let Some(obs) = &world.obs {
        for u in obs.unregistered.iter().take(20) {
            writeln!(
                err,
                "unregistered destination: {} from {} ({} requests{}{})",
                u.address,
                snap.workloads[u.workload].key(),
                u.requests,
                u.authority
                    .as_deref()
                    .map(|a| format!(", authority {a}"))
                    .unwrap_or_default(),
                if u.blocked { ", blocked" } else { "" }
            )?;
        }
    }
    writeln!(
        err,
        "{} Sidecars: {created} to create, {updated} to update, {unchanged} unchanged; skipped {} (no evidence: {no_evidence}, user-owned: {user_owned}, other: {})",
        created + updated + unchanged,
        no_evidence + user_owned + other_skips.len(),
        other_skips.len()
    )?;
    Ok(())
}

// === audit ===

fn cmd_audit(a: args::AuditArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<Outcome> {
    let world = World::load(&a.common, err)?;
    world.report_ingest(err)?;
    let workloads: Option<BTreeSet<WorkloadId>> = world.selector.as_ref().map(|_| {
        (0..world.snap.workloads.len())
            .filter(|w| world.in_scope(*w))
            .collect()
    });
    let findings = audit::audit(
        &world.snap,
        world.obs.as_ref(),
        &AuditScope {
            namespaces: world.namespaces.as_ref(),
            workloads: workloads.as_ref(),
        },
    );
    let summary = audit::summarize(&findings);
    match a.output {
        ReportOutput::Json => output::json(
            out,
            &serde_json::json!({"findings": findings, "summary": summary}),
        )?,
        ReportOutput::Yaml => output::yaml(
            out,
            &serde_json::json!({"findings": findings, "summary": summary}),
        )?,
        ReportOutput::Table | ReportOutput::Wide => {
            if findings.is_empty() {
                writeln!(err, "no findings")?;
            } else {
                let mut t =
                    Table::new(["SEVERITY", "CODE", "KIND", "NAMESPACE", "NAME", "MESSAGE"]);
                for f in &findings {
                    t.row([
                        f.severity.as_str().to_string(),
                        f.code.to_string(),
                        f.kind.clone(),
                        f.namespace.clone(),
                        f.name.clone(),
                        f.message.clone(),
                    ]);
                }
                t.write(out)?;
            }
        }
    }
    writeln!(
        err,
        "{} findings: {} errors, {} warnings, {} info",
        findings.len(),
        summary.errors,
        summary.warnings,
        summary.infos
    )?;
    let threshold = match a.fail_on {
        FailOn::Error => Some(Severity::Error),
        FailOn::Warning => Some(Severity::Warning),
        FailOn::Info => Some(Severity::Info),
        FailOn::None => None,
    };
    Ok(match threshold {
        Some(t) if findings.iter().any(|f| f.severity >= t) => Outcome::Findings,
        _ => Outcome::Ok,
    })
}

// === explain ===

fn cmd_explain(a: args::ExplainArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<Outcome> {
    // One proxy's scope depends on pods everywhere (endpoints, headless
    // Services' per-pod listeners): read them all, then look the target
    // up in its namespace.
    let mut everywhere = a.common.clone();
    everywhere.all_namespaces = true;
    let world = World::load(&everywhere, err)?;
    let snap = &world.snap;
    let live_ns = world
        .live
        .as_ref()
        .map(|l| l.live.default_namespace.clone());
    let ns = a.common.namespace.as_deref().or(live_ns.as_deref());
    let (w, pod) = match a.what.to_ascii_lowercase().as_str() {
        "pod" | "pods" | "po" => {
            let hits: Vec<usize> = snap
                .pods_named(&a.name)
                .iter()
                .copied()
                .filter(|p| ns.is_none_or(|n| snap.pods[*p].namespace == n))
                .collect();
            match hits.as_slice() {
                [p] => (snap.pods[*p].workload, Some(*p)),
                [] => bail!(
                    "pod {:?} not found{}",
                    a.name,
                    ns.map(|n| format!(" in namespace {n}")).unwrap_or_default()
                ),
                _ => bail!("pod {:?} exists in several namespaces; pass -n", a.name),
            }
        }
        "workload" => (find_workload(snap, &a.name, ns)?, None),
        other => {
            // `explain deployment/x` works too.
            let spec = format!("{other}/{}", a.name);
            (find_workload(snap, &spec, ns)?, None)
        }
    };
    let e = explain::explain(snap, w, pod, world.obs.as_ref());
    match a.output {
        ReportOutput::Json => output::json(out, &e)?,
        ReportOutput::Yaml => output::yaml(out, &e)?,
        ReportOutput::Table | ReportOutput::Wide => {
            let wide = a.output == ReportOutput::Wide;
            if let Some(p) = &e.pod {
                writeln!(out, "Pod:              {}/{}", e.namespace, p)?;
            }
            writeln!(
                out,
                "Workload:         {} (namespace {})",
                e.workload, e.namespace
            )?;
            writeln!(
                out,
                "Injection:        {} ({})",
                if e.injected {
                    "sidecar"
                } else if e.ambient {
                    "ambient (no sidecar; Sidecar resources do not apply)"
                } else {
                    "none (no sidecar)"
                },
                e.injection_reason
            )?;
            writeln!(out, "Scope:            {}", e.scope_reason)?;
            if !e.sidecars.is_empty() {
                writeln!(out, "Sidecars considered:")?;
                let mut hidden = 0;
                for n in &e.sidecars {
                    if !wide && !n.used && !n.selects {
                        hidden += 1;
                        continue;
                    }
                    writeln!(
                        out,
                        "  {} {}: {}",
                        if n.used { "*" } else { "-" },
                        n.sidecar,
                        n.reason
                    )?;
                }
                if hidden > 0 {
                    writeln!(
                        out,
                        "  ({hidden} other Sidecars in the namespace do not select the pod; -o wide lists them)"
                    )?;
                }
            }
            writeln!(out, "Egress hosts:     {}", e.egress_hosts.join(", "))?;
            writeln!(
                out,
                "Visible services: {}{}",
                e.visible_service_count,
                if wide { "" } else { " (-o wide lists them)" }
            )?;
            if wide {
                for s in &e.visible_services {
                    writeln!(out, "  {s}")?;
                }
            }
            writeln!(
                out,
                "Estimated xDS:    {} clusters, {} listeners, {} routes, {} (unscoped: {} clusters, {}); protobuf bytes as istiod sends them",
                e.estimate.clusters,
                e.estimate.listeners,
                e.estimate.routes,
                bytes(e.estimate.bytes),
                e.unscoped_estimate.clusters,
                bytes(e.unscoped_estimate.bytes)
            )?;
            if wide {
                writeln!(
                    out,
                    "  by type: CDS {}, EDS {}, LDS {}, RDS {}",
                    bytes(e.estimate.bytes_cds),
                    bytes(e.estimate.bytes_eds),
                    bytes(e.estimate.bytes_lds),
                    bytes(e.estimate.bytes_rds)
                )?;
            }
            writeln!(
                out,
                "Pushed on changes to: {} imported services{}{}{}",
                e.pushed_by.services,
                e.pushed_by
                    .sidecar
                    .as_deref()
                    .map(|s| format!(", Sidecar {s}"))
                    .unwrap_or_default(),
                if e.pushed_by.virtual_services.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", VirtualServices {}",
                        e.pushed_by.virtual_services.join(", ")
                    )
                },
                if e.pushed_by.destination_rules.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", DestinationRules {}",
                        e.pushed_by.destination_rules.join(", ")
                    )
                }
            )?;
            if let Some(obs) = &e.observed {
                writeln!(out, "Observed destinations:")?;
                if obs.is_empty() {
                    writeln!(out, "  (none)")?;
                }
                for o in obs {
                    writeln!(
                        out,
                        "  {:<14} {} ({} requests)",
                        o.status, o.destination, o.requests
                    )?;
                }
            }
        }
    }
    Ok(Outcome::Ok)
}

// === impact ===

fn cmd_impact(a: args::ImpactArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<Outcome> {
    let world = World::load(&a.common, err)?;
    world.report_ingest(err)?;
    let snap = &world.snap;
    let ns = a
        .common
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let target = Target::parse(&a.target, &ns).ok_or_else(|| {
        anyhow!(
            "expected service/NAME, serviceentry/NAME, virtualservice/NAME or destinationrule/NAME, got {:?}",
            a.target
        )
    })?;
    // "After" is every workload under its recommended Sidecar.
    let all: Vec<WorkloadId> = snap.sidecar_workloads().collect();
    let recs = recommendations(&world, &all, &RecommendOptions::default());
    let mut proposed: HashMap<WorkloadId, Vec<Listener>> = HashMap::new();
    for r in &recs {
        if let Some(sc) = r.sidecar() {
            let hosts: Vec<scope::host::HostEntry> = sc
                .spec
                .egress
                .iter()
                .flat_map(|l| l.hosts.iter())
                .filter_map(|h| scope::host::HostEntry::parse(h, snap.options.istio).ok())
                .collect();
            proposed.insert(
                r.workloads[0],
                vec![Listener {
                    port: None,
                    protocol: None,
                    hosts,
                }],
            );
        }
    }
    if world.obs.is_none() {
        writeln!(
            err,
            "note: without --access-log there are no recommendations, so \"after\" equals \"now\""
        )?;
    }
    let imp = explain::impact(snap, &target, &proposed)?;
    match a.output {
        ReportOutput::Json => output::json(out, &imp)?,
        ReportOutput::Yaml => output::yaml(out, &imp)?,
        ReportOutput::Table | ReportOutput::Wide => {
            let names = |s: &explain::ImpactSide| -> String {
                let v: Vec<&str> = s
                    .workloads
                    .keys()
                    .map(|k| k.rsplit('/').next().unwrap_or(k))
                    .collect();
                if v.len() > 5 && a.output != ReportOutput::Wide {
                    format!("{}, ... {} more", v[..5].join(", "), v.len() - 5)
                } else {
                    v.join(", ")
                }
            };
            let label = a.target.rsplit('/').next().unwrap_or(&a.target);
            writeln!(
                out,
                "{label}: {} proxies now, {} after ({})",
                imp.now.proxies,
                imp.after.proxies,
                names(&imp.after)
            )?;
            let mut t = Table::new(["", "PROXIES", "OF", "PUSHED (PROTOBUF)", "WORKLOADS"]);
            t.row([
                "now".to_string(),
                imp.now.proxies.to_string(),
                imp.total_proxies.to_string(),
                bytes(imp.now.bytes),
                names(&imp.now),
            ]);
            t.row([
                "after".to_string(),
                imp.after.proxies.to_string(),
                imp.total_proxies.to_string(),
                bytes(imp.after.bytes),
                names(&imp.after),
            ]);
            t.write(out)?;
        }
    }
    Ok(Outcome::Ok)
}

// === codes ===

fn cmd_codes(a: args::CodesArgs, out: &mut dyn Write) -> Result<Outcome> {
    let docs: Vec<&audit::CodeDoc> = match &a.code {
        Some(c) => vec![audit::code_doc(c)
            .ok_or_else(|| anyhow!("unknown code {c:?}; `kubectl meshscope codes` lists them"))?],
        None => audit::CODES.iter().collect(),
    };
    match a.output {
        ReportOutput::Json => output::json(out, &docs)?,
        ReportOutput::Yaml => output::yaml(out, &docs)?,
        ReportOutput::Table | ReportOutput::Wide
            if a.code.is_none() && a.output == ReportOutput::Table =>
        {
            let mut t = Table::new(["CODE", "SEVERITY", "TITLE"]);
            for d in &docs {
                t.row([d.code, d.severity.as_str(), d.title]);
            }
            t.write(out)?;
        }
        _ => {
            for d in &docs {
                writeln!(out, "{} ({}): {}\n", d.code, d.severity, d.title)?;
                writeln!(out, "{}\n", d.description)?;
                writeln!(out, "Fix: {}\n", d.fix)?;
            }
        }
    }
    Ok(Outcome::Ok)
}
