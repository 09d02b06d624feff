//! meshscope's admission webhook as the API server sees it: each
//! ValidatingWebhookConfiguration labelled `app.kubernetes.io/part-of:
//! meshscope`, and the ready endpoints of the Service it calls. With
//! `failurePolicy: Ignore` a webhook without one is skipped by the API
//! server, so an install whose pods never started enforces nothing:
//! `version` says so, and `audit` reports MS0022
//! (`meshscope_shared::installed`).

use std::collections::BTreeMap;

use meshscope_shared::installed::WebhookState;

use super::client::{istio_in as resource, Live};
use super::failure::ApiFailure;
use super::list::Select;

impl Live {
    /// meshscope's validating webhooks and how many ready endpoints each
    /// has (empty: none installed).
    pub async fn meshscope_webhooks(&self) -> Result<Vec<WebhookState>, ApiFailure> {
        let vwc = resource(
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        );
        let select = Select::labels("app.kubernetes.io/part-of=meshscope");
        let mut out = Vec::new();
        let mut ready: BTreeMap<String, usize> = BTreeMap::new();
        for c in self.list_dynamic(&vwc, None, select).await? {
            let configuration = c.metadata.name.clone().unwrap_or_default();
            for w in c.data["webhooks"].as_array().into_iter().flatten() {
                let svc = &w["clientConfig"]["service"];
                let service = match (svc["namespace"].as_str(), svc["name"].as_str()) {
                    (Some(ns), Some(name)) => Some((ns.to_string(), name.to_string())),
                    _ => None,
                };
                let ready_endpoints = match &service {
                    Some((ns, name)) => {
                        let key = format!("{ns}/{name}");
                        if !ready.contains_key(&key) {
                            let n = self.ready_endpoints(ns, name).await?;
                            ready.insert(key.clone(), n);
                        }
                        Some(ready[&key])
                    }
                    None => None,
                };
                out.push(WebhookState {
                    configuration: configuration.clone(),
                    webhook: w["name"].as_str().unwrap_or("").to_string(),
                    service: service.map(|(ns, name)| format!("{ns}/{name}")),
                    failure_policy: w["failurePolicy"].as_str().unwrap_or("Fail").to_string(),
                    ready_endpoints,
                });
            }
        }
        Ok(out)
    }

    /// The ready endpoints of Service `ns/name`, from its EndpointSlices.
    async fn ready_endpoints(&self, ns: &str, name: &str) -> Result<usize, ApiFailure> {
        let slices = resource("discovery.k8s.io", "EndpointSlice", "endpointslices");
        let label = format!("kubernetes.io/service-name={name}");
        let list = self
            .list_dynamic(&slices, Some(ns), Select::labels(&label))
            .await?;
        Ok(list
            .iter()
            .flat_map(|s| s.data["endpoints"].as_array().into_iter().flatten())
            .filter(|e| e["conditions"]["ready"].as_bool() != Some(false))
            .count())
    }
}
