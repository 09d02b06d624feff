//! Leader election on a `coordination.k8s.io` Lease, for `apply --watch`
//! run as several replicas: the one that holds the Lease writes, the
//! others wait.
//!
//! The election itself is kube-lease-manager's (0.13, on kube 5 and
//! k8s-openapi 0.29 like the rest of the workspace, MIT). Of the crates
//! that offer one, it is the only one on kube 5: kube-coordinate 2.0 is on
//! kube 2, kubert 0.25's `lease` feature on kube 1.1 and k8s-openapi 0.25
//! (each would pull a second kube), and kube-runtime 5 has no election.
//!
//! What the crate guarantees (kube-lease-manager 0.13.1
//! `src/manager.rs`, `src/state.rs`): a replica takes a free Lease by
//! server-side apply under a field manager of its own, so two replicas
//! cannot both make themselves its holder (the second gets 409 Conflict
//! and backs off); the holder renews `grace` seconds before the Lease
//! expires; a replica takes over a Lease that another holds only once it
//! has expired by its own clock; and releasing clears the holder. Its
//! followers sleep until the holder's lease would expire, so by itself a
//! released Lease is taken over only then.
//!
//! What this file adds: every poll period (a quarter of `grace`, at most
//! a second) it reads the Lease, which gives
//!
//! - a bound on leading: [`Election::is_leader`] is true only while the
//!   crate holds the Lease *and* the Lease as last read names this replica
//!   with `renewTime + leaseDurationSeconds - grace/2` still ahead, counted
//!   on this process's monotonic clock from when that read was sent. It
//!   turns false by itself when that time passes, even if every call to
//!   the API server hangs; a failed renewal turns it false at once;
//! - a quick handover: a follower that reads a released Lease starts a
//!   fresh manager, which takes it at once (within about a poll period of
//!   the release, not a lease duration);
//! - no twin leaders: a replica that finds the Lease held, unexpired,
//!   under its own identity when it joins did not take it (another process
//!   runs with the same identity, or this replica's previous run held it):
//!   it follows until that holder stops renewing and the Lease expires,
//!   and [`Election::twin`] says so. The crate alone would take such a
//!   Lease for its own and renew it beside the other holder.
//!
//! What cannot be guaranteed: the API server does not fence writes on a
//! Lease, so a writer checks [`Election::is_leader`] before each write, and
//! a replica paused between that check and the end of its write (a stopped
//! process, a starved CPU, a write slow to answer) can still write after
//! its lease expired and another replica took over, until it checks again.
//! Clocks of different nodes that differ by more than `grace/2` shorten or
//! void the margin (followers judge expiry by their own clocks against the
//! `renewTime` the holder wrote by its own).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::client::{qualified, Live};
use super::failure::{ApiFailure, FailureKind};
use super::permissions::LEASE_GROUP;

/// How long a Lease holds without renewal, unless told otherwise:
/// client-go's default, renewed after two thirds of it.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);

/// `leases.coordination.k8s.io`.
fn resource() -> String {
    qualified(LEASE_GROUP, "leases")
}

/// A Lease's timing, in the whole seconds the Lease API counts in.
#[derive(Clone, Copy, Debug)]
struct Timing {
    duration: u64,
    /// Renew this long before the lease expires.
    grace: u64,
    /// How often the Lease is read.
    poll: Duration,
}

impl Timing {
    fn new(lease: Duration) -> Timing {
        let duration = lease.as_secs().max(2);
        let grace = (duration / 3).max(1);
        Timing {
            duration,
            grace,
            poll: Duration::from_millis((grace * 250).min(1000)),
        }
    }

    /// Leading ends this long before the Lease's own expiry: the clock
    /// skew between nodes tolerated.
    fn margin(&self) -> Duration {
        Duration::from_millis(self.grace * 500)
    }
}

/// Who holds a Lease, as read.
#[derive(Debug, PartialEq, Eq)]
enum Holder {
    /// This replica, leading until then (`None`: already expired).
    Me(Option<Instant>),
    Other,
    Free,
}

/// Who holds `lease`, read by a request sent at `sent` (monotonic and
/// wall clock), for replica `identity`.
fn holder(lease: &Lease, identity: &str, sent: (Instant, SystemTime), margin: Duration) -> Holder {
    let Some(spec) = &lease.spec else {
        return Holder::Free;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => Holder::Free,
        Some(h) if h != identity => Holder::Other,
        Some(_) => {
            let until = match (&spec.renew_time, spec.lease_duration_seconds) {
                (Some(renew), Some(secs)) if secs > 0 => {
                    let expiry =
                        SystemTime::from(renew.0) + Duration::from_secs(secs.unsigned_abs().into());
                    expiry
                        .duration_since(sent.1)
                        .ok()
                        .and_then(|left| left.checked_sub(margin))
                        .map(|left| sent.0 + left)
                }
                _ => None,
            };
            Holder::Me(until)
        }
    }
}

/// The verb a 403 names (`... cannot patch resource "leases" ...`).
fn denied_verb(message: &str) -> Option<&'static str> {
    let (_, rest) = message.split_once(" cannot ")?;
    let word = rest.split_whitespace().next()?;
    [
        "get", "create", "patch", "update", "list", "watch", "delete",
    ]
    .into_iter()
    .find(|v| *v == word)
}

/// A kube-lease-manager failure as an [`ApiFailure`] on the Lease in
/// `ns`; `verb`: what it was doing, when the server does not say.
fn failure(live: &Live, e: LeaseManagerError, verb: &'static str, ns: &str) -> ApiFailure {
    match e {
        LeaseManagerError::KubeError(e) => {
            let verb = match &e {
                kube::Error::Api(s) => denied_verb(&s.message).unwrap_or(verb),
                _ => verb,
            };
            ApiFailure::from_kube(e, verb, &resource(), Some(ns), &live.server)
        }
        other => ApiFailure {
            verb,
            resource: resource(),
            namespace: Some(ns.to_string()),
            server: live.server.clone(),
            kind: FailureKind::Other(other.to_string()),
        },
    }
}

/// Failures that trying again does not mend: no permission, credentials
/// or trust, no namespace.
fn fatal(f: &ApiFailure) -> bool {
    matches!(
        f.kind,
        FailureKind::Forbidden(_)
            | FailureKind::Unauthorized
            | FailureKind::Tls(_)
            | FailureKind::NotFound(_)
    )
}

/// Which Lease, for whom, and how it is timed.
#[derive(Clone)]
struct Ballot {
    live: Live,
    ns: String,
    name: String,
    identity: String,
    timing: Timing,
    /// Set while the Lease is held under this identity by someone else.
    twin: Arc<AtomicBool>,
}

impl Ballot {
    /// A manager for the Lease, which it reads first (and creates when
    /// missing).
    async fn manager(&self) -> Result<LeaseManager, ApiFailure> {
        let t = self.timing;
        let build = LeaseManagerBuilder::new(self.live.client.clone(), &self.name)
            .with_namespace(&self.ns)
            .with_identity(&self.identity)
            .with_create_mode(LeaseCreateMode::AutoCreate)
            .with_duration(t.duration)
            .with_grace(t.grace)
            .build();
        self.live
            .bounded("get", &resource(), Some(&self.ns), async {
                build
                    .await
                    .map_err(|e| failure(&self.live, e, "get", &self.ns))
            })
            .await
    }

    /// Who holds the Lease now.
    async fn read(&self, api: &Api<Lease>) -> Result<Holder, ApiFailure> {
        let sent = (Instant::now(), SystemTime::now());
        let got = self
            .live
            .bounded("get", &resource(), Some(&self.ns), async {
                api.get_opt(&self.name).await.map_err(|e| {
                    ApiFailure::from_kube(e, "get", &resource(), Some(&self.ns), &self.live.server)
                })
            })
            .await?;
        Ok(match got {
            Some(lease) => holder(&lease, &self.identity, sent, self.timing.margin()),
            None => Holder::Free,
        })
    }

    /// Follows while the Lease is held, unexpired, under this identity by
    /// a holder that is not this election (see the module's notes), read
    /// every poll period. Returns whether `stop` came meanwhile.
    async fn await_twin(
        &self,
        api: &Api<Lease>,
        stop: &mut oneshot::Receiver<()>,
    ) -> Result<bool, ApiFailure> {
        loop {
            let held = match self.read(api).await {
                Ok(Holder::Me(Some(until))) => Instant::now() < until,
                Ok(_) => false,
                Err(f) if fatal(&f) => return Err(f),
                Err(_) => false,
            };
            self.twin.store(held, Ordering::SeqCst);
            if !held {
                return Ok(false);
            }
            tokio::select! {
                _ = &mut *stop => return Ok(true),
                () = tokio::time::sleep(self.timing.poll) => {}
            }
        }
    }

    /// Gives the Lease up, if this replica holds it.
    async fn release(&self, m: &LeaseManager) -> Result<(), ApiFailure> {
        self.live
            .bounded("patch", &resource(), Some(&self.ns), async {
                m.release()
                    .await
                    .map_err(|e| failure(&self.live, e, "patch", &self.ns))
            })
            .await
    }

    /// Runs the election until `stop` (then releases) or a fatal
    /// failure, publishing on `tx` until when this replica leads.
    async fn run(
        self,
        first: LeaseManager,
        tx: watch::Sender<Option<Instant>>,
        mut stop: oneshot::Receiver<()>,
    ) -> Result<(), ApiFailure> {
        let api: Api<Lease> = Api::namespaced(self.live.client.clone(), &self.ns);
        let poll = self.timing.poll;
        let publish = |until: Option<Instant>| {
            tx.send_if_modified(|v| std::mem::replace(v, until) != until);
        };
        if self.await_twin(&api, &mut stop).await? {
            return Ok(());
        }
        let mut next = Some(first);
        loop {
            let m = match next.take() {
                Some(m) => m,
                None => match self.manager().await {
                    Ok(m) => m,
                    Err(f) if fatal(&f) => return Err(f),
                    Err(_) => {
                        tokio::select! {
                            _ = &mut stop => return Ok(()),
                            () = tokio::time::sleep(poll * 4) => continue,
                        }
                    }
                },
            };
            let built = Instant::now();
            // Whether the crate holds the Lease, and until when the Lease
            // as last read says this replica leads.
            let mut held = false;
            let mut until: Option<Instant> = None;
            let mut changed = Box::pin(m.changed());
            let mut poll_at = Instant::now();
            loop {
                tokio::select! {
                    biased;
                    r = &mut stop => {
                        // Stop writing first, then hand over (unless the
                        // Election was dropped: then the lease expires).
                        publish(None);
                        drop(changed);
                        return match r {
                            Ok(()) => self.release(&m).await,
                            Err(_) => Ok(()),
                        };
                    }
                    r = &mut changed => match r {
                        Ok(now) => {
                            held = now;
                            poll_at = Instant::now();
                            changed.set(m.changed());
                        }
                        Err(e) => {
                            // A renewal or a take-over failed: stop
                            // leading, and start again with a fresh read.
                            publish(None);
                            let f = failure(&self.live, e, "patch", &self.ns);
                            if fatal(&f) {
                                return Err(f);
                            }
                            break;
                        }
                    },
                    // A read in flight is dropped when another branch
                    // wins (a stop is not held up by a slow answer), and
                    // made again right away.
                    r = async {
                        tokio::time::sleep_until(poll_at.into()).await;
                        self.read(&api).await
                    } => {
                        poll_at = Instant::now() + poll;
                        match r {
                            Ok(Holder::Me(u)) => until = u,
                            Ok(Holder::Other) => until = None,
                            Ok(Holder::Free) => {
                                until = None;
                                // Released: the crate would only look again
                                // when the old holder's lease expires.
                                if !held && built.elapsed() > poll {
                                    break;
                                }
                            }
                            Err(f) if fatal(&f) => {
                                publish(None);
                                return Err(f);
                            }
                            // The deadline stands, and passes by itself.
                            Err(_) => {}
                        }
                    }
                }
                publish(if held { until } else { None });
            }
        }
    }
}

/// This replica's part in the election for one Lease: whether it leads,
/// waiting until it does, and giving the Lease up. Dropping it stops
/// renewing without releasing (the others take over once the lease
/// expires); [`Election::release`] hands over at once.
pub struct Election {
    /// Until when this replica leads (`None`: it follows).
    rx: watch::Receiver<Option<Instant>>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ApiFailure>>>,
    identity: String,
    ns: String,
    server: String,
    twin: Arc<AtomicBool>,
}

impl Live {
    /// Joins the election for Lease `ns/name` (created when missing) as
    /// `identity`, which must be unique among the replicas (the pod's
    /// name), with a lease of `lease` (whole seconds, at least 2;
    /// [`LEASE_DURATION`] is the usual). Fails when the Lease cannot be
    /// read or created (an RBAC denial names the permission); later
    /// failures that retrying does not mend end the election, and
    /// [`Election::changed`] returns them.
    pub async fn elect(
        &self,
        ns: &str,
        name: &str,
        identity: &str,
        lease: Duration,
    ) -> Result<Election, ApiFailure> {
        if identity.is_empty() {
            return Err(ApiFailure {
                verb: "patch",
                resource: resource(),
                namespace: Some(ns.to_string()),
                server: self.server.clone(),
                kind: FailureKind::Other(
                    "an election needs a non-empty identity, unique among the replicas (the pod's name)".into(),
                ),
            });
        }
        let twin = Arc::new(AtomicBool::new(false));
        let ballot = Ballot {
            live: self.clone(),
            ns: ns.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            timing: Timing::new(lease),
            twin: twin.clone(),
        };
        let first = ballot.manager().await?;
        let (tx, rx) = watch::channel(None);
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(ballot.run(first, tx, stopped));
        Ok(Election {
            rx,
            stop: Some(stop),
            task: Some(task),
            identity: identity.to_string(),
            ns: ns.to_string(),
            server: self.server.clone(),
            twin,
        })
    }
}

impl Election {
    /// Whether this replica leads now: cheap, and what a writer checks
    /// before each write (see the module's notes for what it guarantees).
    pub fn is_leader(&self) -> bool {
        self.rx.borrow().is_some_and(|until| Instant::now() < until)
    }

    /// The identity this replica runs for.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Whether this replica follows because it found the Lease held under
    /// its own identity by another holder (a replica started with the same
    /// identity, or this one's previous run, until its lease expires).
    pub fn twin(&self) -> bool {
        self.twin.load(Ordering::SeqCst)
    }

    /// Resolves when [`Election::is_leader`] changes from what it was at
    /// the call, with the new value; an error when the election ended on
    /// a failure that retrying does not mend.
    pub async fn changed(&mut self) -> Result<bool, ApiFailure> {
        let was = self.is_leader();
        loop {
            let until = *self.rx.borrow_and_update();
            let now = until.is_some_and(|u| Instant::now() < u);
            if now != was {
                return Ok(now);
            }
            let lapse = async {
                match until {
                    Some(u) if now => tokio::time::sleep_until(u.into()).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                r = self.rx.changed() => if r.is_err() {
                    return Err(self.ended().await);
                },
                () = lapse => {}
            }
        }
    }

    /// Resolves once this replica leads.
    pub async fn leading(&mut self) -> Result<(), ApiFailure> {
        while !self.is_leader() {
            self.changed().await?;
        }
        Ok(())
    }

    /// Stops leading and gives the Lease up at once, for a shutdown
    /// (SIGTERM) after the write in flight: another replica takes over
    /// within about a second.
    pub async fn release(mut self) -> Result<(), ApiFailure> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => self.joined(task.await),
            None => Ok(()),
        }
    }

    /// Why the election's task ended.
    async fn ended(&mut self) -> ApiFailure {
        let r = match self.task.take() {
            Some(task) => self.joined(task.await),
            None => Ok(()),
        };
        r.err()
            .unwrap_or_else(|| self.other("the election ended".into()))
    }

    fn joined(
        &self,
        r: Result<Result<(), ApiFailure>, tokio::task::JoinError>,
    ) -> Result<(), ApiFailure> {
        r.unwrap_or_else(|e| Err(self.other(format!("the election's task failed: {e}"))))
    }

    fn other(&self, why: String) -> ApiFailure {
        ApiFailure {
            verb: "patch",
            resource: resource(),
            namespace: Some(self.ns.clone()),
            server: self.server.clone(),
            kind: FailureKind::Other(why),
        }
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: Option<&str>, renewed_ago: Duration, secs: i32) -> Lease {
        let renew = SystemTime::now() - renewed_ago;
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                renew_time: Some(MicroTime(renew.try_into().unwrap())),
                lease_duration_seconds: Some(secs),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn timing_renews_after_two_thirds_and_reads_often() {
        let t = Timing::new(LEASE_DURATION);
        assert_eq!(
            (t.duration, t.grace, t.poll),
            (15, 5, Duration::from_secs(1))
        );
        let t = Timing::new(Duration::from_millis(500));
        assert_eq!((t.duration, t.grace), (2, 1));
        assert_eq!(t.poll, Duration::from_millis(250));
        assert!(t.grace < t.duration);
    }

    #[test]
    fn this_replica_leads_until_the_lease_expires_less_the_margin() {
        let renewed = lease(Some("a"), Duration::from_secs(1), 3);
        let sent = (Instant::now(), SystemTime::now());
        let margin = Duration::from_millis(500);
        let Holder::Me(Some(until)) = holder(&renewed, "a", sent, margin) else {
            panic!("a leads")
        };
        let left = until - sent.0;
        assert!(
            left > Duration::from_millis(1400) && left <= Duration::from_millis(1500),
            "{left:?}"
        );
        // Expired, or within the margin of it: not leading.
        for ago in [3, 10] {
            let l = lease(Some("a"), Duration::from_millis(ago * 1000 - 400), 3);
            assert_eq!(holder(&l, "a", sent, margin), Holder::Me(None));
        }
        let l = lease(Some("b"), Duration::ZERO, 3);
        assert_eq!(holder(&l, "a", sent, margin), Holder::Other);
        for free in [None, Some("")] {
            assert_eq!(
                holder(&lease(free, Duration::ZERO, 3), "a", sent, margin),
                Holder::Free
            );
        }
        assert_eq!(holder(&Lease::default(), "a", sent, margin), Holder::Free);
    }

    #[test]
    fn a_denial_names_its_verb() {
        let m = "leases.coordination.k8s.io \"w\" is forbidden: User \"bob\" cannot patch resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"x\"";
        assert_eq!(denied_verb(m), Some("patch"));
        assert_eq!(denied_verb("no such thing"), None);
    }
}
