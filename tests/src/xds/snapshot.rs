//! What a proxy holds at one moment ([`ProxyConfig`]): per type, its
//! resources' names and encoded sizes.

use std::collections::BTreeMap;

use super::resources::ClusterType;
use super::state::XdsState;

/// Count and bytes of one type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TypeTotal {
    pub count: usize,
    pub bytes: u64,
}

/// What a proxy holds at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyConfig {
    /// `ns/name`.
    pub proxy: String,
    /// `"cds"`, `"lds"`, `"rds"`, `"eds"` → resource name → encoded bytes.
    pub by_type: BTreeMap<String, BTreeMap<String, u64>>,
    pub totals: BTreeMap<String, TypeTotal>,
    pub total_bytes: u64,
    /// Cluster name → discovery type, from the last CDS response.
    pub cluster_types: BTreeMap<String, ClusterType>,
}

impl ProxyConfig {
    pub fn from_state(proxy: &str, st: &XdsState) -> Self {
        let mut c = ProxyConfig {
            proxy: proxy.to_string(),
            cluster_types: st.cluster_types.clone(),
            ..Default::default()
        };
        for (ty, ts) in &st.types {
            let total = TypeTotal {
                count: ts.resources.len(),
                bytes: ts.resources.values().sum(),
            };
            c.total_bytes += total.bytes;
            c.totals.insert(ty.to_string(), total);
            c.by_type.insert(ty.to_string(), ts.resources.clone());
        }
        c
    }

    /// Resource names of a type (`"cds"`, ...), sorted.
    pub fn names(&self, ty: &str) -> Vec<String> {
        self.by_type
            .get(ty)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn total(&self, ty: &str) -> TypeTotal {
        self.totals.get(ty).copied().unwrap_or_default()
    }

    /// `{"proxy":"ns/name","types":{"cds":{"count":..,"bytes":..,
    /// "resources":{"name":bytes,...}},...},"total_bytes":..}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut types = serde_json::Map::new();
        for (ty, res) in &self.by_type {
            let t = self.total(ty);
            types.insert(
                ty.clone(),
                serde_json::json!({
                    "count": t.count,
                    "bytes": t.bytes,
                    "resources": res,
                }),
            );
        }
        serde_json::json!({
            "proxy": self.proxy,
            "types": types,
            "total_bytes": self.total_bytes,
        })
    }
}
