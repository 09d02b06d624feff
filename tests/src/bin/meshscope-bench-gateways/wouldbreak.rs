//! The would-break corpus: an EnvoyFilter on the public gateway whose Lua
//! code calls Services no route sends to, and traffic to another. `audit`
//! must name every such cluster in an MS0025, and istiod with the flag on
//! must indeed leave them out of the gateway's CDS (and send them with the
//! flag off).

use std::path::Path;

use anyhow::{Context, Result};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::meshgen::Topology;
use serde::Serialize;

use crate::layout::{self, Layout, WouldBreak};
use crate::measure::connect;
use crate::measure::{key, Routers};
use crate::plugin;

#[derive(Clone, Debug, Default, Serialize)]
pub struct WouldBreakResult {
    pub gateway: String,
    /// The clusters the gateway still uses that the flag drops.
    pub clusters: Vec<String>,
    /// `audit`'s finding on the gateway.
    pub code: String,
    pub message: String,
    /// Of `clusters`, those the MS0025 names.
    pub named: Vec<String>,
    /// (cluster, proxy) pairs checked per istiod, and those absent with
    /// the flag on and present with it off.
    pub pairs: usize,
    pub absent_on: usize,
    pub present_off: usize,
    /// The cluster the EnvoyFilter's annotation lists: not named by the
    /// finding, and in every proxy's CDS with the flag on.
    pub annotated: String,
    pub annotated_named: bool,
    pub annotated_kept_on: bool,
}

/// Applies the corpus on the deployed mesh `t`, audits it with the mesh's
/// log `log` plus the corpus's traffic, and checks both istiods.
pub fn run(
    c: &Cluster,
    t: &Topology,
    l: &Layout,
    routers: &Routers,
    work: &Path,
    log: &Path,
) -> Result<WouldBreakResult> {
    let wb = layout::would_break(t, l);
    let public = l.gateways.iter().find(|g| g.ingress).context("public")?;
    eprintln!("[gateways-bench] would-break: EnvoyFilter lua-enrich and traffic");
    c.apply(&wb.yaml);
    let mut text = std::fs::read_to_string(log)?;
    let n = text.lines().count() as u64;
    text.push_str(&layout::access_log(t, &wb.traffic, n));
    let log = work.join("access-would-break.log");
    std::fs::write(&log, text)?;
    let finding = plugin::audit(c, &log)?.remove(&public.key);
    let (code, message) = finding.map(|f| (f.code, f.message)).unwrap_or_default();
    let names = |c: &str| code == "MS0025" && message.contains(&format!("{c} ("));
    let mut r = WouldBreakResult {
        gateway: public.key.clone(),
        named: wb.clusters.iter().filter(|c| names(c)).cloned().collect(),
        clusters: wb.clusters.clone(),
        annotated_named: names(&wb.annotated),
        annotated: wb.annotated.clone(),
        code: code.clone(),
        message: message.clone(),
        ..WouldBreakResult::default()
    };
    let mine: Routers = routers
        .iter()
        .filter(|(w, _)| *w == public.workload)
        .cloned()
        .collect();
    check_istiods(c, t, &wb, &mine, &mut r)?;
    Ok(r)
}

/// Connects the public gateway's proxies (`mine`) to an istiod with the
/// flag on, then off, and counts the corpus's clusters each holds.
fn check_istiods(
    c: &Cluster,
    t: &Topology,
    wb: &WouldBreak,
    mine: &Routers,
    r: &mut WouldBreakResult,
) -> Result<()> {
    let mut t = t.clone();
    // istiod holds the EnvoyFilter before the proxies connect.
    t.istio.push(wb.yaml.clone());
    let mut kept = 0;
    for on in [true, false] {
        let (istiod, sim) = connect(c, &t, mine, on)?;
        for (_, pod) in mine {
            let have = sim
                .get(&key(pod))
                .map(|p| p.cluster_names())
                .unwrap_or_default();
            for cl in &wb.clusters {
                r.pairs += usize::from(on);
                match (on, have.contains(cl)) {
                    (true, false) => r.absent_on += 1,
                    (false, true) => r.present_off += 1,
                    _ => eprintln!(
                        "[gateways-bench] would-break: {} {} {cl} with the flag {}",
                        key(pod),
                        if on { "has" } else { "lacks" },
                        if on { "on" } else { "off" }
                    ),
                }
            }
            kept += usize::from(on && have.contains(&wb.annotated));
        }
        sim.close();
        drop(istiod);
    }
    r.annotated_kept_on = kept == mine.len();
    Ok(())
}
