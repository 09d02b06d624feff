//! The "most likely to be gotten wrong" points of the Istio semantics, each
//! with istiod's behaviour as the expected value, plus Istio's own test
//! inputs from `../shared/istio-testdata` (outside the repository: the
//! tests that read them say on stderr that they were skipped when the
//! directory is absent).

use std::collections::BTreeSet;
use std::path::PathBuf;

use meshscope_shared::audit::{self, AuditScope};
use meshscope_shared::scope::{Evaluator, ScopeSource};
use meshscope_shared::snapshot::{Labels, MeshSnapshot, WorkloadKind};
use meshscope_shared::{Inputs, IstioVersion, Options};
use meshscope_test_support::fixtures::{inputs, labels};
use meshscope_test_support::outside::istio_testdata;

fn snap_v(yaml: &str, minor: u32) -> MeshSnapshot {
    let options = Options {
        istio: IstioVersion { major: 1, minor },
        ..Options::default()
    };
    MeshSnapshot::build(&inputs(yaml), options).unwrap()
}

fn snap(yaml: &str) -> MeshSnapshot {
    snap_v(yaml, 30)
}

/// Hostnames a proxy in `ns` with `l` imports.
fn imported(s: &MeshSnapshot, ns: &str, l: &Labels) -> BTreeSet<String> {
    let sel = s.select_sidecar(ns, l);
    let vis = s.visible(ns, &s.listeners_of(sel.source));
    vis.services
        .keys()
        .map(|id| {
            let svc = &s.services[*id];
            format!("{}/{}", svc.namespace, svc.hostname)
        })
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn svc(ns: &str, name: &str, extra_meta: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n{extra_meta}spec:\n  ports:\n  - name: http\n    port: 80\n"
    )
}

fn sidecar(ns: &str, name: &str, created: &str, selector: Option<&str>, hosts: &[&str]) -> String {
    let sel = selector
        .map(|s| {
            let (k, v) = s.split_once('=').unwrap();
            format!("  workloadSelector:\n    labels:\n      {k}: {v}\n")
        })
        .unwrap_or_default();
    let egress = if hosts.is_empty() {
        "  ingress:\n  - port:\n      number: 9080\n      protocol: HTTP\n    defaultEndpoint: 127.0.0.1:8080\n".to_string()
    } else {
        let h: String = hosts.iter().map(|h| format!("    - \"{h}\"\n")).collect();
        format!("  egress:\n  - hosts:\n{h}")
    };
    format!(
        "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: {name}\n  namespace: {ns}\n  creationTimestamp: \"{created}\"\nspec:\n{sel}{egress}"
    )
}

fn mesh() -> String {
    svc("a", "web", "") + &svc("b", "api", "") + &svc("c", "db", "")
}

// 1. A Sidecar without egress is */*; it does not inherit.

#[test]
fn sidecar_without_egress_imports_everything_and_does_not_inherit_the_namespace_default() {
    let yaml = mesh()
        + &sidecar("a", "ns-default", "2024-01-01T00:00:00Z", None, &["./*"])
        + &sidecar(
            "a",
            "ingress-only",
            "2024-01-02T00:00:00Z",
            Some("app=web"),
            &[],
        );
    let s = snap(&yaml);
    let web = labels(&[("app", "web")]);
    assert!(matches!(
        s.select_sidecar("a", &web).source,
        ScopeSource::Workload(_)
    ));
    assert_eq!(
        imported(&s, "a", &web),
        set(&[
            "a/web.a.svc.cluster.local",
            "b/api.b.svc.cluster.local",
            "c/db.c.svc.cluster.local"
        ])
    );
    // Other pods get the namespace default.
    assert_eq!(
        imported(&s, "a", &labels(&[("app", "other")])),
        set(&["a/web.a.svc.cluster.local"])
    );
}

#[test]
fn root_default_dot_means_the_proxys_namespace() {
    let yaml = mesh()
        + &sidecar(
            "istio-system",
            "default",
            "2024-01-01T00:00:00Z",
            None,
            &["./*"],
        );
    let s = snap(&yaml);
    let sel = s.select_sidecar("b", &Labels::new());
    assert!(matches!(sel.source, ScopeSource::Root(_)));
    assert_eq!(
        imported(&s, "b", &Labels::new()),
        set(&["b/api.b.svc.cluster.local"])
    );
}

#[test]
fn root_namespace_sidecar_with_a_selector_is_not_a_mesh_default() {
    let yaml = mesh()
        + &sidecar(
            "istio-system",
            "sel",
            "2024-01-01T00:00:00Z",
            Some("app=web"),
            &["./*"],
        );
    let s = snap(&yaml);
    assert_eq!(
        s.select_sidecar("a", &labels(&[("app", "web")])).source,
        ScopeSource::Implicit
    );
    let f = audit::sidecar_findings(&s, 0);
    assert!(f.iter().any(|f| f.code.as_str() == "MS0008"), "{f:?}");
}

// 2. No short-name expansion; multi-level wildcards; VS import by VS namespace.

#[test]
fn egress_hosts_do_no_short_name_expansion() {
    let yaml = mesh()
        + &sidecar(
            "a",
            "s",
            "2024-01-01T00:00:00Z",
            None,
            &["b/api", "c/db.c.svc.cluster.local"],
        );
    let s = snap(&yaml);
    assert_eq!(
        imported(&s, "a", &Labels::new()),
        set(&["c/db.c.svc.cluster.local"])
    );
    // and audit flags the short name
    let f = audit::sidecar_findings(&s, 0);
    assert!(
        f.iter()
            .any(|f| f.code.as_str() == "MS0007" && f.message.contains("b/api")),
        "{f:?}"
    );
}

#[test]
fn wildcard_egress_hosts_match_any_depth_but_not_the_apex() {
    let se = "---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: ext\n  namespace: a\nspec:\n  hosts: [a.b.example.com, example.com, x.example.com]\n  ports:\n  - number: 443\n    name: tls\n    protocol: TLS\n  resolution: DNS\n  exportTo: [\".\"]\n";
    let yaml =
        se.to_string() + &sidecar("a", "s", "2024-01-01T00:00:00Z", None, &["./*.example.com"]);
    let s = snap(&yaml);
    assert_eq!(
        imported(&s, "a", &Labels::new()),
        set(&["a/a.b.example.com", "a/x.example.com"])
    );
}

#[test]
fn virtual_services_are_imported_by_their_own_namespace_and_pull_in_destinations() {
    // VS in namespace `routes` for host api.b routes to db.c.
    let vs = "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: api-route\n  namespace: routes\nspec:\n  hosts: [api.b.svc.cluster.local]\n  http:\n  - route:\n    - destination:\n        host: db.c.svc.cluster.local\n";
    // An entry for the service's namespace does not import the VS...
    let s = snap(
        &(mesh()
            + vs
            + &sidecar(
                "a",
                "s",
                "2024-01-01T00:00:00Z",
                None,
                &["b/api.b.svc.cluster.local"],
            )),
    );
    let sel = s.select_sidecar("a", &Labels::new());
    let vis = s.visible("a", &s.listeners_of(sel.source));
    assert!(vis.virtual_services.is_empty());
    assert_eq!(
        imported(&s, "a", &Labels::new()),
        set(&["b/api.b.svc.cluster.local"])
    );
    // ...an entry for the VS's namespace does, and the destination comes along
    // although the Sidecar never names it.
    let s = snap(
        &(mesh()
            + vs
            + &sidecar(
                "a",
                "s",
                "2024-01-01T00:00:00Z",
                None,
                &["routes/api.b.svc.cluster.local"],
            )),
    );
    assert_eq!(
        imported(&s, "a", &Labels::new()),
        set(&["c/db.c.svc.cluster.local"])
    );
}

#[test]
fn vs_routes_for_another_source_namespace_are_skipped() {
    let vs = "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: r\n  namespace: a\nspec:\n  hosts: [web.a.svc.cluster.local]\n  http:\n  - match:\n    - sourceNamespace: b\n    route:\n    - destination:\n        host: db.c.svc.cluster.local\n";
    let s = snap(
        &(mesh()
            + vs
            + &sidecar(
                "a",
                "s",
                "2024-01-01T00:00:00Z",
                None,
                &["./web.a.svc.cluster.local"],
            )),
    );
    assert_eq!(
        imported(&s, "a", &Labels::new()),
        set(&["a/web.a.svc.cluster.local"])
    );
}

// 3. exportTo caps everything; DR lookup.

#[test]
fn export_to_caps_what_egress_can_reach() {
    let yaml = svc("a", "web", "")
        + &svc(
            "b",
            "private",
            "  annotations:\n    networking.istio.io/exportTo: \".\"\n",
        )
        + &svc(
            "c",
            "hidden",
            "  annotations:\n    networking.istio.io/exportTo: \"~\"\n",
        )
        + &svc(
            "d",
            "shared",
            "  annotations:\n    networking.istio.io/exportTo: \"a, d\"\n",
        );
    let s = snap(&yaml);
    assert_eq!(
        imported(&s, "a", &Labels::new()),
        set(&["a/web.a.svc.cluster.local", "d/shared.d.svc.cluster.local"])
    );
    assert!(imported(&s, "b", &Labels::new()).contains("b/private.b.svc.cluster.local"));
    assert!(!imported(&s, "c", &Labels::new()).contains("c/hidden.c.svc.cluster.local"));
}

#[test]
fn destination_rules_come_only_from_client_service_and_root_namespaces() {
    let dr = |ns: &str, name: &str, export: &str| {
        format!("---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  host: api.b.svc.cluster.local\n  exportTo: [\"{export}\"]\n  subsets:\n  - name: v1\n")
    };
    // A public DR in an unrelated namespace is never used.
    let s = snap(&(mesh() + &dr("z", "elsewhere", "*")));
    let api = s.services_named("api.b.svc.cluster.local")[0];
    assert!(s.destination_rule_for("a", api, None).is_none());
    // The service's namespace DR, exported, is used; the client's own wins over it.
    let s = snap(&(mesh() + &dr("b", "svc-ns", "*") + &dr("a", "client-ns", ".")));
    let api = s.services_named("api.b.svc.cluster.local")[0];
    let got = s
        .destination_rule_for("a", api, None)
        .map(|d| s.destination_rules[d.rules[0]].name.clone());
    assert_eq!(got.as_deref(), Some("client-ns"));
    let got = s
        .destination_rule_for("c", api, None)
        .map(|d| s.destination_rules[d.rules[0]].name.clone());
    assert_eq!(got.as_deref(), Some("svc-ns"));
    // A private DR in the service namespace is not used by other clients; root is next.
    let s = snap(&(mesh() + &dr("b", "svc-ns", ".") + &dr("istio-system", "root", "*")));
    let api = s.services_named("api.b.svc.cluster.local")[0];
    let got = s
        .destination_rule_for("c", api, None)
        .map(|d| s.destination_rules[d.rules[0]].name.clone());
    assert_eq!(got.as_deref(), Some("root"));
}

#[test]
fn same_hostname_in_two_namespaces_keeps_the_scope_namespace_then_the_kubernetes_service() {
    let se = |ns: &str| {
        format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: dup\n  namespace: {ns}\nspec:\n  hosts: [api.b.svc.cluster.local]\n  ports:\n  - number: 80\n    name: http\n  resolution: DNS\n")
    };
    let s = snap(&(mesh() + &se("a") + &se("z")));
    let l = Labels::new();
    let from_a = imported(&s, "a", &l);
    assert!(from_a.contains("a/api.b.svc.cluster.local"));
    assert!(!from_a.contains("b/api.b.svc.cluster.local"));
    let from_c = imported(&s, "c", &l);
    assert!(from_c.contains("b/api.b.svc.cluster.local"), "{from_c:?}");
    assert!(!from_c.contains("z/api.b.svc.cluster.local"));
}

// 4. Several Sidecars match: oldest wins, then name; selector beats namespace-wide.

#[test]
fn oldest_matching_selector_sidecar_wins_then_name() {
    let yaml = mesh()
        + &sidecar(
            "a",
            "newer",
            "2024-02-01T00:00:00Z",
            Some("app=web"),
            &["b/*"],
        )
        + &sidecar(
            "a",
            "older",
            "2024-01-01T00:00:00Z",
            Some("app=web"),
            &["c/*"],
        )
        + &sidecar("a", "ns-wide", "2023-01-01T00:00:00Z", None, &["./*"]);
    let s = snap(&yaml);
    let web = labels(&[("app", "web"), ("pod-template-hash", "x")]);
    let sel = s.select_sidecar("a", &web);
    let ScopeSource::Workload(id) = sel.source else {
        panic!()
    };
    assert_eq!(s.sidecars[id].name, "older");
    assert_eq!(imported(&s, "a", &web), set(&["c/db.c.svc.cluster.local"]));
    // same timestamp: first by name
    let yaml = mesh()
        + &sidecar(
            "a",
            "zeta",
            "2024-01-01T00:00:00Z",
            Some("app=web"),
            &["b/*"],
        )
        + &sidecar(
            "a",
            "alpha",
            "2024-01-01T00:00:00Z",
            Some("app=web"),
            &["c/*"],
        );
    let s = snap(&yaml);
    let ScopeSource::Workload(id) = s.select_sidecar("a", &web).source else {
        panic!()
    };
    assert_eq!(s.sidecars[id].name, "alpha");
}

#[test]
fn empty_selector_matches_every_pod_but_still_sorts_as_a_selector() {
    let yaml = mesh()
        + &sidecar("a", "ns-wide", "2020-01-01T00:00:00Z", None, &["./*"])
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: empty-sel\n  namespace: a\n  creationTimestamp: \"2024-01-01T00:00:00Z\"\nspec:\n  workloadSelector:\n    labels: {}\n  egress:\n  - hosts: [\"c/*\"]\n";
    let s = snap(&yaml);
    let ScopeSource::Workload(id) = s.select_sidecar("a", &Labels::new()).source else {
        panic!()
    };
    assert_eq!(s.sidecars[id].name, "empty-sel");
}

// 5. Version drift.

#[test]
fn tilde_excludes_on_1_31_and_is_a_missing_namespace_before() {
    let yaml = mesh()
        + &sidecar(
            "a",
            "s",
            "2024-01-01T00:00:00Z",
            None,
            &["*/*", "~b/api.b.svc.cluster.local"],
        );
    let s31 = snap_v(&yaml, 31);
    assert_eq!(
        imported(&s31, "a", &Labels::new()),
        set(&["a/web.a.svc.cluster.local", "c/db.c.svc.cluster.local"])
    );
    // Before 1.31 `~b` is rejected by validation and skipped: */* remains.
    let s30 = snap_v(&yaml, 30);
    assert_eq!(imported(&s30, "a", &Labels::new()).len(), 3);
    // `~/*` imports nothing on both.
    let closed = mesh() + &sidecar("a", "s", "2024-01-01T00:00:00Z", None, &["~/*"]);
    assert!(imported(&snap_v(&closed, 30), "a", &Labels::new()).is_empty());
    assert!(imported(&snap_v(&closed, 31), "a", &Labels::new()).is_empty());
}

// 6. Ports.

#[test]
fn a_listener_with_a_port_keeps_only_services_with_that_port() {
    let yaml = mesh()
        + "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: grpc\n  namespace: b\nspec:\n  ports:\n  - name: grpc\n    port: 9090\n"
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: s\n  namespace: a\nspec:\n  egress:\n  - port:\n      number: 9090\n      protocol: GRPC\n      name: grpc\n    hosts: [\"b/*\"]\n";
    let s = snap(&yaml);
    assert_eq!(
        imported(&s, "a", &Labels::new()),
        set(&["b/grpc.b.svc.cluster.local"])
    );
}

// Istio's own scope fixtures (lds_test.go), root namespace istio-config.

/// `rel` in Istio's test inputs, or `None` (said on stderr) without them.
fn testdata(test: &str, rel: &str) -> Option<PathBuf> {
    istio_testdata(test, rel)
}

fn istio_config_mesh(test: &str, file: &str) -> Option<MeshSnapshot> {
    let text = std::fs::read_to_string(testdata(test, file)?)
        .expect("../shared/istio-testdata is readable");
    let mesh = meshscope_shared::MeshConfig::from_yaml("rootNamespace: istio-config").unwrap();
    Some(MeshSnapshot::build_with_mesh(
        &inputs(&text),
        Options::default(),
        mesh,
    ))
}

#[test]
fn lds_test_with_default_sidecar_imports_ns1_only_with_istiods_counts() {
    let Some(s) = istio_config_mesh(
        "lds_test_with_default_sidecar_imports_ns1_only_with_istiods_counts",
        "scope/sidecar-ns-scope.configs.yaml",
    ) else {
        return;
    };
    let sel = s.select_sidecar("ns1", &Labels::new());
    assert!(matches!(sel.source, ScopeSource::Root(_)));
    assert_eq!(
        imported(&s, "ns1", &Labels::new()),
        set(&[
            "ns1/http1.ns1.svc.cluster.local",
            "ns1/http2.ns1.svc.cluster.local",
            "ns1/tcp1.ns1.svc.cluster.local"
        ])
    );
    let mut eval = Evaluator::new(&s);
    let vis = eval.visible_for(sel.source, "ns1");
    // One inbound port (8080) on the proxy.
    let est = s.estimate(
        &vis,
        meshscope_shared::snapshot::Inbound {
            http: 1,
            tcp: 0,
            sniffed: 0,
        },
    );
    assert_eq!(
        est.listeners, 4,
        "virtualOutbound, virtualInbound, 0.0.0.0_8080, tcp1:3306"
    );
    assert_eq!(est.clusters, 9, "{est:?}");
}

#[test]
fn lds_test_sidecar_for_workload_without_service_imports_only_http1() {
    let Some(s) = istio_config_mesh(
        "lds_test_sidecar_for_workload_without_service_imports_only_http1",
        "scope/sidecar-without-service.configs.yaml",
    ) else {
        return;
    };
    let l = labels(&[("app", "consumeronly")]);
    assert!(matches!(
        s.select_sidecar("consumerns", &l).source,
        ScopeSource::Workload(_)
    ));
    assert_eq!(
        imported(&s, "consumerns", &l),
        set(&["ns1/http1.ns1.svc.cluster.local"])
    );
}

#[test]
fn istio_sidecar_corpus_loads_audits_and_explains() {
    let Some(dir) = testdata("istio_sidecar_corpus_loads_audits_and_explains", "sidecars") else {
        return;
    };
    let mut files = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "yaml") {
                files.push(p);
            }
        }
    }
    assert!(files.len() >= 15, "{files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let mut inp = Inputs::default();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
            if v.get("kind").is_some() {
                inp.add(v)
                    .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            }
        }
        let s = MeshSnapshot::build(&inp, Options::default()).unwrap();
        let _ = audit::audit(
            &s,
            None,
            &AuditScope {
                namespaces: None,
                workloads: None,
            },
        );
        for w in 0..s.workloads.len() {
            let _ = meshscope_shared::explain::explain(&s, w, None, None);
        }
    }
}

/// Audits an analyzer fixture; returns the findings.
fn audit_fixture(test: &str, rel: &str) -> Option<Vec<audit::Finding>> {
    let text = std::fs::read_to_string(testdata(test, rel)?).unwrap();
    let s = MeshSnapshot::build(&inputs(&text), Options::default()).unwrap();
    Some(audit::audit(
        &s,
        None,
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    ))
}

/// `ns/name` of every finding with `code`.
fn named(f: &[audit::Finding], code: &str) -> BTreeSet<String> {
    f.iter()
        .filter(|x| x.code.as_str() == code)
        .map(|x| format!("{}/{}", x.namespace, x.name))
        .collect()
}

#[test]
fn analyzer_sidecar_selector_fixture_agrees_with_istioctl() {
    let Some(f) = audit_fixture(
        "analyzer_sidecar_selector_fixture_agrees_with_istioctl",
        "analyzer/sidecar-selector.yaml",
    ) else {
        return;
    };
    let named = |code: &str| named(&f, code);
    // IST0101: selector matches nothing.
    assert_eq!(
        named("MS0003"),
        set(&["default/maps-to-nonexistent", "other/maps-to-different-ns"])
    );
    // IST0110: reviews (dupe-1, dupe-2) and ratings (overlap-1, overlap-2).
    assert_eq!(
        named("MS0004"),
        set(&["default/ratings", "default/reviews"])
    );
    let reviews = f
        .iter()
        .find(|x| x.code.as_str() == "MS0004" && x.name == "reviews")
        .unwrap();
    assert!(reviews.message.contains("dupe-1") && reviews.message.contains("dupe-2"));
}

#[test]
fn analyzer_default_selector_fixture_agrees_with_istioctl() {
    let Some(f) = audit_fixture(
        "analyzer_default_selector_fixture_agrees_with_istioctl",
        "analyzer/sidecar-default-selector.yaml",
    ) else {
        return;
    };
    let named = |code: &str| named(&f, code);
    // IST0111 on both selector-less Sidecars in ns2, none in ns1.
    assert_eq!(
        named("MS0005"),
        set(&["ns2/has-conflict-1", "ns2/has-conflict-2"])
    );
    // IST0167 for Sidecars that reach ambient pods only.
    let ambient = named("MS0009");
    assert!(
        ambient.contains("ns-ambient/namespace-scoped"),
        "{ambient:?}"
    );
    assert!(
        !ambient.iter().any(|n| n.starts_with("ns-not-ambient")),
        "{ambient:?}"
    );
}

#[test]
fn dns_service_entry_without_export_to_is_flagged() {
    let Some(path) = testdata(
        "dns_service_entry_without_export_to_is_flagged",
        "scope/validation-dataset-networking-v1-ServiceEntry.yaml",
    ) else {
        return;
    };
    let text = std::fs::read_to_string(path).unwrap();
    let s = MeshSnapshot::build(&inputs(&text), Options::default()).unwrap();
    let f = audit::audit(
        &s,
        None,
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    );
    assert_eq!(
        f.iter().filter(|x| x.code.as_str() == "MS0002").count(),
        1,
        "{f:?}"
    );
    // With a mesh default of ".", it is not exported everywhere.
    let mesh = meshscope_shared::MeshConfig::from_yaml("defaultServiceExportTo: [\".\"]").unwrap();
    let s = MeshSnapshot::build_with_mesh(&inputs(&text), Options::default(), mesh);
    let f = audit::audit(
        &s,
        None,
        &AuditScope {
            namespaces: None,
            workloads: None,
        },
    );
    assert!(f.iter().all(|x| x.code.as_str() != "MS0002"));
}

#[test]
fn workloads_resolve_to_their_top_controller() {
    let yaml = "---\napiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: nightly\n  namespace: a\nspec:\n  schedule: \"0 0 * * *\"\n  jobTemplate:\n    spec:\n      template:\n        metadata:\n          labels:\n            app: nightly\n        spec:\n          containers: [{name: c, image: x}]\n---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: nightly-123\n  namespace: a\n  ownerReferences:\n  - {apiVersion: batch/v1, kind: CronJob, name: nightly, uid: u, controller: true}\nspec:\n  template:\n    spec:\n      containers: [{name: c, image: x}]\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: nightly-123-abcde\n  namespace: a\n  ownerReferences:\n  - {apiVersion: batch/v1, kind: Job, name: nightly-123, uid: u, controller: true}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: web-5d8f7c-x1y2z\n  namespace: a\n  labels: {app: web, pod-template-hash: 5d8f7c}\n  ownerReferences:\n  - {apiVersion: apps/v1, kind: ReplicaSet, name: web-5d8f7c, uid: u, controller: true}\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: bare\n  namespace: a\n";
    let s = snap(yaml);
    let kinds: BTreeSet<String> = s
        .workloads
        .iter()
        .map(|w| format!("{}/{}", w.kind, w.name))
        .collect();
    assert_eq!(
        kinds,
        set(&["CronJob/nightly", "Deployment/web", "Pod/bare"])
    );
    let cj = s
        .find_workload(&WorkloadKind::CronJob, "a", "nightly")
        .unwrap();
    assert_eq!(s.workloads[cj].pods.len(), 1);
}

// Rules found by holding the engine to a real istiod 1.31
// (tests/tests/istiod.rs); each was a disagreement there first.

fn port_sidecar(ns: &str, port: u32, protocol: &str, hosts: &[&str]) -> String {
    let h: String = hosts.iter().map(|h| format!("    - \"{h}\"\n")).collect();
    format!(
        "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: default\n  namespace: {ns}\nspec:\n  egress:\n  - port:\n      number: {port}\n      protocol: {protocol}\n      name: p\n    hosts:\n{h}"
    )
}

fn route_vs(ns: &str, host: &str, dest: &str, port: Option<u32>) -> String {
    let port = port
        .map(|p| format!("        port:\n          number: {p}\n"))
        .unwrap_or_default();
    format!(
        "---\napiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: r\n  namespace: {ns}\nspec:\n  hosts: [{host}]\n  http:\n  - route:\n    - destination:\n        host: {dest}\n{port}"
    )
}

#[test]
fn a_port_specific_listener_pulls_in_only_destinations_that_have_its_port() {
    // db.c has only port 80; the listener is on 9090.
    let yaml = mesh()
        + &route_vs(
            "b",
            "api.b.svc.cluster.local",
            "db.c.svc.cluster.local",
            None,
        )
        + &port_sidecar("a", 9090, "GRPC", &["*/*"]);
    let s = snap_v(&yaml, 31);
    assert!(imported(&s, "a", &Labels::new()).is_empty());
    // Without the port, the destination comes along, as a cluster only.
    let yaml = mesh()
        + &route_vs(
            "b",
            "api.b.svc.cluster.local",
            "db.c.svc.cluster.local",
            None,
        )
        + &sidecar(
            "a",
            "default",
            "2024-01-01T00:00:00Z",
            None,
            &["b/api.b.svc.cluster.local"],
        );
    let s = snap_v(&yaml, 31);
    let vis = s.visible(
        "a",
        &s.listeners_of(s.select_sidecar("a", &Labels::new()).source),
    );
    assert_eq!(vis.pulled.len(), 1, "{vis:?}");
    let est = s.estimate(&vis, Default::default());
    // api.b and db.c clusters; one 0.0.0.0_80 listener (api.b's) and the
    // two virtual ones, no listener for the pulled-in destination's port.
    assert_eq!(est.clusters, 3 + 2, "{est:?}");
    assert_eq!(est.listeners, 2 + 1, "{est:?}");
}

#[test]
fn a_destination_rule_exported_only_elsewhere_does_not_apply_in_its_own_namespace() {
    let dr = "---\napiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: web\n  namespace: a\nspec:\n  host: web.a.svc.cluster.local\n  exportTo: [b]\n  subsets:\n  - name: v1\n    labels:\n      version: v1\n";
    let s = snap_v(&(mesh() + dr), 31);
    let vis = s.visible(
        "a",
        &s.listeners_of(s.select_sidecar("a", &Labels::new()).source),
    );
    assert!(vis.destination_rules.is_empty(), "{vis:?}");
    let vis_b = s.visible(
        "b",
        &s.listeners_of(s.select_sidecar("b", &Labels::new()).source),
    );
    assert_eq!(vis_b.destination_rules.len(), 1);
    assert!(s
        .outbound_clusters(&vis_b, None)
        .contains(&"outbound|80|v1|web.a.svc.cluster.local".to_string()));
}

#[test]
fn a_listener_declared_http_on_a_tcp_port_gets_a_wildcard_http_listener() {
    let tcp = "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: db\n  namespace: a\nspec:\n  clusterIP: 10.96.1.1\n  ports:\n  - name: tcp-db\n    port: 5432\n";
    let s = snap_v(
        &(tcp.to_string() + &port_sidecar("a", 5432, "HTTP", &["./*"])),
        31,
    );
    let vis = s.visible(
        "a",
        &s.listeners_of(s.select_sidecar("a", &Labels::new()).source),
    );
    let est = s.estimate(&vis, Default::default());
    // 0.0.0.0_5432 (with a route) instead of 10.96.1.1_5432.
    assert_eq!((est.listeners, est.routes), (3, 1), "{est:?}");
}

#[test]
fn udp_ports_get_inbound_clusters_and_unnamed_ports_are_sniffed_on_the_service_address() {
    let yaml = "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: dns\n  namespace: a\nspec:\n  clusterIP: 10.96.1.2\n  selector:\n    app: dns\n  ports:\n  - name: udp-dns\n    port: 53\n    protocol: UDP\n  - name: plain\n    port: 7000\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: dns-0\n  namespace: a\n  labels:\n    app: dns\nspec:\n  containers:\n  - name: app\n  - name: istio-proxy\n";
    let s = snap_v(yaml, 31);
    let w = s.workloads.iter().position(|w| w.name == "dns-0").unwrap();
    assert_eq!(s.workloads[w].inbound.ports(), 2);
    let vis = s.visible("a", &s.listeners_of(ScopeSource::Implicit));
    let est = s.estimate(&vis, s.workloads[w].inbound);
    // outbound|7000 only (UDP gets no outbound cluster), two inbound, three fixed.
    assert_eq!(est.clusters, 1 + 2 + 3, "{est:?}");
    // 10.96.1.2_7000 and the two virtual listeners; the sniffed listener
    // names a route of its own, `dns.a.svc.cluster.local:7000`.
    assert_eq!((est.listeners, est.routes), (3, 1), "{est:?}");
    let l = s.outbound_listeners(&vis.egress, None);
    assert_eq!(l.route_names(), vec!["dns.a.svc.cluster.local:7000"]);
}

/// A Kubernetes Service port's protocol as istiod reads it
/// (`ConvertProtocol`, `pkg/config/kube/conversion.go`, 1.31): appProtocol
/// over the name, the name's prefix up to the first `-` only, and TCP for
/// a port named by number on 25, 53, 3306 or 27017 (elsewhere sniffed). A
/// ServiceEntry's protocol field is read whole.
#[test]
fn port_protocols_read_as_istiod_reads_them() {
    use meshscope_shared::snapshot::Protocol::{self, Auto, Http, Tcp};
    let svc = |port, name, app| Protocol::of_service_port(port, name, app);
    assert_eq!(svc(9090, Some("9090"), None), Auto);
    assert_eq!(svc(27017, Some("27017"), None), Tcp);
    assert_eq!(svc(3306, None, None), Tcp);
    assert_eq!(svc(8080, Some("http-web"), None), Http);
    assert_eq!(svc(8080, Some("HTTP2"), None), Http);
    assert_eq!(svc(8080, Some("http_web"), None), Auto);
    assert_eq!(svc(8080, Some("grpc-web-x"), None), Http);
    assert_eq!(svc(8080, Some("h2c"), None), Auto);
    assert_eq!(svc(8080, Some("http"), Some("tcp")), Tcp);
    assert_eq!(svc(8080, Some("http"), Some("custom")), Auto);
    assert_eq!(svc(8080, Some("x"), Some("kubernetes.io/h2c")), Http);
    assert_eq!(Protocol::parse("TLS"), Tcp);
    assert_eq!(Protocol::parse("http-web"), Auto);
    assert_eq!(Protocol::parse(""), Auto);
}
