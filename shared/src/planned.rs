//! Objects a user is about to apply (`-f FILE` on `recommend`, `apply` and
//! `diff`), laid over the cluster's: the mesh as it will be once
//! `kubectl apply -f FILE` has run. This is how a Deployment whose creation
//! the webhook denies gets its Sidecar first: it is not in the cluster, so
//! only its manifest can say what it is and which hosts it names.
//!
//! As `kubectl apply` does, an object of the file replaces the cluster's
//! object of the same kind, namespace and name, and an object without a
//! namespace goes to the namespace the command runs in.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::inputs::Inputs;

/// What laying the planned objects over the cluster's did, for the note
/// the command prints.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Overlay {
    /// `Kind ns/name` of each planned object the cluster does not hold.
    pub added: Vec<String>,
    /// `Kind ns/name` of each cluster object a planned one replaced.
    pub replaced: Vec<String>,
}

impl Overlay {
    /// One line for stderr: what the command plans with.
    pub fn note(&self) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        format!(
            "-f: planning as if applied: new {}; replacing {}",
            list(&self.added),
            list(&self.replaced)
        )
    }
}

/// Every kind [`Inputs`] holds, as `field: "Kind"`, for the macros below.
macro_rules! with_kinds {
    ($m:ident) => {
        $m!(
            namespaces: "Namespace",
            pods: "Pod",
            deployments: "Deployment",
            statefulsets: "StatefulSet",
            daemonsets: "DaemonSet",
            replicasets: "ReplicaSet",
            jobs: "Job",
            cronjobs: "CronJob",
            services: "Service",
            service_entries: "ServiceEntry",
            sidecars: "Sidecar",
            virtual_services: "VirtualService",
            destination_rules: "DestinationRule",
            telemetries: "Telemetry",
            authorization_policies: "AuthorizationPolicy",
            mesh_config_maps: "ConfigMap",
            config_maps: "ConfigMap",
            endpoint_slices: "EndpointSlice",
        )
    };
}

/// The namespaces the planned objects land in (`default_ns` for those
/// without one), sorted and without repeats: where a command run with
/// `-f` and no `-n` looks.
pub fn namespaces(planned: &Inputs, default_ns: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    macro_rules! collect {
        ($($field:ident: $kind:literal),* $(,)?) => {$(
            // A Namespace object names no namespace it lives in.
            if $kind != "Namespace" {
                for o in &planned.$field {
                    let ns = o.metadata.namespace.as_deref().unwrap_or(default_ns);
                    out.push(ns.to_string());
                }
            }
        )*};
    }
    with_kinds!(collect);
    out.sort();
    out.dedup();
    out
}

/// Lays `planned` over `live`: see the module's documentation. Namespace
/// objects are matched by name alone.
pub fn overlay(live: &mut Inputs, mut planned: Inputs, default_ns: &str) -> Overlay {
    let mut done = Overlay::default();
    macro_rules! lay {
        ($($field:ident: $kind:literal),* $(,)?) => {$(
            for mut obj in std::mem::take(&mut planned.$field) {
                if $kind != "Namespace" && obj.metadata.namespace.is_none() {
                    obj.metadata.namespace = Some(default_ns.to_string());
                }
                let label = describe($kind, &obj.metadata);
                let same = |o: &ObjectMeta| {
                    o.namespace == obj.metadata.namespace && o.name == obj.metadata.name
                };
                match live.$field.iter().position(|o| same(&o.metadata)) {
                    Some(i) => {
                        live.$field[i] = obj;
                        done.replaced.push(label);
                    }
                    None => {
                        live.$field.push(obj);
                        done.added.push(label);
                    }
                }
            }
        )*};
    }
    with_kinds!(lay);
    done
}

fn describe(kind: &str, m: &ObjectMeta) -> String {
    let name = m.name.as_deref().unwrap_or("");
    match &m.namespace {
        Some(ns) if kind != "Namespace" => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn inputs(objs: &[serde_json::Value]) -> Inputs {
        let mut i = Inputs {
            manifest_hints: true,
            ..Default::default()
        };
        for o in objs {
            i.add(o.clone()).unwrap();
        }
        i
    }

    fn dep(ns: Option<&str>, name: &str, image: &str) -> serde_json::Value {
        let mut meta = json!({"name": name});
        if let Some(ns) = ns {
            meta["namespace"] = json!(ns);
        }
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
               "spec": {"selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                                     "spec": {"containers": [{"name": "app", "image": image}]}}}})
    }

    #[test]
    fn planned_objects_join_or_replace_the_cluster_s_and_take_the_command_s_namespace() {
        let mut live = inputs(&[
            dep(Some("shop"), "api", "api:1"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
        ]);
        let planned = inputs(&[
            dep(None, "worker", "worker:1"),
            dep(Some("shop"), "api", "api:2"),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "worker-cfg"}, "data": {"A": "reviews:9080"}}),
        ]);
        assert_eq!(namespaces(&planned, "shop"), vec!["shop".to_string()]);
        let done = overlay(&mut live, planned, "shop");
        assert_eq!(
            done.added,
            vec!["Deployment shop/worker", "ConfigMap shop/worker-cfg"]
        );
        assert_eq!(done.replaced, vec!["Deployment shop/api"]);
        assert_eq!(live.deployments.len(), 2);
        let api = live
            .deployments
            .iter()
            .find(|d| d.metadata.name.as_deref() == Some("api"))
            .unwrap();
        let image = api
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .image
            .clone();
        assert_eq!(image.as_deref(), Some("api:2"));
        assert_eq!(
            done.note(),
            "-f: planning as if applied: new Deployment shop/worker, ConfigMap shop/worker-cfg; replacing Deployment shop/api"
        );
    }

    #[test]
    fn the_namespaces_of_planned_objects_are_theirs_else_the_command_s() {
        let planned = inputs(&[
            dep(Some("b"), "x", "x"),
            dep(None, "y", "y"),
            dep(Some("a"), "z", "z"),
        ]);
        assert_eq!(namespaces(&planned, "ctx"), vec!["a", "b", "ctx"]);
        assert!(namespaces(&Inputs::default(), "ctx").is_empty());
    }
}
