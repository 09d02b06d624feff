//! meshscope's own Services, as shipped in `deploy/` (the webhook's, and
//! the watcher's), are exported to their own namespace only: installing
//! meshscope adds no cluster to the proxies of the rest of the mesh
//! (issue #35 item 8: 15 → 17 clusters per unscoped proxy before).

use meshscope_shared::scope::{Evaluator, ScopeSource};
use meshscope_test_support::fixtures::snap;

const SHIPPED: [&str; 2] = ["deploy/base/service.yaml", "deploy/watch/service.yaml"];

/// The hostnames an unscoped proxy in `ns` imports.
fn imported(s: &meshscope_shared::MeshSnapshot, ns: &str) -> Vec<String> {
    let mut eval = Evaluator::new(s);
    let v = eval.visible_for(ScopeSource::Implicit, ns);
    v.services
        .keys()
        .map(|id| s.services[*id].hostname.clone())
        .collect()
}

#[test]
fn meshscopes_own_services_reach_no_other_namespaces_proxies() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut yaml = String::from(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: apps\n  labels: {istio-injection: enabled}\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: meshscope-system\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: apps\nspec:\n  clusterIP: 10.96.0.9\n  selector: {app: web}\n  ports: [{name: http, port: 80}]\n",
    );
    for f in SHIPPED {
        yaml += "---\n";
        yaml += &std::fs::read_to_string(format!("{root}/{f}")).unwrap();
    }
    let s = snap(&yaml);
    let apps = imported(&s, "apps");
    assert_eq!(apps, ["web.apps.svc.cluster.local"], "{apps:?}");
    let own = imported(&s, "meshscope-system");
    for name in ["meshscope-webhook", "meshscope-watch"] {
        let host = format!("{name}.meshscope-system.svc.cluster.local");
        assert!(own.contains(&host), "{host} in {own:?}");
    }
}
