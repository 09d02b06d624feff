//! Who a simulated proxy claims to be: its [`ProxySpec`] and the
//! [`Node`] it sends istiod.

use std::collections::{BTreeMap, HashMap};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use meshscope_shared::inject::Gateway;

/// The version istiod is built with (`tests/istiod/build`): `ISTIO_VERSION`
/// must match it, or istiod treats the proxy as another version.
pub const DEFAULT_ISTIO_VERSION: &str = "1.31-dev";

/// Who a simulated proxy claims to be. Build the [`Node`] with
/// [`ProxySpec::node`]; for a given spec it is the same every time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxySpec {
    pub namespace: String,
    pub pod_name: String,
    pub pod_ip: String,
    /// The pod's labels. istiod prefers the labels of the Pod it finds by
    /// IP or name, but sends these when there is none.
    pub labels: BTreeMap<String, String>,
    pub service_account: String,
    pub workload_name: String,
    /// Must be istiod's own version ([`DEFAULT_ISTIO_VERSION`]).
    pub istio_version: String,
    /// `NODE_NAME` (the pod's `spec.nodeName`); empty sends `meshscope-sim`.
    pub node_name: String,
    /// Connects as a gateway (`router`) or a waypoint (`waypoint`), not a
    /// `sidecar`.
    pub gateway: Option<Gateway>,
}

impl ProxySpec {
    /// A spec with service account `default`, workload name = pod name, no
    /// labels and [`DEFAULT_ISTIO_VERSION`].
    pub fn new(namespace: &str, pod_name: &str, pod_ip: &str) -> Self {
        ProxySpec {
            namespace: namespace.into(),
            pod_name: pod_name.into(),
            pod_ip: pod_ip.into(),
            labels: BTreeMap::new(),
            service_account: "default".into(),
            workload_name: pod_name.into(),
            istio_version: DEFAULT_ISTIO_VERSION.into(),
            node_name: String::new(),
            gateway: None,
        }
    }

    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// `ns/name`, the key used in reports.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.pod_name)
    }

    /// `<pod>.<ns>`: the proxy ID of istiod's debug endpoints
    /// (`/debug/sidecarz?proxyID=...`).
    pub fn proxy_id(&self) -> String {
        format!("{}.{}", self.pod_name, self.namespace)
    }

    /// `sidecar~<podIP>~<pod>.<ns>~<ns>.svc.cluster.local` (`router~...`
    /// for a gateway, `waypoint~...` for a waypoint).
    pub fn node_id(&self) -> String {
        format!(
            "{}~{}~{}.{}~{}.svc.cluster.local",
            self.gateway.map_or("sidecar", Gateway::as_str),
            self.pod_ip,
            self.pod_name,
            self.namespace,
            self.namespace
        )
    }

    /// The node metadata (what pilot-agent sends for a sidecar, reduced to
    /// the fields istiod needs).
    pub fn metadata(&self) -> Struct {
        let labels = Struct {
            fields: self
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), string_value(v)))
                .collect(),
        };
        let node_name = if self.node_name.is_empty() {
            "meshscope-sim"
        } else {
            &self.node_name
        };
        let mut fields = HashMap::new();
        for (k, v) in [
            ("NAMESPACE", self.namespace.as_str()),
            ("NAME", &self.pod_name),
            ("INSTANCE_IPS", &self.pod_ip),
            ("CLUSTER_ID", "Kubernetes"),
            ("ISTIO_VERSION", &self.istio_version),
            ("SERVICE_ACCOUNT", &self.service_account),
            ("WORKLOAD_NAME", &self.workload_name),
            ("MESH_ID", "cluster.local"),
            ("NODE_NAME", node_name),
        ] {
            fields.insert(k.to_string(), string_value(v));
        }
        fields.insert("LABELS".into(), struct_value(labels));
        fields.insert("PROXY_CONFIG".into(), struct_value(Struct::default()));
        Struct { fields }
    }

    pub fn node(&self) -> Node {
        Node {
            id: self.node_id(),
            metadata: Some(self.metadata()),
            ..Default::default()
        }
    }
}

fn string_value(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_string())),
    }
}

fn struct_value(s: Struct) -> Value {
    Value {
        kind: Some(Kind::StructValue(s)),
    }
}
