//! The Istio objects a scenario writes, as YAML documents: builders for
//! Sidecars, ServiceEntries, VirtualServices and DestinationRules
//! (`Kind::new(ns, name)`, then what the object holds, then `.yaml()`),
//! and [`labelled`] to add labels to any of them.

use std::fmt::Write as _;

use crate::world::Labels;

/// One egress listener: optional (port, protocol), and hosts.
pub type Egress<'a> = (Option<(u32, &'a str)>, Vec<String>);

/// A route destination: host, optional port, optional subset.
pub type Dest = (String, Option<u32>, Option<String>);

/// An egress listener of a [`SidecarDoc`]: optional (port, protocol),
/// and hosts.
type Listener = (Option<(u32, String)>, Vec<String>);

/// A Sidecar: an optional workload selector and egress listeners, in
/// order (no egress: none written).
#[derive(Clone, Debug)]
pub struct SidecarDoc {
    ns: String,
    name: String,
    selector: Option<Labels>,
    egress: Vec<Listener>,
}

impl SidecarDoc {
    pub fn new(ns: &str, name: &str) -> Self {
        SidecarDoc {
            ns: ns.into(),
            name: name.into(),
            selector: None,
            egress: Vec::new(),
        }
    }

    /// `workloadSelector.labels`.
    pub fn selector(mut self, labels: &Labels) -> Self {
        self.selector = Some(labels.clone());
        self
    }

    /// One more egress listener: on `port` (number, protocol), or the
    /// catch-all when `None`, importing `hosts`.
    pub fn egress<S: Into<String>>(
        mut self,
        port: Option<(u32, &str)>,
        hosts: impl IntoIterator<Item = S>,
    ) -> Self {
        let port = port.map(|(p, proto)| (p, proto.to_string()));
        self.egress
            .push((port, hosts.into_iter().map(Into::into).collect()));
        self
    }

    /// [`SidecarDoc::egress`] for each listener of `egress`, in order.
    pub fn listeners(self, egress: &[Egress<'_>]) -> Self {
        egress
            .iter()
            .fold(self, |d, (port, hosts)| d.egress(*port, hosts.iter()))
    }

    pub fn yaml(&self) -> String {
        let (ns, name) = (&self.ns, &self.name);
        let mut d = format!(
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n"
        );
        if let Some(sel) = &self.selector {
            d.push_str("  workloadSelector:\n    labels:\n");
            for (k, v) in sel {
                let _ = writeln!(d, "      {k}: {v}");
            }
        }
        if !self.egress.is_empty() {
            d.push_str("  egress:\n");
            for (port, hosts) in &self.egress {
                d.push_str("  - ");
                if let Some((p, proto)) = port {
                    let _ = write!(
                        d,
                        "port:\n      number: {p}\n      protocol: {proto}\n      name: egress-{p}\n    "
                    );
                }
                d.push_str("hosts:\n");
                for h in hosts {
                    let _ = writeln!(d, "    - \"{h}\"");
                }
            }
        }
        d
    }
}

/// `  exportTo: ["a", "b"]` when set, else nothing.
fn export_field(export: &Option<Vec<String>>) -> String {
    match export {
        None => String::new(),
        Some(v) => format!(
            "  exportTo: [{}]\n",
            v.iter()
                .map(|e| format!("\"{e}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The list of an `exportTo` field.
fn export_list<S: Into<String>>(to: impl IntoIterator<Item = S>) -> Option<Vec<String>> {
    Some(to.into_iter().map(Into::into).collect())
}

/// A MESH_EXTERNAL ServiceEntry: hosts, addresses, ports (number, name,
/// protocol), a resolution (DNS unless set), endpoint addresses, and an
/// `exportTo` list when one is set.
#[derive(Clone, Debug)]
pub struct ServiceEntryDoc {
    ns: String,
    name: String,
    hosts: Vec<String>,
    addresses: Vec<String>,
    ports: Vec<(u32, String, String)>,
    resolution: String,
    endpoints: Vec<String>,
    export: Option<Vec<String>>,
}

impl ServiceEntryDoc {
    pub fn new(ns: &str, name: &str) -> Self {
        ServiceEntryDoc {
            ns: ns.into(),
            name: name.into(),
            hosts: Vec::new(),
            addresses: Vec::new(),
            ports: Vec::new(),
            resolution: "DNS".into(),
            endpoints: Vec::new(),
            export: None,
        }
    }

    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.hosts.push(host.into());
        self
    }

    pub fn port(mut self, number: u32, name: &str, protocol: &str) -> Self {
        self.ports.push((number, name.into(), protocol.into()));
        self
    }

    /// [`ServiceEntryDoc::port`] for each (number, name, protocol).
    pub fn ports(self, ports: &[(u32, &str, &str)]) -> Self {
        ports
            .iter()
            .fold(self, |d, (n, name, proto)| d.port(*n, name, proto))
    }

    /// `DNS`, `STATIC`, `NONE`, ...
    pub fn resolution(mut self, resolution: &str) -> Self {
        self.resolution = resolution.into();
        self
    }

    pub fn address(mut self, address: impl Into<String>) -> Self {
        self.addresses.push(address.into());
        self
    }

    pub fn addresses<S: Into<String>>(mut self, addresses: impl IntoIterator<Item = S>) -> Self {
        self.addresses.extend(addresses.into_iter().map(Into::into));
        self
    }

    pub fn endpoint(mut self, address: impl Into<String>) -> Self {
        self.endpoints.push(address.into());
        self
    }

    pub fn endpoints<S: Into<String>>(mut self, addresses: impl IntoIterator<Item = S>) -> Self {
        self.endpoints.extend(addresses.into_iter().map(Into::into));
        self
    }

    /// `exportTo: [to...]`.
    pub fn export_to<S: Into<String>>(mut self, to: impl IntoIterator<Item = S>) -> Self {
        self.export = export_list(to);
        self
    }

    /// An `exportTo` list, or none (`None`).
    pub fn export(mut self, export: Option<Vec<String>>) -> Self {
        self.export = export;
        self
    }

    pub fn yaml(&self) -> String {
        let (ns, name) = (&self.ns, &self.name);
        let mut d = format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  hosts:\n"
        );
        for h in &self.hosts {
            let _ = writeln!(d, "  - \"{h}\"");
        }
        if !self.addresses.is_empty() {
            d.push_str("  addresses:\n");
            for a in &self.addresses {
                let _ = writeln!(d, "  - {a}");
            }
        }
        d.push_str("  ports:\n");
        for (n, pname, proto) in &self.ports {
            let _ = writeln!(
                d,
                "  - number: {n}\n    name: {pname}\n    protocol: {proto}"
            );
        }
        let resolution = &self.resolution;
        let _ = writeln!(d, "  resolution: {resolution}\n  location: MESH_EXTERNAL");
        if !self.endpoints.is_empty() {
            d.push_str("  endpoints:\n");
            for e in &self.endpoints {
                let _ = writeln!(d, "  - address: {e}");
            }
        }
        d.push_str(&export_field(&self.export));
        d
    }
}

/// A document with `labels` (a flow mapping) added to its metadata.
pub fn labelled(doc: &str, labels: &str) -> String {
    doc.replacen("\nspec:\n", &format!("\n  labels: {labels}\nspec:\n"), 1)
}

fn dest_yaml(d: &Dest, indent: &str) -> String {
    let mut s = format!("{indent}host: {}\n", d.0);
    if let Some(p) = d.1 {
        let _ = writeln!(s, "{indent}port:\n{indent}  number: {p}");
    }
    if let Some(sub) = &d.2 {
        let _ = writeln!(s, "{indent}subset: {sub}");
    }
    s
}

/// A VirtualService of some hosts with (at most) one http route, which
/// may mirror, and one tcp route: each route's destinations in order.
/// The mirror is written only with an http route.
#[derive(Clone, Debug)]
pub struct VirtualServiceDoc {
    ns: String,
    name: String,
    hosts: Vec<String>,
    http: Vec<Dest>,
    mirror: Option<Dest>,
    tcp: Vec<Dest>,
    export: Option<Vec<String>>,
}

impl VirtualServiceDoc {
    pub fn new(ns: &str, name: &str) -> Self {
        VirtualServiceDoc {
            ns: ns.into(),
            name: name.into(),
            hosts: Vec::new(),
            http: Vec::new(),
            mirror: None,
            tcp: Vec::new(),
            export: None,
        }
    }

    pub fn host(mut self, host: impl Into<String>) -> Self {
        self.hosts.push(host.into());
        self
    }

    /// One more destination of the http route.
    pub fn destination(mut self, dest: Dest) -> Self {
        self.http.push(dest);
        self
    }

    /// More destinations of the http route.
    pub fn destinations(mut self, dests: impl IntoIterator<Item = Dest>) -> Self {
        self.http.extend(dests);
        self
    }

    /// The http route's mirror.
    pub fn mirror(mut self, dest: Dest) -> Self {
        self.mirror = Some(dest);
        self
    }

    /// More destinations of the tcp route.
    pub fn tcp_destinations(mut self, dests: impl IntoIterator<Item = Dest>) -> Self {
        self.tcp.extend(dests);
        self
    }

    /// `exportTo: [to...]`.
    pub fn export_to<S: Into<String>>(mut self, to: impl IntoIterator<Item = S>) -> Self {
        self.export = export_list(to);
        self
    }

    /// An `exportTo` list, or none (`None`).
    pub fn export(mut self, export: Option<Vec<String>>) -> Self {
        self.export = export;
        self
    }

    pub fn yaml(&self) -> String {
        let (ns, name) = (&self.ns, &self.name);
        let mut d = format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  hosts:\n"
        );
        for h in &self.hosts {
            let _ = writeln!(d, "  - \"{h}\"");
        }
        if !self.http.is_empty() {
            d.push_str("  http:\n  - route:\n");
            for dest in &self.http {
                d.push_str("    - destination:\n");
                d.push_str(&dest_yaml(dest, "        "));
            }
            if let Some(m) = &self.mirror {
                d.push_str("    mirror:\n");
                d.push_str(&dest_yaml(m, "      "));
            }
        }
        if !self.tcp.is_empty() {
            d.push_str("  tcp:\n  - route:\n");
            for dest in &self.tcp {
                d.push_str("    - destination:\n");
                d.push_str(&dest_yaml(dest, "        "));
            }
        }
        d.push_str(&export_field(&self.export));
        d
    }
}

/// A DestinationRule of one host with subsets (each selecting `version:
/// <name>`).
#[derive(Clone, Debug)]
pub struct DestinationRuleDoc {
    ns: String,
    name: String,
    host: String,
    subsets: Vec<String>,
    export: Option<Vec<String>>,
}

impl DestinationRuleDoc {
    pub fn new(ns: &str, name: &str, host: &str) -> Self {
        DestinationRuleDoc {
            ns: ns.into(),
            name: name.into(),
            host: host.into(),
            subsets: Vec::new(),
            export: None,
        }
    }

    pub fn subsets(mut self, subsets: &[&str]) -> Self {
        self.subsets.extend(subsets.iter().map(|s| s.to_string()));
        self
    }

    /// `exportTo: [to...]`.
    pub fn export_to<S: Into<String>>(mut self, to: impl IntoIterator<Item = S>) -> Self {
        self.export = export_list(to);
        self
    }

    /// An `exportTo` list, or none (`None`).
    pub fn export(mut self, export: Option<Vec<String>>) -> Self {
        self.export = export;
        self
    }

    pub fn yaml(&self) -> String {
        let (ns, name, host) = (&self.ns, &self.name, &self.host);
        let mut d = format!(
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  host: \"{host}\"\n"
        );
        if !self.subsets.is_empty() {
            d.push_str("  subsets:\n");
            for s in &self.subsets {
                let _ = writeln!(d, "  - name: {s}\n    labels:\n      version: {s}");
            }
        }
        d.push_str(&export_field(&self.export));
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::labels;

    #[test]
    fn a_sidecar_has_its_selector_and_listeners_in_order() {
        let d = SidecarDoc::new("a", "s")
            .selector(&labels(&[("app", "x")]))
            .egress(Some((80, "HTTP")), ["b/*"])
            .egress(None, ["./*", "~/*"])
            .yaml();
        assert_eq!(
            d,
            "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: s\n  namespace: a\nspec:\n  workloadSelector:\n    labels:\n      app: x\n  egress:\n  - port:\n      number: 80\n      protocol: HTTP\n      name: egress-80\n    hosts:\n    - \"b/*\"\n  - hosts:\n    - \"./*\"\n    - \"~/*\"\n"
        );
        let none = SidecarDoc::new("a", "default").yaml();
        assert!(none.ends_with("spec:\n"), "{none}");
    }

    #[test]
    fn a_service_entry_writes_every_field_it_has() {
        let d = ServiceEntryDoc::new("a", "db")
            .host("db.example.com")
            .address("240.0.0.10")
            .port(5432, "tcp", "TCP")
            .resolution("STATIC")
            .endpoint("192.0.2.10")
            .export_to(["."])
            .yaml();
        assert_eq!(
            d,
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: db\n  namespace: a\nspec:\n  hosts:\n  - \"db.example.com\"\n  addresses:\n  - 240.0.0.10\n  ports:\n  - number: 5432\n    name: tcp\n    protocol: TCP\n  resolution: STATIC\n  location: MESH_EXTERNAL\n  endpoints:\n  - address: 192.0.2.10\n  exportTo: [\".\"]\n"
        );
        let dns = ServiceEntryDoc::new("a", "api")
            .host("api.example.com")
            .port(443, "tls", "TLS")
            .yaml();
        assert!(dns.ends_with("  resolution: DNS\n  location: MESH_EXTERNAL\n"));
    }

    #[test]
    fn a_virtual_service_mirrors_only_with_an_http_route() {
        let dest = |h: &str| (h.to_string(), Some(80), Some("v1".to_string()));
        let d = VirtualServiceDoc::new("a", "vs")
            .host("x.a.svc.cluster.local")
            .destination(dest("y"))
            .mirror(("m".into(), None, None))
            .tcp_destinations([("t".to_string(), None, None)])
            .export_to(["*"])
            .yaml();
        assert_eq!(
            d,
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: vs\n  namespace: a\nspec:\n  hosts:\n  - \"x.a.svc.cluster.local\"\n  http:\n  - route:\n    - destination:\n        host: y\n        port:\n          number: 80\n        subset: v1\n    mirror:\n      host: m\n  tcp:\n  - route:\n    - destination:\n        host: t\n  exportTo: [\"*\"]\n"
        );
        let tcp_only = VirtualServiceDoc::new("a", "vs")
            .mirror(("m".into(), None, None))
            .tcp_destinations([("t".to_string(), None, None)])
            .yaml();
        assert!(!tcp_only.contains("mirror"));
    }

    #[test]
    fn a_destination_rule_has_a_subset_per_version() {
        let d = DestinationRuleDoc::new("a", "dr", "x")
            .subsets(&["v1", "v2"])
            .export_to(["b"])
            .yaml();
        assert_eq!(
            d,
            "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: dr\n  namespace: a\nspec:\n  host: \"x\"\n  subsets:\n  - name: v1\n    labels:\n      version: v1\n  - name: v2\n    labels:\n      version: v2\n  exportTo: [\"b\"]\n"
        );
    }
}
