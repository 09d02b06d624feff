//! `kubectl meshscope apply --watch`: apply, again and again. Each pass
//! reads only the traffic since the previous one (pod logs after the last
//! line read, Prometheus' increase over the time since, access-log files
//! from where they were left; with Prometheus, a new PassthroughCluster or
//! BlackHoleCluster series starts the next pass early), lets `shared::watch` decide what to write
//! (widen on calls outside a scope; narrow with `--prune-after`), writes
//! the widenings, waits for istiod to confirm them, and only then writes
//! the narrowings. SIGTERM or Ctrl-C finishes the write in flight and ends
//! the loop with exit 0.

mod events;
mod metrics;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::jiff::Timestamp;
use meshscope_shared::recommend::{Action, Outcome as RecOutcome, Recommendation};
use meshscope_shared::watch::{self as plan, Change, Ledger, PassSettings};

use crate::args::EventOutput;
use crate::interrupt::{Interrupt, StopHandle};
use crate::istiod::Istiod;
use crate::live::{Election, LEASE_DURATION};
use crate::outcome::Outcome;
use crate::output::Printer;
use crate::request::{ApplyRequest, WatchRequest};
use crate::sidecars::prune::prune;
use crate::sidecars::waiting::connect_for_wait;
use crate::sidecars::{write_pass, ApplyResult, Cluster, Pass, SidecarRef, WriteSettings};
use crate::sidecars::{SidecarRow, FORCE_HINT};
use crate::world::{Cursor, LiveCtx, World};
use events::{emit, Event, Heartbeat};
use metrics::Metrics;

/// The watcher's state between passes.
struct Watcher<'a> {
    a: &'a ApplyRequest,
    w: &'a WatchRequest,
    ctx: Arc<LiveCtx>,
    metrics: Arc<Metrics>,
    stop: &'a Interrupt,
    cursor: Cursor,
    ledger: Ledger,
    /// Connected on the first pass that writes; dropped on an error.
    istiods: Option<Vec<Istiod>>,
    /// With `--lease`: whether this replica writes.
    election: Option<Election>,
    /// Whether it led at the last look (for the leading/following events).
    led: Option<bool>,
    /// Whether this replica ever followed another.
    followed: bool,
    /// Diagnostics already printed (a pass repeats what the last said).
    said: BTreeSet<String>,
    passes: u64,
    started: Instant,
    /// With `--prometheus`: the count of series outside every scope when
    /// the last pass began (see [`Watcher::idle_until`]).
    outside_series: Option<u64>,
    /// The error of the last pass, if it failed, and how many passes in a
    /// row failed with it.
    last_error: Option<(String, u64)>,
    /// Why each Sidecar last failed or was skipped, as said then.
    skips: std::collections::BTreeMap<SidecarRef, String>,
}

/// Whether a pass's writes settled: each was confirmed by istiod or ended
/// for good (written and confirmed, unchanged, failed or skipped on a
/// conflict). Only then does the watcher keep its read positions; a pass
/// whose writes istiod did not confirm in time, or that a signal cut
/// short, is read again by the next (its writes are then unchanged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settled {
    Yes,
    No,
}

/// How a batch of writes ended.
#[derive(Clone, Copy, Debug)]
struct Written {
    /// Every write was made and confirmed by istiod (narrowing may follow).
    confirmed: bool,
    /// Whether the pass's read may be kept ([`Settled`]).
    settled: Settled,
}

impl Written {
    /// Nothing to write.
    const DONE: Written = Written {
        confirmed: true,
        settled: Settled::Yes,
    };
}

/// How long after SIGTERM or Ctrl-C the watcher may still run, once no
/// write is in flight: the reads of a pass (an API server, Prometheus or
/// istiod that does not answer) are abandoned then, well inside a pod's
/// default grace period of 30 s.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Ends the process [`STOP_GRACE`] after a signal, unless the loop ended
/// first (when the returned guard is dropped) or a write is in flight (it
/// is finished first; writes are bounded by the request timeout). The
/// Lease, if any, is not released then: it expires.
fn bound_stop(stop: StopHandle, output: EventOutput) -> StopBound {
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ended = done.clone();
    std::thread::spawn(move || {
        let over = || ended.load(std::sync::atomic::Ordering::SeqCst);
        while !stop.requested() {
            if over() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let asked = Instant::now();
        while asked.elapsed() < STOP_GRACE || stop.writing() {
            if over() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let e = Event::new("stopped").message(format!(
            "{} after the signal, abandoning the reads in flight (no write was)",
            crate::duration::show_duration(STOP_GRACE)
        ));
        events::emit_now(&e, output);
        std::process::exit(0);
    });
    StopBound(done)
}

/// Tells [`bound_stop`]'s thread, when dropped, that the loop ended.
struct StopBound(Arc<std::sync::atomic::AtomicBool>);

impl Drop for StopBound {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// How long a replica waits at start for the election to say whether it
/// leads, before it says anything.
const ELECTION_SETTLE: Duration = Duration::from_secs(2);

/// How often the watcher probes Prometheus between passes.
const PROBE_EVERY: Duration = Duration::from_secs(1);

pub fn run(a: &ApplyRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    let w = a.watch.as_ref().expect("a --watch request");
    let ctx = Arc::new(LiveCtx::connect(&a.spec.mesh)?);
    let wait = a.wait.as_ref().map_or(Duration::ZERO, |w| w.limit);
    let metrics = Metrics::new(w.interval * 3 + wait + Duration::from_secs(60));
    if let Some(addr) = w.metrics_addr {
        let bound = metrics::serve(&ctx.rt, addr, metrics.clone())?;
        writeln!(p.err, "serving /metrics and /healthz on {bound}")?;
    }
    let mut election = match &w.lease {
        Some((ns, name)) => Some(
            ctx.rt
                .block_on(ctx.live.elect(ns, name, &w.identity, LEASE_DURATION))
                .map_err(|f| anyhow::anyhow!(f.to_string()))?,
        ),
        None => None,
    };
    if let Some(e) = &mut election {
        // The election's first read decides most starts: wait for it, so
        // that a replica that leads does not first say it follows.
        let _ = ctx
            .rt
            .block_on(async { tokio::time::timeout(ELECTION_SETTLE, e.leading()).await });
    }
    let stop = Interrupt::install();
    let _bound = bound_stop(stop.handle(), w.output);
    let mut watcher = Watcher {
        a,
        w,
        ctx,
        metrics,
        stop: &stop,
        cursor: Cursor::new(w.prune_after),
        ledger: Ledger::default(),
        istiods: None,
        election,
        led: None,
        followed: false,
        said: BTreeSet::new(),
        passes: 0,
        started: Instant::now(),
        outside_series: None,
        last_error: None,
        skips: Default::default(),
    };
    emit(
        &Event::new("started").message(watcher.describe()),
        w.output,
        p,
    )?;
    let mut heartbeat = w
        .heartbeat
        .map(|every| Heartbeat::new(every, Instant::now()));
    while !stop.requested() {
        let began = Instant::now();
        let leading = watcher.leading(p)?;
        if let Some(h) = heartbeat.as_mut() {
            if let Some(e) = h.due(began, watcher.metrics.writes(), leading) {
                emit(&e, w.output, p)?;
            }
        }
        if !leading {
            watcher.follow()?;
            continue;
        }
        // What this pass reads is kept only if its writes settle.
        let read_from = watcher.cursor.clone();
        match watcher.pass(true, p) {
            Ok(settled) => {
                watcher.metrics.pass(true);
                watcher.last_error = None;
                if settled == Settled::No {
                    watcher.cursor = read_from;
                }
            }
            // A first pass that fails is a setup problem: say it and stop
            // (with -o json also on stdout, where the events go). Not so
            // for a replica that followed first: it takes over because the
            // leader is gone, often in the same outage, and retries as the
            // leader would have.
            Err(e) if watcher.passes == 0 && !watcher.followed => {
                if w.output == EventOutput::Json {
                    let m = format!("{e:#}; the first pass failed, so the watcher stops");
                    emit(&Event::new("pass-error").message(m), w.output, p)?;
                }
                return Err(e);
            }
            Err(e) => {
                watcher.metrics.pass(false);
                watcher.istiods = None;
                let said = pass_error(&mut watcher.last_error, format!("{e:#}"));
                // Read again next pass what this one read, and narrow
                // nothing on a silence a failed source may have caused.
                watcher.cursor = read_from;
                let now = watcher.started.elapsed().as_secs();
                watcher.ledger.restart_clock(now);
                emit(&Event::new("pass-error").message(said), w.output, p)?;
            }
        }
        watcher.passes += 1;
        if let Some(h) = heartbeat.as_mut() {
            h.pass(watcher.last_error.is_none());
        }
        watcher.idle_until(began + w.interval);
    }
    if let Some(e) = watcher.election.take() {
        // Hand the Lease over now rather than when it expires.
        if let Err(f) = watcher.ctx.rt.block_on(e.release()) {
            writeln!(p.err, "warning: {f}")?;
        }
    }
    emit(
        &Event::new("stopped").message(format!("after {} passes", watcher.passes)),
        w.output,
        p,
    )?;
    Ok(Outcome::Ok)
}

impl Watcher<'_> {
    fn describe(&self) -> String {
        let mut s = format!(
            "a pass every {}",
            crate::duration::show_duration(self.w.interval)
        );
        match self.w.prune_after {
            Some(d) => {
                s += &format!(
                    ", hosts unseen for {} removed",
                    crate::duration::show_duration(d)
                )
            }
            None => s += ", never narrowing (no --prune-after)",
        }
        s
    }

    /// Whether this replica writes this pass; says when that changes.
    fn leading(&mut self, p: &mut Printer<'_>) -> Result<bool> {
        self.metrics.alive();
        let leading = self.election.as_ref().is_none_or(Election::is_leader);
        self.metrics.leader(leading);
        if self.election.is_some() && self.led != Some(leading) {
            let e = if leading {
                Event::new("leading")
                    .message(format!("{} holds the Lease and writes", self.w.identity))
            } else if self.election.as_ref().is_some_and(Election::twin) {
                Event::new("following").message(format!(
                    "{} waits: the Lease is held under this same identity by another process (a replica started with the same --identity, or this one's previous run); it leads once that holder stops renewing. Give each replica its own --identity",
                    self.w.identity
                ))
            } else {
                Event::new("following").message(format!(
                    "{} waits: another replica holds the Lease",
                    self.w.identity
                ))
            };
            emit(&e, self.w.output, p)?;
            // A replica that leads again starts afresh: what it read as a
            // follower (nothing) is no guide to what changed meanwhile. So
            // are the times it last saw each host: hosts called while it
            // followed would look silent since then, and be narrowed at
            // once (the watch-faults soak, seed 41). Forgotten, each counts
            // as seen when it first looks again, as at start.
            self.cursor = Cursor::new(self.w.prune_after);
            self.ledger = Ledger::default();
            self.istiods = None;
        }
        self.led = Some(leading);
        self.followed |= !leading;
        Ok(leading)
    }

    /// Waits, as a follower, until this replica may lead, the interval
    /// passes (to stay healthy) or a signal comes.
    /// An election that ended for a cause retrying cannot fix (RBAC,
    /// credentials) is an error.
    fn follow(&mut self) -> Result<()> {
        let (Some(e), stop, interval) = (self.election.as_mut(), self.stop, self.w.interval) else {
            return Ok(());
        };
        self.ctx.rt.block_on(async {
            tokio::select! {
                r = e.leading() => r.map_err(|f| anyhow::anyhow!(f.to_string())),
                () = tokio::time::sleep(interval) => Ok(()),
                () = stop.wait() => Ok(()),
            }
        })
    }

    /// Sleeps until `next` or a signal. With `--prometheus`, probes it
    /// every [`PROBE_EVERY`] for the series of calls that left through
    /// `PassthroughCluster` or `BlackHoleCluster`, and ends early when
    /// there are more than when the last pass began: a new dependency then
    /// waits for a scrape, not for the rest of the interval. A probe that
    /// fails is ignored (the pass at `next` reports a Prometheus that is
    /// down).
    fn idle_until(&mut self, next: Instant) {
        let url = self.a.spec.mesh.prometheus().map(str::to_string);
        loop {
            let now = Instant::now();
            if now >= next || self.stop.requested() {
                return;
            }
            let step = match url {
                Some(_) => (next - now).min(PROBE_EVERY),
                None => next - now,
            };
            let stop = self.stop;
            self.ctx.rt.block_on(async {
                tokio::select! {
                    () = tokio::time::sleep(step) => {}
                    () = stop.wait() => {}
                }
            });
            let (Some(url), Some(before)) = (&url, self.outside_series) else {
                continue;
            };
            if crate::prometheus::outside_series(url).is_ok_and(|n| n > before) {
                self.metrics.early_pass();
                return;
            }
        }
    }

    /// Prints the diagnostics of `buf` not printed before.
    fn say(&mut self, buf: &[u8], p: &mut Printer<'_>) -> Result<()> {
        for line in String::from_utf8_lossy(buf).lines() {
            if self.said.insert(line.to_string()) {
                writeln!(p.err, "{line}")?;
            }
        }
        Ok(())
    }

    fn pass(&mut self, leading: bool, p: &mut Printer<'_>) -> Result<Settled> {
        let read_at = Timestamp::now();
        if let Some(url) = self.a.spec.mesh.prometheus() {
            // Before the read: a series that appears during it starts the
            // next pass early, and one the read saw does too, harmlessly.
            self.outside_series = crate::prometheus::outside_series(url).ok();
        }
        let mut buf = Vec::new();
        let world = World::load_live_in(
            &self.a.spec.mesh,
            self.ctx.clone(),
            Some(&mut self.cursor),
            &mut buf,
        );
        self.say(&buf, p)?;
        let world = world?;
        let recs = world.recommend(&self.a.spec)?;
        let empty = Default::default();
        let obs = world.obs.as_ref().unwrap_or(&empty);
        let settings = PassSettings {
            now: self.started.elapsed().as_secs(),
            prune_after: self.w.prune_after.map(|d| d.as_secs()),
            include: self.a.spec.include.clone(),
        };
        let plan = plan::plan(&world.snap, obs, &recs, &mut self.ledger, &settings);
        for (_, e) in &plan.outside {
            self.metrics.outside(e.meets.as_str(), 1);
        }
        for c in &plan.conflicts {
            emit(&conflict_event(c), self.w.output, p)?;
        }
        for m in &plan.user_owned {
            let mut e = Event::new("user-owned").sidecar(&m.namespace, &m.sidecar);
            e.hosts = m.missing.clone();
            e.message = Some(format!("{} calls these hosts outside the scope of a Sidecar meshscope does not own; it is left to its owner", m.workload));
            emit(&e, self.w.output, p)?;
        }
        if !leading {
            return Ok(Settled::Yes);
        }
        let mut settled = Settled::Yes;
        if !plan.widen.is_empty() || !plan.narrow.is_empty() {
            if self.istiods.is_none() {
                self.istiods = Some(connect_for_wait(&self.ctx, self.a)?);
            }
            let widened = self.write(&world, &recs, &plan.widen, read_at, p)?;
            settled = widened.settled;
            // Narrow only once every widening of the pass is confirmed.
            if widened.confirmed && !plan.narrow.is_empty() && !self.stop.requested() {
                settled = self.write(&world, &recs, &plan.narrow, read_at, p)?.settled;
            }
        }
        if self.a.prune && !self.stop.requested() {
            let mut rows = Vec::new();
            prune(&Cluster::of(&world)?, self.a.dry_run, &mut rows);
            for SidecarRow {
                result,
                sidecar,
                reason,
            } in rows
            {
                let e = Event::new(if result == ApplyResult::Pruned {
                    "pruned"
                } else {
                    "failed"
                })
                .sidecar(&sidecar.namespace, &sidecar.name);
                let e = if reason.is_empty() {
                    e
                } else {
                    e.message(reason)
                };
                emit(&e, self.w.output, p)?;
            }
        }
        Ok(settled)
    }

    /// Writes `writes` and waits for istiod; says what happened to each.
    fn write(
        &mut self,
        world: &World,
        recs: &[Recommendation],
        writes: &[plan::Write],
        read_at: Timestamp,
        p: &mut Printer<'_>,
    ) -> Result<Written> {
        if writes.is_empty() {
            return Ok(Written::DONE);
        }
        // The pass read for a while: write only if this replica still leads
        // (the next leader reads afresh, so the read is settled here).
        if self.election.as_ref().is_some_and(|e| !e.is_leader()) {
            return Ok(Written {
                confirmed: false,
                settled: Settled::Yes,
            });
        }
        let desired: Vec<Recommendation> = writes
            .iter()
            .map(|wr| with_object(&recs[wr.rec], &wr.sidecar))
            .collect();
        let pass = write_pass(
            &Cluster::of(world)?,
            &desired,
            &WriteSettings::of(self.a),
            self.istiods.as_deref_mut(),
            false,
            self.stop,
            p,
        )?;
        let confirmed_at = Timestamp::now();
        let all = pass.progress.waits.timed_out.is_empty()
            && pass.progress.waits.not_connected.is_empty()
            && !self.stop.requested();
        for wr in writes {
            self.report(world, recs, wr, &pass, all, read_at, confirmed_at, p)?;
        }
        if !pass.progress.waits.timed_out.is_empty() {
            let e = Event::new("not-confirmed").message(format!(
                "istiod did not confirm within {}: {}; narrowing waits for a pass whose widenings are confirmed",
                self.a.wait.as_ref().map(|w| w.given.as_str()).unwrap_or_default(),
                pass.progress.waits.timed_out.join(", ")
            ));
            emit(&e, self.w.output, p)?;
        }
        let ended = pass
            .results
            .iter()
            .all(|r| !matches!(r.result, ApplyResult::Failed | ApplyResult::Skipped));
        Ok(Written {
            confirmed: all && ended,
            settled: if all { Settled::Yes } else { Settled::No },
        })
    }

    /// The event (and the metrics) of one write.
    #[allow(clippy::too_many_arguments)]
    fn report(
        &mut self,
        world: &World,
        recs: &[Recommendation],
        wr: &plan::Write,
        pass: &Pass,
        confirmed: bool,
        read_at: Timestamp,
        confirmed_at: Timestamp,
        p: &mut Printer<'_>,
    ) -> Result<()> {
        let Some(SidecarRow {
            result: res,
            reason: why,
            ..
        }) = pass.results.iter().find(|r| r.sidecar == wr.key)
        else {
            return Ok(()); // not written: interrupted
        };
        let (ns, name) = (&wr.key.namespace, &wr.key.name);
        let mut e = match res {
            ApplyResult::Created | ApplyResult::Configured => match &wr.change {
                Change::Create { hosts } => Event {
                    hosts: hosts.clone(),
                    ..Event::new("created")
                },
                Change::Widen { added } => Event {
                    hosts: added.clone(),
                    ..Event::new("widened")
                },
                Change::Narrow { removed } => Event {
                    hosts: removed.clone(),
                    ..Event::new("narrowed")
                },
            },
            ApplyResult::Unchanged | ApplyResult::Pruned => {
                self.skips.remove(&wr.key);
                return Ok(());
            }
            ApplyResult::Skipped | ApplyResult::Failed => {
                self.metrics.write_failed(1);
                let word = if *res == ApplyResult::Skipped {
                    "skipped"
                } else {
                    "failed"
                };
                let why = match why.strip_suffix(FORCE_HINT) {
                    Some(conflict) => format!("{conflict}; the watcher skips this Sidecar while the edit stands: take the fields over once with `kubectl meshscope apply -n {ns} --force-conflicts`, at every pass with `apply --watch --force-conflicts`, or undo the edit (audit: MS0021)"),
                    None => why.clone(),
                };
                // A hand edit conflicts pass after pass: said once while
                // it stands.
                if self.skips.get(&wr.key) == Some(&why) {
                    return Ok(());
                }
                self.skips.insert(wr.key.clone(), why.clone());
                return emit(
                    &Event::new(word).sidecar(ns, name).message(why),
                    self.w.output,
                    p,
                );
            }
        };
        self.skips.remove(&wr.key);
        e = e.sidecar(ns, name);
        e.met = wr
            .outside
            .iter()
            .map(|o| format!("{}: {}", o.meets.as_str(), o.destination))
            .collect();
        if confirmed {
            e.confirmed_in = Some(pass.progress.waits.elapsed.as_secs_f64());
        }
        match wr.change {
            Change::Narrow { .. } => self.metrics.narrowed(1),
            _ => {
                self.metrics.widened(1);
                if confirmed {
                    let first = self.first_sample(world, &recs[wr.rec]).unwrap_or(read_at);
                    let secs = confirmed_at.duration_since(first).as_secs_f64();
                    self.metrics.scope_latency(secs.max(0.0));
                }
            }
        }
        emit(&e, self.w.output, p)
    }

    /// The first sign this pass had of one of `r`'s workloads calling
    /// outside its scope: its pods' first such pod-log line, or the first
    /// second Prometheus held a new such series of the workload.
    fn first_sample(&self, world: &World, r: &Recommendation) -> Option<Timestamp> {
        let snap = &world.snap;
        let from_prometheus = r.workloads.iter().filter_map(|w| {
            let wl = &snap.workloads[*w];
            self.cursor
                .prometheus_first_outside
                .get(&format!("{}/{}", wl.namespace, wl.name))
                .copied()
        });
        snap.pods
            .iter()
            .filter(|pod| r.workloads.contains(&pod.workload))
            .filter_map(|pod| {
                self.cursor
                    .logs
                    .first_outside
                    .get(&format!("{}/{}", pod.namespace, pod.name))
                    .copied()
            })
            .chain(from_prometheus)
            .min()
    }
}

/// The pass-error message for `error`: whole the first time, and
/// shortened while the passes after fail with the same error (`last`: the
/// error of the last pass and how many in a row had it). An RBAC denial
/// names its fix in a long message; once is enough.
fn pass_error(last: &mut Option<(String, u64)>, error: String) -> String {
    match last {
        Some((was, n)) if *was == error => {
            *n += 1;
            let first: String = error
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(160)
                .collect();
            format!("as in the last pass ({n} in a row): {first}…; retrying next pass")
        }
        _ => {
            let said = format!("{error}; retrying next pass");
            *last = Some((error, 1));
            said
        }
    }
}

/// The event of a managed Sidecar among several that select a workload.
fn conflict_event(c: &plan::Conflict) -> Event {
    let applied = &c.sidecars[0];
    let whose = if c.managed.contains(applied) {
        "meshscope's, so the others are ignored"
    } else {
        "not meshscope's, so the scope meshscope writes is ignored"
    };
    let m = format!(
        "{} Sidecars select {} ({}); istiod applies only {applied}, the oldest: {whose}. Keep one: delete the others (kubectl delete sidecar -n {} NAME), or narrow their selectors (audit: MS0004)",
        c.sidecars.len(),
        c.workload,
        c.sidecars.join(", "),
        c.namespace
    );
    Event::new("conflict")
        .sidecar(&c.namespace, &c.managed[0])
        .message(m)
}

/// `r` with `sc` as the Sidecar to write. The plan writes only a change
/// of scope, so a recommendation that found the live Sidecar unchanged (a
/// narrowing: the recommendation still holds the stale hosts) becomes an
/// update; apply would skip it otherwise.
fn with_object(r: &Recommendation, sc: &meshscope_shared::istio::Sidecar) -> Recommendation {
    let mut r = r.clone();
    if let RecOutcome::Sidecar { object, action, .. } = &mut r.outcome {
        **object = sc.clone();
        if *action == Action::Unchanged {
            *action = Action::Update;
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conflict_says_which_sidecar_istiod_applies_and_how_to_keep_one() {
        let c = plan::Conflict {
            namespace: "shop".into(),
            workload: "Deployment/shop/web".into(),
            sidecars: vec!["web-own".into(), "web-deployment".into()],
            managed: vec!["web-deployment".into()],
        };
        let e = conflict_event(&c);
        assert_eq!(e.event, "conflict");
        assert_eq!(e.sidecar.as_deref(), Some("web-deployment"));
        assert_eq!(
            e.message.as_deref(),
            Some("2 Sidecars select Deployment/shop/web (web-own, web-deployment); istiod applies only web-own, the oldest: not meshscope's, so the scope meshscope writes is ignored. Keep one: delete the others (kubectl delete sidecar -n shop NAME), or narrow their selectors (audit: MS0004)")
        );
    }

    /// A narrowing: the recommendation saw the live scope unchanged (it
    /// still holds the stale host), the plan removes a host. Apply skips
    /// an unchanged recommendation, so the write must be an update.
    #[test]
    fn a_planned_write_of_an_unchanged_recommendation_is_an_update() {
        let sc = |hosts: &[&str]| {
            meshscope_shared::recommend::with_hosts(
                &Default::default(),
                hosts.iter().map(|h| h.to_string()).collect(),
            )
        };
        let r = Recommendation {
            workloads: Vec::new(),
            namespace: "shop".into(),
            outcome: RecOutcome::Sidecar {
                object: Box::new(sc(&["shop/db", "shop/web"])),
                action: Action::Unchanged,
                added: Vec::new(),
                removed: Vec::new(),
            },
            dependencies: Vec::new(),
            hinted: Vec::new(),
            not_visible: Vec::new(),
            required: Vec::new(),
            unknown: Vec::new(),
            edges: Vec::new(),
            before: Default::default(),
            after: None,
            requests: 0,
            notes: Vec::new(),
        };
        let narrowed = with_object(&r, &sc(&["shop/web"]));
        assert!(!narrowed.unchanged());
        let RecOutcome::Sidecar { object, action, .. } = &narrowed.outcome else {
            panic!("{:?}", narrowed.outcome)
        };
        assert_eq!(*action, Action::Update);
        assert_eq!(object.spec.egress[0].hosts, ["shop/web"]);
    }

    #[test]
    fn a_pass_error_is_said_whole_once_and_shortened_while_it_repeats() {
        let mut last = None;
        let long = format!(
            "RBAC forbids list on pods\n{}",
            "grant it: ...\n".repeat(100)
        );
        let first = pass_error(&mut last, long.clone());
        assert_eq!(first, format!("{long}; retrying next pass"));
        let again = pass_error(&mut last, long.clone());
        assert_eq!(
            again,
            "as in the last pass (2 in a row): RBAC forbids list on pods…; retrying next pass"
        );
        assert!(pass_error(&mut last, long.clone()).contains("(3 in a row)"));
        // Another error is said whole.
        let other = pass_error(&mut last, "istiod did not answer".into());
        assert_eq!(other, "istiod did not answer; retrying next pass");
        // After a pass that did not fail (the caller clears `last`), whole again.
        last = None;
        assert_eq!(pass_error(&mut last, long.clone()), first);
    }
}
