//! Users, roles and kubeconfigs for the live tests: a user who may read
//! one namespace, the admin kubeconfig edited, a Deployment with its
//! Service.

use std::path::Path;

use crate::cluster::Cluster;

/// The admin kubeconfig, as YAML.
pub fn kubeconfig_yaml(c: &Cluster) -> serde_yaml::Value {
    serde_yaml::from_str(&std::fs::read_to_string(&c.kubeconfig).unwrap()).unwrap()
}

/// The admin kubeconfig, edited, written to `dir/name`.
pub fn edited(
    c: &Cluster,
    dir: &Path,
    name: &str,
    edit: impl Fn(&mut serde_yaml::Value),
) -> String {
    let mut v = kubeconfig_yaml(c);
    edit(&mut v);
    let p = dir.join(name);
    std::fs::write(&p, serde_yaml::to_string(&v).unwrap()).unwrap();
    p.to_str().unwrap().to_string()
}

/// The reader's verbs, as Role rules (`deploy/rbac/meshscope-reader.yaml`'s, namespaced).
pub const READER_RULES: &str = "rules:\n- apiGroups: [\"\"]\n  resources: [pods, services]\n  verbs: [get, list]\n- apiGroups: [apps]\n  resources: [deployments, replicasets, statefulsets, daemonsets]\n  verbs: [get, list]\n- apiGroups: [batch]\n  resources: [jobs, cronjobs]\n  verbs: [get, list]\n- apiGroups: [networking.istio.io]\n  resources: [sidecars, serviceentries, virtualservices, destinationrules]\n  verbs: [get, list]\n- apiGroups: [networking.istio.io]\n  resources: [gateways, envoyfilters]\n  verbs: [list]\n- apiGroups: [telemetry.istio.io]\n  resources: [telemetries]\n  verbs: [get, list]\n- apiGroups: [security.istio.io]\n  resources: [authorizationpolicies]\n  verbs: [get, list]\n- apiGroups: [gateway.networking.k8s.io]\n  resources: [httproutes, grpcroutes, tcproutes, tlsroutes, referencegrants, gateways]\n  verbs: [get, list]\n";

/// A user bound to a Role in `ns` with the reader's verbs (and `get` on
/// its Namespace object when `namespace_get`).
pub fn namespace_reader(
    c: &Cluster,
    ns: &str,
    user: &str,
    namespace_get: bool,
    dir: &Path,
) -> std::path::PathBuf {
    let extra = if namespace_get {
        "- apiGroups: [\"\"]\n  resources: [namespaces]\n  verbs: [get]\n"
    } else {
        ""
    };
    c.apply(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: {user}\n  namespace: {ns}\n{READER_RULES}{extra}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {user}\n  namespace: {ns}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: {user}\nsubjects:\n- kind: User\n  name: {user}\n  apiGroup: rbac.authorization.k8s.io\n"
    ));
    c.await_grant(user, &["list", "pods", "-n", ns]);
    c.impersonating(user, dir).unwrap()
}

/// A Deployment `name` of one container with a Service of port 80.
pub fn deployment(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers: [{{name: c, image: example/{name}:1}}]\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  selector: {{app: {name}}}\n  ports: [{{port: 80, name: http}}]\n"
    )
}

/// [`namespace_reader`] whose kubeconfig context names `ns` as its
/// namespace, as a namespace's user has it.
pub fn namespace_reader_at_home(
    c: &Cluster,
    ns: &str,
    user: &str,
    dir: &Path,
) -> std::path::PathBuf {
    let kc = namespace_reader(c, ns, user, true, dir);
    let mut v: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&kc).unwrap()).unwrap();
    for ctx in v["contexts"].as_sequence_mut().unwrap() {
        ctx["context"]["namespace"] = ns.into();
    }
    std::fs::write(&kc, serde_yaml::to_string(&v).unwrap()).unwrap();
    kc
}
