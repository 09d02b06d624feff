//! Telemetries and CUSTOM AuthorizationPolicies as the engine reads them:
//! the policies that decide which extension providers a proxy calls
//! (the `required` module resolves them per workload).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::istio::{AuthorizationPolicy, Telemetry, TelemetrySpec};
use crate::labels::Labels;
use crate::meta::{created, name_of, ns_of, Created};

/// A Telemetry, as the resolution reads it.
#[derive(Clone, Debug)]
pub struct TelemetryInfo {
    pub name: String,
    pub namespace: String,
    pub created: Created,
    /// `selector.matchLabels`; empty: namespace-wide.
    pub selector: Labels,
    /// `targetRef`/`targetRefs` set: never applies to a sidecar.
    pub targeted: bool,
    pub spec: TelemetrySpec,
}

/// An AuthorizationPolicy with `action: CUSTOM`.
#[derive(Clone, Debug)]
pub struct CustomAuthz {
    pub name: String,
    pub namespace: String,
    pub created: Created,
    /// `selector.matchLabels`; `None` or empty: every workload.
    pub selector: Labels,
    pub targeted: bool,
    /// `provider.name`.
    pub provider: String,
}

fn meta(m: &ObjectMeta) -> (String, String, Created) {
    (name_of(m), ns_of(m), created(m))
}

/// The Telemetries, oldest first (then by name and namespace), as istiod
/// orders them.
pub fn telemetries(list: &[Telemetry]) -> Vec<TelemetryInfo> {
    let mut out: Vec<TelemetryInfo> = list
        .iter()
        .map(|t| {
            let (name, namespace, created) = meta(&t.metadata);
            TelemetryInfo {
                name,
                namespace,
                created,
                selector: t
                    .spec
                    .selector
                    .as_ref()
                    .map(|s| s.match_labels.clone())
                    .unwrap_or_default(),
                targeted: t.spec.target_ref.is_some() || !t.spec.target_refs.is_empty(),
                spec: t.spec.clone(),
            }
        })
        .collect();
    out.sort_by(|a, b| (a.created, &a.name, &a.namespace).cmp(&(b.created, &b.name, &b.namespace)));
    out
}

/// The CUSTOM AuthorizationPolicies, oldest first.
pub fn custom_authz(list: &[AuthorizationPolicy]) -> Vec<CustomAuthz> {
    let mut out: Vec<CustomAuthz> = list
        .iter()
        .filter(|p| p.spec.action.as_deref() == Some("CUSTOM"))
        .filter_map(|p| {
            let (name, namespace, created) = meta(&p.metadata);
            Some(CustomAuthz {
                name,
                namespace,
                created,
                selector: p
                    .spec
                    .selector
                    .as_ref()
                    .map(|s| s.match_labels.clone())
                    .unwrap_or_default(),
                targeted: p.spec.target_ref.is_some() || !p.spec.target_refs.is_empty(),
                provider: p.spec.provider.as_ref()?.name.clone(),
            })
        })
        .collect();
    out.sort_by(|a, b| (a.created, &a.name, &a.namespace).cmp(&(b.created, &b.name, &b.namespace)));
    out
}
