//! The observe loop: the traffic of a world, read from each source the
//! request gives ([`crate::traffic::TrafficSource`]) in turn and merged. Each source has
//! its reader here, returning what it observed; `apply --watch` passes a
//! [`crate::world::Cursor`] so that each pass reads only what is new. To add a source,
//! see [`crate::traffic`].

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{anyhow, Result};
use meshscope_shared as scope;
use scope::observe::{Applied, Observations};
use scope::MeshSnapshot;

use super::{prometheus_window, Cursor, LiveCtx, World};
use crate::output::plural;
use crate::request::{MeshRequest, PodLogScope};
use crate::traffic::TrafficSource;
use crate::{input, live, prometheus};

/// What every source is read against.
pub(super) struct Reading<'a> {
    pub m: &'a MeshRequest,
    /// The cluster, in live mode.
    pub ctx: Option<&'a LiveCtx>,
    pub snap: &'a MeshSnapshot,
    pub inputs: &'a scope::Inputs,
    /// The namespaces read (`None`: all).
    pub namespaces: Option<&'a BTreeSet<String>>,
}

impl World {
    /// The traffic of every source `r.m` gives, merged (`None` without
    /// one). A watch pass reads through `cursor`, and its first skips the
    /// lines the managed Sidecars already account for.
    pub(super) fn observe(
        r: &Reading<'_>,
        mut cursor: Option<&mut Cursor>,
        err: &mut dyn Write,
    ) -> Result<Option<Observations>> {
        let applied = cursor
            .as_deref()
            .is_some_and(|c| !c.read_before)
            .then(|| scope::watch::applied(r.snap));
        let applied = applied.as_ref();
        let mut obs: Option<Observations> = None;
        for source in &r.m.sources {
            let o = match source {
                TrafficSource::AccessLogs(paths) => {
                    access_logs(r, paths, cursor.as_deref_mut(), applied, err)?
                }
                TrafficSource::PodLogs => {
                    let ctx = cluster(r, source)?;
                    pod_logs(r, ctx, cursor.as_deref_mut(), applied, err)?
                }
                TrafficSource::Prometheus(url) => {
                    cluster(r, source)?;
                    prometheus(r, url, cursor.as_deref_mut())?
                }
            };
            match &mut obs {
                Some(cur) => cur.merge(o),
                None => obs = Some(o),
            }
        }
        if let Some(c) = cursor {
            c.read_before = true;
        }
        let skipped = obs.as_ref().map_or(0, |o| o.stats.already_applied);
        if skipped > 0 {
            writeln!(
                err,
                "note: skipped {} the managed Sidecars already account for (at or before the end of their evidence window)",
                plural(skipped as usize, "log line", "log lines")
            )?;
        }
        Ok(obs)
    }
}

/// The cluster a source read through the API needs (the request checked
/// that one is given).
fn cluster<'a>(r: &Reading<'a>, source: &TrafficSource) -> Result<&'a LiveCtx> {
    r.ctx.ok_or_else(|| {
        anyhow!(
            "{} reads from a cluster; it cannot be combined with --manifests",
            source.flag()
        )
    })
}

/// `--access-log`: the files whole, or (watching) what they gained.
fn access_logs(
    r: &Reading<'_>,
    paths: &[PathBuf],
    cursor: Option<&mut Cursor>,
    applied: Option<&Applied>,
    err: &mut dyn Write,
) -> Result<Observations> {
    match cursor {
        Some(c) => input::tail::tail_access_logs(r.snap, paths, &mut c.files, applied, err),
        None => input::read_access_logs(r.snap, paths, r.m.strict, err),
    }
}

/// `--from-pod-logs`: the istio-proxy log of each proxy in the namespaces
/// read (a gateway's log holds its calls too).
fn pod_logs(
    r: &Reading<'_>,
    ctx: &LiveCtx,
    cursor: Option<&mut Cursor>,
    applied: Option<&Applied>,
    err: &mut dyn Write,
) -> Result<Observations> {
    let (m, snap) = (r.m, r.snap);
    let only = match m.pod_logs {
        PodLogScope::Listed => None,
        PodLogScope::Namespace => Some(
            m.namespace
                .clone()
                .unwrap_or_else(|| ctx.live.default_namespace.clone()),
        ),
    };
    let pods: Vec<usize> = (0..snap.pods.len())
        .filter(|p| {
            let pod = &snap.pods[*p];
            pod.injection.runs_proxy()
                && r.namespaces.is_none_or(|n| n.contains(&pod.namespace))
                && only.as_ref().is_none_or(|n| *n == pod.namespace)
        })
        .collect();
    // After a watch pass, logs with nothing new are the rule.
    let first_read = cursor.as_deref().is_none_or(|c| c.logs.is_new());
    let since = m.pod_log_window();
    let window = match cursor {
        Some(c) => live::LogWindow::After(&mut c.logs, since, applied),
        None => live::LogWindow::Last(since),
    };
    let logs = ctx
        .rt
        .block_on(ctx.live.pod_logs(snap, &pods, window, &r.inputs.pods, err));
    for (pod, why) in &logs.failed {
        writeln!(
            err,
            "warning: cannot read the istio-proxy log of {pod}: {why}"
        )?;
    }
    if first_read && logs.obs.stats.access_lines == 0 && !logs.empty.is_empty() {
        writeln!(
            err,
            "warning: {}",
            scope::notes::empty_pod_logs(snap, &logs.empty, pods.len())
        )?;
    }
    Ok(logs.obs)
}

/// `--prometheus`: Istio's request metrics over the window (watching:
/// since the last pass).
fn prometheus(r: &Reading<'_>, url: &str, cursor: Option<&mut Cursor>) -> Result<Observations> {
    let m = r.m;
    let Some(c) = cursor else {
        return prometheus::observe(r.snap, url, m.prometheus_window());
    };
    let (window, since_last) = prometheus_window(m, &mut c.prometheus, c.lookback);
    let o = prometheus::observe(r.snap, url, window)?;
    // For the latency metric only (a failure costs precision): series new
    // since the last pass, which an earlier widening cannot have answered.
    c.prometheus_first_outside = prometheus::first_outside(url, since_last).unwrap_or_default();
    Ok(o)
}
