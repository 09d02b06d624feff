//! The raw Kubernetes objects a snapshot is built from.
//!
//! Objects arrive as JSON values (from manifests, `kubectl get -o yaml` dumps
//! or the API server) and are sorted by kind here; nothing else in the crate
//! deals with untyped input.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use serde_json::Value;

use crate::error::Error;
use crate::istio::{DestinationRule, ServiceEntry, Sidecar, VirtualService};

/// Every object kind the scope engine reads.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub namespaces: Vec<Namespace>,
    pub pods: Vec<Pod>,
    pub deployments: Vec<Deployment>,
    pub statefulsets: Vec<StatefulSet>,
    pub daemonsets: Vec<DaemonSet>,
    pub replicasets: Vec<ReplicaSet>,
    pub jobs: Vec<Job>,
    pub cronjobs: Vec<CronJob>,
    pub services: Vec<Service>,
    pub service_entries: Vec<ServiceEntry>,
    pub sidecars: Vec<Sidecar>,
    pub virtual_services: Vec<VirtualService>,
    pub destination_rules: Vec<DestinationRule>,
    /// ConfigMaps named `istio` (the mesh config candidates).
    pub mesh_config_maps: Vec<ConfigMap>,
}

/// What `Inputs::add` did with one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    Object,
    /// A kind scoping does not read (Secrets, Ingresses, ...).
    Ignored,
}

fn decode<T: serde::de::DeserializeOwned>(kind: &str, v: Value) -> Result<T, Error> {
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>")
        .to_string();
    serde_json::from_value(v).map_err(|e| Error::Object {
        kind: kind.to_string(),
        name,
        reason: e.to_string(),
    })
}

impl Inputs {
    /// Adds one object, or each item of a `List`. Returns how many objects
    /// were kept.
    pub fn add(&mut self, v: Value) -> Result<usize, Error> {
        let kind = v.get("kind").and_then(Value::as_str).ok_or(Error::NoKind)?;
        if kind == "List" || kind.ends_with("List") && v.get("items").is_some() {
            let items = match v {
                Value::Object(mut m) => m.remove("items"),
                _ => None,
            };
            let mut n = 0;
            if let Some(Value::Array(items)) = items {
                for item in items {
                    n += self.add(item)?;
                }
            }
            return Ok(n);
        }
        Ok(match self.add_one(v)? {
            Added::Object => 1,
            Added::Ignored => 0,
        })
    }

    fn add_one(&mut self, v: Value) -> Result<Added, Error> {
        let kind = v
            .get("kind")
            .and_then(Value::as_str)
            .ok_or(Error::NoKind)?
            .to_string();
        let api = v
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let group = api.split_once('/').map(|(g, _)| g).unwrap_or("");
        let istio = group == crate::istio::NETWORKING_GROUP;
        match (kind.as_str(), istio) {
            ("Namespace", false) => self.namespaces.push(decode(&kind, v)?),
            ("Pod", false) => self.pods.push(decode(&kind, v)?),
            ("Deployment", false) => self.deployments.push(decode(&kind, v)?),
            ("StatefulSet", false) => self.statefulsets.push(decode(&kind, v)?),
            ("DaemonSet", false) => self.daemonsets.push(decode(&kind, v)?),
            ("ReplicaSet", false) => self.replicasets.push(decode(&kind, v)?),
            ("Job", false) => self.jobs.push(decode(&kind, v)?),
            ("CronJob", false) => self.cronjobs.push(decode(&kind, v)?),
            ("Service", false) => self.services.push(decode(&kind, v)?),
            ("ConfigMap", false)
                if v.pointer("/metadata/name").and_then(Value::as_str) == Some("istio") =>
            {
                self.mesh_config_maps.push(decode(&kind, v)?)
            }
            ("ServiceEntry", true) => self.service_entries.push(decode(&kind, v)?),
            ("Sidecar", true) => self.sidecars.push(decode(&kind, v)?),
            ("VirtualService", true) => self.virtual_services.push(decode(&kind, v)?),
            ("DestinationRule", true) => self.destination_rules.push(decode(&kind, v)?),
            _ => return Ok(Added::Ignored),
        }
        Ok(Added::Object)
    }

    /// The mesh config text: the `mesh` key of ConfigMap `istio` in the root
    /// namespace. The root namespace is itself set in that text, so take the
    /// ConfigMap in `istio-system` first, then any other one.
    pub fn mesh_config_text(&self) -> Option<&str> {
        fn mesh(cm: &ConfigMap) -> Option<&str> {
            cm.data.as_ref()?.get("mesh").map(String::as_str)
        }
        self.mesh_config_maps
            .iter()
            .find(|cm| cm.metadata.namespace.as_deref() == Some("istio-system"))
            .and_then(mesh)
            .or_else(|| self.mesh_config_maps.iter().find_map(mesh))
    }

    pub fn len(&self) -> usize {
        self.namespaces.len()
            + self.pods.len()
            + self.deployments.len()
            + self.statefulsets.len()
            + self.daemonsets.len()
            + self.replicasets.len()
            + self.jobs.len()
            + self.cronjobs.len()
            + self.services.len()
            + self.service_entries.len()
            + self.sidecars.len()
            + self.virtual_services.len()
            + self.destination_rules.len()
            + self.mesh_config_maps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
