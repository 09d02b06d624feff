//! Hosts written the way istiod resolves them: headless Services behind
//! pod IPs and pod names, hostnames defined in several namespaces, and the
//! mesh's serviceEntryVisibility.

use meshscope_test_support::access_log;
use meshscope_test_support::fixtures::{hosts, observe, snap, snap_with_mesh};

use meshscope_shared::observe::Observations;
use meshscope_shared::recommend::{self, RecommendOptions};
use meshscope_shared::snapshot::{MeshSnapshot, WorkloadId, WorkloadKind};

/// An injected bare pod `name` in `ns` at `ip`, labelled `app: <app>`.
fn pod(ns: &str, name: &str, app: &str, ip: &str) -> String {
    format!("---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{app: {app}}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\nstatus:\n  podIP: {ip}\n")
}

fn namespace(ns: &str) -> String {
    format!("---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{istio-injection: enabled}}\n")
}

/// A StatefulSet `db` in `data` with two pods behind the headless Service
/// `db` (port 5432, and 8080 targeting 9090).
fn statefulset() -> String {
    let mut y = namespace("data") + &namespace("shop");
    y += "---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\n  namespace: data\nspec:\n  serviceName: db\n  selector:\n    matchLabels: {app: db}\n  template:\n    metadata:\n      labels: {app: db}\n    spec:\n      containers: [{name: c, image: x}]\n";
    for (i, ip) in [(0, "10.1.0.10"), (1, "10.1.0.11")] {
        y += &format!("---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: db-{i}\n  namespace: data\n  labels: {{app: db}}\n  ownerReferences:\n  - {{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: u, controller: true}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\nstatus:\n  podIP: {ip}\n");
    }
    y += "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: db\n  namespace: data\nspec:\n  clusterIP: None\n  selector: {app: db}\n  ports:\n  - {name: tcp-pg, port: 5432}\n  - {name: http-admin, port: 8080, targetPort: 9090}\n";
    y + &pod("shop", "web", "web", "10.0.0.1")
}

fn line(src: &str, cluster: &str, dst: &str, authority: &str) -> String {
    access_log::line(src, authority, cluster, dst)
}

fn pod_workload(s: &MeshSnapshot, ns: &str, name: &str) -> WorkloadId {
    s.find_workload(&WorkloadKind::Pod, ns, name).unwrap()
}

fn outbound(obs: &Observations, w: WorkloadId) -> Vec<(String, u32)> {
    obs.of(w)
        .map(|t| t.outbound.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn pod_ips_of_a_headless_service_map_back_to_it() {
    let s = snap(&statefulset());
    let web = pod_workload(&s, "shop", "web");
    // A TCP call to one pod, and an HTTP call to the other's target port.
    let logs = line("10.0.0.1", "PassthroughCluster", "10.1.0.10:5432", "-")
        + &line("10.0.0.1", "PassthroughCluster", "10.1.0.11:9090", "-");
    let obs = observe(&s, &logs);
    assert_eq!(
        outbound(&obs, web),
        vec![
            ("db.data.svc.cluster.local".to_string(), 5432),
            ("db.data.svc.cluster.local".to_string(), 8080)
        ]
    );
    assert!(obs.unregistered.is_empty(), "{:?}", obs.unregistered);
    let r = recommend::recommend(&s, &obs, &[web], &RecommendOptions::default());
    assert_eq!(hosts(&r[0]), vec!["data/db.data.svc.cluster.local"]);
}

/// The pods of `data` were not read (a read under `-n shop`): the headless
/// Service's EndpointSlice still maps their IPs back; one of a ClusterIP
/// Service, or of another Service's name, does not.
#[test]
fn endpoint_slices_map_pod_ips_of_a_headless_service_whose_pods_were_not_read() {
    let without_pods: String = statefulset()
        .split("---\n")
        .filter(|d| !(d.contains("kind: Pod") && d.contains("namespace: data")))
        .collect::<Vec<_>>()
        .join("---\n");
    let slice = |name: &str, svc: &str, ips: &[&str]| {
        format!(
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}\n  namespace: data\n  labels: {{kubernetes.io/service-name: {svc}, service.kubernetes.io/headless: \"\"}}\naddressType: IPv4\nendpoints:\n{}ports: [{{name: tcp-pg, port: 5432}}]\n",
            ips.iter()
                .map(|ip| format!("- addresses: [\"{ip}\"]\n"))
                .collect::<String>()
        )
    };
    let logs = line("10.0.0.1", "PassthroughCluster", "10.1.0.10:5432", "-")
        + &line("10.0.0.1", "PassthroughCluster", "10.1.0.11:9090", "-");
    // Without slices the pod IPs are unknown.
    let s = snap(&without_pods);
    let obs = observe(&s, &logs);
    assert_eq!(obs.unregistered.len(), 2, "{:?}", obs.unregistered);
    let s = snap(
        &(without_pods.clone()
            + &slice("db-abcde", "db", &["10.1.0.10", "10.1.0.11"])
            + &slice("other-xyz", "other", &["10.1.0.12"])),
    );
    let web = pod_workload(&s, "shop", "web");
    let obs = observe(
        &s,
        &(logs + &line("10.0.0.1", "PassthroughCluster", "10.1.0.12:5432", "-")),
    );
    assert_eq!(
        outbound(&obs, web),
        vec![
            ("db.data.svc.cluster.local".to_string(), 5432),
            ("db.data.svc.cluster.local".to_string(), 8080)
        ]
    );
    // `other` is no Service here: its slice maps nothing.
    assert_eq!(obs.unregistered.len(), 1, "{:?}", obs.unregistered);
    assert_eq!(obs.unregistered[0].address, "10.1.0.12:5432");
}

#[test]
fn a_port_the_headless_service_lacks_stays_unregistered() {
    let s = snap(&statefulset());
    let obs = observe(
        &s,
        &line("10.0.0.1", "PassthroughCluster", "10.1.0.10:6000", "-"),
    );
    assert_eq!(obs.unregistered.len(), 1);
    assert_eq!(obs.unregistered[0].address, "10.1.0.10:6000");
}

#[test]
fn pod_names_under_a_headless_service_map_back_to_it() {
    let s = snap(&statefulset());
    let web = pod_workload(&s, "shop", "web");
    // The pod is not in the input (its IP is unknown): the authority says.
    for auth in [
        "db-1.db.data.svc.cluster.local:8080",
        "db-1.db.data:8080",
        "db-1.db.data.svc:8080",
    ] {
        let obs = observe(
            &s,
            &line("10.0.0.1", "PassthroughCluster", "10.9.9.9:9090", auth),
        );
        assert_eq!(
            outbound(&obs, web),
            vec![("db.data.svc.cluster.local".to_string(), 8080)],
            "{auth}"
        );
    }
    // The same from inside the namespace, by the short form.
    let yaml = statefulset() + &pod("data", "job", "job", "10.1.0.50");
    let s = snap(&yaml);
    let job = pod_workload(&s, "data", "job");
    let obs = observe(
        &s,
        &line(
            "10.1.0.50",
            "PassthroughCluster",
            "10.9.9.9:5432",
            "db-0.db:5432",
        ),
    );
    assert_eq!(
        outbound(&obs, job),
        vec![("db.data.svc.cluster.local".to_string(), 5432)]
    );
}

#[test]
fn a_pod_name_under_a_cluster_ip_service_is_not_a_service_name() {
    let yaml = statefulset()
        + "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: api\n  namespace: data\nspec:\n  clusterIP: 10.96.5.5\n  selector: {app: api}\n  ports:\n  - {name: http, port: 80}\n";
    let s = snap(&yaml);
    let obs = observe(
        &s,
        &line(
            "10.0.0.1",
            "PassthroughCluster",
            "10.9.9.9:80",
            "x-0.api.data.svc.cluster.local",
        ),
    );
    assert_eq!(obs.unregistered.len(), 1);
}

// === meshConfig.serviceEntryVisibility ===

fn ms0002(s: &MeshSnapshot) -> Vec<meshscope_shared::audit::Finding> {
    meshscope_shared::audit::audit(
        s,
        None,
        &meshscope_shared::audit::AuditScope {
            namespaces: None,
            workloads: None,
        },
    )
    .into_iter()
    .filter(|f| f.code.as_str() == "MS0002")
    .collect()
}

/// DNS ServiceEntries without exportTo in `sandbox` (labelled
/// `tier: sandbox`) and `partners`, and a caller in `shop`.
fn entries() -> String {
    let mut y = namespace("shop");
    y += "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: sandbox\n  labels: {tier: sandbox}\n";
    y += "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: partners\n";
    for (ns, host) in [
        ("sandbox", "toy.example.com"),
        ("partners", "api.partner.example"),
    ] {
        y += &format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: ext\n  namespace: {ns}\nspec:\n  hosts: [{host}]\n  location: MESH_EXTERNAL\n  resolution: DNS\n  ports:\n  - {{number: 443, name: tls, protocol: TLS}}\n");
    }
    y + &pod("shop", "web", "web", "10.0.0.1")
}

fn with_mesh(yaml: &str, mesh: &str, istio: &str) -> MeshSnapshot {
    snap_with_mesh(yaml, istio, mesh)
}

const SANDBOX_NAMESPACE_ONLY: &str = "serviceEntryVisibility:\n  applyToSidecars: true\n  policies:\n  - visibility: NAMESPACE\n    matchingRules:\n    - namespaceSelector:\n        matchLabels: {tier: sandbox}\n";

#[test]
fn a_dns_entry_the_mesh_already_keeps_to_its_namespace_is_not_ms0002() {
    let s = with_mesh(&entries(), SANDBOX_NAMESPACE_ONLY, "1.31");
    let f = ms0002(&s);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].namespace, "partners");
    // The one reported offers both fixes, the mesh one for its namespace.
    assert!(
        f[0].message.contains("kubectl meshscope apply --exports -n partners --from-pod-logs writes it, or have meshConfig.serviceEntryVisibility give namespace partners visibility NAMESPACE"),
        "{}",
        f[0].message
    );
    // NONE hides it too.
    let none = SANDBOX_NAMESPACE_ONLY.replace("NAMESPACE", "NONE");
    assert_eq!(ms0002(&with_mesh(&entries(), &none, "1.31")).len(), 1);
    // A default of NAMESPACE caps both.
    let all = "serviceEntryVisibility:\n  defaultVisibility: NAMESPACE\n  applyToSidecars: true\n";
    assert!(ms0002(&with_mesh(&entries(), all, "1.31")).is_empty());
}

#[test]
fn without_apply_to_sidecars_the_cap_is_for_ambient_only_and_the_message_says_so() {
    let mesh = SANDBOX_NAMESPACE_ONLY.replace("applyToSidecars: true", "applyToSidecars: false");
    let s = with_mesh(&entries(), &mesh, "1.31");
    let f = ms0002(&s);
    assert_eq!(f.len(), 2, "{f:?}");
    let sandbox = f.iter().find(|f| f.namespace == "sandbox").unwrap();
    assert!(
        sandbox.message.ends_with("or set meshConfig.serviceEntryVisibility.applyToSidecars: true (it makes ServiceEntries in sandbox visible NAMESPACE, which sidecars ignore until then)"),
        "{}",
        sandbox.message
    );
    // Sidecars still see it everywhere.
    let svc = s.services_named("toy.example.com")[0];
    assert!(s.services[svc].export.visible_to("shop"));
}

#[test]
fn before_istio_1_31_the_setting_is_not_read_and_the_message_keeps_to_export_to() {
    let s = with_mesh(&entries(), SANDBOX_NAMESPACE_ONLY, "1.30");
    let f = ms0002(&s);
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(
        f.iter().all(|f| f.message.ends_with(&format!(
            "kubectl meshscope apply --exports -n {} --from-pod-logs writes it",
            f.namespace
        ))),
        "{f:?}"
    );
    let svc = s.services_named("toy.example.com")[0];
    assert!(s.services[svc].export.visible_to("shop"));
    // 1.31 without the setting: both fixes, the engine's defaults.
    let s = with_mesh(&entries(), "", "1.31");
    let f = ms0002(&s);
    assert_eq!(f.len(), 2);
    assert!(f[0]
        .message
        .contains("or cap ServiceEntries in the mesh config"));
    assert!(s.services[s.services_named("toy.example.com")[0]]
        .export
        .visible_to("shop"));
}

#[test]
fn a_capped_entry_leaves_other_namespaces_scopes_and_is_not_written_for_them() {
    let s = with_mesh(&entries(), SANDBOX_NAMESPACE_ONLY, "1.31");
    let toy = s.services_named("toy.example.com")[0];
    assert!(!s.services[toy].export.visible_to("shop"));
    assert!(s.services[toy].export.visible_to("sandbox"));
    let web = pod_workload(&s, "shop", "web");
    let logs = line(
        "10.0.0.1",
        "outbound|443||toy.example.com",
        "203.0.113.9:443",
        "-",
    ) + &line(
        "10.0.0.1",
        "outbound|443||api.partner.example",
        "203.0.113.8:443",
        "-",
    );
    let obs = observe(&s, &logs);
    let r = recommend::recommend(&s, &obs, &[web], &RecommendOptions::default());
    assert_eq!(hosts(&r[0]), vec!["partners/api.partner.example"]);
}

// === one hostname, several namespaces ===

fn entry(ns: &str, created: &str, port: u32, protocol: &str, export: &str) -> String {
    format!("---\napiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: api\n  namespace: {ns}\n  creationTimestamp: \"{created}\"\nspec:\n  hosts: [api.example.com]\n  location: MESH_EXTERNAL\n  resolution: DNS\n  ports:\n  - {{number: {port}, name: p, protocol: {protocol}}}\n{export}")
}

/// api.example.com in `aaa` (oldest, public, 443/TLS), `bbb` (newer,
/// exported only to `web`, 8443/HTTP) and `shop` (newest, public,
/// 9443/TLS); callers in web, shop and other.
fn duplicated() -> String {
    let mut y = String::new();
    for ns in ["aaa", "bbb", "shop", "web", "other"] {
        y += &namespace(ns);
    }
    y += &entry("aaa", "2026-01-01T00:00:00Z", 443, "TLS", "");
    y += &entry(
        "bbb",
        "2026-02-01T00:00:00Z",
        8443,
        "HTTP",
        "  exportTo: [web]\n",
    );
    y += &entry("shop", "2026-03-01T00:00:00Z", 9443, "TLS", "");
    y + &pod("web", "web", "web", "10.0.0.1")
        + &pod("shop", "cart", "cart", "10.0.0.2")
        + &pod("other", "job", "job", "10.0.0.3")
}

#[test]
fn each_namespace_gets_the_copy_istiod_gives_its_proxies() {
    let s = snap(&duplicated());
    let ns_of = |ns: &str| {
        s.imported_copy("api.example.com", ns)
            .map(|id| s.services[id].namespace.clone())
    };
    // Its own namespace's; else one exported to it by name before the
    // public ones; else the oldest public one.
    assert_eq!(ns_of("shop").as_deref(), Some("shop"));
    assert_eq!(ns_of("web").as_deref(), Some("bbb"));
    assert_eq!(ns_of("other").as_deref(), Some("aaa"));
}

#[test]
fn observed_hosts_are_written_from_the_namespace_whose_copy_the_traffic_used() {
    let s = snap(&duplicated());
    let logs = line(
        "10.0.0.1",
        "outbound|8443||api.example.com",
        "203.0.113.1:8443",
        "-",
    ) + &line(
        "10.0.0.2",
        "outbound|9443||api.example.com",
        "203.0.113.1:9443",
        "-",
    ) + &line(
        "10.0.0.3",
        "outbound|443||api.example.com",
        "203.0.113.1:443",
        "-",
    );
    let obs = observe(&s, &logs);
    let ws = [
        pod_workload(&s, "web", "web"),
        pod_workload(&s, "shop", "cart"),
        pod_workload(&s, "other", "job"),
    ];
    let r = recommend::recommend(&s, &obs, &ws, &RecommendOptions::default());
    assert_eq!(hosts(&r[0]), vec!["bbb/api.example.com"]);
    assert_eq!(hosts(&r[1]), vec!["shop/api.example.com"]);
    assert_eq!(hosts(&r[2]), vec!["aaa/api.example.com"]);
}

#[test]
fn a_sidecar_that_imports_one_copy_keeps_that_copy() {
    // web's own Sidecar imports aaa's copy: its traffic used aaa's.
    let yaml = duplicated()
        + "---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: mine\n  namespace: web\nspec:\n  workloadSelector:\n    labels: {app: web}\n  egress:\n  - hosts: [aaa/api.example.com]\n";
    let s = snap(&yaml);
    let web = pod_workload(&s, "web", "web");
    let obs = observe(
        &s,
        &line(
            "10.0.0.1",
            "outbound|443||api.example.com",
            "203.0.113.1:443",
            "-",
        ),
    );
    let r = recommend::recommend(&s, &obs, &[web], &RecommendOptions::default());
    assert!(
        r[0].dependencies == vec!["aaa/api.example.com".to_string()],
        "{:?}",
        r[0].dependencies
    );
}

#[test]
fn audit_reports_a_hostname_defined_with_different_ports_and_who_gets_which() {
    let s = snap(&duplicated());
    let f: Vec<_> = meshscope_shared::audit::audit(
        &s,
        None,
        &meshscope_shared::audit::AuditScope {
            namespaces: None,
            workloads: None,
        },
    )
    .into_iter()
    .filter(|f| f.code.as_str() == "MS0014")
    .collect();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].kind.as_str(), f[0].name.as_str()),
        ("Hostname", "api.example.com")
    );
    assert_eq!(
        f[0].message,
        "api.example.com is defined in 3 namespaces with different ports or protocols: aaa (ServiceEntry api: 443/TCP), bbb (ServiceEntry api: 8443/HTTP), shop (ServiceEntry api: 9443/TCP); proxies in other get aaa's; proxies in web get bbb's; proxies in shop get shop's; an egress host <namespace>/api.example.com imports only that namespace's copy"
    );
    // The same ports everywhere: no finding.
    let same = duplicated()
        .replace(
            "number: 8443, name: p, protocol: HTTP",
            "number: 443, name: p, protocol: TLS",
        )
        .replace("number: 9443", "number: 443");
    let s = snap(&same);
    let f = meshscope_shared::audit::audit(
        &s,
        None,
        &meshscope_shared::audit::AuditScope {
            namespaces: None,
            workloads: None,
        },
    );
    assert!(f.iter().all(|f| f.code.as_str() != "MS0014"), "{f:?}");
}

/// Metrics of a TCP call through PassthroughCluster name no service
/// (`destination_service="unknown"`), but the workload that answered: a
/// headless Service selecting its pods is what was called. A name or a
/// pod IP maps as in access logs.
#[test]
fn passthrough_metrics_map_back_by_the_answering_workload_a_name_or_a_pod_ip() {
    use meshscope_shared::observe::Unregistered;
    let s = snap(&statefulset());
    let web = pod_workload(&s, "shop", "web");
    let db = s
        .find_workload(&WorkloadKind::StatefulSet, "data", "db")
        .unwrap();
    let u = |address: &str| Unregistered {
        workload: web,
        address: address.to_string(),
        authority: None,
        requests: 3,
        blocked: false,
    };
    let mut obs = Observations::default();
    obs.add_passthrough(&s, u("unknown"), Some(db), "prometheus");
    obs.add_passthrough(
        &s,
        u("db-1.db.data.svc.cluster.local:8080"),
        None,
        "prometheus",
    );
    obs.add_passthrough(&s, u("10.1.0.10:5432"), None, "prometheus");
    // Nothing to go on: it stays unregistered.
    obs.add_passthrough(&s, u("unknown"), None, "prometheus");
    obs.add_passthrough(&s, u("api.example.com"), None, "prometheus");
    assert_eq!(
        outbound(&obs, web),
        vec![
            ("db.data.svc.cluster.local".to_string(), 5432),
            ("db.data.svc.cluster.local".to_string(), 8080)
        ]
    );
    let t = obs.of(web).unwrap();
    assert_eq!(
        t.outbound[&("db.data.svc.cluster.local".to_string(), 5432)].requests,
        6
    );
    assert_eq!(
        obs.unregistered
            .iter()
            .map(|u| u.address.as_str())
            .collect::<Vec<_>>(),
        vec!["unknown", "api.example.com"]
    );
}

/// The outbound listeners a proxy in `ns` with `app=<app>` gets.
fn listeners(s: &MeshSnapshot, ns: &str, app: &str) -> u64 {
    let l = meshscope_test_support::fixtures::labels(&[("app", app)]);
    let vis = s.visible(ns, &s.listeners_of(s.select_sidecar(ns, &l).source));
    let inbound = meshscope_shared::snapshot::Inbound::default();
    let own = s
        .pods
        .iter()
        .find(|p| p.namespace == ns && p.labels == l)
        .and_then(|p| p.ips.first().copied());
    s.estimate_for_proxy(&vis, &l, own, inbound).listeners
}

/// istiod indexes no endpoint of a Service whose exportTo annotation
/// holds `~`, even beside `*` (which still exports it to everyone): the
/// headless `db` then gets no per-pod TCP listener anywhere, neither in
/// `shop` nor on its own pods, while its clusters stay (random seed 10128
/// against istiod 1.31).
#[test]
fn a_headless_service_exported_with_tilde_gets_no_pod_listeners() {
    let plain = snap(&statefulset());
    let tilde = snap(&statefulset().replace(
        "  name: db\n  namespace: data\nspec:\n  clusterIP: None",
        "  name: db\n  namespace: data\n  annotations: {networking.istio.io/exportTo: \"*,~\"}\nspec:\n  clusterIP: None",
    ));
    // virtualOutbound, virtualInbound, 0.0.0.0_8080, and 10.1.0.1x_5432
    // per pod (its own left out on a db pod).
    assert_eq!(listeners(&plain, "shop", "web"), 5);
    assert_eq!(listeners(&plain, "data", "db"), 4);
    assert_eq!(listeners(&tilde, "shop", "web"), 3);
    assert_eq!(listeners(&tilde, "data", "db"), 3);
    for s in [&plain, &tilde] {
        let vis = s.visible(
            "shop",
            &s.listeners_of(s.select_sidecar("shop", &Default::default()).source),
        );
        assert_eq!(
            s.outbound_clusters(&vis, None),
            vec![
                "outbound|5432||db.data.svc.cluster.local",
                "outbound|8080||db.data.svc.cluster.local"
            ]
        );
    }
}
