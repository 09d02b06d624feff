//! The gateways added to the realistic mesh: an ingress gateway with
//! routes to a few front and hub Services, one small ingress gateway per
//! four team namespaces, and the egress gateway's pods as router
//! proxies; their observed traffic as access-log lines; and the
//! would-break corpus (an EnvoyFilter's Lua `httpCall`s and traffic to
//! Services no route sends to).

use meshscope_e2e::meshgen::{port, Topology, DOMAIN};
use meshscope_e2e::world::labels;
use meshscope_e2e::{inbound_text_line, routed_text_line};

pub const INGRESS_NS: &str = "istio-ingress";
const EGRESS_NS: &str = "rl-egress";
const PLATFORM: &str = "rl-platform";

/// One gateway workload: its pods are router proxies.
#[derive(Clone, Debug)]
pub struct Gateway {
    pub workload: usize,
    pub ingress: bool,
    /// `Deployment/ns/name`, as `audit` and `impact` name it.
    pub key: String,
    /// The `outbound|PORT||HOST` clusters its routes send to.
    pub routed: Vec<String>,
}

/// Requests a gateway's pods sent through one cluster.
#[derive(Clone, Debug)]
pub struct Flow {
    pub gateway: usize,
    pub authority: String,
    pub cluster: String,
    /// The Service called (its pods answer), or `None` for an external
    /// host (`dst` then is its address).
    pub to: Option<usize>,
    pub dst: String,
}

#[derive(Clone, Debug, Default)]
pub struct Layout {
    pub gateways: Vec<Gateway>,
    pub traffic: Vec<Flow>,
    /// A Service the public gateway and a team gateway route to.
    pub routed_probe: usize,
}

fn cluster(t: &Topology, w: usize) -> String {
    format!("outbound|{}||{}", t.workloads[w].ports[0].number, t.host(w))
}

fn key(t: &Topology, w: usize) -> String {
    let wl = &t.workloads[w];
    format!("Deployment/{}/{}", wl.namespace, wl.name)
}

/// A Gateway on port 80 for `hosts`, selecting `selector`.
fn gateway_doc(name: &str, (k, v): (&str, &str), hosts: &[String]) -> String {
    let hosts: String = hosts.iter().map(|h| format!("    - {h}\n")).collect();
    format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: {name}\n  namespace: {INGRESS_NS}\nspec:\n  selector:\n    {k}: {v}\n  servers:\n  - port:\n      number: 80\n      name: http\n      protocol: HTTP\n    hosts:\n{hosts}"
    )
}

/// A VirtualService in `ns` bound to Gateway `istio-ingress/gw` for
/// `host`: `/api` to `api` (when given), the rest to `web`, mirrored to
/// `mirror` (when given).
fn route_doc(
    t: &Topology,
    (ns, name): (&str, &str),
    (gw, host): (&str, &str),
    (web, api, mirror): (usize, Option<usize>, Option<usize>),
) -> String {
    let dest = |w: usize| {
        format!(
            "destination:\n        host: {}\n        port:\n          number: {}\n",
            t.host(w),
            t.workloads[w].ports[0].number
        )
    };
    let mut http = String::new();
    if let Some(a) = api {
        http.push_str(&format!(
            "  - match:\n    - uri:\n        prefix: /api\n    route:\n    - {}",
            dest(a)
        ));
    }
    http.push_str(&format!("  - route:\n    - {}", dest(web)));
    if let Some(m) = mirror {
        let d = dest(m)
            .replace("destination:", "mirror:")
            .replace("\n  ", "\n");
        http.push_str(&format!("    {d}"));
    }
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  hosts:\n  - {host}\n  gateways:\n  - {INGRESS_NS}/{gw}\n  http:\n{http}"
    )
}

/// Adds the gateways to `t` (new workloads go last, so the mesh's pods
/// keep their IPs) and returns them with their traffic.
pub fn add_gateways(t: &mut Topology) -> Layout {
    let mut l = Layout::default();
    egress(t, &mut l);
    let find = |t: &Topology, ns: &str, name: &str| t.find(ns, name).expect("realistic workload");
    let teams: Vec<String> = t
        .namespaces
        .iter()
        .map(|(n, _)| n.clone())
        .filter(|n| n.starts_with("rl-team-"))
        .collect();
    // The public gateway: the first team's shop (web, api), login (auth),
    // the second team's status page; the first's web mirrored to the
    // third's.
    let gw = t.add_router(
        INGRESS_NS,
        "istio-ingressgateway",
        2,
        vec![port("http2", 80), port("https", 443)],
        labels(&[("istio", "ingressgateway")]),
    );
    let (web1, api1) = (find(t, &teams[0], "web"), find(t, &teams[0], "api"));
    let (web2, web3) = (find(t, &teams[1], "web"), find(t, &teams[2], "web"));
    let auth = find(t, PLATFORM, "auth");
    l.routed_probe = web1;
    let sites = [
        ("shop", teams[0].as_str(), web1, Some(api1), Some(web3)),
        ("login", PLATFORM, auth, None, None),
        ("status", teams[1].as_str(), web2, None, None),
    ];
    let hosts: Vec<String> = sites
        .iter()
        .map(|s| format!("{}.example.com", s.0))
        .collect();
    t.istio
        .push(gateway_doc("public", ("istio", "ingressgateway"), &hosts));
    let mut routed = Vec::new();
    for (site, ns, web, api, mirror) in sites {
        let host = format!("{site}.example.com");
        let name = format!("public-{site}");
        t.istio.push(route_doc(
            t,
            (ns, &name),
            ("public", &host),
            (web, api, mirror),
        ));
        for w in [Some(web), api].into_iter().flatten() {
            l.flow(t, gw, &host, w);
        }
        routed.extend([Some(web), api, mirror].into_iter().flatten());
    }
    l.push(t, gw, true, &routed);
    for (g, four) in teams.chunks(4).enumerate() {
        team_gateway(t, &mut l, g, four);
    }
    l
}

/// The egress gateway's pods as router proxies, and their calls to the
/// external host the mesh routes through them.
fn egress(t: &mut Topology, l: &mut Layout) {
    let (w, _) = t.egress_gateway.expect("realistic has an egress gateway");
    t.make_router(w, labels(&[("istio", "egressgateway")]));
    let x = t
        .externals
        .iter()
        .position(|e| e.via_gateway)
        .expect("an external host routed through the egress gateway");
    let ext = &t.externals[x];
    let c = format!("outbound|{}||{}", ext.port, ext.host);
    l.traffic.push(Flow {
        gateway: w,
        authority: ext.host.clone(),
        cluster: c.clone(),
        to: None,
        dst: format!("203.0.113.{}:{}", x % 250 + 1, ext.port),
    });
    l.gateways.push(Gateway {
        workload: w,
        ingress: false,
        key: key(t, w),
        routed: vec![c],
    });
    debug_assert_eq!(t.workloads[w].namespace, EGRESS_NS);
}

/// Team gateway `g` (one pod) for the four teams `four`: its host to the
/// first team's web, `/api` to the second's api (when there is one).
fn team_gateway(t: &mut Topology, l: &mut Layout, g: usize, four: &[String]) {
    let sel = format!("team-gw-{g}");
    let gw = t.add_router(
        INGRESS_NS,
        &sel,
        1,
        vec![port("http2", 80)],
        labels(&[("istio", &sel)]),
    );
    let host = format!("team-{g}.example.com");
    t.istio.push(gateway_doc(
        &format!("team-{g}"),
        ("istio", &sel),
        std::slice::from_ref(&host),
    ));
    let web = t.find(&four[0], "web").expect("team web");
    let api = four.get(1).and_then(|ns| t.find(ns, "api"));
    let name = format!("team-gw-{g}");
    let doc = route_doc(
        t,
        (&four[0], &name),
        (&format!("team-{g}"), &host),
        (web, api, None),
    );
    t.istio.push(doc);
    for w in [Some(web), api].into_iter().flatten() {
        l.flow(t, gw, &host, w);
    }
    l.push(
        t,
        gw,
        true,
        &[Some(web), api].into_iter().flatten().collect::<Vec<_>>(),
    );
}

impl Layout {
    fn push(&mut self, t: &Topology, w: usize, ingress: bool, routed: &[usize]) {
        let mut routed: Vec<String> = routed.iter().map(|r| cluster(t, *r)).collect();
        routed.sort();
        routed.dedup();
        self.gateways.push(Gateway {
            workload: w,
            ingress,
            key: key(t, w),
            routed,
        });
    }

    fn flow(&mut self, t: &Topology, gateway: usize, authority: &str, to: usize) {
        self.traffic.push(Flow {
            gateway,
            authority: authority.into(),
            cluster: cluster(t, to),
            to: Some(to),
            dst: String::new(),
        });
    }

    /// Whether a route of any gateway sends to Service `w`.
    pub fn routes_to(&self, t: &Topology, w: usize) -> bool {
        let c = cluster(t, w);
        self.gateways.iter().any(|g| g.routed.contains(&c))
    }

    pub fn gateway_of(&self, w: usize) -> Option<&Gateway> {
        self.gateways.iter().find(|g| g.workload == w)
    }
}

/// The flows as access-log lines in Istio's TEXT format, `n` numbering
/// them on from the mesh's: from every pod of the gateway, three requests
/// each, answered by the callee's pods in turn (whose sidecars log the
/// inbound side).
pub fn access_log(t: &Topology, flows: &[Flow], mut n: u64) -> String {
    let mut out = String::new();
    for f in flows {
        for (r, src) in t.pod_ips(f.gateway).iter().enumerate() {
            for k in 0..3 {
                let dialled = format!("{src}:80");
                let Some(to) = f.to else {
                    out.push_str(&routed_text_line(
                        n,
                        src,
                        &f.authority,
                        &f.cluster,
                        &f.dst,
                        &f.dst,
                    ));
                    n += 1;
                    continue;
                };
                let ips = t.pod_ips(to);
                let ip = &ips[(r + k) % ips.len()];
                let port = t.workloads[to].ports[0].number;
                let up = format!("{ip}:{port}");
                out.push_str(&routed_text_line(
                    n,
                    src,
                    &f.authority,
                    &f.cluster,
                    &up,
                    &dialled,
                ));
                if t.workloads[to].injected {
                    out.push_str(&inbound_text_line(n, src, &t.host(to), port, ip));
                }
                n += 1;
            }
        }
    }
    out
}

/// The would-break corpus on the public gateway: an EnvoyFilter whose Lua
/// code calls three Services no route sends to (its annotation lists only
/// a fourth, which the flag then keeps), and observed traffic to a fifth.
pub struct WouldBreak {
    /// The EnvoyFilter.
    pub yaml: String,
    pub traffic: Vec<Flow>,
    /// The clusters the flag drops that the gateway still uses.
    pub clusters: Vec<String>,
    /// The cluster its annotation lists: kept with the flag on.
    pub annotated: String,
}

/// Services no gateway routes to: each team's `svc-J`, in team order.
fn unrouted(t: &Topology, l: &Layout, j: usize) -> Vec<usize> {
    (0..t.workloads.len())
        .filter(|w| t.workloads[*w].name == format!("svc-{j}"))
        .filter(|w| !l.routes_to(t, *w))
        .collect()
}

pub fn would_break(t: &Topology, l: &Layout) -> WouldBreak {
    let gw = l
        .gateways
        .iter()
        .find(|g| g.ingress)
        .expect("the public gateway")
        .workload;
    let lua: Vec<usize> = (0..3).map(|j| unrouted(t, l, j)[j + 2]).collect();
    let seen = unrouted(t, l, 3)[5];
    let annotated = t.find(PLATFORM, "config").expect("config");
    let calls: String = lua
        .iter()
        .chain([&annotated])
        .map(|w| {
            format!(
                "                h:httpCall(\"{}\", {{[\":method\"] = \"GET\", [\":path\"] = \"/enrich\", [\":authority\"] = \"{}\"}}, \"\", 500)\n",
                cluster(t, *w),
                t.workloads[*w].name
            )
        })
        .collect();
    let wl = &t.workloads[annotated];
    let yaml = format!(
        "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata:\n  name: lua-enrich\n  namespace: {INGRESS_NS}\n  annotations:\n    envoyfilter.istio.io/referenced-services: {}/{}.{}.{DOMAIN}\nspec:\n  workloadSelector:\n    labels:\n      istio: ingressgateway\n  configPatches:\n  - applyTo: HTTP_FILTER\n    match:\n      context: GATEWAY\n      listener:\n        filterChain:\n          filter:\n            name: envoy.filters.network.http_connection_manager\n    patch:\n      operation: INSERT_BEFORE\n      value:\n        name: envoy.filters.http.lua\n        typed_config:\n          \"@type\": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua\n          default_source_code:\n            inline_string: |\n              function envoy_on_request(h)\n{calls}              end\n",
        wl.namespace, wl.name, wl.namespace
    );
    let mut wb = WouldBreak {
        yaml,
        traffic: Vec::new(),
        clusters: lua.iter().chain([&seen]).map(|w| cluster(t, *w)).collect(),
        annotated: cluster(t, annotated),
    };
    let mut l2 = Layout::default();
    l2.flow(t, gw, "shop.example.com", seen);
    wb.traffic = l2.traffic;
    wb
}
