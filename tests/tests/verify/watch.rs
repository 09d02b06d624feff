//! `apply --watch` as a process against the real API server and the real
//! istiod, with simulated sidecars: it creates Sidecars from the first
//! traffic, widens one when its workload calls a Service outside its scope
//! (istiod confirms, the sidecar gets the cluster), narrows a host no
//! traffic reached for `--prune-after` only after that, writes nothing at
//! a steady mesh, serves /metrics and /healthz, and ends with exit 0 on
//! SIGTERM.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use meshscope_e2e::kubelet::{Logs, StandInKubelet};
use meshscope_e2e::outbound_text_line;
use meshscope_e2e::watcher::Watcher;
use meshscope_test_support::net::{admin_get, free_port};
use serde_json::Value;

use super::{with_setup, Setup};

/// `apply --watch` of the setup's namespace from `source`, a pass every
/// 2 s, narrowing after 12 s, metrics on `metrics_port`.
fn watch(s: &Setup, source: &[&str], metrics_port: u16) -> Watcher {
    watch_every(s, source, metrics_port, ["2s", "12s"])
}

/// [`watch`] with `--interval` and `--prune-after` as given.
fn watch_every(
    s: &Setup,
    source: &[&str],
    metrics_port: u16,
    [interval, prune_after]: [&str; 2],
) -> Watcher {
    let addr = format!("127.0.0.1:{metrics_port}");
    let mut args = vec!["-n", s.ns.as_str()];
    args.extend_from_slice(source);
    args.extend([
        "--interval",
        interval,
        "--prune-after",
        prune_after,
        "--istiod-url",
        s.url.as_str(),
        "--metrics-addr",
        addr.as_str(),
    ]);
    Watcher::start(&s.c.kubeconfig, &args)
}

/// A copy of the setup's access log that a test appends to: its
/// directory (removed on drop), its path, and the path as an argument.
pub(super) fn copy_log(s: &Setup) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("access.log");
    std::fs::copy(s.log.path(), &log_path).unwrap();
    let log = log_path.to_str().unwrap().to_string();
    (dir, log_path, log)
}

fn event_for(e: &Value, kind: &str, sidecar: &str) -> bool {
    e["event"] == kind && e["sidecar"] == sidecar
}

/// The Sidecar the watcher created for `pod`, once it exists, and its
/// `created` event.
pub(super) fn created_for(s: &Setup, w: &mut Watcher, pod: &str) -> (String, Value) {
    let name = loop {
        let name = s.sidecar_of(pod);
        if !name.is_empty() {
            break name;
        }
        w.until("created", Duration::from_secs(90), |e| {
            e["event"] == "created"
        });
    };
    let seen = w
        .seen
        .iter()
        .find(|e| event_for(e, "created", &name))
        .cloned();
    let event = seen.unwrap_or_else(|| {
        w.until("created", Duration::from_secs(30), |e| {
            event_for(e, "created", &name)
        })
    });
    (name, event)
}

#[test]
fn apply_watch_widens_narrows_and_stops_cleanly_against_a_real_istiod() {
    meshscope_e2e::needs_cluster!();
    with_setup("wch", 850, scenario);
}

fn scenario(s: &Setup) {
    let ns = s.ns.as_str();
    let ip = |pod: &str| s.ip(pod);
    let (_dir, log_path, log) = copy_log(s);
    let append = |lines: &str| {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&log_path)
            .unwrap();
        f.write_all(lines.as_bytes()).unwrap();
    };
    let port = free_port();
    let mut w = watch(s, &["--access-log", &log], port);

    // Pass 1: client-0 and web-0 get Sidecars from the traffic so far.
    let (client, created) = created_for(s, &mut w, "client-0");
    assert!(created["confirmed_in"].as_f64().is_some(), "{created}");
    let web_sc = loop {
        let name = s.sidecar_of("web-0");
        if !name.is_empty() {
            break name;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        s.outbound("client-0"),
        vec![s.cluster("db", 5432), s.cluster("web", 80)]
    );

    // client-0 starts calling extra, outside its scope: under the mesh's
    // ALLOW_ANY the proxy sends it through PassthroughCluster.
    let extra_ip = s.cluster_ip("extra");
    let passthrough = |n: u64| {
        outbound_text_line(
            n,
            &ip("client-0"),
            &s.host("extra"),
            80,
            &format!("{extra_ip}:80"),
        )
        .replace(
            &format!("outbound|80||{}", s.host("extra")),
            "PassthroughCluster",
        )
    };
    let t_new = Instant::now();
    append(&(passthrough(100) + &passthrough(101)));
    let widened = w.until("widened", Duration::from_secs(60), |e| {
        event_for(e, "widened", &client)
    });
    let took = t_new.elapsed();
    assert_eq!(
        widened["hosts"][0],
        format!("{ns}/{}", s.host("extra")),
        "{widened}"
    );
    let met = widened["met"].as_array().unwrap();
    assert!(
        met.iter()
            .any(|m| m == &Value::from(format!("passthrough: {}:80", s.host("extra")))),
        "{widened}"
    );
    assert!(widened["confirmed_in"].as_f64().is_some(), "{widened}");
    // Confirmed means pushed and ACKed: the sidecar has the cluster now.
    assert!(
        s.outbound("client-0").contains(&s.cluster("extra", 80)),
        "{:?}",
        s.outbound("client-0")
    );
    eprintln!("new dependency to confirmed widened scope: {took:?} (interval 2s)");

    // The pass that widened counts itself once it ends, just after its
    // events: read until it has.
    let deadline = Instant::now() + Duration::from_secs(20);
    let metrics = loop {
        let (status, metrics) = admin_get(port, "/metrics", Duration::from_secs(5));
        assert_eq!(status, 200, "{metrics}");
        if metrics.contains("\nmeshscope_watch_passes_total 1\n") && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        break metrics;
    };
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
            .parse()
            .unwrap()
    };
    assert_eq!(value("meshscope_watch_widenings_total"), 3.0, "{metrics}");
    assert_eq!(value("meshscope_watch_narrowings_total"), 0.0, "{metrics}");
    assert!(value("meshscope_watch_passes_total") >= 2.0, "{metrics}");
    assert!(
        value("meshscope_watch_edges_outside_scope_total{meets=\"passthrough\"}") >= 1.0,
        "{metrics}"
    );
    assert_eq!(
        value("meshscope_watch_scope_latency_seconds_count"),
        3.0,
        "{metrics}"
    );
    assert_eq!(value("meshscope_watch_leader"), 1.0, "{metrics}");
    assert_eq!(admin_get(port, "/healthz", Duration::from_secs(5)).0, 200);

    // From now on client-0 calls web and extra, never db again: db is
    // narrowed once 12 s pass without a call to it, not before.
    let feeding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let feeder = {
        let (feeding, log_path) = (feeding.clone(), log_path.clone());
        let (client_ip, web, extra) = (ip("client-0"), s.host("web"), s.host("extra"));
        std::thread::spawn(move || {
            let mut n = 300;
            while feeding.load(std::sync::atomic::Ordering::SeqCst) {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&log_path)
                    .unwrap();
                let mut lines = outbound_text_line(n, &client_ip, &web, 80, "10.255.0.1:80");
                // In scope now: through extra's own cluster.
                lines += &outbound_text_line(n + 1, &client_ip, &extra, 80, "10.255.0.2:80");
                f.write_all(lines.as_bytes()).unwrap();
                n += 2;
                std::thread::sleep(Duration::from_millis(700));
            }
        })
    };
    let t_feed = Instant::now();
    let narrowed = w.until("narrowed", Duration::from_secs(60), |e| {
        event_for(e, "narrowed", &client)
    });
    assert_eq!(
        narrowed["hosts"],
        serde_json::json!([format!("{ns}/{}", s.host("db"))]),
        "{narrowed}"
    );
    // Not before --prune-after since db was last seen (the first pass).
    assert!(
        t_new.elapsed() >= Duration::from_secs(10),
        "narrowed after {:?}",
        t_new.elapsed()
    );
    // Widen first, narrow after: the widening came before, confirmed.
    let order: Vec<&str> = w
        .seen
        .iter()
        .filter(|e| e["sidecar"] == client.as_str())
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["created", "widened", "narrowed"], "{:#?}", w.seen);
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.outbound("client-0").contains(&s.cluster("db", 5432)) {
        assert!(
            Instant::now() < deadline,
            "client-0 still has db: {:?}",
            s.outbound("client-0")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(s.outbound("client-0").contains(&s.cluster("extra", 80)));
    // web-0 had no traffic since the first pass: silence is not evidence,
    // its Sidecar keeps db.
    let web_hosts = s.c.kubectl_ok(
        &[
            "get",
            "sidecar",
            &web_sc,
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.egress[0].hosts}",
        ],
        None,
    );
    assert!(web_hosts.contains(&s.host("db")), "{web_hosts}");
    eprintln!("narrowed {:?} after the feed started", t_feed.elapsed());

    // A steady mesh: the same calls, pass after pass, write nothing.
    let rv = s.c.sidecar_resource_version(ns, &client);
    let quiet = w.during(Duration::from_secs(7));
    assert!(
        quiet
            .iter()
            .all(|e| !["created", "widened", "narrowed"]
                .contains(&e["event"].as_str().unwrap_or(""))),
        "{quiet:#?}"
    );
    assert_eq!(s.c.sidecar_resource_version(ns, &client), rv);
    feeding.store(false, std::sync::atomic::Ordering::SeqCst);
    feeder.join().unwrap();

    // SIGTERM: the loop ends, exit 0, and says so.
    w.sigterm();
    let stopped = w.until("stopped", Duration::from_secs(15), |e| {
        e["event"] == "stopped"
    });
    assert!(
        stopped["message"].as_str().unwrap().starts_with("after "),
        "{stopped}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = w.child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "still running after SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status:?}\n{}", w.stderr());
    starts_from_the_evidence(s, &client, &log, &append);
}

/// A watcher that starts again (a restart, or another replica taking over
/// the Lease) reads the log from its beginning, where client-0 still calls
/// db: the Sidecar's evidence says those lines are applied, so db, narrowed
/// away, stays away; a call made after that evidence widens as ever.
fn starts_from_the_evidence(s: &Setup, client: &str, log: &str, append: &dyn Fn(&str)) {
    let mut again = watch(s, &["--access-log", log], free_port());
    let quiet = again.during(Duration::from_secs(8));
    assert!(
        quiet.iter().all(|e| !event_for(e, "widened", client)),
        "{quiet:#?}\n{}",
        again.stderr()
    );
    assert!(!s.outbound("client-0").contains(&s.cluster("db", 5432)));
    assert!(
        again
            .stderr()
            .contains("log lines the managed Sidecars already account for"),
        "{}",
        again.stderr()
    );
    let db_ip = s.cluster_ip("db");
    append(&outbound_text_line(
        1000,
        &s.ip("client-0"),
        &s.host("db"),
        5432,
        &format!("{db_ip}:5432"),
    ));
    let back = again.until("widened", Duration::from_secs(60), |e| {
        event_for(e, "widened", client)
    });
    assert_eq!(
        back["hosts"],
        serde_json::json!([format!("{}/{}", s.ns, s.host("db"))]),
        "{back}"
    );
    assert!(s.outbound("client-0").contains(&s.cluster("db", 5432)));
    again.stop();
}

#[test]
fn apply_watch_reads_pod_logs_from_where_it_left_off() {
    meshscope_e2e::needs_cluster!();
    with_setup("wcp", 860, pod_logs);
}

fn pod_logs(s: &Setup) {
    let ns = s.ns.as_str();
    let ip = |pod: &str| s.ip(pod);
    let kubelet = StandInKubelet::start(Logs::new()).unwrap();
    let node = s.c.stand_in_node("watchnode", kubelet.port).unwrap();
    for p in &s.sc.world.pods {
        s.c.bind_pod(ns, &p.name, &node).unwrap();
    }
    let key = format!("{ns}/client-0/istio-proxy");
    let mut before_third = Timestamp::now();
    for n in 0..3 {
        before_third = Timestamp::now();
        kubelet.append(
            &key,
            &outbound_text_line(n, &ip("client-0"), &s.host("web"), 80, "10.255.0.1:80"),
        );
    }
    let port = free_port();
    let mut w = watch(s, &["--from-pod-logs"], port);
    let created = w.until("created", Duration::from_secs(90), |e| {
        e["event"] == "created"
    });
    let client = s.sidecar_of("client-0");
    assert_eq!(created["sidecar"], client.as_str(), "{created}");
    assert_eq!(
        created["hosts"],
        serde_json::json!([format!("{ns}/{}", s.host("web"))])
    );

    // A new dependency, through PassthroughCluster (out of scope).
    let extra_ip = s.cluster_ip("extra");
    let line = outbound_text_line(
        10,
        &ip("client-0"),
        &s.host("extra"),
        80,
        &format!("{extra_ip}:80"),
    )
    .replace(
        &format!("outbound|80||{}", s.host("extra")),
        "PassthroughCluster",
    );
    kubelet.append(&key, line.trim_end());
    let widened = w.until("widened", Duration::from_secs(60), |e| {
        event_for(e, "widened", &client)
    });
    assert_eq!(
        widened["hosts"],
        serde_json::json!([format!("{ns}/{}", s.host("extra"))]),
        "{widened}"
    );
    assert!(s.outbound("client-0").contains(&s.cluster("extra", 80)));
    // Every read after the first asks from where the last one ended: from
    // the third line's second on (sinceTime has whole seconds; the kubelet
    // serves the lines at or after it, and the reader skips those it has).
    let before_third = Timestamp::from_second(before_third.as_second()).unwrap();
    let asked: Vec<String> = kubelet
        .requests()
        .into_iter()
        .filter(|r| r.contains("/client-0/istio-proxy"))
        .collect();
    assert!(asked[0].contains("sinceSeconds="), "{asked:?}");
    let since = |r: &str| -> Option<Timestamp> {
        let v = r.split_once("sinceTime=")?.1.split('&').next()?;
        v.replace("%3A", ":").replace("%3a", ":").parse().ok()
    };
    assert!(
        asked.len() >= 2
            && asked[1..]
                .iter()
                .all(|r| r.contains("timestamps=true")
                    && since(r).is_some_and(|t| t >= before_third)),
        "{asked:?} (the third line was written at or after {before_third})"
    );
    // The evidence adds the new line to the three the Sidecar held (a
    // pass that took the third line again would have replaced the count
    // with its own two: its window would overlap the Sidecar's).
    let requests = s.c.sidecar_jsonpath(
        ns,
        &client,
        "{.metadata.annotations.meshscope\\.io/requests}",
    );
    assert_eq!(
        requests.trim(),
        "4",
        "3 requests before, 1 in the pass that widened; the Sidecar says {requests}"
    );
    let (_, metrics) = admin_get(port, "/metrics", Duration::from_secs(5));
    assert!(
        metrics.contains("meshscope_watch_edges_outside_scope_total{meets=\"passthrough\"} 1\n"),
        "{metrics}"
    );
    drop(w);
}

#[test]
fn apply_watch_replicas_elect_one_writer_and_hand_over_on_sigterm() {
    meshscope_e2e::needs_cluster!();
    with_setup("wcl", 870, replicas);
}

fn replicas(s: &Setup) {
    let ns = s.ns.as_str();
    let (_dir, log_path, log) = copy_log(s);
    let lease = format!("{ns}/meshscope-watch");
    let args = |id: &'static str| -> Vec<String> {
        ["--access-log", &log, "--lease", &lease, "--identity", id]
            .iter()
            .map(|a| a.to_string())
            .collect()
    };
    let start = |id: &'static str| {
        let a = args(id);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        watch(s, &a, free_port())
    };
    let mut a = start("replica-a");
    let first = a.until("leading", Duration::from_secs(30), |e| {
        e["event"] == "leading"
    });
    // The election settles before the first word: a replica that leads
    // never says first that it follows (issue #34 item 15).
    assert!(
        a.seen.iter().all(|e| e["event"] != "following"),
        "{:#?}",
        a.seen
    );
    assert!(
        first["message"]
            .as_str()
            .unwrap()
            .starts_with("replica-a holds the Lease"),
        "{first}"
    );
    let mut b = start("replica-b");
    b.until("following", Duration::from_secs(30), |e| {
        e["event"] == "following"
    });
    let client = loop {
        let name = s.sidecar_of("client-0");
        if !name.is_empty() {
            break name;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    a.until("created", Duration::from_secs(60), |e| {
        event_for(e, "created", &client)
    });
    // The follower writes nothing while the leader runs.
    let quiet = b.during(Duration::from_secs(5));
    assert!(
        quiet
            .iter()
            .all(|e| e["event"] != "created" && e["event"] != "widened"),
        "{quiet:#?}"
    );

    // SIGTERM: the leader releases the Lease, the follower takes over at once.
    let t = Instant::now();
    a.sigterm();
    a.until("stopped", Duration::from_secs(15), |e| {
        e["event"] == "stopped"
    });
    b.until("leading", Duration::from_secs(10), |e| {
        e["event"] == "leading"
    });
    let handover = t.elapsed();
    assert!(a.child.wait().unwrap().success());
    // And the new leader writes: a call outside client-0's scope widens it.
    let ip =
        s.sc.world
            .pods
            .iter()
            .find(|p| p.name == "client-0")
            .unwrap()
            .ip
            .clone();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&log_path)
        .unwrap();
    f.write_all(outbound_text_line(50, &ip, &s.host("extra"), 80, "10.255.0.3:80").as_bytes())
        .unwrap();
    let widened = b.until("widened", Duration::from_secs(60), |e| {
        event_for(e, "widened", &client)
    });
    assert_eq!(
        widened["hosts"],
        serde_json::json!([format!("{ns}/{}", s.host("extra"))])
    );
    eprintln!("handover after SIGTERM: {handover:?}");
    b.sigterm();
    b.until("stopped", Duration::from_secs(15), |e| {
        e["event"] == "stopped"
    });
}

#[test]
fn apply_watch_follows_prometheus_scraping_istio_metrics() {
    meshscope_e2e::needs_cluster!();
    with_setup("wcm", 880, prometheus);
}

/// `istio_requests_total` labels of a source-reported call from client-0.
fn series(s: &Setup, service: &str, dest_name: &str, dest_workload: &str) -> String {
    let ns = &s.ns;
    format!(
        "reporter=\"source\",source_workload=\"client-0\",source_workload_namespace=\"{ns}\",destination_service=\"{service}\",destination_service_name=\"{dest_name}\",destination_service_namespace=\"{ns}\",destination_workload=\"{dest_workload}\",destination_workload_namespace=\"{ns}\""
    )
}

/// Waits until Prometheus at `url` holds a series of `metric`.
fn scraped(url: &str, metric: &str) {
    let port: u16 = url
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = admin_get(
            port,
            &format!("/api/v1/query?query={metric}"),
            Duration::from_secs(5),
        );
        if body.contains(metric) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never scraped {metric}: {body}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Passes 10 minutes apart, so that only the probe between passes can
/// start the one that widens; and the call outside the scope is a single
/// request, whose series appears at 1 and never moves, which `increase`
/// alone never shows.
fn prometheus(s: &Setup) {
    use meshscope_e2e::cluster::Prometheus;
    use meshscope_e2e::traffic::Counters;
    let ns = s.ns.as_str();
    let counters = Arc::new(Counters::default());
    let web = series(s, &s.host("web"), "web", "web-0");
    counters.add(web.clone(), 1);
    let addr = counters.serve().unwrap();
    let prom = Prometheus::scraping(&addr.to_string(), "1s").unwrap();
    // Traffic to web flows, as in a mesh: its counter keeps growing.
    let feeding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let feeder = {
        let (feeding, counters) = (feeding.clone(), counters.clone());
        std::thread::spawn(move || {
            while feeding.load(std::sync::atomic::Ordering::SeqCst) {
                counters.add(web.clone(), 3);
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    scraped(&prom.url, "istio_requests_total");
    let port = free_port();
    let mut w = watch_every(s, &["--prometheus", &prom.url], port, ["10m", "20m"]);
    let (client, created) = created_for(s, &mut w, "client-0");
    assert_eq!(
        created["hosts"],
        serde_json::json!([format!("{ns}/{}", s.host("web"))]),
        "{created}"
    );
    // client-0 calls extra, outside its scope, once: Istio reports the
    // destination as PassthroughCluster and the Service's address.
    let extra_ip = s.cluster_ip("extra");
    counters.add(
        series(
            s,
            &format!("{extra_ip}:80"),
            "PassthroughCluster",
            "unknown",
        ),
        1,
    );
    let t = Instant::now();
    let widened = w.until("widened", Duration::from_secs(120), |e| {
        event_for(e, "widened", &client)
    });
    assert_eq!(
        widened["hosts"],
        serde_json::json!([format!("{ns}/{}", s.host("extra"))]),
        "{widened}"
    );
    assert!(s.outbound("client-0").contains(&s.cluster("extra", 80)));
    let (_, metrics) = admin_get(port, "/metrics", Duration::from_secs(5));
    let early = metrics
        .lines()
        .find_map(|l| l.strip_prefix("meshscope_watch_early_passes_total "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(early.is_some_and(|n| n >= 1), "{metrics}");
    eprintln!(
        "prometheus (1 s scrapes, 10 min passes, probe each second): one request outside the scope to confirmed widened scope in {:?}",
        t.elapsed()
    );
    feeding.store(false, std::sync::atomic::Ordering::SeqCst);
    feeder.join().unwrap();
    drop(w);
}

/// A stand-in Prometheus (a mock: the case is about a Prometheus that
/// answers 500, which the real one cannot be made to do on demand): every
/// query gets an empty vector, or, while `failing` is set, a 500 with
/// Prometheus' error body. The traffic itself comes from the access log.
struct FlakyPrometheus {
    url: String,
    failing: Arc<std::sync::atomic::AtomicBool>,
    /// While set, a query gets no answer for two minutes.
    hanging: Arc<std::sync::atomic::AtomicBool>,
}

impl FlakyPrometheus {
    fn start() -> FlakyPrometheus {
        use std::io::{BufRead, BufReader};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let failing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let hanging = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, hang) = (failing.clone(), hanging.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                if hang.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_secs(120));
                        drop(conn);
                    });
                    continue;
                }
                // The request head; queries are GETs without a body.
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let (status, body) = if flag.load(std::sync::atomic::Ordering::SeqCst) {
                    (
                        "500 Internal Server Error",
                        r#"{"status":"error","errorType":"internal","error":"stand-in failure"}"#,
                    )
                } else {
                    (
                        "200 OK",
                        r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
                    )
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        FlakyPrometheus {
            url,
            failing,
            hanging,
        }
    }

    fn fail(&self, on: bool) {
        self.failing.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    fn hang(&self) {
        self.hanging
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn sigterm_ends_a_watcher_stuck_reading_a_hung_prometheus_within_its_grace() {
    meshscope_e2e::needs_cluster!();
    with_setup("wcs", 896, stuck_read);
}

/// issue #34 item 11: a pass stuck on a Prometheus that never answers
/// (its client would wait 60 s, twice) does not hold SIGTERM up: the
/// watcher ends 5 s after the signal, exit 0, saying it abandoned the read.
fn stuck_read(s: &Setup) {
    let prom = FlakyPrometheus::start();
    let (_dir, _, log) = copy_log(s);
    let mut w = watch_every(
        s,
        &["--access-log", &log, "--prometheus", &prom.url],
        free_port(),
        ["2s", "20m"],
    );
    created_for(s, &mut w, "client-0");
    prom.hang();
    // The probe between passes gives up on Prometheus after 5 s; the next
    // pass then begins and sticks in its Prometheus read.
    std::thread::sleep(Duration::from_secs(10));
    let (stopped, status, took) = w.terminate(Duration::from_secs(30));
    assert!(status.success(), "{status:?}\n{}", w.stderr());
    assert!(
        took < Duration::from_secs(12),
        "SIGTERM took {took:?} with a hung Prometheus"
    );
    assert!(
        stopped["message"]
            .as_str()
            .is_some_and(|m| m.contains("abandoning the reads in flight")),
        "{stopped}"
    );
    eprintln!("SIGTERM with a hung Prometheus: exited in {took:?}");
}

#[test]
fn a_pass_whose_prometheus_fails_loses_no_traffic_and_narrows_nothing_still_called() {
    meshscope_e2e::needs_cluster!();
    with_setup("wcf", 890, failed_source);
}

/// issue #34, items 1 and 2: Prometheus answers 500 for longer than
/// `--prune-after` while the access log goes on. A call outside the scope
/// logged meanwhile is widened once Prometheus answers again (the failed
/// passes' lines are read again), and the hosts client-0 keeps calling are
/// never narrowed (a failed source is no evidence of silence).
fn failed_source(s: &Setup) {
    let ns = s.ns.as_str();
    let prom = FlakyPrometheus::start();
    let (_dir, log_path, log) = copy_log(s);
    let port = free_port();
    let mut w = watch_every(
        s,
        &["--access-log", &log, "--prometheus", &prom.url],
        port,
        ["2s", "8s"],
    );
    let (client, _) = created_for(s, &mut w, "client-0");
    assert!(s.outbound("client-0").contains(&s.cluster("web", 80)));
    // client-0 calls web and db every 3 s throughout: well inside
    // --prune-after 8s at passes 2 s apart.
    let feeding = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let feeder = {
        let (feeding, log_path) = (feeding.clone(), log_path.clone());
        let (client_ip, web, db) = (s.ip("client-0"), s.host("web"), s.host("db"));
        std::thread::spawn(move || {
            let mut n = 500;
            while feeding.load(std::sync::atomic::Ordering::SeqCst) {
                let mut lines = outbound_text_line(n, &client_ip, &web, 80, "10.255.0.1:80");
                lines += &outbound_text_line(n + 1, &client_ip, &db, 5432, "10.255.0.3:5432");
                // Gone once a failing test removed its directory.
                let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(&log_path) else {
                    return;
                };
                f.write_all(lines.as_bytes()).unwrap();
                n += 2;
                std::thread::sleep(Duration::from_secs(3));
            }
        })
    };
    // Prometheus fails for 16 s, twice --prune-after; meanwhile client-0
    // calls extra, outside its scope, once.
    prom.fail(true);
    let extra_ip = s.cluster_ip("extra");
    let passthrough = outbound_text_line(
        900,
        &s.ip("client-0"),
        &s.host("extra"),
        80,
        &format!("{extra_ip}:80"),
    )
    .replace(
        &format!("outbound|80||{}", s.host("extra")),
        "PassthroughCluster",
    );
    w.until("pass-error", Duration::from_secs(30), |e| {
        e["event"] == "pass-error"
    });
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log_path)
        .unwrap()
        .write_all(passthrough.as_bytes())
        .unwrap();
    let failing = w.during(Duration::from_secs(16));
    // Alive, but not ready: its passes fail (issue #34 item 9).
    let (live, _) = admin_get(port, "/healthz", Duration::from_secs(5));
    let (ready, why) = admin_get(port, "/readyz", Duration::from_secs(5));
    prom.fail(false);
    assert_eq!((live, ready), (200, 503), "{why}");
    assert!(why.contains("the last passes failed"), "{why}");
    let errors = failing
        .iter()
        .filter(|e| e["event"] == "pass-error")
        .count();
    assert!(
        errors >= 3,
        "passes failed while Prometheus did: {failing:#?}"
    );
    let widened = w.until("widened", Duration::from_secs(30), |e| {
        event_for(e, "widened", &client)
    });
    assert_eq!(
        widened["hosts"],
        serde_json::json!([format!("{ns}/{}", s.host("extra"))]),
        "{widened}"
    );
    // A few healthy passes more: still nothing narrowed, and ready again.
    w.during(Duration::from_secs(6));
    let (ready, why) = admin_get(port, "/readyz", Duration::from_secs(5));
    assert_eq!(ready, 200, "{why}");
    feeding.store(false, std::sync::atomic::Ordering::SeqCst);
    feeder.join().unwrap();
    let narrowed: Vec<&Value> = w.seen.iter().filter(|e| e["event"] == "narrowed").collect();
    assert!(
        narrowed.is_empty(),
        "narrowed hosts that were called every 3 s while Prometheus failed: {narrowed:#?}"
    );
    let outbound = s.outbound("client-0");
    for (host, port) in [("web", 80), ("db", 5432), ("extra", 80)] {
        assert!(
            outbound.contains(&s.cluster(host, port)),
            "{host}: {outbound:?}"
        );
    }
    let pass_error = w.seen.iter().find(|e| e["event"] == "pass-error").unwrap();
    assert!(
        pass_error["message"]
            .as_str()
            .is_some_and(|m| m.contains("500")),
        "{pass_error}"
    );
    drop(w);
}

#[test]
fn a_hand_edited_managed_sidecar_is_skipped_once_with_its_fix_and_taken_over_by_policy() {
    meshscope_e2e::needs_cluster!();
    with_setup("wce", 897, hand_edit);
}

/// issue #34 item 10: a managed Sidecar edited by hand (kubectl patch
/// owns its hosts now) conflicts with every widening the watcher writes.
/// The skip is said once while the edit stands, with the commands that
/// resolve it; a watcher run with --force-conflicts takes the fields over.
fn hand_edit(s: &Setup) {
    let ns = s.ns.as_str();
    let (_dir, log_path, log) = copy_log(s);
    let mut w = watch_every(s, &["--access-log", &log], free_port(), ["2s", "20m"]);
    let (client, _) = created_for(s, &mut w, "client-0");
    s.c.patch_sidecar_hosts(ns, &client, &[format!("{ns}/{}", s.host("web"))]);
    let extra_ip = s.cluster_ip("extra");
    let passthrough = |n: u64| {
        outbound_text_line(
            n,
            &s.ip("client-0"),
            &s.host("extra"),
            80,
            &format!("{extra_ip}:80"),
        )
        .replace(
            &format!("outbound|80||{}", s.host("extra")),
            "PassthroughCluster",
        )
    };
    let append = |text: String| {
        std::fs::OpenOptions::new()
            .append(true)
            .open(&log_path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap()
    };
    append(passthrough(700));
    let skipped = w.until("skipped", Duration::from_secs(30), |e| {
        event_for(e, "skipped", &client)
    });
    let m = skipped["message"].as_str().unwrap();
    assert!(m.starts_with("conflict: "), "{m}");
    assert!(
        m.contains(&format!(
            "kubectl meshscope apply -n {ns} --force-conflicts"
        )) && m.contains("apply --watch --force-conflicts"),
        "{m}"
    );
    // The calls go on; the skip is not said again while the edit stands.
    for n in 0..4 {
        append(passthrough(701 + n));
        std::thread::sleep(Duration::from_secs(2));
    }
    let again = w.during(Duration::from_secs(2));
    let skips = w
        .seen
        .iter()
        .filter(|e| event_for(e, "skipped", &client))
        .count();
    assert_eq!(skips, 1, "{again:#?}");
    w.stop();
    // audit reports the hand edit too, naming who made it (MS0021).
    let edited = hand_edited(s);
    assert_eq!(edited.len(), 1, "{edited:#?}");
    let m = edited[0]["message"].as_str().unwrap();
    assert!(
        edited[0]["name"] == client.as_str()
            && m.contains("kubectl-patch")
            && m.contains(&format!(
                "kubectl meshscope apply -n {ns} --force-conflicts"
            )),
        "{m}"
    );
    // Policy: a watcher with --force-conflicts takes the fields over.
    let mut forced = watch_every(
        s,
        &["--access-log", &log, "--force-conflicts"],
        free_port(),
        ["2s", "20m"],
    );
    let widened = forced.until("widened", Duration::from_secs(60), |e| {
        event_for(e, "widened", &client)
    });
    assert!(
        widened["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h == &Value::from(format!("{ns}/{}", s.host("extra")))),
        "{widened}"
    );
    assert!(s.outbound("client-0").contains(&s.cluster("extra", 80)));
    forced.stop();
    // Taken back: no hand edit left.
    assert_eq!(hand_edited(s), Vec::<Value>::new());
}

/// audit's MS0021 findings in the setup's namespace.
fn hand_edited(s: &Setup) -> Vec<Value> {
    let r = super::meshscope(&s.c.kubeconfig, &["audit", "-n", &s.ns, "-o", "json"]);
    let v: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("audit -o json: {e}\n{}\n{}", r.stdout, r.stderr));
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "MS0021")
        .cloned()
        .collect()
}
