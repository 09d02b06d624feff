//! `kubectl meshscope apply`: server-side apply of the recommended Sidecars,
//! field manager `kubectl-meshscope`, through the Sidecar write layer
//! ([`crate::sidecars`]). It never takes over a Sidecar it does not own,
//! reports per object, and a failure in one object does not stop the
//! others.

use anyhow::{bail, Result};
use meshscope_shared::snapshot::PodId;

use crate::args::ReportOutput;
use crate::interrupt::Interrupt;
use crate::istiod::checks::{check_pods, traffic_by_workload, warn_version_skew};
use crate::istiod::table::report;
use crate::istiod::Istiod;
use crate::outcome::Outcome;
use crate::output::{plural, Printer};
use crate::request::ApplyRequest;
use crate::sidecars::report::{report_rows, unconfirmed};
use crate::sidecars::waiting::connect_for_wait;
use crate::sidecars::write::Waits;
use crate::sidecars::{prune::prune, write_pass, Cluster, Pass, WriteSettings};
use crate::world::World;

pub fn run(a: &ApplyRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    let (world, recs) = World::load_recommended(&a.spec, p)?;
    world.summarize_recommendations(&recs, p)?;
    if let (Some(spec), None) = (&a.spec.workload, recs.iter().find_map(|r| r.sidecar())) {
        bail!(
            "nothing to apply for {spec}: {}",
            meshscope_shared::notes::why_nothing(&world.snap, &recs)
        );
    }
    let cluster = Cluster::of(&world)?;
    let mut istiods = match a.wait {
        Some(_) => Some(connect_for_wait(cluster.ctx, a)?),
        None => None,
    };
    // From here on, Ctrl-C finishes the writes in flight and starts no more.
    let stop = Interrupt::install();
    let settings = WriteSettings::of(a);
    let Pass {
        mut results,
        progress,
        not_narrowed,
        planned,
    } = write_pass(
        &cluster,
        &recs,
        &settings,
        istiods.as_deref_mut(),
        true,
        &stop,
        p,
    )?;
    if a.prune && !stop.requested() {
        prune(&cluster, a.dry_run, &mut results);
    }
    let mut outcome = report_rows(&results, a.dry_run, p)?;
    if stop.requested() {
        bail!(
            "interrupted: {} of {} not written{}; each write is one server-side apply, so what was written is whole. Run the same command again to finish",
            progress.not_written.len(),
            plural(planned, "Sidecar", "Sidecars"),
            if not_narrowed == 0 {
                String::new()
            } else {
                format!(", {not_narrowed} not narrowed yet")
            }
        );
    }
    if let Some(istiods) = istiods.as_mut() {
        if report_waits(&world, a, istiods, &progress.waits, p)? == Outcome::Findings {
            outcome = Outcome::Findings;
        }
    }
    Ok(outcome)
}

/// Says what `--wait` waited for, and verifies the proxies it confirmed
/// against a fresh read of the cluster.
fn report_waits(
    world: &World,
    a: &ApplyRequest,
    istiods: &mut [Istiod],
    waits: &Waits,
    p: &mut Printer<'_>,
) -> Result<Outcome> {
    let mut outcome = Outcome::Ok;
    let waited: Vec<PodId> = waits.pods.iter().copied().collect();
    writeln!(
        p.err,
        "waited {:.2} s for istiod to push {} and for {} to ACK{}",
        waits.elapsed.as_secs_f64(),
        plural(waits.sidecars, "Sidecar", "Sidecars"),
        plural(waits.confirmed, "proxy", "proxies"),
        if waits.steps > 1 {
            format!(" ({} steps: hosts added first, then removed)", waits.steps)
        } else {
            String::new()
        }
    )?;
    let given = a
        .wait
        .as_ref()
        .map(|w| w.given.as_str())
        .unwrap_or_default();
    if unconfirmed(&waits.not_connected, &waits.timed_out, given, p.err)? {
        outcome = Outcome::Findings;
    }
    if waited.is_empty() {
        return Ok(outcome);
    }
    // Verify against a fresh read: the snapshot above predates the writes.
    let traffic = traffic_by_workload(&world.snap, world.obs.as_ref());
    let fresh = World::read_again(&a.spec.mesh, p.err)?;
    let pods: Vec<PodId> = waited
        .iter()
        .map(|p| &world.snap.pods[*p])
        .filter_map(|pod| fresh.snap.find_pod(&pod.namespace, &pod.name))
        .collect();
    writeln!(p.out)?;
    let ctx = world.live_ctx()?;
    let checks = ctx
        .rt
        .block_on(check_pods(&fresh.snap, &traffic, &pods, istiods, p.err))?;
    warn_version_skew(&fresh.snap, &checks, p.err)?;
    if report(&checks, ReportOutput::Table, p)? == Outcome::Findings {
        outcome = Outcome::Findings;
    }
    Ok(outcome)
}
