//! `kubectl meshscope recommend`: a Sidecar per workload from observed traffic.

use anyhow::{bail, Result};
use meshscope_shared as scope;
use scope::recommend::{self, Action, Outcome as RecOutcome};

use crate::args::RecommendOutput;
use crate::outcome::Outcome;
use crate::output::{self, bytes, Printer, Table};
use crate::request::RecommendRequest;
use crate::world::World;

pub fn run(r: &RecommendRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    let (world, recs) = World::load_recommended(&r.spec, p)?;
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
            let savings = recommend::savings::savings(&world.snap, &recs);
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
    world.summarize_recommendations(&recs, p)?;
    world.gateway_readiness(p)?;
    Ok(Outcome::Ok)
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
