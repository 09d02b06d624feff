//! What the live tests put into the test control plane before they run:
//! the reference scenario in a fresh namespace, and the webhook install's
//! identity (Namespace, ServiceAccount, RBAC) with the files one webhook
//! process starts from.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;

use kubectl_meshscope::install::{generate_pki, render, Pki, Settings};
use meshscope_shared::admission::Policy;

use crate::cluster::Cluster;
use crate::Scenario;

/// Creates a small reference scenario's Deployments and Services in a
/// fresh injected namespace and gives the pods the controllers create the
/// scenario's IPs.
pub fn deploy_scenario(c: &Cluster, prefix: &str) -> Scenario {
    deploy_scenario_with(c, prefix, |m| m)
}

/// As `deploy_scenario`, with the manifests edited first.
pub fn deploy_scenario_with(
    c: &Cluster,
    prefix: &str,
    edit: impl Fn(String) -> String,
) -> Scenario {
    let ns = c.namespace(prefix, &[("istio-injection", "enabled")]);
    let s = Scenario {
        namespace: ns.clone(),
        httpbins: 4,
        sleeps: 2,
        fanout: 2,
        requests_per_edge: 2,
        ..Scenario::reference()
    };
    c.apply(&edit(s.live_manifests()));
    for (app, ips) in s.pod_ips() {
        let pods = c.wait_pods(&ns, &app, ips.len()).unwrap();
        for (pod, ip) in pods.iter().zip(ips) {
            c.set_pod_ip(&ns, pod, &ip.to_string()).unwrap();
        }
    }
    s
}

/// The settings of `kubectl meshscope webhook manifests` the webhook tests
/// install with.
pub fn webhook_manifests_args() -> Settings {
    Settings {
        namespace: "meshscope-system".into(),
        image: "meshscope-webhook:e2e".into(),
        default_policy: Policy::Warn,
        mutate_serviceentry_exportto: false,
        istio_namespace: "istio-system".into(),
        validity_days: 1,
    }
}

/// The webhook install's Namespace, ServiceAccount and RBAC, applied once
/// per control plane and test process.
pub fn install_webhook_rbac(c: &Cluster) {
    // Once per control plane (a test may start one of its own).
    static DONE: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if done.insert(c.kubeconfig.clone()) {
        let pki = generate_pki(&["127.0.0.1".into()], 1).unwrap();
        let docs = render(&webhook_manifests_args(), &pki).unwrap();
        let keep = [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
        ];
        for d in docs
            .iter()
            .filter(|d| keep.contains(&d["kind"].as_str().unwrap_or_default()))
        {
            c.apply(&serde_yaml::to_string(d).unwrap());
        }
    }
}

/// The webhook install's ServiceAccount, as the API server names it.
pub const WEBHOOK_SERVICE_ACCOUNT: &str =
    "system:serviceaccount:meshscope-system:meshscope-webhook";

/// What one webhook process under test starts from.
pub struct WebhookFiles {
    /// Holds the files below; removed on drop.
    pub dir: tempfile::TempDir,
    /// Its serving certificate for 127.0.0.1, also in `tls.crt` and `tls.key`.
    pub pki: Pki,
    /// `webhook.kubeconfig`: acts as the install's ServiceAccount.
    pub kubeconfig: PathBuf,
}

/// Installs the webhook's RBAC (once) and writes a fresh directory with a
/// serving certificate and a kubeconfig that impersonates its
/// ServiceAccount.
pub fn webhook_files(c: &Cluster) -> WebhookFiles {
    install_webhook_rbac(c);
    let dir = tempfile::tempdir().unwrap();
    let pki = generate_pki(&["127.0.0.1".into()], 1).unwrap();
    std::fs::write(dir.path().join("tls.crt"), &pki.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &pki.key_pem).unwrap();
    // KUBECONFIG is a ':'-separated list, and the user name has colons.
    let kubeconfig = dir.path().join("webhook.kubeconfig");
    std::fs::rename(
        c.impersonating(WEBHOOK_SERVICE_ACCOUNT, dir.path())
            .unwrap(),
        &kubeconfig,
    )
    .unwrap();
    WebhookFiles {
        dir,
        pki,
        kubeconfig,
    }
}
