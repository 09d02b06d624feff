//! Live evidence for `meshscope_shared::detect`: istiod's pods, whose
//! images and `--domain` argument say which Istio and which cluster domain
//! the cluster runs. Reading them is best effort: a cluster without istiod,
//! or a user who may not list pods in istio-system, gives no evidence, and
//! the proxies' own images decide.

use meshscope_shared::inputs::Pod as ObservedPod;

use crate::live::{Live, Select};

/// The namespace istiod runs in, unless a revision install moved it.
pub const ISTIO_NAMESPACE: &str = "istio-system";

pub async fn istiod_pods(live: &Live) -> Vec<ObservedPod> {
    live.list(Some(ISTIO_NAMESPACE), Select::labels("app=istiod"))
        .await
        .unwrap_or_default()
}
