//! `kubectl meshscope impact` held to the real istiod (issue #19, item 1):
//! for a change to each kind impact takes, the proxies istiod pushes to
//! are exactly the ones impact names, those calling the object and those
//! serving it.
//!
//! A bookinfo-shaped namespace, every pod scoped by its own Sidecar except
//! `lonely-0` (the default scope: it imports everything), and a simulated
//! sidecar per pod. Each change is made with `kubectl`, then undone; a
//! proxy counts as pushed when its stream received any response after the
//! change (istiod's decision: `DefaultProxyNeedsPush` in
//! `pilot/pkg/xds/proxy_dependencies.go`; which types it then sends is
//! each generator's choice, reported on stderr).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::fidelity::{Builder, Scenario, SidecarDoc, DEFAULT_MESH};
use meshscope_e2e::istiod::Istiod;
use meshscope_e2e::world::{labels, SvcPort};
use meshscope_e2e::xds::Sim;
use serde_json::Value;

use super::{meshscope, serial, tag};

/// A pod: its name, its labels, and the hosts its Sidecar imports
/// (`None`: no Sidecar).
type PodDef = (
    &'static str,
    &'static [(&'static str, &'static str)],
    Option<&'static [&'static str]>,
);

const PODS: [PodDef; 7] = [
    (
        "productpage-0",
        &[("app", "productpage")],
        Some(&["reviews", "details"]),
    ),
    (
        "reviews-v1-0",
        &[("app", "reviews"), ("version", "v1")],
        Some(&["ratings", "ratings.mesh"]),
    ),
    (
        "reviews-v2-0",
        &[("app", "reviews"), ("version", "v2")],
        Some(&["ratings", "ratings.mesh"]),
    ),
    (
        "reviews-v3-0",
        &[("app", "reviews"), ("version", "v3")],
        Some(&["ratings", "ratings.mesh"]),
    ),
    ("ratings-0", &[("app", "ratings")], Some(&[])),
    ("details-0", &[("app", "details")], Some(&[])),
    ("lonely-0", &[("app", "lonely")], None),
];

/// Pod → the xDS types istiod pushed it.
type Pushed = BTreeMap<String, BTreeSet<&'static str>>;

struct Mesh {
    c: &'static Cluster,
    ns: String,
    sc: Scenario,
    istiod: Istiod,
    sim: Sim,
}

/// The ServiceEntry that puts the ratings pods behind `ratings.mesh`.
fn service_entry(ns: &str, extra_port: bool) -> String {
    let extra = if extra_port {
        "  - {number: 9081, name: http-extra, protocol: HTTP}\n"
    } else {
        ""
    };
    format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: ratings-mesh\n  namespace: {ns}\nspec:\n  hosts: [ratings.mesh]\n  location: MESH_INTERNAL\n  resolution: STATIC\n  ports:\n  - {{number: 9080, name: http, protocol: HTTP}}\n{extra}  workloadSelector:\n    labels: {{app: ratings}}\n"
    )
}

fn virtual_service(ns: &str, subset: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: reviews\n  namespace: {ns}\nspec:\n  hosts: [reviews]\n  http:\n  - route:\n    - destination: {{host: reviews, subset: {subset}}}\n"
    )
}

fn destination_rule(ns: &str, lb: &str) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: reviews\n  namespace: {ns}\nspec:\n  host: reviews\n  trafficPolicy:\n    loadBalancer: {{simple: {lb}}}\n  subsets:\n  - {{name: v1, labels: {{version: v1}}}}\n  - {{name: v2, labels: {{version: v2}}}}\n  - {{name: v3, labels: {{version: v3}}}}\n"
    )
}

fn setup() -> Mesh {
    let c = Cluster::shared();
    let ns = format!("imp{}", tag());
    let mut w = Builder::new(500 + tag() % 50);
    w.namespace(&ns);
    for name in ["productpage", "reviews", "ratings", "details"] {
        w.service(&ns, name, vec![SvcPort::new("http", 9080)], false);
    }
    for (pod, l, hosts) in PODS {
        let l = labels(l);
        w.pod(&ns, pod, l.clone());
        let Some(hosts) = hosts else { continue };
        // A Sidecar that imports nothing of the mesh still needs a host:
        // istio-system holds no Service here.
        let mut egress: Vec<String> = hosts
            .iter()
            .map(|h| match *h {
                "ratings.mesh" => "./ratings.mesh".to_string(),
                h => format!("./{h}.{ns}.svc.cluster.local"),
            })
            .collect();
        if egress.is_empty() {
            egress.push("istio-system/*".into());
        }
        let app = &l["app"];
        let sel = labels(&[("app", app)]);
        let doc = SidecarDoc::new(&ns, app)
            .selector(&sel)
            .egress(None, egress)
            .yaml();
        // The three reviews pods share one Sidecar.
        if !w.world.istio.contains(&doc) {
            w.istio(doc);
        }
    }
    w.istio(service_entry(&ns, false));
    w.istio(virtual_service(&ns, "v1"));
    w.istio(destination_rule(&ns, "ROUND_ROBIN"));
    let sc = w.finish("impact".into(), DEFAULT_MESH.into());
    sc.world.apply(c).expect("world applied");
    let istiod = Istiod::start(c).expect("istiod starts");
    let host = |n: &str| format!("{n}.{ns}.svc.cluster.local");
    let services: Vec<(String, String)> = ["productpage", "reviews", "ratings", "details"]
        .iter()
        .map(|n| (ns.clone(), host(n)))
        .chain([(ns.clone(), "ratings.mesh".to_string())])
        .collect();
    let configs: Vec<(String, String)> = ["reviews", "productpage", "ratings", "details"]
        .iter()
        .map(|n| (ns.clone(), n.to_string()))
        .collect();
    istiod
        .wait_for(&services, &configs, Duration::from_secs(60))
        .expect("istiod sees the mesh");
    let specs = sc.world.pods.iter().map(|p| p.proxy_spec()).collect();
    let sim = Sim::connect_many_settled(&istiod.grpc_url(), specs, 8);
    Mesh {
        c,
        ns,
        sc,
        istiod,
        sim,
    }
}

impl Mesh {
    /// Makes a change with `kubectl`, and returns the pods whose proxies
    /// istiod pushed to, each with the types it sent.
    fn pushed_by(&self, what: &str, args: &[&str], stdin: Option<&str>) -> Pushed {
        let t0 = Instant::now();
        self.c.kubectl_ok(args, stdin);
        self.sim
            .wait_push_after(t0, Duration::from_millis(2000), Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{what}: istiod pushes: {e:#}"));
        let mut out = BTreeMap::new();
        for p in self.sim.proxies() {
            let types: BTreeSet<&'static str> = p.pushes_since(t0).iter().map(|x| x.ty).collect();
            if !types.is_empty() {
                let pod = p.key().rsplit('/').next().unwrap().to_string();
                out.insert(pod, types);
            }
        }
        eprintln!("{what}: istiod pushed {out:?}");
        out
    }

    /// `impact TARGET -o json`'s now side, for this namespace's pods:
    /// (every pod reached, the callers, the serving ones).
    fn impact(&self, target: &str) -> [BTreeSet<String>; 3] {
        let r = meshscope(
            &self.c.kubeconfig,
            &["impact", target, "-n", &self.ns, "-o", "json"],
        );
        assert!(
            r.outcome.is_ok(),
            "impact {target}: {:?}\n{}",
            r.outcome,
            r.stderr
        );
        let v: Value = serde_json::from_str(&r.stdout).expect("impact -o json is JSON");
        let prefix = format!("Pod/{}/", self.ns);
        let pods = |field: &str| -> BTreeSet<String> {
            v["now"][field]
                .as_object()
                .unwrap_or_else(|| panic!("impact {target}: no now.{field}: {v}"))
                .keys()
                .filter_map(|k| k.strip_prefix(&prefix).map(String::from))
                .collect()
        };
        [pods("workloads"), pods("importing"), pods("serving")]
    }

    /// Applies `doc` (an edit of one of the mesh's objects).
    fn apply(&self, what: &str, doc: &str) -> Pushed {
        self.pushed_by(what, &["apply", "-f", "-"], Some(doc))
    }

    fn patch_service(&self, what: &str, op: &str) -> Pushed {
        let patch = match op {
            "add" => {
                r#"[{"op":"add","path":"/spec/ports/-","value":{"name":"http-extra","port":9081,"targetPort":9081}}]"#
            }
            _ => r#"[{"op":"remove","path":"/spec/ports/1"}]"#,
        };
        self.pushed_by(
            what,
            &[
                "patch",
                "service",
                "reviews",
                "-n",
                &self.ns,
                "--type=json",
                "-p",
                patch,
            ],
            None,
        )
    }
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// What impact says of `target` is who istiod pushes `changes` to, each
/// time, and it names the callers and the serving pods it was given.
fn check(
    m: &Mesh,
    target: &str,
    callers: &[&str],
    serving: &[&str],
    changes: &[&dyn Fn() -> Pushed],
) {
    let [all, c, s] = m.impact(target);
    assert_eq!(c, set(callers), "{target}: the callers impact names");
    assert_eq!(s, set(serving), "{target}: the serving pods impact names");
    assert_eq!(all, &c | &s, "{target}");
    for (i, change) in changes.iter().enumerate() {
        let pushed: BTreeSet<String> = change().into_keys().collect();
        assert_eq!(
            pushed, all,
            "{target}, change {}: the proxies istiod pushed to (left) are the ones impact names (right)",
            i + 1
        );
    }
}

fn scenario(m: &Mesh) {
    let ns = m.ns.as_str();
    let reviews = ["reviews-v1-0", "reviews-v2-0", "reviews-v3-0"];
    // A port added to Service reviews, then removed: its callers, and the
    // pods it selects, whose inbound listeners and clusters come from it.
    check(
        m,
        "service/reviews",
        &["productpage-0", "lonely-0"],
        &reviews,
        &[
            &|| m.patch_service("service/reviews: port added", "add"),
            &|| m.patch_service("service/reviews: port removed", "remove"),
        ],
    );
    // The same for a ServiceEntry with a workloadSelector: ratings-0 serves
    // ratings.mesh (its service targets include the entry's ports).
    check(
        m,
        "serviceentry/ratings-mesh",
        &["reviews-v1-0", "reviews-v2-0", "reviews-v3-0", "lonely-0"],
        &["ratings-0"],
        &[
            &|| {
                m.apply(
                    "serviceentry/ratings-mesh: port added",
                    &service_entry(ns, true),
                )
            },
            &|| {
                m.apply(
                    "serviceentry/ratings-mesh: port removed",
                    &service_entry(ns, false),
                )
            },
        ],
    );
    // Routing: only the scopes that hold the VirtualService or the
    // DestinationRule depend on it; the reviews pods are not pushed.
    check(
        m,
        "virtualservice/reviews",
        &["productpage-0", "lonely-0"],
        &[],
        &[
            &|| m.apply("virtualservice/reviews: to v2", &virtual_service(ns, "v2")),
            &|| m.apply("virtualservice/reviews: to v1", &virtual_service(ns, "v1")),
        ],
    );
    check(
        m,
        "destinationrule/reviews",
        &["productpage-0", "lonely-0"],
        &[],
        &[
            &|| {
                m.apply(
                    "destinationrule/reviews: LEAST_REQUEST",
                    &destination_rule(ns, "LEAST_REQUEST"),
                )
            },
            &|| {
                m.apply(
                    "destinationrule/reviews: ROUND_ROBIN",
                    &destination_rule(ns, "ROUND_ROBIN"),
                )
            },
        ],
    );
}

#[test]
fn impact_names_the_proxies_istiod_pushes_each_kind_of_change_to() {
    meshscope_e2e::needs_cluster!();
    let _serial = serial();
    let m = setup();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&m)));
    m.sim.close();
    if let Err(e) = m.sc.world.delete(m.c) {
        eprintln!("cleanup: {e:#}");
    }
    if let Err(p) = result {
        eprintln!("istiod log:\n{}", m.istiod.log_tail(40));
        std::panic::resume_unwind(p);
    }
}
