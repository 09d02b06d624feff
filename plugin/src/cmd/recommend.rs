//! `kubectl meshscope recommend`: a Sidecar per workload from observed traffic.

use std::collections::BTreeSet;

use anyhow::{bail, Result};
use meshscope_shared as scope;
use scope::observe::Observations;
use scope::recommend::{self, Action, Outcome as RecOutcome, RecommendOptions};
use scope::snapshot::WorkloadId;

use crate::args::RecommendOutput;
use crate::outcome::Outcome;
use crate::output::{self, bytes, Printer, Table};
use crate::request::{RecommendRequest, RecommendSpec};
use crate::world::World;

pub fn run(r: &RecommendRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    let (world, recs) = load(&r.spec, p)?;
    world.warn_missing_kinds("recommend", None, p.err)?;
    let objects: Vec<&scope::istio::Sidecar> = recs.iter().filter_map(|r| r.sidecar()).collect();
    // `recommend --workload X | kubectl apply -f -` with nothing to apply
    // fails in kubectl with a puzzling message: say why here instead.
    if let (Some(spec), true) = (&r.spec.workload, objects.is_empty()) {
        let why = scope::notes::why_nothing(&world.snap, &recs);
        bail!("no Sidecar recommended for {spec}: {why}");
    }
    match r.output {
        RecommendOutput::Yaml => {
            for o in &objects {
                writeln!(p.out, "---")?;
                output::yaml(p.out, o)?;
            }
        }
        RecommendOutput::Json => {
            // The savings ride beside the items: kubectl apply -f reads a
            // List's items only, so the output still applies as is.
            let savings = recommend::savings(&world.snap, &recs);
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "savings": savings, "items": objects});
            output::json(p.out, &list)?;
        }
        RecommendOutput::Name => output::names(
            p.out,
            objects
                .iter()
                .map(|o| ("Sidecar", o.metadata.name.as_deref().unwrap_or_default())),
        )?,
        RecommendOutput::Table | RecommendOutput::Wide => {
            let wide = r.output == RecommendOutput::Wide;
            let t = table(&world, &recs, r.spec.per_namespace, wide);
            p.table(&t)?;
        }
        RecommendOutput::Dot => write!(
            p.out,
            "{}",
            scope::graph::dot(&scope::graph::build(&world.snap, &recs))
        )?,
        RecommendOutput::Mermaid => write!(
            p.out,
            "{}",
            scope::graph::mermaid(&scope::graph::build(&world.snap, &recs))
        )?,
    }
    summarize_recommendations(&world, &recs, p)?;
    Ok(Outcome::Ok)
}

/// Loads the world and computes the recommendations `recommend`, `apply`
/// and `diff` share.
pub fn load(
    spec: &RecommendSpec,
    p: &mut Printer<'_>,
) -> Result<(World, Vec<recommend::Recommendation>)> {
    let world = World::load(&spec.mesh, p.err)?;
    world.report_ingest(p)?;
    refuse_logs_without_access_lines(&world, spec)?;
    warn_context_namespace_saw_nothing(&world, spec, p)?;
    if world.obs.is_none() && world.hints.is_none() {
        writeln!(
            p.err,
            "warning: {}",
            scope::notes::no_traffic_source(spec.allow_idle)
        )?;
    }
    let recs = recommend_in(&world, spec)?;
    Ok((world, recs))
}

/// Access logs that held lines, none of them an access-log line (an
/// nginx log, an application's own output), are an error, not "0
/// Sidecars": a pipeline that applies what `recommend` prints would
/// otherwise pass on nothing. An empty log is only warned about (a quiet
/// mesh), as the files themselves were.
fn refuse_logs_without_access_lines(world: &World, spec: &RecommendSpec) -> Result<()> {
    let Some(obs) = &world.obs else {
        return Ok(());
    };
    if spec.mesh.access_logs.is_empty() || obs.stats.lines == 0 || obs.stats.access_lines > 0 {
        return Ok(());
    }
    bail!(
        "the access logs given held {} and not one access-log line (see the warnings above), so nothing can be recommended from them: give istio-proxy's access log (kubectl logs POD -c istio-proxy), or read the cluster with --from-pod-logs or --prometheus",
        crate::output::plural(obs.stats.lines as usize, "line", "lines")
    )
}

/// Against a cluster with neither `-n` nor `-A`, the context's namespace
/// is read; when not one line's source is a pod of it, the traffic was
/// most likely another namespace's: say which namespace was read and how
/// to read the right one, rather than only "0 Sidecars".
fn warn_context_namespace_saw_nothing(
    world: &World,
    spec: &RecommendSpec,
    p: &mut Printer<'_>,
) -> Result<()> {
    let (Some(obs), Some(ns)) = (&world.obs, world.default_namespace()) else {
        return Ok(());
    };
    if spec.mesh.namespace.is_some() || spec.mesh.all_namespaces {
        return Ok(());
    }
    let lines = obs.stats.access_lines;
    if lines == 0 || obs.stats.unattributed < lines {
        return Ok(());
    }
    writeln!(
        p.err,
        "warning: no -n or -A, so namespace {ns} (the context's) was read, and none of the {} came from a pod in it: give the namespace of the workloads that sent them with -n NAMESPACE, or read every namespace with -A",
        crate::output::plural(lines as usize, "observed call (access-log line or Prometheus sample)", "observed calls (access-log lines or Prometheus samples)")
    )?;
    Ok(())
}

/// The recommendations `spec` asks for, in a loaded world.
pub fn recommend_in(world: &World, spec: &RecommendSpec) -> Result<Vec<recommend::Recommendation>> {
    let snap = &world.snap;
    let mut targets: Vec<WorkloadId> = Vec::new();
    if let Some(workload) = &spec.workload {
        let ns = spec
            .mesh
            .namespace
            .clone()
            .or_else(|| world.default_namespace());
        let w = world.find_workload(workload, ns.as_deref())?;
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
        include: spec.include.clone(),
        allow_idle: spec.allow_idle,
        prune: spec.prune_hosts,
        per_namespace: spec.per_namespace,
        manifest_hints: world.hints.clone(),
    };
    Ok(recommendations(world, &targets, &opts))
}

/// The recommendations for `workloads` of `world`.
pub fn recommendations(
    world: &World,
    workloads: &[WorkloadId],
    opts: &RecommendOptions,
) -> Vec<recommend::Recommendation> {
    let empty = Observations::default();
    let obs = world.obs.as_ref().unwrap_or(&empty);
    recommend::recommend(&world.snap, obs, workloads, opts)
}

/// The `-o table` (and `wide`) view of the recommendations.
fn table(
    world: &World,
    recs: &[recommend::Recommendation],
    per_namespace: bool,
    wide: bool,
) -> Table {
    let snap = &world.snap;
    let mut t = Table::new([
        "NAMESPACE",
        "WORKLOAD",
        "ACTION",
        "DEPENDENCIES",
        "SERVICES",
        "XDS (PROTOBUF)",
        "NOTES",
    ]);
    for r in recs {
        let wl = &snap.workloads[r.workloads[0]];
        let who = if per_namespace {
            format!("({} workloads)", r.workloads.len())
        } else {
            format!("{}/{}", wl.kind.as_str().to_ascii_lowercase(), wl.name)
        };
        let (action, notes) = action_and_notes(world, r);
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
            } else if wide {
                r.dependencies.join(",")
            } else {
                let domain = &snap.options.cluster_domain;
                let short: Vec<String> = r
                    .dependencies
                    .iter()
                    .map(|d| short_host(d, &r.namespace, domain))
                    .collect();
                output::bounded(&short, SHOWN_DEPENDENCIES, ",")
            },
            svc,
            cfg,
            notes.join("; "),
        ]);
    }
    t
}

/// A dependency (`ns/host`) as short as it reads from namespace `from`:
/// a Service of `from` by its name, one of another namespace as
/// `name.namespace`, anything else (a ServiceEntry's host) as it is.
/// `-o wide` shows them whole.
fn short_host(dep: &str, from: &str, domain: &str) -> String {
    let host = dep.split_once('/').map_or(dep, |(_, h)| h);
    let Some(svc) = host.strip_suffix(&format!(".svc.{domain}")) else {
        return host.to_string();
    };
    match svc.rsplit_once('.') {
        Some((name, ns)) if ns == from => name.to_string(),
        Some(_) => svc.to_string(),
        None => host.to_string(),
    }
}

/// The ACTION and NOTES cells of one recommendation's row.
fn action_and_notes(world: &World, r: &recommend::Recommendation) -> (String, Vec<String>) {
    let snap = &world.snap;
    let (action, mut notes) = match &r.outcome {
        RecOutcome::Sidecar {
            action,
            added,
            removed,
            ..
        } => (
            match action {
                Action::Create => "create".to_string(),
                Action::Update if removed.is_empty() => {
                    format!("update (+{})", added.len())
                }
                Action::Update => {
                    format!("update (+{} -{})", added.len(), removed.len())
                }
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
    notes.extend(r.notes.iter().cloned());
    if !r.not_visible.is_empty() {
        notes.push(format!("not exported here: {}", r.not_visible.join(", ")));
    }
    // Hosts added that no traffic shows, and why.
    for q in &r.required {
        let port = q.port.map(|p| format!(":{p}")).unwrap_or_default();
        notes.push(match &q.problem {
            None => format!("adds {}{port} ({})", q.service, q.why.join("; ")),
            Some(p) => format!(
                "needs {}{port} ({}), not written: {p}",
                q.service,
                q.why.join("; ")
            ),
        });
    }
    if !r.unknown.is_empty() {
        notes.push(format!("unknown, left out: {}", r.unknown.join(", ")));
    }
    // What the observed edges left outside the scope meet.
    let outside = meshscope_shared::edges::summarize_outside(&r.edges);
    if !outside.is_empty() {
        notes.push(format!("edges outside the scope meet {outside}"));
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
    (action, notes)
}

/// How many dependencies the default table shows before "+N more"
/// (`-o wide` shows them all).
const SHOWN_DEPENDENCIES: usize = 3;

/// The recommendation summary, on stderr.
pub fn summarize_recommendations(
    world: &World,
    recs: &[recommend::Recommendation],
    p: &mut Printer<'_>,
) -> Result<()> {
    let snap = &world.snap;
    let mut created = 0;
    let mut updated = 0;
    let mut unchanged = 0;
    let mut user_owned = 0;
    let mut no_evidence = 0;
    let mut other_skips = Vec::new();
    let (mut hosts_added, mut hosts_removed) = (0, 0);
    // Objects, not recommendations: one namespace-wide Sidecar serves many.
    let mut seen = BTreeSet::new();
    for r in recs {
        for n in &r.notes {
            writeln!(p.err, "note: {}: {n}", snap.workloads[r.workloads[0]].key())?;
        }
        for u in &r.unknown {
            writeln!(
                p.err,
                "warning: {}: called {u}; left out of its Sidecar (a `*/` host would import nothing)",
                snap.workloads[r.workloads[0]].key()
            )?;
        }
        match &r.outcome {
            RecOutcome::Sidecar {
                action,
                object,
                added,
                removed,
            } => {
                if !seen.insert((r.namespace.clone(), object.metadata.name.clone())) {
                    continue;
                }
                hosts_added += added.len();
                hosts_removed += removed.len();
                match action {
                    Action::Create => created += 1,
                    Action::Update => updated += 1,
                    Action::Unchanged => unchanged += 1,
                }
            }
            RecOutcome::UserOwned { sidecar, missing } => {
                user_owned += 1;
                writeln!(
                    p.err,
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
        writeln!(p.err, "skipped {s}")?;
    }
    // Only the selected workloads' traffic: `-l`, `-n` and `--workload`
    // leave the others' destinations out of the recommendations, and so
    // out of the warnings.
    let selected: BTreeSet<WorkloadId> = recs
        .iter()
        .flat_map(|r| r.workloads.iter().copied())
        .collect();
    if let Some(obs) = &world.obs {
        for u in obs.unregistered_from(&selected).take(20) {
            writeln!(
                p.err,
                "unregistered destination: {} from {} ({}{}{})",
                u.address,
                snap.workloads[u.workload].key(),
                output::plural(u.requests as usize, "request", "requests"),
                u.authority
                    .as_deref()
                    .map(|a| format!(", authority {a}"))
                    .unwrap_or_default(),
                if u.blocked { ", blocked" } else { "" }
            )?;
        }
    }
    let hosts = match (hosts_added, hosts_removed) {
        (0, 0) => String::new(),
        (a, 0) => format!(" (+{})", output::plural(a, "host", "hosts")),
        (a, r) => format!(" (+{a} -{})", output::plural(r, "host", "hosts")),
    };
    let skipped = no_evidence + user_owned + other_skips.len();
    p.summary(
        format_args!(
            "{}: {created} to create, {updated} to update{hosts}, {unchanged} unchanged; {} skipped (no evidence: {no_evidence}, user-owned: {user_owned}, other: {})",
            output::plural(created + updated + unchanged, "Sidecar", "Sidecars"),
            output::plural(skipped, "workload", "workloads"),
            other_skips.len()
        ),
    )?;
    let saved = recommend::savings(snap, recs);
    if saved.proxies > 0 {
        p.summary(format_args!(
            "xDS for the {} of these workloads: {} → {} clusters, {} → {} of config (estimated; verify measures it on istiod)",
            output::plural(saved.proxies as usize, "proxy", "proxies"),
            saved.clusters_now,
            saved.clusters_after,
            bytes(saved.bytes_now),
            bytes(saved.bytes_after)
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::short_host;

    #[test]
    fn dependencies_read_short_in_the_table() {
        let d = "cluster.local";
        assert_eq!(
            short_host("shop/carts.shop.svc.cluster.local", "shop", d),
            "carts"
        );
        assert_eq!(
            short_host("db/mongo.db.svc.cluster.local", "shop", d),
            "mongo.db"
        );
        assert_eq!(
            short_host("shop/api.example.com", "shop", d),
            "api.example.com"
        );
        assert_eq!(
            short_host("shop/carts.shop.svc.corp.local", "shop", "corp.local"),
            "carts"
        );
    }
}
