//! meshscope's own admission webhook as installed in a cluster: each
//! webhook of a ValidatingWebhookConfiguration labelled
//! `app.kubernetes.io/part-of: meshscope`, and the ready endpoints of the
//! Service it calls. The API server calls a webhook through its Service;
//! with none ready, `failurePolicy: Ignore` skips it (the install enforces
//! nothing, without a word) and `Fail` rejects every request it matches.
//! A leaf: `version` prints these, `audit` reports MS0022.

use serde::Serialize;

use crate::codes::Code;
use crate::finding::{finding, Finding};

/// One webhook of a configuration, and its Service's ready endpoints.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct WebhookState {
    pub configuration: String,
    pub webhook: String,
    /// `namespace/name` of the Service it calls (`None`: a URL).
    pub service: Option<String>,
    pub failure_policy: String,
    /// Ready endpoints of that Service (`None` for a URL).
    pub ready_endpoints: Option<usize>,
}

impl WebhookState {
    /// What the API server does with this webhook while its Service has
    /// no ready endpoint (`None`: it has one, or calls a URL).
    pub fn unserved(&self) -> Option<&'static str> {
        match self.ready_endpoints {
            Some(0) if self.failure_policy == "Ignore" => {
                Some("the API server skips it (failurePolicy Ignore) and nothing is enforced")
            }
            Some(0) => Some("the API server rejects what it checks (failurePolicy Fail)"),
            _ => None,
        }
    }
}

/// MS0022 for each webhook whose Service has no ready endpoint.
pub fn webhook_findings(webhooks: &[WebhookState]) -> Vec<Finding> {
    webhooks
        .iter()
        .filter_map(|w| {
            let what = w.unserved()?;
            let service = w.service.as_deref().unwrap_or_default();
            let (ns, name) = service.split_once('/').unwrap_or(("", service));
            Some(finding(
                Code::WebhookNotReady,
                "ValidatingWebhookConfiguration",
                "",
                &w.configuration,
                format!(
                    "webhook {} calls Service {service}, which has no ready endpoint: {what}. Check the pods it selects: kubectl describe service -n {ns} {name}; kubectl get pods -n {ns}",
                    w.webhook
                ),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(policy: &str, ready: Option<usize>) -> WebhookState {
        WebhookState {
            configuration: "meshscope".into(),
            webhook: "pods.meshscope.io".into(),
            service: ready.map(|_| "meshscope-system/meshscope-webhook".into()),
            failure_policy: policy.into(),
            ready_endpoints: ready,
        }
    }

    #[test]
    fn a_webhook_without_a_ready_endpoint_is_ms0022_whatever_its_policy() {
        let found = webhook_findings(&[
            state("Ignore", Some(0)),
            state("Fail", Some(0)),
            state("Ignore", Some(2)),
            state("Ignore", None),
        ]);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found.iter().all(|f| f.code.as_str() == "MS0022"));
        assert!(
            found[0].message.contains("nothing is enforced"),
            "{}",
            found[0].message
        );
        assert!(
            found[1].message.contains("rejects what it checks"),
            "{}",
            found[1].message
        );
        assert!(
            found[0]
                .message
                .contains("kubectl describe service -n meshscope-system meshscope-webhook"),
            "{}",
            found[0].message
        );
    }
}
