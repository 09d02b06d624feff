//! Port-forwards to a pod through the API server (WebSocket), for
//! istiod's debug port: `verify` and `apply --wait`.

use std::time::Duration;

use anyhow::anyhow;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Portforwarder;

use super::client::Live;
use super::grants::VERIFIER_FILE;

impl Live {
    /// Opens a port-forward to `port` of pod `ns/name`, giving up after
    /// `within`; a failure says how to forward the port by hand instead.
    pub async fn port_forward(
        &self,
        ns: &str,
        name: &str,
        port: u16,
        within: Duration,
    ) -> anyhow::Result<Portforwarder> {
        let pods = self.api::<Pod>(Some(ns));
        let ports = [port];
        let open = tokio::time::timeout(within, pods.portforward(name, &ports));
        self.noting("create", "pods/portforward", Some(ns), open)
            .await
            .map_err(|_| anyhow!("port-forward to pod {ns}/{name} timed out"))?
            .map_err(|e| port_forward_error(e, ns, name, port))
    }
}

fn port_forward_error(e: kube::Error, ns: &str, name: &str, port: u16) -> anyhow::Error {
    match &e {
        kube::Error::Api(s) if s.code == 403 => anyhow!(
            "RBAC forbids a port-forward to istiod pod {ns}/{name} ({}); grant {VERIFIER_FILE} (create on pods/portforward in {ns}), or run `kubectl port-forward -n {ns} {name} {port}` and pass --istiod-url http://localhost:{port}",
            s.message
        ),
        _ => anyhow!(
            "cannot port-forward to istiod pod {ns}/{name} port {port}: {e}; or run `kubectl port-forward -n {ns} {name} {port}` and pass --istiod-url http://localhost:{port}"
        ),
    }
}
