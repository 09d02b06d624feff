//! The soak, phase by phase: the control plane and the webhook started,
//! the clients and the certificate rotation, the control-plane events,
//! the open-loop load until the webhook exits after SIGTERM, then the
//! figures.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use meshscope_e2e::cluster::Cluster;
use meshscope_test_support::net::{admin_get, free_port, rss_kib};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::client::{send_h1, send_h2, H2Pool, Job, Tls};
use crate::control::{cluster_up, setup_cluster};
use crate::events::Events;
use crate::figures::{report, Ended};
use crate::mix::{bodies, expect, judge, MIX};
use crate::pki::{client_config, new_ca, rotate, Pki};
use crate::records::{Outcome, Record};
use crate::settings::{Args, ADMIN_READ, SERVICE_ACCOUNT};
use crate::state::Soak;
use crate::timeline::{FlipState, Plan};

fn log(m: &str) {
    eprintln!("[soak] {m}");
}

/// The whole soak; whether every target was met.
pub async fn soak(args: Args) -> Result<bool> {
    let _ = std::fs::remove_dir_all(&args.work);
    std::fs::create_dir_all(args.work.join("tls"))?;
    log(&format!(
        "starting the control plane in {}",
        args.cluster_dir.display()
    ));
    let kubeconfig = cluster_up(&args.cluster_dir)?;
    setup_cluster(&kubeconfig)?;
    let cluster = Cluster {
        kubeconfig: kubeconfig.clone(),
    };
    let wh_kubeconfig = args.work.join("webhook.kubeconfig");
    std::fs::rename(
        cluster.impersonating(SERVICE_ACCOUNT, &args.work)?,
        &wh_kubeconfig,
    )?;

    let pki = new_ca()?;
    let tls_dir = args.work.join("tls");
    let first = rotate(&pki, &tls_dir, 0)?;
    let client = client_config(&pki)?;
    let webhook = start_webhook(&args, &wh_kubeconfig, &tls_dir).await?;

    let tls = Arc::new(Tls::new(client, webhook.port, first));
    let bodies = bodies();
    let plan = Arc::new(Plan::new(args.duration as f64));
    let flip = Arc::new(Mutex::new(FlipState::default()));
    let (sigterm_at, exited, observed) = (Arc::default(), Arc::default(), Arc::default());
    let (rec_tx, collector) = collect();
    // HTTP/1.1 workers take jobs from one queue.
    let (h1_tx, h1_rx) = mpsc::unbounded_channel::<Job>();
    let s = Soak {
        tls,
        bodies,
        plan,
        flip,
        sigterm_at,
        exited,
        observed,
        pid: webhook.child.id(),
        start: Instant::now(),
    };
    let finish = Arc::new(Finish {
        rec_tx: rec_tx.clone(),
        plan: s.plan.clone(),
        flip: s.flip.clone(),
        sigterm_at: s.sigterm_at.clone(),
        start: s.start,
    });
    let workers = s.h1_workers(&args, h1_rx, &finish);
    let h2 = Arc::new(H2Pool {
        slots: (0..args.h2_connections)
            .map(|_| tokio::sync::Mutex::new(None))
            .collect(),
    });
    let rotator = s.rotator(pki, tls_dir);
    let events = Events {
        start: s.start,
        plan: s.plan.clone(),
        flip: s.flip.clone(),
        observed: s.observed.clone(),
        state: args.cluster_dir.clone(),
        kubeconfig: kubeconfig.clone(),
        admin_port: webhook.admin_port,
    }
    .spawn();
    let ended = s.load(&args, webhook.child, &h1_tx, &h2, &finish).await?;
    drop(h1_tx);
    // Let the last answers and failures come in.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for w in workers {
        w.abort();
    }
    rotator.abort();
    events.abort();
    drop(finish);
    drop(rec_tx);
    let records = tokio::time::timeout(Duration::from_secs(10), collector).await??;
    Ok(report(&args, &s, &records, &ended))
}

/// The release webhook, serving and ready.
struct Webhook {
    child: Child,
    port: u16,
    admin_port: u16,
}

/// Starts the webhook on free loopback ports and waits for its /readyz.
async fn start_webhook(args: &Args, kubeconfig: &Path, tls_dir: &Path) -> Result<Webhook> {
    let (port, admin_port) = (free_port(), free_port());
    let wh_log = args.work.join("webhook.log");
    let mut webhook: Child = Command::new(&args.webhook)
        .env_clear()
        .env("KUBECONFIG", kubeconfig)
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--admin-listen=127.0.0.1:{admin_port}"))
        .arg(format!("--tls-cert={}", tls_dir.join("tls.crt").display()))
        .arg(format!("--tls-key={}", tls_dir.join("tls.key").display()))
        .arg("--stale-after-seconds=3")
        .arg("--log-level=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&wh_log)?)
        .spawn()
        .context("start the webhook")?;
    let pid = webhook.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while admin_get(admin_port, "/readyz", ADMIN_READ).0 != 200 {
        if Instant::now() > deadline || webhook.try_wait()?.is_some() {
            bail!(
                "the webhook did not get ready: {}",
                std::fs::read_to_string(&wh_log)?
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    log(&format!(
        "webhook ready (pid {pid}); {} req/s for {} s",
        args.rate, args.duration
    ));
    Ok(Webhook {
        child: webhook,
        port,
        admin_port,
    })
}

/// The records, as they come in, until every sender is gone.
fn collect() -> (mpsc::UnboundedSender<Record>, JoinHandle<Vec<Record>>) {
    let (rec_tx, mut rec_rx) = mpsc::unbounded_channel::<Record>();
    let collector = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(r) = rec_rx.recv().await {
            all.push(r);
        }
        all
    });
    (rec_tx, collector)
}

/// Judges each answer against what its request should have got when it
/// was sent, and records it.
struct Finish {
    rec_tx: mpsc::UnboundedSender<Record>,
    plan: Arc<Plan>,
    flip: Arc<Mutex<FlipState>>,
    sigterm_at: Arc<Mutex<Option<Instant>>>,
    start: Instant,
}

impl Finish {
    fn record(&self, job: &Job, outcome: Outcome, body: &[u8]) {
        let sig = *self.sigterm_at.lock().unwrap();
        let after_sigterm = sig.is_some_and(|s| job.sent >= s);
        let phase = self.plan.phase(
            job.sent.duration_since(self.start).as_secs_f64(),
            after_sigterm,
        );
        let (enforce, other) = self.flip.lock().unwrap().at(job.sent);
        let want = expect(job.kind, enforce);
        let alt = other.map(|o| expect(job.kind, o));
        let outcome = match outcome {
            Outcome::Answered { status, .. } => Outcome::Answered {
                status,
                verdict: judge(status, body, &job.uid, want, alt),
            },
            o => o,
        };
        let denied = matches!(outcome, Outcome::Answered { status: 200, .. })
            .then(|| {
                serde_json::from_slice::<Value>(body)
                    .ok()
                    .and_then(|v| v["response"]["allowed"].as_bool())
                    .map(|a| !a)
            })
            .flatten();
        let _ = self.rec_tx.send(Record {
            phase,
            kind: job.kind,
            sent: job.sent,
            latency: job.sent.elapsed(),
            outcome,
            after_sigterm,
            denied,
        });
    }
}

impl Soak {
    /// `--h1-connections` workers, each with its own HTTP/1.1 connection,
    /// taking jobs from one queue.
    fn h1_workers(
        &self,
        args: &Args,
        h1_rx: mpsc::UnboundedReceiver<Job>,
        finish: &Arc<Finish>,
    ) -> Vec<JoinHandle<()>> {
        let h1_rx = Arc::new(tokio::sync::Mutex::new(h1_rx));
        let mut workers = Vec::new();
        for _ in 0..args.h1_connections {
            let rx = h1_rx.clone();
            let tls = self.tls.clone();
            let finish = finish.clone();
            workers.push(tokio::spawn(async move {
                let mut conn = None;
                loop {
                    let job = { rx.lock().await.recv().await };
                    let Some(job) = job else { break };
                    let (o, body) = send_h1(&tls, &mut conn, &job).await;
                    finish.record(&job, o, &body);
                }
            }));
        }
        workers
    }

    /// Certificate rotation every 10 s, with a probe: each new connection
    /// must present the generation in place when it connected.
    fn rotator(&self, pki: Pki, dir: PathBuf) -> JoinHandle<()> {
        let tls = self.tls.clone();
        let exited = self.exited.clone();
        let start = self.start;
        tokio::spawn(async move {
            let mut n = 1;
            let mut next = start + Duration::from_secs(10);
            let mut probe = tokio::time::interval(Duration::from_millis(500));
            while !exited.load(Ordering::SeqCst) {
                tokio::select! {
                    _ = tokio::time::sleep_until(next.into()) => {
                        match rotate(&pki, &dir, n) {
                            Ok(der) => {
                                tls.generations.lock().unwrap().push(der);
                                tls.current.store(n, Ordering::SeqCst);
                                eprintln!("[soak] t={:.1}s certificate generation {n} (serial {}) in place", start.elapsed().as_secs_f64(), n + 1);
                            }
                            Err(e) => eprintln!("[soak] rotation failed: {e:#}"),
                        }
                        n += 1;
                        next += Duration::from_secs(10);
                    }
                    _ = probe.tick() => {
                        // A new connection; its certificate is checked in connect.
                        let _ = tls.connect(b"http/1.1").await;
                    }
                }
            }
        })
    }

    /// The open-loop generator: `--rate` requests a second, alternating
    /// between the HTTP/1.1 queue and the HTTP/2 connections, the RSS read
    /// at 2 s and at the end, SIGTERM half a second after the end; until
    /// the webhook exits (or 25 s after SIGTERM).
    async fn load(
        &self,
        args: &Args,
        mut webhook: Child,
        h1_tx: &mpsc::UnboundedSender<Job>,
        h2: &Arc<H2Pool>,
        finish: &Arc<Finish>,
    ) -> Result<Ended> {
        let (start, pid) = (self.start, self.pid);
        let period = Duration::from_secs_f64(1.0 / args.rate as f64);
        let mut tick = tokio::time::interval_at(start.into(), period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut i: u64 = 0;
        let mut rss_before = 0;
        let mut rss_after = 0;
        let mut sigterm_sent = false;
        let mut late_ticks: u64 = 0;
        let end = start + Duration::from_secs_f64(self.plan.end);
        let sigterm_time = end + Duration::from_millis(500);
        let waiter = {
            let exited = self.exited.clone();
            tokio::task::spawn_blocking(move || {
                let st = webhook.wait();
                exited.store(true, Ordering::SeqCst);
                (st, Instant::now())
            })
        };
        loop {
            let scheduled: Instant = tick.tick().await.into();
            if Instant::now() - scheduled > Duration::from_millis(5) {
                late_ticks += 1;
            }
            let t = scheduled.duration_since(start);
            if rss_before == 0 && t >= Duration::from_secs(2) {
                rss_before = rss_kib(pid).unwrap_or(0);
            }
            if !sigterm_sent && scheduled >= end && rss_after == 0 {
                rss_after = rss_kib(pid).unwrap_or(0);
            }
            if !sigterm_sent && scheduled >= sigterm_time {
                *self.sigterm_at.lock().unwrap() = Some(Instant::now());
                let _ = Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status();
                sigterm_sent = true;
                log(&format!("t={:.1}s SIGTERM sent", t.as_secs_f64()));
            }
            if self.exited.load(Ordering::SeqCst) {
                break;
            }
            if sigterm_sent && Instant::now() > sigterm_time + Duration::from_secs(25) {
                break;
            }
            self.send(i, scheduled, h1_tx, h2, finish);
            i += 1;
        }
        let (status, exited_at) = waiter.await?;
        let status = status?;
        let sig = self.sigterm_at.lock().unwrap().unwrap_or(exited_at);
        log(&format!(
            "webhook exited {status} {:.2} s after SIGTERM",
            (exited_at - sig).as_secs_f64()
        ));
        Ok(Ended {
            end,
            late_ticks,
            rss_before,
            rss_after,
            status,
            exited_at,
            sig,
        })
    }

    /// Request `i` of the mix, due at `scheduled`: even ones to the
    /// HTTP/1.1 queue, odd ones over an HTTP/2 connection in turn.
    fn send(
        &self,
        i: u64,
        scheduled: Instant,
        h1_tx: &mpsc::UnboundedSender<Job>,
        h2: &Arc<H2Pool>,
        finish: &Arc<Finish>,
    ) {
        let kind = MIX[(i % MIX.len() as u64) as usize];
        let uid = format!("soak-{i:09}");
        let body = Bytes::from(self.bodies[&kind].replace("{uid}", &uid));
        let job = Job {
            kind,
            uid,
            body,
            sent: scheduled,
        };
        if i.is_multiple_of(2) {
            let _ = h1_tx.send(job);
        } else {
            let (tls, h2, finish) = (self.tls.clone(), h2.clone(), finish.clone());
            let slot = ((i / 2) as usize) % h2.slots.len();
            tokio::spawn(async move {
                let (o, body) = send_h2(&tls, &h2, slot, &job).await;
                finish.record(&job, o, &body);
            });
        }
    }
}
