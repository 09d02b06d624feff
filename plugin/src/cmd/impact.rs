//! `kubectl meshscope impact`: which proxies a change is pushed to, now and under the recommended Sidecars.

use std::collections::{BTreeMap, HashMap};

use anyhow::{bail, Result};
use meshscope_shared as scope;
use scope::explain;
use scope::recommend::RecommendOptions;
use scope::snapshot::{Listener, WorkloadId};

use crate::args::ReportOutput;
use crate::outcome::Outcome;
use crate::output::{self, bytes, plural, Printer, Table};
use crate::request::ImpactRequest;
use crate::world::World;

pub fn run(r: &ImpactRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    // A change reaches proxies in every namespace: the request reads them
    // all. `-n` only says where the target is.
    let world = World::load(&r.mesh, p.err)?;
    world.report_ingest(p)?;
    let snap = &world.snap;
    let ns = match (&r.namespace, &world.live) {
        (Some(ns), _) => ns.clone(),
        (None, Some(l)) => l.live.default_namespace.clone(),
        // Offline without -n: wherever the one object of that name is.
        (None, None) => match r.target.namespaces_in(snap).as_slice() {
            [one] => one.clone(),
            [] => bail!("{} not found in any namespace of the input", r.spec),
            many => bail!(
                "{} exists in several namespaces ({}); pass -n",
                r.spec,
                many.join(", ")
            ),
        },
    };
    found(&world, r, &ns)?;
    let target = r.target.in_namespace(&ns);
    // "After" is every workload under its recommended Sidecar.
    let all: Vec<WorkloadId> = snap.sidecar_workloads().collect();
    let recs = world.recommendations(&all, &RecommendOptions::default());
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
                    tls: false,
                    hosts,
                }],
            );
        }
    }
    if world.obs.is_none() {
        writeln!(p.err, "note: {}", scope::notes::impact_without_traffic())?;
    }
    let imp = explain::impact(
        snap,
        &target,
        &proposed,
        &|w| world.in_scope(w),
        world.obs.as_ref(),
    )?;
    print(r, &ns, &imp, p)
}

/// The namespace and the target in it exist, or the error names which
/// does not (and where an object of that name is).
fn found(world: &World, r: &ImpactRequest, ns: &str) -> Result<()> {
    let snap = &world.snap;
    if !snap.namespaces.contains_key(ns) {
        bail!("namespace {ns:?} not found{}", world.source());
    }
    let elsewhere = r.target.namespaces_in(snap);
    if elsewhere.iter().any(|n| n == ns) {
        return Ok(());
    }
    let hint = match elsewhere.as_slice() {
        [] => String::new(),
        [one] => format!("; there is one in namespace {one} (pass -n {one})"),
        many if many.len() <= 5 => {
            format!(
                "; there are some in namespaces {} (pass -n)",
                many.join(", ")
            )
        }
        many => format!(
            "; there are some in namespaces {}, ... {} more (pass -n)",
            many[..5].join(", "),
            many.len() - 5
        ),
    };
    bail!(
        "{} not found in namespace {ns}{}{hint}",
        r.spec,
        world.source()
    )
}

/// Prints the impact on `ns`'s target.
fn print(
    r: &ImpactRequest,
    ns: &str,
    imp: &explain::Impact,
    p: &mut Printer<'_>,
) -> Result<Outcome> {
    match r.output {
        ReportOutput::Json => output::json(p.out, imp)?,
        ReportOutput::Yaml => output::yaml(p.out, imp)?,
        // The workloads whose proxies the change is pushed to now.
        ReportOutput::Name => output::names(
            p.out,
            imp.now.workloads.keys().filter_map(|k| {
                let mut parts = k.splitn(3, '/');
                let kind = parts.next()?;
                let _ns = parts.next()?;
                Some((kind, parts.next()?))
            }),
        )?,
        ReportOutput::Table | ReportOutput::Wide => table(r, ns, imp, p)?,
    }
    Ok(Outcome::Ok)
}

/// The headline and the now/after table: how many proxies, and which
/// workloads are pushed because they call the target and which because
/// they serve it.
fn table(r: &ImpactRequest, ns: &str, imp: &explain::Impact, p: &mut Printer<'_>) -> Result<()> {
    let wide = r.output == ReportOutput::Wide;
    let names = |m: &BTreeMap<String, usize>| -> String {
        let v: Vec<&str> = m
            .keys()
            // `Kind/ns/name` → `ns/name`
            .map(|k| k.split_once('/').map_or(k.as_str(), |(_, rest)| rest))
            .collect();
        if v.is_empty() {
            "none".to_string()
        } else if v.len() > 5 && !wide {
            format!("{}, ... {} more", v[..5].join(", "), v.len() - 5)
        } else {
            v.join(", ")
        }
    };
    // The headline is the table's heading: --no-headers drops both.
    if !p.no_headers {
        let a = &imp.after;
        let groups = [
            ("importing it", &a.importing),
            ("serving it", &a.serving),
            ("gateways", &a.gateways),
        ];
        let why: Vec<String> = groups
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(label, m)| format!("{label}: {}", names(m)))
            .collect();
        let why = match why.is_empty() {
            true => "none".to_string(),
            false => why.join("; "),
        };
        writeln!(
            p.out,
            "{} (namespace {ns}): pushed to {} now, {} after ({why})",
            r.spec,
            plural(imp.now.proxies, "proxy", "proxies"),
            plural(a.proxies, "proxy", "proxies"),
        )?;
    }
    let mut t = Table::new([
        "",
        "PROXIES",
        "OF",
        "PUSHED (PROTOBUF)",
        "IMPORTING",
        "SERVING",
        "GATEWAYS",
    ]);
    for (label, side) in [("now", &imp.now), ("after", &imp.after)] {
        t.row([
            label.to_string(),
            side.proxies.to_string(),
            imp.total_proxies.to_string(),
            bytes(side.bytes),
            names(&side.importing),
            names(&side.serving),
            names(&side.gateways),
        ]);
    }
    p.table(&t)?;
    if !imp.now.gateways.is_empty() || !imp.gateways_if_filtered.is_empty() {
        let n: usize = imp.gateways_if_filtered.values().sum();
        writeln!(
            p.out,
            "with {}=true: pushed to {} ({})",
            scope::gateway_clusters::FILTER_FLAG,
            plural(n, "gateway proxy", "gateway proxies"),
            names(&imp.gateways_if_filtered)
        )?;
    }
    // Who calls it, as the traffic shows, apart from who merely imports it.
    if let Some(seen) = &imp.observed_callers {
        let calls: Vec<String> = seen
            .iter()
            .map(|(k, n)| {
                let k = k.split_once('/').map_or(k.as_str(), |(_, rest)| rest);
                format!("{k} ({})", plural(*n as usize, "request", "requests"))
            })
            .collect();
        if calls.is_empty() {
            writeln!(p.out, "seen calling it: none in the traffic read")?;
        } else {
            writeln!(p.out, "seen calling it: {}", calls.join(", "))?;
        }
    }
    Ok(())
}
