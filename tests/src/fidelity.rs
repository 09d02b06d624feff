//! Scenarios for holding the scope engine to a real istiod: a few fixed
//! ones that pin known-tricky rules, and a seeded random generator that
//! mixes exportTo (annotation, field, mesh defaults), ServiceEntries of
//! every resolution, VirtualServices pulling hosts in, DestinationRule
//! subsets, headless Services, and namespace, root and selector Sidecars
//! with every kind of egress host.

use std::fmt::Write as _;

use crate::bench::Rng;
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

/// One egress listener: optional (port, protocol), and hosts.
pub type Egress<'a> = (Option<(u32, &'a str)>, Vec<String>);

/// A generated Service: namespace, name, (port name, number) pairs.
type SvcRef = (String, String, Vec<(String, u32)>);

/// `egress` lists of (optional port, hosts).
pub fn sidecar_doc(
    ns: &str,
    name: &str,
    selector: Option<&Labels>,
    egress: &[Egress<'_>],
) -> String {
    let mut d = format!(
        "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n"
    );
    if let Some(sel) = selector {
        d.push_str("  workloadSelector:\n    labels:\n");
        for (k, v) in sel {
            let _ = writeln!(d, "      {k}: {v}");
        }
    }
    if !egress.is_empty() {
        d.push_str("  egress:\n");
        for (port, hosts) in egress {
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

#[allow(clippy::too_many_arguments)]
pub fn service_entry_doc(
    ns: &str,
    name: &str,
    hosts: &[String],
    ports: &[(u32, &str, &str)],
    resolution: &str,
    addresses: &[String],
    endpoints: &[String],
    export: &Option<Vec<String>>,
) -> String {
    let mut d = format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  hosts:\n"
    );
    for h in hosts {
        let _ = writeln!(d, "  - \"{h}\"");
    }
    if !addresses.is_empty() {
        d.push_str("  addresses:\n");
        for a in addresses {
            let _ = writeln!(d, "  - {a}");
        }
    }
    d.push_str("  ports:\n");
    for (n, pname, proto) in ports {
        let _ = writeln!(
            d,
            "  - number: {n}\n    name: {pname}\n    protocol: {proto}"
        );
    }
    let _ = writeln!(d, "  resolution: {resolution}\n  location: MESH_EXTERNAL");
    if !endpoints.is_empty() {
        d.push_str("  endpoints:\n");
        for e in endpoints {
            let _ = writeln!(d, "  - address: {e}");
        }
    }
    d.push_str(&export_field(export));
    d
}

/// A document with `labels` (a flow mapping) added to its metadata.
pub fn labelled(doc: &str, labels: &str) -> String {
    doc.replacen("\nspec:\n", &format!("\n  labels: {labels}\nspec:\n"), 1)
}

/// A route destination: host, optional port, optional subset.
pub type Dest = (String, Option<u32>, Option<String>);

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

pub fn virtual_service_doc(
    ns: &str,
    name: &str,
    hosts: &[String],
    http: &[Dest],
    mirror: Option<&Dest>,
    tcp: &[Dest],
    export: &Option<Vec<String>>,
) -> String {
    let mut d = format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  hosts:\n"
    );
    for h in hosts {
        let _ = writeln!(d, "  - \"{h}\"");
    }
    if !http.is_empty() {
        d.push_str("  http:\n  - route:\n");
        for dest in http {
            d.push_str("    - destination:\n");
            d.push_str(&dest_yaml(dest, "        "));
        }
        if let Some(m) = mirror {
            d.push_str("    mirror:\n");
            d.push_str(&dest_yaml(m, "      "));
        }
    }
    if !tcp.is_empty() {
        d.push_str("  tcp:\n  - route:\n");
        for dest in tcp {
            d.push_str("    - destination:\n");
            d.push_str(&dest_yaml(dest, "        "));
        }
    }
    d.push_str(&export_field(export));
    d
}

pub fn destination_rule_doc(
    ns: &str,
    name: &str,
    host: &str,
    subsets: &[&str],
    export: &Option<Vec<String>>,
) -> String {
    let mut d = format!(
        "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  host: \"{host}\"\n"
    );
    if !subsets.is_empty() {
        d.push_str("  subsets:\n");
        for s in subsets {
            let _ = writeln!(d, "  - name: {s}\n    labels:\n      version: {s}");
        }
    }
    d.push_str(&export_field(export));
    d
}

// === fixed scenarios ===

/// Scenarios that pin rules by hand: each proxy's expected scope is
/// obvious from the names.
pub fn fixed(slot: u64) -> Vec<Scenario> {
    let mut out = Vec::new();

    // 1. Two namespaces, a namespace default, a selector Sidecar, exportTo
    //    on a Service, a VirtualService pulling a host in, DR subsets.
    {
        let mut b = Builder::new(slot);
        let (a, c) = (format!("fx{slot}-a"), format!("fx{slot}-b"));
        b.namespace(&a);
        b.namespace(&c);
        b.service(&a, "web", vec![SvcPort::new("http", 80)], false);
        b.service(&a, "db", vec![SvcPort::new("tcp-db", 5432)], false);
        b.service(
            &c,
            "api",
            vec![SvcPort::new("http", 8080), SvcPort::new("grpc", 9090)],
            false,
        );
        b.service(&c, "hidden", vec![SvcPort::new("http", 80)], false);
        b.export_service(&c, "hidden", ".");
        b.service(&c, "pulled", vec![SvcPort::new("http", 80)], false);
        b.pod(&a, "web-0", labels(&[("app", "web"), ("version", "v1")]));
        b.pod(&a, "db-0", labels(&[("app", "db")]));
        b.pod(&a, "client-0", labels(&[("app", "client")]));
        b.pod(&c, "api-0", labels(&[("app", "api"), ("version", "v1")]));
        b.pod(&c, "api-1", labels(&[("app", "api"), ("version", "v2")]));
        b.pod(&c, "hidden-0", labels(&[("app", "hidden")]));
        b.pod(&c, "pulled-0", labels(&[("app", "pulled")]));
        b.istio(sidecar_doc(
            &a,
            "default",
            None,
            &[(None, vec!["./*".into()])],
        ));
        b.istio(sidecar_doc(
            &a,
            "client",
            Some(&labels(&[("app", "client")])),
            &[(
                None,
                vec![
                    format!("{c}/api.{c}.{DOMAIN}"),
                    format!("{c}/hidden.{c}.{DOMAIN}"),
                ],
            )],
        ));
        b.istio(virtual_service_doc(
            &c,
            "api-routes",
            &[fqdn("api", &c)],
            &[(fqdn("pulled", &c), Some(80), None)],
            None,
            &[],
            &None,
        ));
        b.istio(destination_rule_doc(
            &c,
            "api",
            &fqdn("api", &c),
            &["v1", "v2"],
            &None,
        ));
        out.push(b.finish("fixed-basic".into(), DEFAULT_MESH.into()));
    }

    // 2. ServiceEntries of each resolution, one hostname in two
    //    namespaces, a port-specific listener, `~` and wildcard hosts.
    {
        let mut b = Builder::new(slot + 1);
        let (a, c) = (format!("fx{slot}-c"), format!("fx{slot}-d"));
        b.namespace(&a);
        b.namespace(&c);
        b.service(
            &a,
            "app",
            vec![SvcPort::new("http", 80), SvcPort::new("tcp", 9000)],
            false,
        );
        b.service(
            &a,
            "stateful",
            vec![SvcPort::new("tcp-peer", 7000), SvcPort::new("http", 80)],
            true,
        );
        b.pod(&a, "app-0", labels(&[("app", "app")]));
        b.pod(&a, "stateful-0", labels(&[("app", "stateful")]));
        b.pod(&a, "stateful-1", labels(&[("app", "stateful")]));
        // Running but not Ready: istiod still builds an outbound listener
        // for its IP (headless listeners take every endpoint, ready or not).
        b.unready_pod(&a, "stateful-2", labels(&[("app", "stateful")]));
        // Terminating (its EndpointSlice entry says so, as the controller
        // writes it): istiod keeps the listener for its IP too.
        b.terminating_pod(&a, "stateful-3", labels(&[("app", "stateful")]));
        b.pod(&c, "ext-client-0", labels(&[("app", "ext-client")]));
        b.pod(&c, "narrow-0", labels(&[("app", "narrow")]));
        b.istio(service_entry_doc(
            &a,
            "dns",
            &["api.example.com".into()],
            &[(443, "tls", "TLS"), (80, "http", "HTTP")],
            "DNS",
            &[],
            &[],
            &None,
        ));
        b.istio(service_entry_doc(
            &a,
            "none",
            &["*.wild.example.com".into()],
            &[(443, "tls", "TLS")],
            "NONE",
            &[],
            &[],
            &None,
        ));
        b.istio(service_entry_doc(
            &c,
            "static",
            &["db.example.com".into()],
            &[(5432, "tcp", "TCP")],
            "STATIC",
            &["240.0.0.10".into()],
            &["192.0.2.10".into()],
            &Some(vec![".".into()]),
        ));
        // The same hostname defined in both namespaces, with different ports.
        b.istio(service_entry_doc(
            &a,
            "shared-a",
            &["shared.example.com".into()],
            &[(8080, "http", "HTTP")],
            "DNS",
            &[],
            &[],
            &None,
        ));
        b.istio(service_entry_doc(
            &c,
            "shared-c",
            &["shared.example.com".into()],
            &[(9090, "grpc", "GRPC")],
            "DNS",
            &[],
            &[],
            &None,
        ));
        b.istio(sidecar_doc(
            &c,
            "default",
            None,
            &[(None, vec!["./*".into(), "*/*.example.com".into()])],
        ));
        b.istio(sidecar_doc(
            &c,
            "narrow",
            Some(&labels(&[("app", "narrow")])),
            &[
                (Some((80, "HTTP")), vec![format!("{a}/*")]),
                (None, vec!["~/*".into()]),
            ],
        ));
        out.push(b.finish("fixed-serviceentries".into(), DEFAULT_MESH.into()));
    }

    // 3. The root default, oldest-wins between two selector Sidecars, and
    //    mesh-wide exportTo defaults.
    {
        let mut b = Builder::new(slot + 2);
        let (a, c) = (format!("fx{slot}-e"), format!("fx{slot}-f"));
        b.namespace(&a);
        b.namespace(&c);
        b.service(&a, "one", vec![SvcPort::new("http", 80)], false);
        b.service(&c, "two", vec![SvcPort::new("http", 80)], false);
        b.service(&c, "three", vec![SvcPort::new("http-web", 8000)], false);
        b.export_service(&c, "three", "*");
        b.pod(&a, "one-0", labels(&[("app", "one"), ("tier", "front")]));
        b.pod(&c, "two-0", labels(&[("app", "two")]));
        b.pod(&c, "three-0", labels(&[("app", "three")]));
        b.istio(sidecar_doc(
            ROOT_NS,
            &format!("fx{slot}-root"),
            None,
            &[(None, vec!["./*".into(), format!("{ROOT_NS}/*")])],
        ));
        b.istio(sidecar_doc(
            &a,
            "by-app",
            Some(&labels(&[("app", "one")])),
            &[(None, vec![format!("{c}/*")])],
        ));
        b.istio(sidecar_doc(
            &a,
            "by-tier",
            Some(&labels(&[("tier", "front")])),
            &[(None, vec!["./*".into()])],
        ));
        let mesh = format!("{DEFAULT_MESH}defaultServiceExportTo: [\".\"]\n");
        out.push(b.finish("fixed-root-and-defaults".into(), mesh));
    }

    // 4. Rules the random scenarios found where istiod differed from the
    //    engine: VirtualService destinations under a port-specific
    //    listener, a DestinationRule exported only elsewhere, a listener's
    //    declared protocol, a Service and a ServiceEntry of one hostname in
    //    one namespace, UDP inbound ports, sniffed ports.
    {
        let mut b = Builder::new(slot + 3);
        let (a, c) = (format!("fx{slot}-g"), format!("fx{slot}-h"));
        b.namespace(&a);
        b.namespace(&c);
        b.service(&a, "grpc", vec![SvcPort::new("grpc", 9090)], false);
        b.service(
            &a,
            "web",
            vec![SvcPort::new("http", 80), SvcPort::new("udp-dns", 5353)],
            false,
        );
        b.service(&a, "peers", vec![SvcPort::new("https-x", 8443)], true);
        b.service(
            &c,
            "dest",
            vec![SvcPort::new("http", 80), SvcPort::new("plain", 7000)],
            false,
        );
        b.service(&c, "twin", vec![SvcPort::new("tls", 443)], true);
        b.pod(&a, "grpc-0", labels(&[("app", "grpc")]));
        b.pod(&a, "web-0", labels(&[("app", "web"), ("version", "v1")]));
        b.pod(&a, "peers-0", labels(&[("app", "peers")]));
        b.pod(&a, "peers-1", labels(&[("app", "peers")]));
        b.pod(&c, "dest-0", labels(&[("app", "dest")]));
        b.pod(&c, "twin-0", labels(&[("app", "twin")]));
        b.pod(&c, "caller-0", labels(&[("app", "caller")]));
        b.istio(virtual_service_doc(
            &a,
            "to-dest",
            &[fqdn("web", &a)],
            &[(fqdn("dest", &c), None, None)],
            None,
            &[],
            &None,
        ));
        b.istio(destination_rule_doc(
            &a,
            "web-elsewhere",
            &fqdn("web", &a),
            &["v1"],
            &Some(vec![c.clone()]),
        ));
        b.istio(service_entry_doc(
            &c,
            "twin-se",
            &[fqdn("twin", &c)],
            &[(443, "tls", "TLS")],
            "DNS",
            &["240.0.9.9".into()],
            &[],
            &None,
        ));
        // A port-specific listener (9090) whose VirtualService destination
        // lacks that port, and an HTTP-declared listener on a TCP port.
        b.istio(sidecar_doc(
            &a,
            "default",
            None,
            &[
                (Some((9090, "GRPC")), vec!["*/*".into()]),
                (Some((8443, "HTTP")), vec!["./*".into()]),
                (None, vec!["./*".into()]),
            ],
        ));
        b.istio(sidecar_doc(
            &c,
            "caller",
            Some(&labels(&[("app", "caller")])),
            &[(None, vec!["./*".into(), format!("{a}/*")])],
        ));
        out.push(b.finish("fixed-istiod-found".into(), DEFAULT_MESH.into()));
    }

    // 5. Outbound listeners by address and port, as the 200-seed sweep
    //    found istiod keys them: port-specific listeners bind headless
    //    Services on 0.0.0.0 and lock their keys against the catch-all,
    //    an HTTP-declared port is one 0.0.0.0 listener while the
    //    catch-all still builds the services' own address listeners, a
    //    listener that excludes every host it names builds nothing, and
    //    two headless Services over the same pods share each pod's
    //    listener; ports named by number are sniffed, with a route per
    //    service port; and an ExternalName Service builds nothing.
    {
        let mut b = Builder::new(slot + 4);
        let (a, c) = (format!("fx{slot}-i"), format!("fx{slot}-j"));
        b.namespace(&a);
        b.namespace(&c);
        let mut sniffed = SvcPort::new("plain", 7100);
        sniffed.app_protocol = Some("http".into());
        b.service(
            &c,
            "peer",
            vec![SvcPort::new("tcp-peer", 7000), sniffed],
            true,
        );
        b.world.services.push(Service {
            namespace: c.clone(),
            name: "mirror".into(),
            selector: labels(&[("app", "peer")]),
            ports: vec![SvcPort::new("tcp-mirror", 7000)],
            headless: true,
            annotations: Labels::new(),
            labels: Labels::new(),
            external_name: None,
        });
        b.service(&c, "db", vec![SvcPort::new("tcp-db", 5432)], false);
        b.service(&c, "cache", vec![SvcPort::new("tcp-cache", 5432)], false);
        b.service(&c, "web", vec![SvcPort::new("http", 80)], false);
        // Ports named by number are sniffed (a `<host>:<port>` route each),
        // except on well-known ports; an appProtocol is cut at `-` only
        // (`http_web` is sniffed).
        let mut underscored = SvcPort::new("web", 8088);
        underscored.app_protocol = Some("http_web".into());
        b.service(
            &c,
            "store",
            vec![
                SvcPort::new("27017", 27017),
                SvcPort::new("9091", 9091),
                underscored,
            ],
            false,
        );
        b.service(&c, "ring", vec![SvcPort::new("7200", 7200)], true);
        b.pod(&c, "store-0", labels(&[("app", "store")]));
        b.pod(&c, "ring-0", labels(&[("app", "ring")]));
        b.pod(&c, "ring-1", labels(&[("app", "ring")]));
        // An ExternalName Service is an alias from 1.21: no cluster or
        // listener of its own, whatever ports it lists.
        b.world.services.push(Service {
            namespace: c.clone(),
            name: "alias".into(),
            selector: Labels::new(),
            ports: vec![SvcPort::new("http", 80), SvcPort::new("tcp-ext", 6000)],
            headless: false,
            annotations: Labels::new(),
            labels: Labels::new(),
            external_name: Some(fqdn("web", &c)),
        });
        b.pod(&c, "peer-0", labels(&[("app", "peer")]));
        b.pod(&c, "peer-1", labels(&[("app", "peer")]));
        b.pod(&c, "db-0", labels(&[("app", "db")]));
        b.pod(&c, "web-0", labels(&[("app", "web")]));
        b.pod(&a, "client-0", labels(&[("app", "client")]));
        b.pod(&a, "narrow-0", labels(&[("app", "narrow")]));
        b.istio(sidecar_doc(
            &a,
            "default",
            None,
            &[
                (Some((7000, "TCP")), vec![format!("{c}/peer.{c}.{DOMAIN}")]),
                (Some((7100, "TCP")), vec![format!("{c}/peer.{c}.{DOMAIN}")]),
                (Some((5432, "HTTP")), vec![format!("{c}/*")]),
                (
                    Some((8443, "TCP")),
                    vec![format!("{c}/*"), format!("~{c}/*")],
                ),
                (None, vec![format!("{c}/*")]),
            ],
        ));
        b.istio(sidecar_doc(
            &a,
            "narrow",
            Some(&labels(&[("app", "narrow")])),
            &[(Some((5432, "HTTP")), vec![format!("{c}/*")])],
        ));
        out.push(b.finish("fixed-listener-keys".into(), DEFAULT_MESH.into()));
    }

    out
}

/// Waypoints, for an istiod with ambient on (`Istiod::start_ambient`):
/// its waypoints' clusters and listeners, and its sidecars' with the
/// HBONE-sending cluster and listener ambient adds.
pub fn waypoints(slot: u64) -> Vec<Scenario> {
    let mut out = Vec::new();
    // Services bound by their own
    //    label and by their namespace's, from another namespace through
    //    an HBONE listener that admits it (exportTo aside), `none`, a
    //    DestinationRule's subsets, a sniffed port, a route from a bound
    //    service to one not bound, a MESH_EXTERNAL entry, and a waypoint
    //    for workloads only (no service binds to it).
    {
        let mut b = Builder::new(slot + 5);
        let (a, c) = (format!("fx{slot}-wa"), format!("fx{slot}-wb"));
        b.namespace(&a);
        b.namespace(&c);
        let uses = |name: &str| labels(&[("istio.io/use-waypoint", name)]);
        b.service(
            &a,
            "a",
            vec![SvcPort::new("http", 80), SvcPort::new("tcp-x", 9090)],
            false,
        );
        b.label_service(&a, "a", uses("wp"));
        b.service(&a, "b", vec![SvcPort::new("http", 8080)], false);
        b.service(&a, "d", vec![SvcPort::new("foo", 7001)], false);
        b.label_service(&a, "d", uses("wp"));
        b.service(&a, "e", vec![SvcPort::new("http", 80)], false);
        b.label_service(&a, "e", uses("wl"));
        b.service(&c, "f", vec![SvcPort::new("http", 80)], false);
        b.label_service(
            &c,
            "f",
            labels(&[
                ("istio.io/use-waypoint", "wp"),
                ("istio.io/use-waypoint-namespace", &a),
            ]),
        );
        b.export_service(&c, "f", ".");
        b.service(&c, "g", vec![SvcPort::new("http", 80)], false);
        b.label_service(&c, "g", uses("none"));
        b.world.namespaces.retain(|(n, _)| *n != c);
        b.world.namespace(
            &c,
            labels(&[
                ("istio-injection", "enabled"),
                ("istio.io/use-waypoint", "wp"),
                ("istio.io/use-waypoint-namespace", &a),
            ]),
        );
        for name in ["a", "b", "d", "e", "f", "g"] {
            let ns = if "fg".contains(name) { &c } else { &a };
            b.pod(ns, &format!("{name}-0"), labels(&[("app", name)]));
        }
        b.waypoint(&a, "wp", ", allowedRoutes: {namespaces: {from: All}}", "");
        b.waypoint(&a, "wl", "", "istio.io/waypoint-for: workload");
        b.istio(destination_rule_doc(
            &a,
            "a",
            &fqdn("a", &a),
            &["v1"],
            &None,
        ));
        b.istio(format!(
            "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: a, namespace: {a}}}\nspec:\n  hosts: [a]\n  http:\n  - route:\n    - destination: {{host: b}}\n"
        ));
        b.istio(format!(
            "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: ext\n  namespace: {a}\n  labels: {{istio.io/use-waypoint: wp}}\nspec:\n  hosts: [ext.example.com]\n  ports: [{{number: 80, name: http, protocol: HTTP}}, {{number: 443, name: tls, protocol: TLS}}]\n  resolution: DNS\n"
        ));
        out.push(b.finish("fixed-waypoints".into(), DEFAULT_MESH.into()));
    }
    out
}

// === random scenarios ===

const PORTS: &[(&str, u32)] = &[
    ("http", 80),
    ("http-alt", 8080),
    ("grpc", 9090),
    ("tcp-db", 5432),
    ("plain", 7000),
    ("udp-dns", 5353),
    ("tls", 443),
    ("https-x", 8443),
];

fn pick<'a, T>(rng: &mut Rng, v: &'a [T]) -> &'a T {
    &v[rng.below(v.len())]
}

fn chance(rng: &mut Rng, p: f64) -> bool {
    rng.unit() < p
}

/// A random scenario, the same for the same seed; `run` only keeps the
/// namespace names of different runs apart (a deleted namespace lingers
/// while it terminates).
pub fn random(seed: u64, run: u64) -> Scenario {
    random_scenario(seed, run, false)
}

/// [`random`]'s scenario of `seed` with a waypoint too (`random_waypoint`),
/// for an istiod with ambient on.
pub fn random_ambient(seed: u64, run: u64) -> Scenario {
    random_scenario(seed, run, true)
}

fn random_scenario(seed: u64, run: u64, ambient: bool) -> Scenario {
    let mut rng = Rng::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed);
    let mut b = Builder::new(1000 + seed);
    let nns = 2 + rng.below(2);
    let nss: Vec<String> = (0..nns)
        .map(|i| format!("r{run}-{seed}-{}", (b'a' + i as u8) as char))
        .collect();
    for ns in &nss {
        b.namespace(ns);
    }
    // Services and their pods.
    let mut svcs: Vec<SvcRef> = Vec::new();
    for ns in &nss {
        for k in 0..1 + rng.below(4) {
            let name = format!("svc{k}");
            let mut ports: Vec<SvcPort> = Vec::new();
            for _ in 0..1 + rng.below(3) {
                let (pn, pp) = *pick(&mut rng, PORTS);
                if ports.iter().any(|p| p.port == pp || p.name == pn) {
                    continue;
                }
                let mut sp = SvcPort::new(pn, pp);
                if chance(&mut rng, 0.15) && pn == "plain" {
                    sp.app_protocol = Some("http".into());
                }
                ports.push(sp);
            }
            let headless = chance(&mut rng, 0.15);
            svcs.push((
                ns.clone(),
                name.clone(),
                ports.iter().map(|p| (p.name.clone(), p.port)).collect(),
            ));
            b.service(ns, &name, ports, headless);
            if chance(&mut rng, 0.3) {
                let other = pick(&mut rng, &nss).clone();
                let export = match rng.below(4) {
                    0 => ".".to_string(),
                    1 => "*".to_string(),
                    2 => other,
                    _ => format!(".,{}", pick(&mut rng, &nss)),
                };
                b.export_service(ns, &name, &export);
            }
            for r in 0..1 + rng.below(2) {
                let version = if r == 0 { "v1" } else { "v2" };
                b.pod(
                    ns,
                    &format!("{name}-{r}"),
                    labels(&[("app", &name), ("version", version)]),
                );
            }
        }
        if chance(&mut rng, 0.6) {
            b.pod(
                ns,
                "client-0",
                labels(&[("app", "client"), ("role", "caller")]),
            );
        }
    }
    let svc_host = |rng: &mut Rng, short: bool| -> (String, String, Vec<(String, u32)>) {
        let (ns, name, ports) = svcs[rng.below(svcs.len())].clone();
        let host = if short {
            name.clone()
        } else {
            fqdn(&name, &ns)
        };
        (ns, host, ports)
    };
    let export_opt = |rng: &mut Rng, nss: &[String]| -> Option<Vec<String>> {
        if chance(rng, 0.6) {
            return None;
        }
        Some(match rng.below(3) {
            0 => vec![".".into()],
            1 => vec!["*".into()],
            _ => vec![pick(rng, nss).clone()],
        })
    };
    // ServiceEntries.
    let mut entry_hosts: Vec<(String, String)> = Vec::new();
    for k in 0..rng.below(4) {
        let ns = pick(&mut rng, &nss).clone();
        let (host, resolution) = match rng.below(5) {
            0 => ("api.example.com".to_string(), "DNS"),
            1 => ("*.wild.example.com".to_string(), "NONE"),
            2 => ("db.example.com".to_string(), "STATIC"),
            3 => ("api.example.com".to_string(), "NONE"),
            _ => {
                // The hostname of a Kubernetes Service, from a ServiceEntry.
                let (_, h, _) = svc_host(&mut rng, false);
                (h, "DNS")
            }
        };
        let ports: Vec<(u32, &str, &str)> = match rng.below(3) {
            0 => vec![(443, "tls", "TLS")],
            1 => vec![(80, "http", "HTTP"), (443, "https", "HTTPS")],
            _ => vec![(5432, "tcp", "TCP")],
        };
        let endpoints: Vec<String> = if resolution == "STATIC" {
            vec![format!("192.0.2.{}", 10 + k)]
        } else {
            vec![]
        };
        let addresses: Vec<String> = if chance(&mut rng, 0.3) && !host.starts_with('*') {
            vec![format!("240.0.{}.{}", seed % 250, 10 + k)]
        } else {
            vec![]
        };
        let export = export_opt(&mut rng, &nss);
        // Never a second entry of one host in one namespace created in the
        // same second: istiod orders such a tie by map order (seed 10041);
        // unusual_entries makes that shape a second apart.
        if entry_hosts.contains(&(ns.clone(), host.clone())) {
            continue;
        }
        entry_hosts.push((ns.clone(), host.clone()));
        b.istio(service_entry_doc(
            &ns,
            &format!("se{k}"),
            &[host],
            &ports,
            resolution,
            &addresses,
            &endpoints,
            &export,
        ));
    }
    // Shapes the first seeds predate, from a stream of their own so that
    // the rest of each seed stays as it was.
    let mut shape = Rng::new(seed ^ 0xa11c_e5ee_d000_0021);
    let unusual = chance(&mut shape, 0.7);
    if unusual {
        unusual_entries(&mut b, &mut shape, &nss, seed);
    }
    // VirtualServices.
    for k in 0..rng.below(4) {
        let ns = pick(&mut rng, &nss).clone();
        let (_, host, _) = svc_host(&mut rng, false);
        let mut http: Vec<Dest> = Vec::new();
        let mut tcp: Vec<Dest> = Vec::new();
        let n = 1 + rng.below(2);
        for _ in 0..n {
            let short = chance(&mut rng, 0.2);
            let (dns, dh, dports) = svc_host(&mut rng, short);
            // A short name resolves in the VirtualService's namespace.
            let dh = if short && dns != ns {
                fqdn(&dh, &dns)
            } else {
                dh
            };
            let port = if chance(&mut rng, 0.5) {
                Some(pick(&mut rng, &dports).1)
            } else {
                None
            };
            let subset = if chance(&mut rng, 0.2) {
                Some("v1".to_string())
            } else {
                None
            };
            // Never a tcp route to a service with a UDP port, nor a second
            // destination in a tcp route (the generator writes no
            // weights): istiod 1.31 (eed52ebb66ad) panics in
            // pilot/pkg/networking/core/networkfilter.go:297
            // (buildOutboundNetworkFiltersWithWeightedClusters) when no
            // destination of a multi-destination tcp route has a weight
            // (seeds 10014 and 10078); validation would reject such a
            // route. The second destination goes to the http routes.
            let udp = dports.iter().any(|p| p.0.starts_with("udp"));
            if chance(&mut rng, 0.25) && !udp && tcp.is_empty() {
                tcp.push((dh, port, None));
            } else {
                http.push((dh, port, subset));
            }
        }
        let mirror = if chance(&mut rng, 0.3) && !http.is_empty() {
            let (_, mh, _) = svc_host(&mut rng, false);
            Some((mh, None, None))
        } else {
            None
        };
        let export = export_opt(&mut rng, &nss);
        b.istio(virtual_service_doc(
            &ns,
            &format!("vs{k}"),
            &[host],
            &http,
            mirror.as_ref(),
            &tcp,
            &export,
        ));
    }
    // DestinationRules.
    for k in 0..rng.below(4) {
        let ns = pick(&mut rng, &nss).clone();
        let host = if chance(&mut rng, 0.2) {
            format!("*.{}.{DOMAIN}", pick(&mut rng, &nss))
        } else {
            svc_host(&mut rng, false).1
        };
        let subsets: &[&str] = match rng.below(3) {
            0 => &[],
            1 => &["v1"],
            _ => &["v1", "v2"],
        };
        let export = export_opt(&mut rng, &nss);
        b.istio(destination_rule_doc(
            &ns,
            &format!("dr{k}"),
            &host,
            subsets,
            &export,
        ));
    }
    // Sidecars.
    let host_entry = |rng: &mut Rng, ns: &str| -> String {
        let other = pick(rng, &nss).clone();
        match rng.below(12) {
            0 => "./*".into(),
            1 => format!("{other}/*"),
            2 => "*/api.example.com".into(),
            3 => "*/*.example.com".into(),
            4 => {
                let (sns, h, _) = svc_host(rng, false);
                format!("{sns}/{h}")
            }
            5 => "~/*".into(),
            6 => format!("{ROOT_NS}/*"),
            7 => {
                let (_, h, _) = svc_host(rng, false);
                format!("*/{h}")
            }
            8 => {
                // A short name: egress hosts do no expansion, so this
                // imports nothing.
                let (_, h, _) = svc_host(rng, true);
                format!("./{h}")
            }
            9 => format!("{other}/*.{other}.{DOMAIN}"),
            10 => format!("./*.{ns}.{DOMAIN}"),
            _ => "*/*".into(),
        }
    };
    let egress = |rng: &mut Rng, shape: &mut Rng, ns: &str| -> Vec<Egress<'static>> {
        let mut ls = Vec::new();
        let n = 1 + rng.below(2);
        let mut used_ports: Vec<Option<u32>> = Vec::new();
        for _ in 0..n {
            let port = if chance(rng, 0.35) {
                let (pn, pp) = *pick(rng, PORTS);
                let proto = if pn.starts_with("http") {
                    "HTTP"
                } else if pn == "grpc" {
                    "GRPC"
                } else if pn.starts_with("udp") {
                    continue;
                } else {
                    "TCP"
                };
                Some((pp, proto))
            } else {
                None
            };
            // istiod rejects two listeners on one port (or two catch-alls).
            let key = port.map(|p| p.0);
            if used_ports.contains(&key) {
                continue;
            }
            used_ports.push(key);
            let mut hosts: Vec<String> =
                (0..1 + rng.below(3)).map(|_| host_entry(rng, ns)).collect();
            if unusual && chance(shape, 0.5) {
                hosts.push(unusual_host(shape, &nss, seed));
            }
            ls.push((port, hosts));
        }
        // Every listener skipped (a UDP port, a port twice): one catch-all,
        // as a Sidecar with no egress and no selector is invalid.
        if ls.is_empty() {
            ls.push((None, vec![host_entry(rng, ns)]));
        }
        // A port-less listener must come last: istiod takes the first
        // catch-all.
        ls.sort_by_key(|(p, _)| p.is_none());
        ls
    };
    if chance(&mut rng, 0.3) {
        let e = egress(&mut rng, &mut shape, ROOT_NS);
        b.istio(sidecar_doc(
            ROOT_NS,
            &format!("r{run}-{seed}-root"),
            None,
            &e,
        ));
    }
    for ns in &nss {
        if chance(&mut rng, 0.5) {
            let e = egress(&mut rng, &mut shape, ns);
            b.istio(sidecar_doc(ns, "default", None, &e));
        }
        for k in 0..rng.below(3) {
            let sel = match rng.below(3) {
                0 => labels(&[("version", "v2")]),
                1 => labels(&[("role", "caller")]),
                _ => {
                    let names: Vec<&SvcRef> = svcs.iter().filter(|s| &s.0 == ns).collect();
                    let s = names[rng.below(names.len())];
                    labels(&[("app", &s.1)])
                }
            };
            let e = if chance(&mut rng, 0.1) {
                Vec::new()
            } else {
                egress(&mut rng, &mut shape, ns)
            };
            b.istio(sidecar_doc(ns, &format!("sel{k}"), Some(&sel), &e));
        }
    }
    let mut mesh = DEFAULT_MESH.to_string();
    features(&mut b, &mut mesh, seed, &nss, &svcs);
    if ambient {
        random_waypoint(
            &mut Rng::new(seed ^ 0x3a7b_1e00_0033_0006),
            &mut b,
            &nss,
            &svcs,
        );
    }
    if chance(&mut rng, 0.25) {
        mesh.push_str("defaultServiceExportTo: [\".\"]\n");
    }
    if chance(&mut rng, 0.2) {
        mesh.push_str("defaultVirtualServiceExportTo: [\".\"]\n");
    }
    if chance(&mut rng, 0.2) {
        mesh.push_str("defaultDestinationRuleExportTo: [\".\"]\n");
    }
    let kind = if ambient {
        "random ambient seed"
    } else {
        "random seed"
    };
    b.finish(format!("{kind} {seed}"), mesh)
}

/// A waypoint `wp` in one namespace ([`Builder::waypoint`]), whose HBONE
/// listener admits its own namespace (the default), every one, or a
/// selector's; one time in six for workloads only, one in six for all
/// traffic. Each Service names it one time in three (with its namespace
/// when elsewhere) and opts out (`none`) one time in ten; one namespace
/// in three names it for its services.
fn random_waypoint(f: &mut Rng, b: &mut Builder, nss: &[String], svcs: &[SvcRef]) {
    let wns = pick(f, nss).clone();
    let allowed = match f.below(3) {
        0 => String::new(),
        1 => ", allowedRoutes: {namespaces: {from: All}}".to_string(),
        _ => {
            let picked = pick(f, nss).clone();
            format!(", allowedRoutes: {{namespaces: {{from: Selector, selector: {{matchLabels: {{kubernetes.io/metadata.name: {picked}}}}}}}}}")
        }
    };
    let traffic = match f.below(6) {
        0 => "istio.io/waypoint-for: workload",
        1 => "istio.io/waypoint-for: all",
        _ => "",
    };
    let naming = |ns: &str| {
        let mut l = labels(&[("istio.io/use-waypoint", "wp")]);
        if ns != wns {
            l.insert("istio.io/use-waypoint-namespace".into(), wns.clone());
        }
        l
    };
    for (ns, name, _) in svcs {
        if chance(f, 0.33) {
            b.label_service(ns, name, naming(ns));
        } else if chance(f, 0.1) {
            b.label_service(ns, name, labels(&[("istio.io/use-waypoint", "none")]));
        }
    }
    for (ns, l) in b.world.namespaces.iter_mut() {
        if chance(f, 0.33) {
            l.extend(naming(ns));
        }
    }
    b.waypoint(&wns, "wp", &allowed, traffic);
}

/// The features the engine models beyond hosts and exportTo, from a
/// stream of their own (so the rest of each older seed stays as it was):
/// the mesh's and a Sidecar's outbound traffic policy (egress proxy
/// included), `serviceEntryVisibility` over labelled namespaces, a tracing
/// extension provider, DNS capture, pods that are not Ready or are held in
/// Terminating, a DestinationRule of a ServiceEntry host, and
/// port-specific listeners with `~` exclusions of the scenario's own
/// Services; then, from streams of their own, `~` in exportTo lists
/// ([`tilde_exports`]), mesh routes ([`mesh_routes`]) and an ingress
/// Gateway ([`ingress_gateway`]). Headless Services come from the main
/// stream.
fn features(b: &mut Builder, mesh: &mut String, seed: u64, nss: &[String], svcs: &[SvcRef]) {
    let mut f = Rng::new(seed ^ 0xfea7_0e5d_0021_0002);
    mesh_features(&mut f, b, mesh, nss, svcs);
    pod_states(&mut f, b);
    sidecar_features(&mut f, b, svcs);
    tilde_exports(&mut Rng::new(seed ^ 0x7117_de00_0021_0003), b, nss);
    mesh_routes(&mut Rng::new(seed ^ 0x6a33_a000_0033_0004), b, nss, svcs);
    let streams = &mut Rng::new(seed ^ 0x57e4_6a7e_0033_0007);
    ingress_gateway(
        &mut Rng::new(seed ^ 0x1a9e_55a7_e033_0005),
        streams,
        b,
        nss,
        svcs,
    );
}

/// An ingress Gateway, from a stream of its own: a third of the seeds get
/// Gateway `gw` of class `istio` in one namespace with its pod as istiod's
/// deployment controller renders it (Service `gw-istio`, a pod running
/// `proxy router`: the test istiod has no `kube-gateway` template,
/// `../shared/istiod.md` §7), and an HTTPRoute bound to it, in the
/// Gateway's namespace or another, for one hostname, with one or two
/// backends in any namespace; a backend in another namespace than the
/// route's gets a ReferenceGrant one time in two (istiod refuses it
/// without one). Its HTTP listener admits routes from every namespace, its
/// own only (the default) or a selector's, and may have a hostname of its
/// own; the route may name it by `sectionName`. Half the gateways also get
/// a TCP or TLS listener and route ([`gateway_stream_route`], from
/// `streams`), and their Service the listener's port.
fn ingress_gateway(
    f: &mut Rng,
    streams: &mut Rng,
    b: &mut Builder,
    nss: &[String],
    svcs: &[SvcRef],
) {
    if !chance(f, 0.33) {
        return;
    }
    let gns = pick(f, nss).clone();
    // istiod's deployment controller gives the Gateway's Service a port
    // per listener: the pod listens on each.
    let (stream_listener, stream_docs) = gateway_stream_route(streams, &gns, nss, svcs);
    let mut ports = vec![SvcPort::new("http", 80)];
    if stream_listener.contains("port: 9000") {
        ports.push(SvcPort::new("tcp", 9000));
    } else if stream_listener.contains("port: 9443") {
        ports.push(SvcPort::new("tls", 9443));
    }
    b.service(&gns, "gw-istio", ports, false);
    b.pod(
        &gns,
        "gw-istio-0",
        labels(&[
            ("app", "gw-istio"),
            ("gateway.networking.k8s.io/gateway-name", "gw"),
            ("sidecar.istio.io/inject", "false"),
        ]),
    );
    if let Some(p) = b.world.pods.last_mut() {
        p.gateway = Some(meshscope_shared::inject::Gateway::Router);
    }
    let rns = match chance(f, 0.5) {
        true => gns.clone(),
        false => pick(f, nss).clone(),
    };
    // The listener: routes from every namespace, from its own (the
    // default), or from those a selector picks (the route's or another);
    // one time in four a hostname of its own that the route's matches,
    // one in eight one it misses; the route names the listener one time
    // in four.
    let allowed = match f.below(4) {
        0 => String::new(),
        1 => {
            let any = pick(f, nss).clone();
            let picked = pick(f, &[rns.clone(), gns.clone(), any]).clone();
            format!(", allowedRoutes: {{namespaces: {{from: Selector, selector: {{matchLabels: {{kubernetes.io/metadata.name: {picked}}}}}}}}}")
        }
        _ => ", allowedRoutes: {namespaces: {from: All}}".to_string(),
    };
    let hostname = match f.below(8) {
        0 | 1 => ", hostname: \"*.example.com\"",
        2 => ", hostname: shop.example.org",
        _ => "",
    };
    let section = match chance(f, 0.25) {
        true => ", sectionName: http",
        false => "",
    };
    b.istio(format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: {gns}}}\nspec:\n  gatewayClassName: istio\n  listeners:\n  - {{name: http, port: 80, protocol: HTTP{hostname}{allowed}}}\n{stream_listener}"
    ));
    for d in stream_docs {
        b.istio(d);
    }
    let mut backends = String::new();
    let mut grants: Vec<(String, String)> = Vec::new();
    for _ in 0..1 + f.below(2) {
        let (bns, bname, bports) = pick(f, svcs);
        let Some(port) = bports.iter().find(|p| !p.0.starts_with("udp")) else {
            continue;
        };
        let _ = writeln!(
            backends,
            "    - {{name: {bname}, namespace: {bns}, port: {}}}",
            port.1
        );
        let pair = (bns.clone(), bname.clone());
        if *bns != rns && chance(f, 0.5) && !grants.contains(&pair) {
            grants.push(pair);
        }
    }
    if backends.is_empty() {
        return;
    }
    b.istio(format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: ingress, namespace: {rns}}}\nspec:\n  parentRefs:\n  - {{name: gw, namespace: {gns}{section}}}\n  hostnames: [shop.example.com]\n  rules:\n  - backendRefs:\n{backends}"
    ));
    for (bns, bname) in grants {
        b.istio(reference_grant_doc("HTTPRoute", &rns, &bns, &bname));
    }
}

/// A TCP or TLS listener of the ingress Gateway and a route bound to it,
/// from a stream of its own: half the gateways get a TCP listener on 9000
/// or a TLS one on 9443 passing TLS through (routes from every
/// namespace), with a TCPRoute or TLSRoute (for one hostname) naming it
/// by `sectionName`, from the Gateway's namespace or another, to one or
/// two weighted backends in any namespace; a backend in another namespace
/// gets a ReferenceGrant one time in two. Returns the listener's line and
/// the documents.
fn gateway_stream_route(
    s: &mut Rng,
    gns: &str,
    nss: &[String],
    svcs: &[SvcRef],
) -> (String, Vec<String>) {
    if !chance(s, 0.5) {
        return (String::new(), Vec::new());
    }
    let (kind, section, listener, hostnames) = match chance(s, 0.5) {
        true => (
            "TLSRoute",
            "tls",
            "  - {name: tls, port: 9443, protocol: TLS, tls: {mode: Passthrough}, allowedRoutes: {namespaces: {from: All}}}\n",
            "  hostnames: [secure.example.com]\n",
        ),
        false => (
            "TCPRoute",
            "tcp",
            "  - {name: tcp, port: 9000, protocol: TCP, allowedRoutes: {namespaces: {from: All}}}\n",
            "",
        ),
    };
    let rns = match chance(s, 0.5) {
        true => gns.to_string(),
        false => pick(s, nss).clone(),
    };
    let mut backends = String::new();
    let mut docs = Vec::new();
    for _ in 0..1 + s.below(2) {
        let (bns, bname, bports) = pick(s, svcs);
        let Some(port) = bports.iter().find(|p| !p.0.starts_with("udp")) else {
            continue;
        };
        let _ = writeln!(
            backends,
            "    - {{name: {bname}, namespace: {bns}, port: {}, weight: {}}}",
            port.1,
            1 + s.below(9)
        );
        if *bns != rns && chance(s, 0.5) {
            docs.push(reference_grant_doc(kind, &rns, bns, bname));
        }
    }
    if backends.is_empty() {
        return (String::new(), Vec::new());
    }
    docs.push(format!(
        "apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{name: gw-{section}, namespace: {rns}}}\nspec:\n  parentRefs:\n  - {{name: gw, namespace: {gns}, sectionName: {section}}}\n{hostnames}  rules:\n  - backendRefs:\n{backends}"
    ));
    (listener.to_string(), docs)
}

/// A ReferenceGrant in `ns` that lets `kind`s of namespace `from_ns` send
/// requests to Service `name`.
fn reference_grant_doc(kind: &str, from_ns: &str, ns: &str, name: &str) -> String {
    let lower = kind.to_lowercase();
    format!(
        "apiVersion: gateway.networking.k8s.io/v1beta1\nkind: ReferenceGrant\nmetadata: {{name: from-{lower}-{from_ns}-{name}, namespace: {ns}}}\nspec:\n  from: [{{group: gateway.networking.k8s.io, kind: {kind}, namespace: {from_ns}}}]\n  to: [{{group: \"\", kind: Service, name: {name}}}]\n"
    )
}

/// Gateway API mesh (GAMMA) routes, from a stream of their own: half the
/// seeds get one or two, each an HTTPRoute, GRPCRoute, (on a parent with
/// a TCP port) TCPRoute or (on one with a TLS port, for the parent's name)
/// TLSRoute in the parent's namespace (producer) or
/// another (consumer), with one to three weighted backends in any
/// namespace, one in six of weight 0, one route in three on one port of
/// its parent; the second route, one time in two after an HTTP, gRPC or
/// TCP one, names the same kind, namespace and parent (one time in two on
/// the same port, else on a port when the first named none and on none
/// when it named one): istiod merges HTTP and gRPC ones, orders the two
/// VirtualServices by age and name (seed 10007 at bd9a6b7), and keeps
/// the first TCP one's filter chain. Not generated, as the engine does
/// not model them yet (issue #33): headless parents, a parent a
/// VirtualService routes too (which of the two istiod's virtual host
/// follows).
fn mesh_routes(f: &mut Rng, b: &mut Builder, nss: &[String], svcs: &[SvcRef]) {
    if !chance(f, 0.5) {
        return;
    }
    // The first route's kind, namespace, parent (and its ports) and port,
    // when it is an HTTP, gRPC or TCP one: the second names them one time
    // in two.
    type First<'a> = (&'a str, String, String, Vec<(String, u32)>, String);
    let mut first: Option<First> = None;
    for k in 0..1 + f.below(2) {
        if let Some((kind, ns, parent, pports, port)) = first.clone().filter(|_| chance(f, 0.5)) {
            let backends = route_backends(f, svcs);
            let port = match (chance(f, 0.5), port.is_empty()) {
                (true, _) => port,
                (false, true) => format!(", port: {}", pick(f, &pports).1),
                (false, false) => String::new(),
            };
            let parent_ref = format!("{{{parent}{port}}}");
            if !backends.is_empty() {
                b.istio(format!(
                    "apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{name: route{k}, namespace: {ns}}}\nspec:\n  parentRefs:\n  - {parent_ref}\n  rules:\n  - backendRefs:\n{backends}"
                ));
            }
            continue;
        }
        let (pns, parent, pports) = pick(f, svcs).clone();
        if b.is_headless(&pns, &parent) || b.routed_by_virtual_service(&fqdn(&parent, &pns)) {
            continue;
        }
        let tcp_port = pports.iter().any(|p| p.0 == "tcp-db" || p.0 == "plain");
        let tls_port = pports.iter().any(|p| p.0 == "tls" || p.0 == "https-x");
        let kind = match f.below(6) {
            0 | 1 if tcp_port => "TCPRoute",
            4 | 5 if tls_port => "TLSRoute",
            0 | 1 => "GRPCRoute",
            _ => "HTTPRoute",
        };
        // A TLSRoute matches SNI names (at least one): the parent's.
        let hostnames = match kind {
            "TLSRoute" => format!("  hostnames: [{}]\n", fqdn(&parent, &pns)),
            _ => String::new(),
        };
        let ns = if chance(f, 0.5) {
            pns.clone()
        } else {
            pick(f, nss).clone()
        };
        let backends = route_backends(f, svcs);
        if backends.is_empty() {
            continue;
        }
        // One route in three attaches to one port of its parent.
        let port = match chance(f, 0.33) {
            true => format!(", port: {}", pick(f, &pports).1),
            false => String::new(),
        };
        let parent_base = format!("group: \"\", kind: Service, name: {parent}, namespace: {pns}");
        let parent_ref = format!("{{{parent_base}{port}}}");
        b.istio(format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{name: route{k}, namespace: {ns}}}\nspec:\n  parentRefs:\n  - {parent_ref}\n{hostnames}  rules:\n  - backendRefs:\n{backends}"
        ));
        if matches!(kind, "HTTPRoute" | "GRPCRoute" | "TCPRoute") {
            first = Some((kind, ns, parent_base, pports, port));
        }
    }
}

/// One to three backends in any namespace, one in six of weight 0
/// (istiod drops it), as `backendRefs` lines.
fn route_backends(f: &mut Rng, svcs: &[SvcRef]) -> String {
    let mut backends = String::new();
    for _ in 0..1 + f.below(3) {
        let (bns, bname, bports) = pick(f, svcs);
        let Some(port) = bports.iter().find(|p| !p.0.starts_with("udp")) else {
            continue;
        };
        let _ = writeln!(
            backends,
            "    - {{name: {bname}, namespace: {bns}, port: {}, weight: {}}}",
            port.1,
            f.below(6).min(1) * (1 + f.below(99))
        );
    }
    backends
}

/// A Service's FQDN and its first port that is not UDP (0: none).
fn svc_port(f: &mut Rng, svcs: &[SvcRef]) -> (String, u32) {
    let (ns, name, ports) = pick(f, svcs);
    let tcp = ports.iter().find(|p| !p.0.starts_with("udp")).map(|p| p.1);
    (fqdn(name, ns), tcp.unwrap_or(0))
}

/// The mesh-wide policy, serviceEntryVisibility, a tracing provider, a
/// DestinationRule of a ServiceEntry host, DNS capture.
fn mesh_features(f: &mut Rng, b: &mut Builder, mesh: &mut String, nss: &[String], svcs: &[SvcRef]) {
    match f.below(6) {
        0 => *mesh = mesh.replace("mode: ALLOW_ANY\n", "mode: REGISTRY_ONLY\n"),
        1 => *mesh = mesh.replace("mode: ALLOW_ANY\n", "mode: ALLOW_ANY_DYNAMIC_DNS\n"),
        _ => {}
    }
    if chance(f, 0.3) {
        entry_visibility(f, b, mesh, nss);
    }
    // A tracing provider (Envoy calls it; istiod adds nothing for it).
    if chance(f, 0.25) {
        let (host, port) = svc_port(f, svcs);
        if port != 0 {
            let _ = write!(
                mesh,
                "extensionProviders:\n- name: zipkin\n  zipkin: {{service: {host}, port: {port}}}\ndefaultProviders:\n  tracing: [zipkin]\n"
            );
        }
    }
    // A DestinationRule of a ServiceEntry host: a DNS entry's subsets get
    // no cluster (its endpoints have no labels), a STATIC one's do.
    if chance(f, 0.35) {
        let host = *pick(f, &["api.example.com", "db.example.com"]);
        let ns = pick(f, nss).clone();
        b.istio(destination_rule_doc(&ns, "se-dr", host, &["v1"], &None));
    }
    if chance(f, 0.2) {
        mesh.push_str("defaultConfig:\n  proxyMetadata:\n    ISTIO_META_DNS_CAPTURE: \"true\"\n");
    }
}

/// serviceEntryVisibility by namespace labels (`tier: sandbox` on some).
fn entry_visibility(f: &mut Rng, b: &mut Builder, mesh: &mut String, nss: &[String]) {
    for (ns, l) in b.world.namespaces.iter_mut() {
        if nss.contains(ns) && chance(f, 0.5) {
            l.insert("tier".into(), "sandbox".into());
        }
    }
    let v = |f: &mut Rng| *pick(f, &["PUBLIC", "NAMESPACE", "NONE"]);
    let _ = write!(
        mesh,
        "serviceEntryVisibility:\n  defaultVisibility: {}\n  applyToSidecars: {}\n",
        v(f),
        chance(f, 0.7)
    );
    if chance(f, 0.6) {
        let _ = write!(
            mesh,
            "  policies:\n  - visibility: {}\n    matchingRules:\n    - namespaceSelector:\n        matchLabels: {{tier: sandbox}}\n",
            v(f)
        );
    }
}

/// Some pods not Ready, a few held in Terminating (never every pod).
fn pod_states(f: &mut Rng, b: &mut Builder) {
    let n = b.world.pods.len();
    for i in 0..n {
        if chance(f, 0.1) {
            b.world.pods[i].ready = false;
        } else if chance(f, 0.06) && i + 1 < n {
            b.world.pods[i].terminating = true;
        }
    }
}

/// Sidecars: a port-specific listener with an exclusion, and their own
/// outbound policy.
fn sidecar_features(f: &mut Rng, b: &mut Builder, svcs: &[SvcRef]) {
    for doc in b.world.istio.iter_mut() {
        if !doc.contains("\nkind: Sidecar\n") {
            continue;
        }
        if chance(f, 0.3) && doc.contains("\n  egress:\n") {
            port_listener_with_exclusion(f, doc, svcs);
        }
        if chance(f, 0.25) {
            let policy = match f.below(4) {
                0 => "  outboundTrafficPolicy: {}\n".to_string(),
                1 => "  outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n".to_string(),
                2 => "  outboundTrafficPolicy: {mode: ALLOW_ANY}\n".to_string(),
                _ => {
                    let (host, port) = svc_port(f, svcs);
                    if port == 0 {
                        continue;
                    }
                    format!(
                        "  outboundTrafficPolicy:\n    mode: ALLOW_ANY\n    egressProxy:\n      host: {host}\n      port: {{number: {port}}}\n"
                    )
                }
            };
            doc.push_str(&policy);
        }
    }
}

/// A port-specific listener first in `doc`'s egress, importing a
/// namespace with one of its Services (or all) excluded.
fn port_listener_with_exclusion(f: &mut Rng, doc: &mut String, svcs: &[SvcRef]) {
    let (sns, name, ports) = pick(f, svcs);
    let excluded = if chance(f, 0.5) {
        format!("~{sns}/{}", fqdn(name, sns))
    } else {
        format!("~{sns}/*")
    };
    let (pn, pp) = pick(f, ports);
    let proto = if pn.starts_with("http") {
        "HTTP"
    } else if pn == "grpc" {
        "GRPC"
    } else {
        "TCP"
    };
    // A port no listener has yet: istiod rejects two on one port.
    if !pn.starts_with("udp") && !doc.contains(&format!("number: {pp}\n")) {
        let listener = format!(
            "  egress:\n  - port:\n      number: {pp}\n      protocol: {proto}\n      name: egress-{pp}\n    hosts:\n    - \"{sns}/*\"\n    - \"{excluded}\"\n"
        );
        *doc = doc.replacen("  egress:\n", &listener, 1);
    }
}

/// `~` in exportTo lists, alone and beside `.`, `*` or a namespace: on
/// the Service annotation, and on ServiceEntries, VirtualServices and
/// DestinationRules that set none (validation rejects most of these for
/// all but Services, but istiod acts on what reaches it).
fn tilde_exports(t: &mut Rng, b: &mut Builder, nss: &[String]) {
    let list = |t: &mut Rng| -> Vec<String> {
        let other = pick(t, nss).clone();
        let second = pick(t, &[".", "*", other.as_str()]).to_string();
        match t.below(3) {
            0 => vec!["~".into()],
            1 => vec!["~".into(), second],
            _ => vec![second, "~".into()],
        }
    };
    for s in b.world.services.iter_mut() {
        if chance(t, 0.12) {
            let l = list(t);
            s.annotations
                .insert("networking.istio.io/exportTo".into(), l.join(","));
        }
    }
    for doc in b.world.istio.iter_mut() {
        let kind = ["ServiceEntry", "VirtualService", "DestinationRule"]
            .iter()
            .any(|k| doc.contains(&format!("\nkind: {k}\n")));
        if kind && !doc.contains("\n  exportTo:") && chance(t, 0.1) {
            let l: Vec<String> = list(t).iter().map(|e| format!("\"{e}\"")).collect();
            let _ = writeln!(doc, "  exportTo: [{}]", l.join(", "));
        }
    }
}

/// The hosts [`unusual_entries`] defines.
fn unusual_names(seed: u64) -> (String, String, String) {
    (
        format!("same-{seed}.example.com"),
        format!("multi-{seed}.example.com"),
        format!("front-{seed}.example.com"),
    )
}

/// Several ServiceEntries of one hostname in one namespace (like, or of
/// another resolution or labels, the second created over a second after
/// the first), one hostname in two namespaces with other ports, and a
/// VirtualService routing to it. Everything added after this is newer.
fn unusual_entries(b: &mut Builder, shape: &mut Rng, nss: &[String], seed: u64) {
    let (same, multi, front) = unusual_names(seed);
    let home = pick(shape, nss).clone();
    let (m1, m2) = (pick(shape, nss).clone(), pick(shape, nss).clone());
    let export = |shape: &mut Rng| -> Option<Vec<String>> {
        match shape.below(4) {
            0 => Some(vec![".".into()]),
            1 => Some(vec![pick(shape, nss).clone()]),
            _ => None,
        }
    };
    let entry = |ns: &str,
                 name: &str,
                 host: &str,
                 port: (u32, &str, &str),
                 res: &str,
                 e: &Option<Vec<String>>| {
        service_entry_doc(ns, name, &[host.to_string()], &[port], res, &[], &[], e)
    };
    b.istio(entry(
        &home,
        "same-a",
        &same,
        (80, "http", "HTTP"),
        "DNS",
        &None,
    ));
    let e1 = export(shape);
    b.istio(entry(
        &m1,
        "multi-a",
        &multi,
        (8080, "http", "HTTP"),
        "DNS",
        &e1,
    ));
    b.later();
    let second = match shape.below(3) {
        0 => entry(&home, "same-b", &same, (443, "tls", "TLS"), "DNS", &None),
        1 => entry(&home, "same-b", &same, (443, "tls", "TLS"), "NONE", &None),
        _ => labelled(
            &entry(&home, "same-b", &same, (443, "tls", "TLS"), "DNS", &None),
            "{team: x}",
        ),
    };
    b.istio(second);
    let e2 = export(shape);
    b.istio(entry(
        &m2,
        "multi-b",
        &multi,
        (9090, "http", "HTTP"),
        "DNS",
        &e2,
    ));
    let vns = pick(shape, nss).clone();
    b.istio(virtual_service_doc(
        &vns,
        "to-multi",
        &[front],
        &[(multi, None, None)],
        None,
        &[],
        &None,
    ));
}

/// An egress host of the shapes [`unusual_entries`] makes: exclusions, a
/// namespace twice, a named namespace that may lack the host.
fn unusual_host(shape: &mut Rng, nss: &[String], seed: u64) -> String {
    let (same, multi, front) = unusual_names(seed);
    let other = pick(shape, nss).clone();
    match shape.below(8) {
        0 => format!("~{other}/*"),
        1 => format!("~/{same}"),
        2 => format!("{other}/*"),
        3 => format!("{other}/{multi}"),
        4 => format!("*/{multi}"),
        5 => format!("*/{front}"),
        6 => format!("~{other}/{multi}"),
        _ => format!("./{same}"),
    }
}
