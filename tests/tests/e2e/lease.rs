//! The election of `apply --watch`'s writer (`plugin/src/live/lease.rs`) on
//! the real API server: one leader of two, a release handed over at once,
//! a leader that stops renewing replaced once its lease expires, a leader
//! cut off from the API server stopping before another starts, RBAC
//! denials named; and `deploy/watch/` against what watch mode asks for
//! (`plugin/src/live/permissions.rs`, `read.rs`), offline and applied.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubectl_meshscope::live::{
    everything_needed, ConnectOptions, Live, Need, Purpose, LEASE_GROUP,
};
use meshscope_e2e::cluster::{repo_root, Cluster};
use meshscope_e2e::watch_rbac::{assert_grants_exactly_watch_needs, deployment_purpose, one};
use meshscope_test_support::fixtures::yaml_docs;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

/// Short enough for tests, long enough that a loaded machine's slow
/// answers do not make a leader skip a renewal (renewed after 4s, read
/// every 500 ms, leading until 1s before it expires).
const LEASE: Duration = Duration::from_secs(6);
/// `grace` of [`LEASE`]: the renewal comes this long before expiry.
const GRACE: Duration = Duration::from_secs(2);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(kubeconfig: &Path) -> Live {
    Live::connect(&ConnectOptions {
        kubeconfig: Some(kubeconfig.to_path_buf()),
        chunk_size: 500,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// The Lease's holder, as kubectl reads it.
fn holder(c: &Cluster, ns: &str, name: &str) -> String {
    c.kubectl_ok(
        &[
            "get",
            "lease",
            name,
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        None,
    )
}

/// Two replicas started with the same identity (issue #34 item 5): the
/// second finds the Lease held under its own identity, unexpired, and
/// follows, saying why, for as long as the first renews; once the first
/// releases it, the second leads.
#[test]
fn a_second_replica_with_the_same_identity_never_leads_beside_the_first() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("lease-twin", &[]);
    runtime().block_on(async {
        let live = connect(&c.kubeconfig).await;
        let mut a = live.elect(&ns, "writer", "same", LEASE).await.unwrap();
        timeout(Duration::from_secs(10), a.leading())
            .await
            .expect("the first leads")
            .unwrap();
        let mut b = live.elect(&ns, "writer", "same", LEASE).await.unwrap();
        // Through two lease durations, renewals included, only the first.
        let end = Instant::now() + 2 * LEASE;
        while Instant::now() < end {
            assert!(a.is_leader(), "the first stopped leading");
            assert!(!b.is_leader(), "both lead under one identity");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(b.twin(), "the second says it waits for a twin");
        assert!(!a.twin());
        a.release().await.unwrap();
        timeout(LEASE + Duration::from_secs(5), b.leading())
            .await
            .expect("the second leads once the first released")
            .unwrap();
        assert!(!b.twin());
        b.release().await.unwrap();
    });
}

#[test]
fn exactly_one_of_two_replicas_leads_and_a_release_hands_over_at_once() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("lease-one", &[]);
    runtime().block_on(async {
        let live = connect(&c.kubeconfig).await;
        let mut a = live.elect(&ns, "writer", "a", LEASE).await.unwrap();
        let mut b = live.elect(&ns, "writer", "b", LEASE).await.unwrap();
        timeout(Duration::from_secs(10), async {
            tokio::select! {
                r = a.leading() => r.unwrap(),
                r = b.leading() => r.unwrap(),
            }
        })
        .await
        .expect("one of two leads");
        // Through two lease durations, renewals included: always exactly
        // one (never both, and the leader does not lapse while it renews).
        let end = Instant::now() + 2 * LEASE;
        let first = a.is_leader();
        while Instant::now() < end {
            assert!(
                a.is_leader() != b.is_leader(),
                "a leads: {}, b leads: {}",
                a.is_leader(),
                b.is_leader()
            );
            assert_eq!(a.is_leader(), first, "the leader changed without cause");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (leader, mut other) = if first { (a, b) } else { (b, a) };
        let (lid, oid) = (leader.identity().to_string(), other.identity().to_string());
        assert_eq!(holder(c, &ns, "writer"), lid);

        // Released: the other leads within about a second, not a lease.
        let released = Instant::now();
        leader.release().await.unwrap();
        timeout(Duration::from_secs(2), other.leading())
            .await
            .unwrap_or_else(|_| panic!("{oid} does not lead 2s after {lid} released"))
            .unwrap();
        eprintln!("handed over in {:?}", released.elapsed());
        assert_eq!(holder(c, &ns, "writer"), oid);
        other.release().await.unwrap();
    });
    assert_eq!(holder(c, &ns, "writer"), "", "released, no one holds it");
}

#[test]
fn a_leader_that_stops_renewing_is_replaced_once_its_lease_expires() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("lease-drop", &[]);
    runtime().block_on(async {
        let live = connect(&c.kubeconfig).await;
        let mut a = live.elect(&ns, "writer", "a", LEASE).await.unwrap();
        timeout(Duration::from_secs(10), a.leading())
            .await
            .expect("a alone leads")
            .unwrap();
        let mut b = live.elect(&ns, "writer", "b", LEASE).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(a.is_leader() && !b.is_leader());
        // a stops renewing without giving the Lease up (a crash).
        let dropped = Instant::now();
        drop(a);
        let mut changes = Vec::new();
        timeout(LEASE + Duration::from_secs(4), async {
            changes.push(b.changed().await.unwrap());
        })
        .await
        .expect("b leads once a's lease expired");
        let took = dropped.elapsed();
        eprintln!("taken over {took:?} after the leader stopped");
        assert_eq!(changes, [true]);
        assert!(b.is_leader());
        // a had renewed at most LEASE - GRACE before it stopped, so its
        // lease held for at least GRACE more (less a slow renewal).
        assert!(took >= GRACE - Duration::from_millis(500), "{took:?}");
        assert_eq!(holder(c, &ns, "writer"), "b");
        b.release().await.unwrap();
    });
}

/// A TCP relay to the API server that can be frozen: while it is, bytes
/// are held in both directions and connections stay open, as a network
/// partition (or a paused API server) looks to a client.
struct Relay {
    addr: std::net::SocketAddr,
    frozen: Arc<AtomicBool>,
}

impl Relay {
    async fn start(upstream: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let frozen = Arc::new(AtomicBool::new(false));
        let f = frozen.clone();
        tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let Ok(up) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pump(dr, uw, f.clone()));
                tokio::spawn(pump(ur, dw, f.clone()));
            }
        });
        Relay { addr, frozen }
    }

    fn freeze(&self, on: bool) {
        self.frozen.store(on, Ordering::SeqCst);
    }
}

async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, frozen: Arc<AtomicBool>) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
}

/// The admin kubeconfig, its server reached through `relay`; and the
/// server's `host:port`.
fn through(c: &Cluster, relay: Option<&Relay>, dir: &Path) -> (std::path::PathBuf, String) {
    let text = std::fs::read_to_string(&c.kubeconfig).unwrap();
    let mut v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let mut upstream = String::new();
    for cl in v["clusters"].as_sequence_mut().unwrap() {
        let server = cl["cluster"]["server"].as_str().unwrap().to_string();
        upstream = server
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_string();
        if let Some(r) = relay {
            cl["cluster"]["server"] = format!("https://{}", r.addr).into();
        }
    }
    let path = dir.join("relayed.kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&v).unwrap()).unwrap();
    (path, upstream)
}

#[test]
fn a_leader_cut_off_from_the_api_server_stops_leading_before_another_starts() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("lease-cut", &[]);
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let (_, upstream) = through(c, None, dir.path());
        let relay = Relay::start(upstream).await;
        let (relayed, _) = through(c, Some(&relay), dir.path());
        let mut a = connect(&relayed)
            .await
            .elect(&ns, "writer", "a", LEASE)
            .await
            .unwrap();
        timeout(Duration::from_secs(10), a.leading())
            .await
            .expect("a alone leads")
            .unwrap();
        let b = connect(&c.kubeconfig)
            .await
            .elect(&ns, "writer", "b", LEASE)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(a.is_leader() && !b.is_leader());
        // a's renewals and reads now hang (well within --request-timeout),
        // and a must stop leading on its own clock before b can start.
        let cut = Instant::now();
        relay.freeze(true);
        let mut a_stopped = None;
        let deadline = cut + LEASE + Duration::from_secs(5);
        while !b.is_leader() {
            assert!(Instant::now() < deadline, "b never took over");
            let (al, bl) = (a.is_leader(), b.is_leader());
            assert!(!(al && bl), "both lead");
            if !al && a_stopped.is_none() {
                a_stopped = Some(cut.elapsed());
            }
            if a_stopped.is_some() {
                assert!(!a.is_leader(), "a leads again while cut off");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let b_started = cut.elapsed();
        let a_stopped = a_stopped.expect("a stopped leading before b started");
        eprintln!("cut off: a stopped leading after {a_stopped:?}, b led after {b_started:?}");
        assert!(a_stopped <= LEASE, "{a_stopped:?}");
        assert!(!a.is_leader());
        relay.freeze(false);
        b.release().await.unwrap();
        drop(a);
    });
}

#[test]
fn rbac_denials_on_the_lease_name_the_permission() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let ns = c.namespace("lease-rbac", &[]);
    let dir = tempfile::tempdir().unwrap();
    let user = format!("lease-user-{ns}");
    let kubeconfig = c.impersonating(&user, dir.path()).unwrap();
    runtime().block_on(async {
        let live = connect(&kubeconfig).await;
        // Nothing granted: joining fails at once, naming the permission.
        let e = live
            .elect(&ns, "writer", "a", LEASE)
            .await
            .err()
            .expect("no permission on leases")
            .to_string();
        let first = e.lines().next().unwrap();
        assert!(
            first.starts_with(&format!(
                "RBAC forbids get on leases.coordination.k8s.io in namespace \"{ns}\""
            )) && first.contains("grant deploy/watch/rbac.yaml"),
            "{e}"
        );
        assert!(
            e.contains("kind: Role\n")
                && e.contains(&format!("namespace: {ns}"))
                && e.contains("apiGroups: [\"coordination.k8s.io\"]")
                && e.contains("verbs: [\"get\"]"),
            "{e}"
        );

        // get alone: joining works, taking the Lease does not, and the
        // election ends with the denial instead of retrying forever.
        c.apply(&format!(
            "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: writer\n  namespace: {ns}\nspec: {{}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: lease-get\n  namespace: {ns}\nrules:\n- apiGroups: [\"coordination.k8s.io\"]\n  resources: [\"leases\"]\n  resourceNames: [\"writer\"]\n  verbs: [\"get\"]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: lease-get\n  namespace: {ns}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: lease-get\nsubjects:\n- kind: User\n  name: {user}\n"
        ));
        // The authorizer sees a new RoleBinding a moment later.
        let get = [Need::named("get", LEASE_GROUP, "leases", &ns, "writer")];
        let deadline = Instant::now() + Duration::from_secs(10);
        while !live.check(&get).await.unwrap().is_empty() {
            assert!(Instant::now() < deadline, "the Role never took effect");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut a = live.elect(&ns, "writer", "a", LEASE).await.unwrap();
        let e = timeout(Duration::from_secs(10), a.leading())
            .await
            .expect("the denial ends the election")
            .expect_err("no permission to patch")
            .to_string();
        assert!(
            e.starts_with(&format!(
                "RBAC forbids patch on leases.coordination.k8s.io in namespace \"{ns}\""
            )),
            "{e}"
        );
        assert!(!a.is_leader());
    });
    assert_eq!(holder(c, &ns, "writer"), "");
}

/// deploy/watch, file by file in kustomization order.
fn watch_install() -> Vec<Value> {
    let dir = repo_root().join("deploy/watch");
    let k = &yaml_docs(&std::fs::read_to_string(dir.join("kustomization.yaml")).unwrap())[0];
    let mut out = Vec::new();
    for r in k["resources"].as_array().unwrap() {
        out.extend(yaml_docs(
            &std::fs::read_to_string(dir.join(r.as_str().unwrap())).unwrap(),
        ));
    }
    out
}

#[test]
fn the_watch_install_grants_exactly_what_watch_mode_asks_for() {
    let docs = watch_install();
    let (args, purpose, _, _) = deployment_purpose(one(&docs, "Deployment"));
    for flag in [
        "--watch",
        "--all-namespaces",
        "--from-pod-logs",
        "--wait=2m",
    ] {
        assert!(
            args.iter().any(|a| a == flag),
            "{flag} missing from {args:?}"
        );
    }
    assert!(!args.iter().any(|a| a == "--prune"), "{args:?}");
    let sa = one(&docs, "ServiceAccount");
    let subject = (
        sa["metadata"]["namespace"].as_str().unwrap(),
        sa["metadata"]["name"].as_str().unwrap(),
    );
    let d = one(&docs, "Deployment");
    assert_eq!(
        d["spec"]["template"]["spec"]["serviceAccountName"],
        subject.1
    );
    assert_eq!(d["metadata"]["namespace"], subject.0);
    // The Lease it runs for is the one the install ships.
    let lease = one(&docs, "Lease");
    let Purpose::Watch {
        lease: Some((lns, lname)),
        ..
    } = &purpose
    else {
        panic!("the Deployment passes --lease: {args:?}")
    };
    assert_eq!(
        (
            lease["metadata"]["namespace"].as_str(),
            lease["metadata"]["name"].as_str()
        ),
        (Some(lns.as_str()), Some(lname.as_str()))
    );
    assert_eq!(lease["apiVersion"], format!("{LEASE_GROUP}/v1"));

    assert_grants_exactly_watch_needs(&docs, subject, d, "deploy/watch/rbac.yaml");

    // Probes and scraping reach the port --metrics-addr listens on.
    let addr = args
        .iter()
        .find_map(|a| a.strip_prefix("--metrics-addr="))
        .expect("--metrics-addr");
    let port: u64 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let container = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["ports"][0]["containerPort"], port);
    // Liveness: the loop runs; readiness: the passes do not all fail.
    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        assert_eq!(container[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(
            container[probe]["httpGet"]["port"],
            container["ports"][0]["name"]
        );
    }
    assert_eq!(
        d["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"],
        port.to_string()
    );
    assert_eq!(d["spec"]["replicas"], 2);
    assert!(
        args.contains(&"--identity=$(POD_NAME)".to_string()),
        "{args:?}"
    );
    assert_eq!(
        container["env"][0],
        serde_json::json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    );
}

#[test]
fn the_watch_install_is_accepted_and_its_service_account_can_hold_the_lease() {
    meshscope_e2e::needs_cluster!();
    let c = Cluster::shared();
    let dir = repo_root().join("deploy/watch");
    let path = |f: &str| dir.join(f).to_str().unwrap().to_string();
    c.kubectl_ok(&["apply", "-f", &path("namespace.yaml")], None);
    // The whole install, Deployment included, as the API server checks it
    // (no pods: this control plane has no scheduler or kubelet anyway).
    let out = c.kubectl_ok(&["apply", "-k", &path(""), "--dry-run=server"], None);
    for object in [
        "serviceaccount/meshscope-watch",
        "clusterrole.rbac.authorization.k8s.io/meshscope-watch",
        "clusterrolebinding.rbac.authorization.k8s.io/meshscope-watch",
        "role.rbac.authorization.k8s.io/meshscope-watch",
        "rolebinding.rbac.authorization.k8s.io/meshscope-watch",
        "lease.coordination.k8s.io/meshscope-watch",
        "service/meshscope-watch",
        "deployment.apps/meshscope-watch",
        "poddisruptionbudget.policy/meshscope-watch",
    ] {
        assert!(out.contains(object), "{object} missing from:\n{out}");
    }
    // For real: what the ServiceAccount runs with.
    let docs = yaml_docs(&c.kubectl_ok(&["kustomize", &path("")], None));
    let keep = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Lease",
    ];
    for d in docs
        .iter()
        .filter(|d| keep.contains(&d["kind"].as_str().unwrap()))
    {
        c.apply(&serde_yaml::to_string(d).unwrap());
    }
    let (_, purpose, pod_logs, hints) = deployment_purpose(one(&watch_install(), "Deployment"));
    let tmp = tempfile::tempdir().unwrap();
    let kubeconfig = c
        .impersonating(
            "system:serviceaccount:meshscope-system:meshscope-watch",
            tmp.path(),
        )
        .unwrap();
    runtime().block_on(async {
        let live = connect(&kubeconfig).await;
        // The API server agrees that it may do all watch mode asks (once
        // the authorizer has seen the new bindings)...
        let needs = everything_needed(&purpose, pod_logs, hints);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let denied = live.check(&needs).await.unwrap();
            if denied.is_empty() {
                break;
            }
            assert!(Instant::now() < deadline, "{denied:#?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // ...and no more: no deleting Sidecars, no other Lease, no
        // port-forwards outside istio-system.
        let beyond = [
            Need::new("delete", "networking.istio.io", "sidecars", None),
            Need::named("patch", LEASE_GROUP, "leases", "meshscope-system", "other"),
            Need::new("create", "", "pods/portforward", Some("default")),
            Need::new("list", "", "configmaps", Some("istio-system")),
            Need::new("list", "", "secrets", None),
        ];
        assert_eq!(live.check(&beyond).await.unwrap(), beyond);
        // It holds the shipped Lease, and gives it up.
        let identity = format!("e2e-{}", std::process::id());
        let mut e = live
            .elect("meshscope-system", "meshscope-watch", &identity, LEASE)
            .await
            .unwrap();
        timeout(LEASE + Duration::from_secs(10), e.leading())
            .await
            .expect("the ServiceAccount takes the Lease")
            .unwrap();
        assert_eq!(holder(c, "meshscope-system", "meshscope-watch"), identity);
        e.release().await.unwrap();
    });
    assert_eq!(holder(c, "meshscope-system", "meshscope-watch"), "");
}
