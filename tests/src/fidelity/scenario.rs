//! What every scenario is made of: the [`Scenario`] itself, the mesh
//! config and names it assumes, and the [`Builder`] that puts one
//! together.

use crate::world::{labels, Labels, Pod, Service, SvcPort, World};

pub const ROOT_NS: &str = "istio-system";
pub const DOMAIN: &str = "svc.cluster.local";

/// One scenario: its world, the mesh config it runs under, and the objects
/// it puts outside its own namespaces (deleted afterwards).
pub struct Scenario {
    pub name: String,
    pub world: World,
    /// The `mesh` key of ConfigMap istio-system/istio.
    pub mesh: String,
    /// (kind, namespace, name) of objects in other namespaces (the root
    /// namespace's Sidecars).
    pub outside: Vec<(String, String, String)>,
}

pub const DEFAULT_MESH: &str =
    "rootNamespace: istio-system\noutboundTrafficPolicy:\n  mode: ALLOW_ANY\n";

pub fn fqdn(name: &str, ns: &str) -> String {
    format!("{name}.{ns}.{DOMAIN}")
}

/// A small builder over [`World`] with the IPs and names a scenario needs.
pub struct Builder {
    pub world: World,
    pub outside: Vec<(String, String, String)>,
    ip_base: (u32, u32),
    next_ip: u32,
}

impl Builder {
    /// `slot` keeps pod IPs of different scenarios apart (istiod indexes
    /// pods by IP).
    pub fn new(slot: u64) -> Self {
        Builder {
            world: World::default(),
            outside: Vec::new(),
            ip_base: (40 + (slot / 250) as u32 % 200, (slot % 250) as u32),
            next_ip: 1,
        }
    }

    pub fn namespace(&mut self, name: &str) {
        self.world
            .namespace(name, labels(&[("istio-injection", "enabled")]));
    }

    pub fn service(&mut self, ns: &str, name: &str, ports: Vec<SvcPort>, headless: bool) {
        self.world.services.push(Service {
            namespace: ns.into(),
            name: name.into(),
            selector: labels(&[("app", name)]),
            ports,
            headless,
            annotations: Labels::new(),
            labels: Labels::new(),
            external_name: None,
        });
    }

    pub fn export_service(&mut self, ns: &str, name: &str, export: &str) {
        if let Some(s) = self
            .world
            .services
            .iter_mut()
            .find(|s| s.namespace == ns && s.name == name)
        {
            s.annotations
                .insert("networking.istio.io/exportTo".into(), export.into());
        }
    }

    pub fn pod(&mut self, ns: &str, name: &str, l: Labels) {
        let ip = format!("10.{}.{}.{}", self.ip_base.0, self.ip_base.1, self.next_ip);
        self.next_ip += 1;
        assert!(self.next_ip < 255, "too many pods in one scenario");
        self.world.pods.push(Pod {
            namespace: ns.into(),
            name: name.into(),
            labels: l,
            ip,
            service_account: "default".into(),
            ready: true,
            terminating: false,
            proxied: true,
            gateway: None,
        });
    }

    /// Labels Service `ns/name` with `l`.
    pub fn label_service(&mut self, ns: &str, name: &str, l: Labels) {
        if let Some(s) = self
            .world
            .services
            .iter_mut()
            .find(|s| s.namespace == ns && s.name == name)
        {
            s.labels.extend(l);
        }
    }

    /// Waypoint `name` in `ns`: its Gateway of class `istio-waypoint`
    /// (HBONE listener on 15008, with `allowed` appended, `gateway_labels`
    /// on the Gateway), and its Service and pod as istio's waypoint
    /// template writes them (`files/waypoint.yaml` of the istio module,
    /// 1.31; the test istiod renders none), its pod running `proxy
    /// waypoint`. istiod writes the Gateway's status addresses itself.
    pub fn waypoint(&mut self, ns: &str, name: &str, allowed: &str, gateway_labels: &str) {
        let own = labels(&[
            ("gateway.istio.io/managed", "istio.io-mesh-controller"),
            ("gateway.networking.k8s.io/gateway-name", name),
        ]);
        let mut mesh = SvcPort::new("mesh", 15008);
        mesh.app_protocol = Some("all".into());
        let mut status = SvcPort::new("status-port", 15021);
        status.app_protocol = Some("tcp".into());
        self.world.services.push(Service {
            namespace: ns.into(),
            name: name.into(),
            selector: labels(&[("gateway.networking.k8s.io/gateway-name", name)]),
            ports: vec![status, mesh],
            headless: false,
            annotations: Labels::new(),
            labels: own.clone(),
            external_name: None,
        });
        let mut pod_labels = own;
        pod_labels.insert("sidecar.istio.io/inject".into(), "false".into());
        pod_labels.insert("istio.io/dataplane-mode".into(), "none".into());
        self.pod(ns, &format!("{name}-0"), pod_labels);
        if let Some(p) = self.world.pods.last_mut() {
            p.gateway = Some(meshscope_shared::inject::Gateway::Waypoint);
        }
        self.istio(format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels: {{{gateway_labels}}}\nspec:\n  gatewayClassName: istio-waypoint\n  listeners:\n  - {{name: mesh, port: 15008, protocol: HBONE{allowed}}}\n"
        ));
    }

    /// A pod being deleted (held in Terminating).
    pub fn terminating_pod(&mut self, ns: &str, name: &str, l: Labels) {
        self.pod(ns, name, l);
        if let Some(p) = self.world.pods.last_mut() {
            p.terminating = true;
        }
    }

    /// A pod that runs but is not Ready: no endpoint of its Services.
    pub fn unready_pod(&mut self, ns: &str, name: &str, l: Labels) {
        self.pod(ns, name, l);
        if let Some(p) = self.world.pods.last_mut() {
            p.ready = false;
        }
    }

    /// Whether a VirtualService of the scenario names `host`.
    pub fn routed_by_virtual_service(&self, host: &str) -> bool {
        let quoted = format!("\"{host}\"");
        self.world
            .istio
            .iter()
            .any(|d| d.contains("kind: VirtualService") && d.contains(&quoted))
    }

    /// Whether Service `ns/name` is headless.
    pub fn is_headless(&self, ns: &str, name: &str) -> bool {
        self.world
            .services
            .iter()
            .any(|s| s.namespace == ns && s.name == name && s.headless)
    }

    pub fn istio(&mut self, doc: String) {
        if let Some(rest) = doc.split("\n  namespace: ").nth(1) {
            let ns = rest.lines().next().unwrap_or("").trim();
            if ns == ROOT_NS {
                let kind = doc
                    .lines()
                    .find_map(|l| l.strip_prefix("kind: "))
                    .unwrap_or("")
                    .to_string();
                let name = doc
                    .lines()
                    .find_map(|l| l.strip_prefix("  name: "))
                    .unwrap_or("")
                    .to_string();
                self.outside.push((kind, ns.to_string(), name));
            }
        }
        self.world.istio.push(doc);
    }

    /// The Istio objects added from now on are created over a second
    /// after the ones before ([`World::later_from`]).
    pub fn later(&mut self) {
        self.world.later_from = Some(self.world.istio.len());
    }

    pub fn finish(self, name: String, mesh: String) -> Scenario {
        Scenario {
            name,
            world: self.world,
            mesh,
            outside: self.outside,
        }
    }
}
