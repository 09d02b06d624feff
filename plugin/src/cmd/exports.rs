//! `recommend --exports`: the exportTo each Service, ServiceEntry,
//! VirtualService and DestinationRule needs ([`scope::exports`]), as
//! server-side apply patches of that one field, or a table. `apply
//! --exports` and `diff --exports` are in [`write`](mod@write).

mod confirm;
pub mod write;

use anyhow::{bail, Result};
use meshscope_shared as scope;
use scope::exports::{ExportAction, ExportKind, ExportOptions, ExportRec};
use scope::snapshot::EXPORT_TO_ANNOTATION;
use serde_json::{json, Value};

use crate::args::RecommendOutput;
use crate::outcome::Outcome;
use crate::output::{self, Printer, Table};
use crate::request::{ExportsSpec, RecommendRequest, RecommendSpec};
use crate::world::World;

/// How to apply what `-o yaml` prints: a patch of one field, which a
/// client-side `kubectl apply` would record as the whole object.
const APPLY_HINT: &str = "# exportTo patches: apply them server-side, as they are, with\n#   kubectl apply --server-side --field-manager=kubectl-meshscope -f -\n# (or run kubectl meshscope apply --exports with the same flags)";

pub fn recommend(r: &RecommendRequest, e: &ExportsSpec, p: &mut Printer<'_>) -> Result<Outcome> {
    let (world, recs) = load(&r.spec, e, p)?;
    if !r.spec.mesh.planned.is_empty() && r.output.prints_objects() {
        let docs = crate::input::read_documents(&r.spec.mesh.planned)?;
        let ns = world
            .default_namespace()
            .unwrap_or_else(|| "default".into());
        print_planned(&planned(docs, &recs, &ns), r.output, p)?;
        summarize(&world, &recs, p)?;
        return Ok(Outcome::Ok);
    }
    let writes: Vec<&ExportRec> = recs
        .iter()
        .filter(|x| x.action == ExportAction::Write)
        .collect();
    match r.output {
        RecommendOutput::Yaml => {
            writeln!(p.out, "{APPLY_HINT}")?;
            for x in &writes {
                writeln!(p.out, "---")?;
                output::yaml(p.out, &body(x, None))?;
            }
        }
        RecommendOutput::Json => {
            let items: Vec<Value> = writes.iter().map(|x| body(x, None)).collect();
            output::json(
                p.out,
                &json!({"apiVersion": "v1", "kind": "List", "items": items}),
            )?;
        }
        RecommendOutput::Name => output::names(
            p.out,
            writes.iter().map(|x| (x.kind.as_str(), x.name.as_str())),
        )?,
        RecommendOutput::Table | RecommendOutput::Wide => {
            p.table(&table(&recs, r.output == RecommendOutput::Wide))?;
        }
        // Refused with --exports when the flags were read.
        RecommendOutput::Dot | RecommendOutput::Mermaid => {
            bail!("--exports prints exportTo, not a graph")
        }
    }
    summarize(&world, &recs, p)?;
    Ok(Outcome::Ok)
}

/// The world, and the recommendations for the objects of the namespace
/// asked for.
pub(crate) fn load(
    spec: &RecommendSpec,
    e: &ExportsSpec,
    p: &mut Printer<'_>,
) -> Result<(World, Vec<ExportRec>)> {
    let world = World::load(&spec.mesh, p.err)?;
    world.report_ingest(p)?;
    let obs = match &world.obs {
        Some(obs) if !obs.traffic.is_empty() => obs,
        // Every object would be kept to its own namespace: an outage for
        // every caller the source did not show.
        _ => bail!("--exports needs observed traffic, and the traffic source showed none: no exportTo recommended"),
    };
    warn_silent_namespaces(&world, obs, p)?;
    let ns = match (&e.namespace, e.all_namespaces) {
        (_, true) => None,
        (Some(ns), false) => Some(ns.clone()),
        (None, false) => world.default_namespace(),
    };
    let opts = ExportOptions { force: e.force };
    let recs = scope::exports::recommend_exports(&world.snap, obs, opts)
        .into_iter()
        .filter(|x| ns.as_ref().is_none_or(|n| *n == x.namespace))
        .collect();
    Ok((world, recs))
}

/// Namespaces with proxies none of which the traffic shows: their calls
/// are unknown, so what they call may be narrowed away from them.
fn warn_silent_namespaces(
    world: &World,
    obs: &scope::observe::Observations,
    p: &mut Printer<'_>,
) -> Result<()> {
    let snap = &world.snap;
    let with_proxies: std::collections::BTreeSet<&str> = snap
        .sidecar_workloads()
        .map(|w| snap.workloads[w].namespace.as_str())
        .collect();
    let heard: std::collections::BTreeSet<&str> = obs
        .traffic
        .keys()
        .map(|w| snap.workloads[*w].namespace.as_str())
        .collect();
    let silent: Vec<&str> = with_proxies.difference(&heard).copied().collect();
    if !silent.is_empty() {
        writeln!(
            p.err,
            "warning: no traffic observed from namespace{} {}: what their proxies call is unknown, so it may be narrowed away from them (read their proxies' logs too, or keep such a host with a Sidecar that imports it by name)",
            if silent.len() == 1 { "" } else { "s" },
            silent.join(", ")
        )?;
    }
    Ok(())
}

/// The server-side apply body that sets only the exportTo (a Service's
/// annotation), with the `resourceVersion` read, which makes the API server
/// refuse the write if the object changed or is gone.
/// `-f`'s objects as their manifests say them, each with the exportTo
/// its recommendation gives where it narrows (`ns`: the namespace of
/// those that name none). They are not in the cluster yet: a patch of one
/// field would create them incomplete, so the whole manifest is printed.
fn planned(mut docs: Vec<Value>, recs: &[ExportRec], ns: &str) -> Vec<Value> {
    for d in &mut docs {
        let kind = d["kind"].as_str().unwrap_or("").to_string();
        let name = d["metadata"]["name"].as_str().unwrap_or("").to_string();
        let at = d["metadata"]["namespace"]
            .as_str()
            .unwrap_or(ns)
            .to_string();
        let Some(x) = recs.iter().find(|x| {
            x.kind.as_str() == kind
                && x.name == name
                && x.namespace == at
                && x.action == ExportAction::Write
        }) else {
            continue;
        };
        if x.kind == ExportKind::Service {
            let list = x.recommended.join(",");
            d["metadata"]["annotations"][EXPORT_TO_ANNOTATION] = list.into();
        } else {
            d["spec"]["exportTo"] = json!(x.recommended);
        }
    }
    docs
}

const PLANNED_HINT: &str =
    "# -f's objects, each with the exportTo the traffic gives it: apply them as
#   kubectl apply -f -";

fn print_planned(docs: &[Value], out: RecommendOutput, p: &mut Printer<'_>) -> Result<()> {
    match out {
        RecommendOutput::Json => output::json(
            p.out,
            &json!({"apiVersion": "v1", "kind": "List", "items": docs}),
        )?,
        _ => {
            writeln!(p.out, "{PLANNED_HINT}")?;
            for d in docs {
                writeln!(p.out, "---")?;
                output::yaml(p.out, d)?;
            }
        }
    }
    Ok(())
}

pub(crate) fn body(x: &ExportRec, resource_version: Option<&str>) -> Value {
    let mut meta = json!({"name": x.name, "namespace": x.namespace});
    if let Some(rv) = resource_version {
        meta["resourceVersion"] = rv.into();
    }
    match x.kind {
        ExportKind::Service => {
            meta["annotations"] = json!({EXPORT_TO_ANNOTATION: x.recommended.join(",")});
            json!({"apiVersion": "v1", "kind": "Service", "metadata": meta})
        }
        kind => json!({
            "apiVersion": format!("{}/v1", scope::istio::NETWORKING_GROUP),
            "kind": kind.as_str(),
            "metadata": meta,
            "spec": {"exportTo": x.recommended},
        }),
    }
}

fn action_word(a: ExportAction) -> &'static str {
    match a {
        ExportAction::Write => "narrow",
        ExportAction::Unchanged => "unchanged",
        ExportAction::OwnerSet => "owner-set",
        ExportAction::Everyone => "everyone",
        ExportAction::Hidden => "hidden",
        ExportAction::Exempt => "exempt",
    }
}

/// `-o table`: one row per object; `wide` adds why each namespace needs it.
fn table(recs: &[ExportRec], wide: bool) -> Table {
    let mut head = vec![
        "NAMESPACE",
        "KIND",
        "NAME",
        "ACTION",
        "NOW",
        "RECOMMENDED",
        "HIDDEN-FROM",
    ];
    if wide {
        head.push("NEEDED-BY");
    }
    let mut t = Table::new(head);
    for x in recs {
        let now = x
            .declared
            .as_ref()
            .map_or("(default)".to_string(), |d| d.join(","));
        let mut row = vec![
            x.namespace.clone(),
            x.kind.as_str().to_string(),
            x.name.clone(),
            action_word(x.action).to_string(),
            now,
            dash(&x.recommended.join(",")),
            dash(&x.hidden_from.join(",")),
        ];
        if wide {
            let needs: Vec<String> = x
                .needs
                .iter()
                .map(|(ns, why)| {
                    let why: Vec<String> = why.iter().map(ToString::to_string).collect();
                    format!("{ns}: {}", why.join("; "))
                })
                .collect();
            row.push(needs.join(" | "));
        }
        t.row(row);
    }
    t
}

fn dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s.to_string()
    }
}

/// The counts, the traffic window, and the objects whose exportTo hides
/// them from callers (MS0019), to stderr.
fn summarize(world: &World, recs: &[ExportRec], p: &mut Printer<'_>) -> Result<()> {
    let count = |a: ExportAction| recs.iter().filter(|x| x.action == a).count();
    p.summary(format_args!(
        "exports: {} to narrow, {} unchanged, {} set by their owner (left alone without --force-exports), {} needed everywhere",
        count(ExportAction::Write),
        count(ExportAction::Unchanged),
        count(ExportAction::OwnerSet),
        count(ExportAction::Everyone),
    ))?;
    if let Some((from, to)) = world.obs.as_ref().and_then(|o| o.window.as_ref()) {
        p.summary(format_args!(
            "consumers observed from {from} to {to}: a namespace that calls rarely may not show; keep it with a Sidecar that imports the host by name"
        ))?;
    }
    for x in recs {
        if let Some(f) = scope::exports::findings::hidden_from_callers(x) {
            writeln!(p.err, "{} {}: {}", f.severity, f.code, f.message)?;
        }
    }
    Ok(())
}
