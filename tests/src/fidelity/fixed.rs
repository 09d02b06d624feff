//! Scenarios written by hand, each pinning rules whose outcome is obvious
//! from the names: [`fixed`] for sidecars, [`waypoints`] for ambient.

use super::docs::{DestinationRuleDoc, ServiceEntryDoc, SidecarDoc, VirtualServiceDoc};
use super::scenario::{fqdn, Builder, Scenario, DEFAULT_MESH, DOMAIN, ROOT_NS};
use crate::world::{labels, Labels, Service, SvcPort};

/// Scenarios that pin rules by hand: each proxy's expected scope is
/// obvious from the names.
pub fn fixed(slot: u64) -> Vec<Scenario> {
    vec![
        basic(slot),
        service_entries(slot),
        root_and_defaults(slot),
        istiod_found(slot),
        listener_keys(slot),
        super::filtering::gateway_filtering(slot),
    ]
}

/// 1. Two namespaces, a namespace default, a selector Sidecar, exportTo
///    on a Service, a VirtualService pulling a host in, DR subsets.
fn basic(slot: u64) -> Scenario {
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
    b.istio(SidecarDoc::new(&a, "default").egress(None, ["./*"]).yaml());
    b.istio(
        SidecarDoc::new(&a, "client")
            .selector(&labels(&[("app", "client")]))
            .egress(
                None,
                [
                    format!("{c}/api.{c}.{DOMAIN}"),
                    format!("{c}/hidden.{c}.{DOMAIN}"),
                ],
            )
            .yaml(),
    );
    b.istio(
        VirtualServiceDoc::new(&c, "api-routes")
            .host(fqdn("api", &c))
            .destination((fqdn("pulled", &c), Some(80), None))
            .yaml(),
    );
    b.istio(
        DestinationRuleDoc::new(&c, "api", &fqdn("api", &c))
            .subsets(&["v1", "v2"])
            .yaml(),
    );
    b.finish("fixed-basic".into(), DEFAULT_MESH.into())
}

/// 2. ServiceEntries of each resolution, one hostname in two
///    namespaces, a port-specific listener, `~` and wildcard hosts.
fn service_entries(slot: u64) -> Scenario {
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
    b.istio(
        ServiceEntryDoc::new(&a, "dns")
            .host("api.example.com")
            .port(443, "tls", "TLS")
            .port(80, "http", "HTTP")
            .yaml(),
    );
    b.istio(
        ServiceEntryDoc::new(&a, "none")
            .host("*.wild.example.com")
            .port(443, "tls", "TLS")
            .resolution("NONE")
            .yaml(),
    );
    b.istio(
        ServiceEntryDoc::new(&c, "static")
            .host("db.example.com")
            .port(5432, "tcp", "TCP")
            .resolution("STATIC")
            .address("240.0.0.10")
            .endpoint("192.0.2.10")
            .export_to(["."])
            .yaml(),
    );
    // The same hostname defined in both namespaces, with different ports.
    b.istio(
        ServiceEntryDoc::new(&a, "shared-a")
            .host("shared.example.com")
            .port(8080, "http", "HTTP")
            .yaml(),
    );
    b.istio(
        ServiceEntryDoc::new(&c, "shared-c")
            .host("shared.example.com")
            .port(9090, "grpc", "GRPC")
            .yaml(),
    );
    b.istio(
        SidecarDoc::new(&c, "default")
            .egress(None, ["./*", "*/*.example.com"])
            .yaml(),
    );
    b.istio(
        SidecarDoc::new(&c, "narrow")
            .selector(&labels(&[("app", "narrow")]))
            .egress(Some((80, "HTTP")), [format!("{a}/*")])
            .egress(None, ["~/*"])
            .yaml(),
    );
    b.finish("fixed-serviceentries".into(), DEFAULT_MESH.into())
}

/// 3. The root default, oldest-wins between two selector Sidecars, and
///    mesh-wide exportTo defaults.
fn root_and_defaults(slot: u64) -> Scenario {
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
    b.istio(
        SidecarDoc::new(ROOT_NS, &format!("fx{slot}-root"))
            .egress(None, ["./*".into(), format!("{ROOT_NS}/*")])
            .yaml(),
    );
    b.istio(
        SidecarDoc::new(&a, "by-app")
            .selector(&labels(&[("app", "one")]))
            .egress(None, [format!("{c}/*")])
            .yaml(),
    );
    b.istio(
        SidecarDoc::new(&a, "by-tier")
            .selector(&labels(&[("tier", "front")]))
            .egress(None, ["./*"])
            .yaml(),
    );
    let mesh = format!("{DEFAULT_MESH}defaultServiceExportTo: [\".\"]\n");
    b.finish("fixed-root-and-defaults".into(), mesh)
}

/// 4. Rules the random scenarios found where istiod differed from the
///    engine: VirtualService destinations under a port-specific
///    listener, a DestinationRule exported only elsewhere, a listener's
///    declared protocol, a Service and a ServiceEntry of one hostname in
///    one namespace, UDP inbound ports, sniffed ports.
fn istiod_found(slot: u64) -> Scenario {
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
    b.istio(
        VirtualServiceDoc::new(&a, "to-dest")
            .host(fqdn("web", &a))
            .destination((fqdn("dest", &c), None, None))
            .yaml(),
    );
    b.istio(
        DestinationRuleDoc::new(&a, "web-elsewhere", &fqdn("web", &a))
            .subsets(&["v1"])
            .export_to([&c])
            .yaml(),
    );
    b.istio(
        ServiceEntryDoc::new(&c, "twin-se")
            .host(fqdn("twin", &c))
            .port(443, "tls", "TLS")
            .address("240.0.9.9")
            .yaml(),
    );
    // A port-specific listener (9090) whose VirtualService destination
    // lacks that port, and an HTTP-declared listener on a TCP port.
    b.istio(
        SidecarDoc::new(&a, "default")
            .egress(Some((9090, "GRPC")), ["*/*"])
            .egress(Some((8443, "HTTP")), ["./*"])
            .egress(None, ["./*"])
            .yaml(),
    );
    b.istio(
        SidecarDoc::new(&c, "caller")
            .selector(&labels(&[("app", "caller")]))
            .egress(None, ["./*".into(), format!("{a}/*")])
            .yaml(),
    );
    b.finish("fixed-istiod-found".into(), DEFAULT_MESH.into())
}

/// 5. Outbound listeners by address and port, as the 200-seed sweep
///    found istiod keys them: port-specific listeners bind headless
///    Services on 0.0.0.0 and lock their keys against the catch-all,
///    an HTTP-declared port is one 0.0.0.0 listener while the
///    catch-all still builds the services' own address listeners, a
///    listener that excludes every host it names builds nothing, and
///    two headless Services over the same pods share each pod's
///    listener; ports named by number are sniffed, with a route per
///    service port; and an ExternalName Service builds nothing.
fn listener_keys(slot: u64) -> Scenario {
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
    let peer = format!("{c}/peer.{c}.{DOMAIN}");
    b.istio(
        SidecarDoc::new(&a, "default")
            .egress(Some((7000, "TCP")), [&peer])
            .egress(Some((7100, "TCP")), [&peer])
            .egress(Some((5432, "HTTP")), [format!("{c}/*")])
            .egress(Some((8443, "TCP")), [format!("{c}/*"), format!("~{c}/*")])
            .egress(None, [format!("{c}/*")])
            .yaml(),
    );
    b.istio(
        SidecarDoc::new(&a, "narrow")
            .selector(&labels(&[("app", "narrow")]))
            .egress(Some((5432, "HTTP")), [format!("{c}/*")])
            .yaml(),
    );
    b.finish("fixed-listener-keys".into(), DEFAULT_MESH.into())
}

/// Waypoints, for an istiod with ambient on (`Istiod::start_ambient`):
/// its waypoints' clusters and listeners, and its sidecars' with the
/// HBONE-sending cluster and listener ambient adds.
pub fn waypoints(slot: u64) -> Vec<Scenario> {
    vec![bound_services(slot)]
}

/// Services bound by their own label and by their namespace's, from
/// another namespace through an HBONE listener that admits it (exportTo
/// aside), `none`, a DestinationRule's subsets, a sniffed port, a route
/// from a bound service to one not bound, a MESH_EXTERNAL entry, and a
/// waypoint for workloads only (no service binds to it).
fn bound_services(slot: u64) -> Scenario {
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
    b.istio(
        DestinationRuleDoc::new(&a, "a", &fqdn("a", &a))
            .subsets(&["v1"])
            .yaml(),
    );
    b.istio(format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata: {{name: a, namespace: {a}}}\nspec:\n  hosts: [a]\n  http:\n  - route:\n    - destination: {{host: b}}\n"
    ));
    b.istio(format!(
        "apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: ext\n  namespace: {a}\n  labels: {{istio.io/use-waypoint: wp}}\nspec:\n  hosts: [ext.example.com]\n  ports: [{{number: 80, name: http, protocol: HTTP}}, {{number: 443, name: tls, protocol: TLS}}]\n  resolution: DNS\n"
    ));
    b.finish("fixed-waypoints".into(), DEFAULT_MESH.into())
}
