//! The control-plane events of the soak: its API server killed and started
//! again while the webhook's /readyz and /metrics are watched, then the
//! flip namespace's policy changed twice.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meshscope_test_support::net::admin_get;

use crate::control::{kill_apiserver, kubectl, restart_apiserver};
use crate::records::Observed;
use crate::settings::{ADMIN_READ, NS_FLIP};
use crate::timeline::{FlipState, Plan};

/// What the events task needs: the plan and the clock, the control plane,
/// the webhook's admin port, and where to say what it saw and did.
pub struct Events {
    pub start: Instant,
    pub plan: Arc<Plan>,
    pub flip: Arc<Mutex<FlipState>>,
    pub observed: Arc<Mutex<Observed>>,
    /// The control plane's state directory.
    pub state: PathBuf,
    pub kubeconfig: PathBuf,
    pub admin_port: u16,
}

/// One look at the webhook's admin port.
struct Probe {
    code: u16,
    body: String,
    metrics: String,
}

impl Events {
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            self.outage().await;
            self.flips().await;
        })
    }

    fn at(&self, s: f64) -> Instant {
        self.start + Duration::from_secs_f64(s)
    }

    /// kube-apiserver killed at the plan's time, started again at its
    /// restart time; /readyz and /metrics watched until the caches are
    /// fresh again (or the flip phase begins).
    async fn outage(&self) {
        let start = self.start;
        tokio::time::sleep_until(self.at(self.plan.kill).into()).await;
        let killed = Instant::now();
        let (exe, argv) = tokio::task::spawn_blocking({
            let state = self.state.clone();
            move || kill_apiserver(&state)
        })
        .await
        .unwrap()
        .expect("kill kube-apiserver");
        eprintln!(
            "[soak] t={:.1}s kube-apiserver killed (SIGKILL)",
            start.elapsed().as_secs_f64()
        );
        // Watch /readyz and /metrics while it is down and after.
        let restart_at = self.at(self.plan.restart);
        let mut restarted: Option<Instant> = None;
        let mut api_ready = false;
        loop {
            let now = Instant::now();
            if restarted.is_none() && now >= restart_at {
                let (s, e, a) = (self.state.clone(), exe.clone(), argv.clone());
                tokio::task::spawn_blocking(move || restart_apiserver(&s, &e, &a))
                    .await
                    .unwrap()
                    .expect("restart kube-apiserver");
                restarted = Some(Instant::now());
                eprintln!(
                    "[soak] t={:.1}s kube-apiserver started again",
                    start.elapsed().as_secs_f64()
                );
            }
            let probe = self.probe().await;
            let newly_ready = match restarted {
                Some(_) if !api_ready => {
                    let kc = self.kubeconfig.clone();
                    tokio::task::spawn_blocking(move || {
                        kubectl(&kc, &["get", "--raw", "/readyz"], None).is_ok()
                    })
                    .await
                    .unwrap()
                }
                _ => false,
            };
            if newly_ready {
                api_ready = true;
            }
            if self.observe(&probe, killed, restarted, newly_ready) {
                break;
            }
            if now > self.at(self.plan.flip_phase) {
                eprintln!("[soak] caches did not turn fresh before the flip phase");
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// /readyz, then /metrics.
    async fn probe(&self) -> Probe {
        let admin_port = self.admin_port;
        let (code, body) =
            tokio::task::spawn_blocking(move || admin_get(admin_port, "/readyz", ADMIN_READ))
                .await
                .unwrap();
        let (_, metrics) =
            tokio::task::spawn_blocking(move || admin_get(admin_port, "/metrics", ADMIN_READ))
                .await
                .unwrap();
        Probe {
            code,
            body,
            metrics,
        }
    }

    /// Notes what `p` says in `observed`; true once the caches are fresh
    /// again after the restart.
    fn observe(
        &self,
        p: &Probe,
        killed: Instant,
        restarted: Option<Instant>,
        newly_ready: bool,
    ) -> bool {
        let start = self.start;
        let (code, body, metrics) = (p.code, &p.body, &p.metrics);
        // Fresh only on a clear answer: 200 "ok" and the gauge at 0
        // (a failed probe says nothing).
        let fresh_reply = code == 200
            && body.trim() == "ok"
            && metrics
                .lines()
                .any(|l| l == "meshscope_webhook_cache_stale 0");
        let stale = body.contains("stale");
        // The sample line, not the HELP text (which starts with "1 while").
        let gauge = metrics
            .lines()
            .any(|l| l == "meshscope_webhook_cache_stale 1");
        let mut o = self.observed.lock().unwrap();
        if code != 200 {
            o.readyz_non_200_during_outage += 1;
        }
        if stale && o.stale_seen_after_kill_s.is_none() {
            o.stale_seen_after_kill_s = Some(killed.elapsed().as_secs_f64());
            o.readyz_stale_body = Some(body.trim().to_string());
            eprintln!(
                "[soak] t={:.1}s /readyz: {} {}",
                start.elapsed().as_secs_f64(),
                code,
                body.trim()
            );
        }
        if gauge {
            o.metrics_stale_gauge_seen = true;
        }
        if let Some(r) = restarted {
            if newly_ready {
                o.apiserver_ready_after_restart_s = Some(r.elapsed().as_secs_f64());
            }
            if fresh_reply && o.stale_seen_after_kill_s.is_some() {
                o.fresh_again_after_restart_s = Some(r.elapsed().as_secs_f64());
                eprintln!(
                    "[soak] t={:.1}s caches fresh again ({:.1} s after the restart)",
                    start.elapsed().as_secs_f64(),
                    r.elapsed().as_secs_f64()
                );
                return true;
            }
        }
        false
    }

    /// The flip namespace's policy to enforce and back to warn, at the
    /// plan's times, each change noted with when kubectl began and ended.
    async fn flips(&self) {
        for (i, &t) in self.plan.flips.iter().enumerate() {
            tokio::time::sleep_until(self.at(t).into()).await;
            let to = i.is_multiple_of(2);
            let policy = if to { "enforce" } else { "warn" };
            let started = Instant::now();
            let kc = self.kubeconfig.clone();
            tokio::task::spawn_blocking(move || {
                kubectl(
                    &kc,
                    &[
                        "label",
                        "namespace",
                        NS_FLIP,
                        &format!("meshscope.io/policy={policy}"),
                        "--overwrite",
                    ],
                    None,
                )
            })
            .await
            .unwrap()
            .expect("flip the policy label");
            let done = Instant::now();
            self.flip.lock().unwrap().changes.push((started, done, to));
            eprintln!(
                "[soak] t={:.1}s {NS_FLIP} policy -> {policy} (kubectl took {} ms)",
                self.start.elapsed().as_secs_f64(),
                (done - started).as_millis()
            );
        }
    }
}
