//! Reading xDS resources: the four type URLs, a cluster's discovery type,
//! the names CDS and LDS resources lead to subscribe (EDS, RDS), and a
//! resource's name without decoding the rest of it.

use std::collections::BTreeSet;

use anyhow::Result;
use envoy_types::pb::envoy::config::cluster::v3::{cluster, Cluster};
use envoy_types::pb::envoy::config::listener::v3::{filter, FilterChain, Listener};
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    http_connection_manager::RouteSpecifier, HttpConnectionManager,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message as _;

use super::refs::HCM_TYPE;

/// Type URL of CDS resources.
pub const CLUSTER_TYPE: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
/// Type URL of LDS resources.
pub const LISTENER_TYPE: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// Type URL of RDS resources.
pub const ROUTE_TYPE: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
/// Type URL of EDS resources.
pub const ENDPOINT_TYPE: &str =
    "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";

/// The four resource types, as (short name, type URL), in the order istiod
/// pushes them.
pub const TYPES: [(&str, &str); 4] = [
    ("cds", CLUSTER_TYPE),
    ("eds", ENDPOINT_TYPE),
    ("lds", LISTENER_TYPE),
    ("rds", ROUTE_TYPE),
];

/// `"cds"`, `"lds"`, `"rds"`, `"eds"` for the four type URLs, else `None`.
pub fn short_type(type_url: &str) -> Option<&'static str> {
    TYPES.iter().find(|(_, u)| *u == type_url).map(|(s, _)| *s)
}

/// A cluster's discovery type, decoded from CDS.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClusterType {
    Static,
    StrictDns,
    LogicalDns,
    Eds,
    OriginalDst,
    /// `cluster_type` (a custom cluster, e.g. an aggregate) with its name.
    Custom(String),
    /// A `type` value this client does not know.
    Unknown(i32),
}

impl ClusterType {
    pub fn of(c: &Cluster) -> ClusterType {
        match &c.cluster_discovery_type {
            // An unset `type` is 0, STATIC.
            None => ClusterType::Static,
            Some(cluster::ClusterDiscoveryType::ClusterType(t)) => {
                ClusterType::Custom(t.name.clone())
            }
            Some(cluster::ClusterDiscoveryType::Type(t)) => {
                match cluster::DiscoveryType::try_from(*t) {
                    Ok(cluster::DiscoveryType::Static) => ClusterType::Static,
                    Ok(cluster::DiscoveryType::StrictDns) => ClusterType::StrictDns,
                    Ok(cluster::DiscoveryType::LogicalDns) => ClusterType::LogicalDns,
                    Ok(cluster::DiscoveryType::Eds) => ClusterType::Eds,
                    Ok(cluster::DiscoveryType::OriginalDst) => ClusterType::OriginalDst,
                    Err(_) => ClusterType::Unknown(*t),
                }
            }
        }
    }

    /// `EDS`, `STRICT_DNS`, ... as in Envoy's config dump.
    pub fn as_str(&self) -> &str {
        match self {
            ClusterType::Static => "STATIC",
            ClusterType::StrictDns => "STRICT_DNS",
            ClusterType::LogicalDns => "LOGICAL_DNS",
            ClusterType::Eds => "EDS",
            ClusterType::OriginalDst => "ORIGINAL_DST",
            ClusterType::Custom(n) => n,
            ClusterType::Unknown(_) => "UNKNOWN",
        }
    }
}

/// The EDS resource name a cluster needs, if it is an EDS cluster:
/// `eds_cluster_config.service_name`, or the cluster name when that is empty.
pub fn eds_resource_name(c: &Cluster) -> Option<String> {
    if ClusterType::of(c) != ClusterType::Eds {
        return None;
    }
    let service = c
        .eds_cluster_config
        .as_ref()
        .map(|e| e.service_name.as_str())
        .unwrap_or("");
    Some(if service.is_empty() {
        c.name.clone()
    } else {
        service.to_string()
    })
}

/// The `route_config_name`s of the HttpConnectionManagers (with `rds`) in a
/// listener's filter chains and default filter chain.
pub fn route_names(l: &Listener) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let chains = l.filter_chains.iter().chain(l.default_filter_chain.iter());
    for chain in chains {
        collect_routes(chain, &mut out);
    }
    out
}

fn collect_routes(chain: &FilterChain, out: &mut BTreeSet<String>) {
    for f in &chain.filters {
        let Some(filter::ConfigType::TypedConfig(any)) = &f.config_type else {
            continue;
        };
        if any.type_url != HCM_TYPE {
            continue;
        }
        let Ok(hcm) = HttpConnectionManager::decode(any.value.as_slice()) else {
            continue;
        };
        if let Some(RouteSpecifier::Rds(rds)) = hcm.route_specifier {
            if !rds.route_config_name.is_empty() {
                out.insert(rds.route_config_name);
            }
        }
    }
}

/// Only field 1 of a message: `name` of Cluster, Listener and
/// RouteConfiguration, `cluster_name` of ClusterLoadAssignment. Decoding
/// just that skips the (large) rest of RDS and EDS resources.
#[derive(Clone, PartialEq, prost::Message)]
struct NameOnly {
    #[prost(string, tag = "1")]
    name: String,
}

pub(super) fn resource_name(any: &Any) -> Result<String> {
    Ok(NameOnly::decode(any.value.as_slice())?.name)
}
