//! Scenarios taken from the rules istiod's `pilot/pkg/model` applies and
//! its unit tests assert (`push_context.go`, `sidecar.go`, Istio 1.31):
//! several Services and ServiceEntries of one hostname, which copy a
//! VirtualService destination resolves to, egress listeners with `~`
//! exclusions and several listeners, and the `exportTo` annotation's
//! combinations. Each proxy's expected clusters are in the comment above
//! it; the test holds `explain` to what the real istiod sends. Where age
//! decides, the newer objects come in a second wave ([`Builder::later`]):
//! the API server stamps creation times to the second, and istiod breaks
//! a tie by map order.

use crate::fidelity::{
    fqdn, labelled, Builder, Egress, Scenario, ServiceEntryDoc, SidecarDoc, VirtualServiceDoc,
    DEFAULT_MESH, ROOT_NS,
};
use crate::world::{labels, SvcPort};

/// A ServiceEntry of one host and ports (number, name, protocol),
/// resolution DNS, exported as `export` says.
fn entry(
    b: &mut Builder,
    ns: &str,
    name: &str,
    host: &str,
    ports: &[(u32, &str, &str)],
    export: Option<&[&str]>,
) {
    let export = export.map(|e| e.iter().map(|s| s.to_string()).collect());
    b.istio(
        ServiceEntryDoc::new(ns, name)
            .host(host)
            .ports(ports)
            .export(export)
            .yaml(),
    );
}

/// A pod `name` in `ns` labelled `app: name`, scoped by a Sidecar of that
/// selector when `egress` is given.
fn proxy(b: &mut Builder, ns: &str, name: &str, egress: Option<Vec<Egress<'_>>>) {
    let l = labels(&[("app", name)]);
    if let Some(egress) = egress {
        b.istio(
            SidecarDoc::new(ns, name)
                .selector(&l)
                .listeners(&egress)
                .yaml(),
        );
    }
    b.pod(ns, name, l);
}

/// Every case scenario, with names and hosts kept apart by `slot`.
pub fn cases(slot: u64) -> Vec<Scenario> {
    vec![
        same_hostname(slot),
        destinations(slot + 1),
        exports(slot + 2),
        by_age(slot + 3),
        destination_rules(slot + 4),
        routes(slot + 5),
        entry_visibility(slot + 6),
    ]
}

/// A DestinationRule for `host` with `subsets` (each `version: <name>`);
/// `extra` is spec YAML (exportTo, workloadSelector).
fn dr(ns: &str, name: &str, host: &str, subsets: &[&str], extra: &str) -> String {
    let subs: String = subsets
        .iter()
        .map(|s| format!("  - name: {s}\n    labels: {{version: {s}}}\n"))
        .collect();
    format!("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  host: \"{host}\"\n{extra}  subsets:\n{subs}")
}

fn export(list: &str) -> String {
    format!("  exportTo: {list}\n")
}

/// DestinationRule lookup and merging (push_context.go
/// `setDestinationRules`, `destinationRule`; destination_rule.go
/// `mergeDestinationRule`): each Service `rN` of `shop` (port 9080) is one
/// case, its expected subset clusters per proxy in the comments.
fn destination_rules(slot: u64) -> Scenario {
    let mut b = Builder::new(slot);
    let ns = |n: &str| format!("uc{slot}-{n}");
    let (shop, web, api, spec) = (ns("shop"), ns("web"), ns("api"), ns("spec"));
    for n in [&shop, &web, &api, &spec] {
        b.namespace(n);
    }
    for k in 1..=6 {
        b.service(
            &shop,
            &format!("r{k}"),
            vec![SvcPort::new("http", 9080)],
            false,
        );
    }
    for k in 7..=8 {
        b.service(
            &spec,
            &format!("r{k}"),
            vec![SvcPort::new("http", 9080)],
            false,
        );
    }
    let r = |k: u32| fqdn(&format!("r{k}"), if k < 7 { &shop } else { &spec });
    let root = ROOT_NS;
    let (all, v12) = (export("[\"*\"]"), &["v1", "v2"][..]);
    // Root proxies: root-private, then the service namespace, then root
    // exported. tool: r1 debug, r2 v1+v2, r3 none; web: r1, r2 v1+v2, r3 canary.
    b.istio(dr(&shop, "r1", &r(1), v12, ""));
    b.istio(dr(root, &ns("r1-pub"), &r(1), &["canary"], &all));
    b.istio(dr(
        root,
        &ns("r1-priv"),
        &r(1),
        &["debug"],
        &export("[\".\"]"),
    ));
    b.istio(dr(&shop, "r2", &r(2), v12, ""));
    b.istio(dr(root, &ns("r2-pub"), &r(2), &["canary"], &all));
    let dot_web = export(&format!("[\".\", \"{web}\"]"));
    b.istio(dr(root, &ns("r3"), &r(3), &["canary"], &dot_web));
    // Selector rules end web's lookup. r4: client none, canary canary;
    // r5: client local, canary canary; api: v1+v2 for both.
    let sel = "  workloadSelector:\n    matchLabels: {app: canary}\n";
    for k in [4, 5] {
        b.istio(dr(&shop, &format!("r{k}"), &r(k), v12, &all));
        b.istio(dr(&web, &format!("r{k}-sel"), &r(k), &["canary"], sel));
    }
    // Merging in one namespace (the second wave is newer). r6: the
    // newer `*` alone (v2) everywhere.
    b.istio(dr(&shop, "r6-a", &r(6), &["v1"], ""));
    // Most specific host first: r7 (exact to api) hides the wildcard from
    // web; r8 (exact to `~`) from web and api; spec's own proxy gets w.
    let wild = format!("*.{spec}.svc.cluster.local");
    b.istio(dr(&spec, "wild", &wild, &["w"], &all));
    b.istio(dr(
        &spec,
        "r7",
        &r(7),
        &["x"],
        &export(&format!("[\"{api}\"]")),
    ));
    b.istio(dr(&spec, "r8", &r(8), &["x"], &export("[\"~\"]")));
    b.later();
    b.istio(dr(&web, "r4-dot", &r(4), &["local"], &export("[\".\"]")));
    b.istio(dr(&web, "r5-plain", &r(5), &["local"], ""));
    b.istio(dr(&shop, "r6-b", &r(6), &["v2"], &all));
    for (n, app) in [(&web, "client"), (&web, "canary"), (&api, "client")] {
        b.pod(n, app, labels(&[("app", app)]));
    }
    // A DNS entry's subsets: only v1, the one an endpoint's labels have.
    let lab = format!("lab.{slot}.example.com");
    b.istio(format!("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: lab\n  namespace: {shop}\nspec:\n  hosts: [\"{lab}\"]\n  ports:\n  - {{number: 9080, name: http, protocol: HTTP}}\n  resolution: DNS\n  endpoints:\n  - address: 192.0.2.7\n    labels: {{version: v1}}\n"));
    b.istio(dr(&shop, "lab", &lab, v12, ""));
    // A wildcard DYNAMIC_DNS entry: forward proxy clusters on its HTTP and
    // TLS ports only (not HTTPS or TCP), and no subsets.
    let dyn_host = format!("*.dyn{slot}.example.com");
    b.istio(format!("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata:\n  name: dyn\n  namespace: {shop}\nspec:\n  hosts: [\"{dyn_host}\"]\n  ports:\n  - {{number: 80, name: http, protocol: HTTP}}\n  - {{number: 443, name: tls, protocol: TLS}}\n  - {{number: 8443, name: https, protocol: HTTPS}}\n  - {{number: 5432, name: tcp, protocol: TCP}}\n  resolution: DYNAMIC_DNS\n"));
    b.istio(dr(&shop, "dyn", &dyn_host, v12, ""));
    b.pod(&shop, "client", labels(&[("app", "client")]));
    b.pod(&spec, "client", labels(&[("app", "client")]));
    let tool = ns("tool");
    b.pod(root, &tool, labels(&[("app", "tool")]));
    b.outside.push(("pod".into(), root.into(), tool));
    b.finish("case-destination-rules".into(), DEFAULT_MESH.into())
}

/// A VirtualService `web/<name>` for `front`, routing to `dest`:9080 with
/// `route_extra` before its route, exported as `exp`.
fn route_vs(web: &str, name: &str, front: &str, exp: &str, route: &str) -> String {
    format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {web}\nspec:\n  hosts: [\"{front}\"]\n{exp}  http:\n  - {route}\n")
}

fn to(dest: &str) -> String {
    format!("route:\n    - destination:\n        host: {dest}\n        port: {{number: 9080}}")
}

/// What VirtualServices pull in: `~` in exportTo hides one unless `*` is
/// there too; a route naming another source namespace is not rescued by
/// a match without one; a delegate's destinations come with its root.
/// web's proxy imports only its own namespace: ratings3 and ratings5;
/// api's imports web's VirtualServices: ratings3, ratings4, ratings5.
fn routes(slot: u64) -> Scenario {
    let mut b = Builder::new(slot);
    let ns = |n: &str| format!("uc{slot}-{n}");
    let (shop, web, api) = (ns("shop"), ns("web"), ns("api"));
    for n in [&shop, &web, &api] {
        b.namespace(n);
    }
    let ratings = |k: u32| fqdn(&format!("ratings{k}"), &shop);
    for k in 1..=5 {
        b.service(
            &shop,
            &format!("ratings{k}"),
            vec![SvcPort::new("http", 9080)],
            false,
        );
    }
    let front = |k: u32| format!("front{k}.{slot}.example.com");
    let tilde_dot = export("[\"~\", \".\"]");
    let tilde_web = export(&format!("[\"~\", \"{web}\"]"));
    let tilde_all = export("[\"~\", \"*\"]");
    b.istio(route_vs(
        &web,
        "fwd1",
        &front(1),
        &tilde_dot,
        &to(&ratings(1)),
    ));
    b.istio(route_vs(
        &web,
        "fwd2",
        &front(2),
        &tilde_web,
        &to(&ratings(2)),
    ));
    b.istio(route_vs(
        &web,
        "fwd3",
        &front(3),
        &tilde_all,
        &to(&ratings(3)),
    ));
    let src = format!("match:\n    - sourceNamespace: {api}\n    - uri: {{prefix: /}}\n    ");
    b.istio(route_vs(
        &web,
        "fwd4",
        &front(4),
        "",
        &(src + &to(&ratings(4))),
    ));
    let delegate = format!("delegate: {{name: d5, namespace: {shop}}}");
    b.istio(route_vs(&web, "fwd5", &front(5), "", &delegate));
    b.istio(format!("apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: d5\n  namespace: {shop}\nspec:\n  http:\n  - {}\n", to(&ratings(5))));
    b.istio(
        SidecarDoc::new(&web, "default")
            .egress(None, ["./*"])
            .yaml(),
    );
    b.istio(
        SidecarDoc::new(&api, "default")
            .egress(None, [format!("{web}/*")])
            .yaml(),
    );
    b.pod(&web, "client", labels(&[("app", "client")]));
    b.pod(&api, "client", labels(&[("app", "client")]));
    b.finish("case-routes".into(), DEFAULT_MESH.into())
}

/// meshConfig.serviceEntryVisibility (push_context.go `serviceExportTo`):
/// under NAMESPACE a `~` list naming the own namespace becomes visible
/// there (sandbox's proxy: a, b, d; not c, `["~"]` alone); under NONE a
/// VirtualService of the entry's own namespace still pulls it in there
/// (closed's proxy: n, without its subset s1: no endpoint of the DNS
/// entry has its labels); web's proxy gets none of them.
fn entry_visibility(slot: u64) -> Scenario {
    let mut b = Builder::new(slot);
    let ns = |n: &str| format!("uc{slot}-{n}");
    let (sandbox, closed, web) = (ns("sandbox"), ns("closed"), ns("web"));
    for (n, tier) in [(&sandbox, "sandbox"), (&closed, "closed")] {
        b.world.namespace(
            n,
            labels(&[
                ("istio-injection", "enabled"),
                ("tier", &format!("{tier}-{slot}")),
            ]),
        );
    }
    b.namespace(&web);
    let host = |h: &str| format!("{h}.{slot}.example.com");
    let lists: [(&str, Vec<&str>); 4] = [
        ("a", vec!["~", &sandbox]),
        ("b", vec!["~", "."]),
        ("c", vec!["~"]),
        ("d", vec!["~", "*"]),
    ];
    for (name, list) in &lists {
        let ports = [(80, "http", "HTTP")];
        entry(&mut b, &sandbox, name, &host(name), &ports, Some(list));
    }
    let n = host("n");
    entry(&mut b, &closed, "ext-n", &n, &[(80, "http", "HTTP")], None);
    b.istio(dr(&closed, "n-dr", &n, &["s1"], ""));
    b.istio(
        VirtualServiceDoc::new(&closed, "n-vs")
            .host(&n)
            .destination((n.clone(), Some(80), None))
            .yaml(),
    );
    for n in [&sandbox, &closed, &web] {
        b.pod(n, "client", labels(&[("app", "client")]));
    }
    let mesh = format!(
        "{DEFAULT_MESH}serviceEntryVisibility:\n  defaultVisibility: PUBLIC\n  applyToSidecars: true\n  policies:\n  - visibility: NAMESPACE\n    matchingRules:\n    - namespaceSelector:\n        matchLabels: {{tier: sandbox-{slot}}}\n  - visibility: NONE\n    matchingRules:\n    - namespaceSelector:\n        matchLabels: {{tier: closed-{slot}}}\n"
    );
    b.finish("case-entry-visibility".into(), mesh)
}

/// The namespaces and hosts of [`by_age`].
struct AgeCase {
    app: String,
    ext: String,
    x: String,
    y: String,
    vh: String,
    zeta: String,
    merged: String,
    unlike: String,
    twin: String,
    named: String,
    dest: String,
    ported: String,
    raw: String,
    front: String,
    hidden: String,
    hfront: String,
}

impl AgeCase {
    fn new(slot: u64) -> Self {
        let ns = |n: &str| format!("uc{slot}-{n}");
        let host = |h: &str| format!("{h}.{slot}.example.com");
        AgeCase {
            app: ns("app"),
            ext: ns("ext"),
            x: ns("x"),
            y: ns("y"),
            vh: ns("vh"),
            zeta: ns("zeta"),
            merged: host("merged"),
            unlike: host("unlike"),
            twin: host("twin"),
            named: host("named"),
            dest: host("dest"),
            ported: host("ported"),
            raw: host("raw"),
            front: host("front"),
            hidden: host("hidden"),
            hfront: host("hfront"),
        }
    }
}

/// The cases where the older of two copies wins.
fn by_age(slot: u64) -> Scenario {
    let mut b = Builder::new(slot);
    let c = AgeCase::new(slot);
    for n in [&c.app, &c.ext, &c.x, &c.y, &c.vh, &c.zeta] {
        b.namespace(n);
    }
    older_copies(&mut b, &c);
    b.later();
    newer_copies(&mut b, &c);
    age_proxies(&mut b, &c);
    b.finish("case-by-age".into(), DEFAULT_MESH.into())
}

/// [`by_age`]'s first wave: the older copies.
fn older_copies(b: &mut Builder, c: &AgeCase) {
    let AgeCase { ext, x, zeta, .. } = c;
    entry(b, ext, "m-a", &c.merged, &[(80, "http", "HTTP")], None);
    entry(b, ext, "u-a", &c.unlike, &[(80, "http", "HTTP")], None);
    entry(b, x, "twin", &c.twin, &[(80, "http", "HTTP")], None);
    entry(b, x, "named", &c.named, &[(80, "http", "HTTP")], None);
    entry(b, zeta, "dest", &c.dest, &[(9090, "http", "HTTP")], None);
    entry(b, x, "ported", &c.ported, &[(80, "http", "HTTP")], None);
    let own = Some(&[x.as_str()][..]);
    entry(b, x, "r-a", &c.raw, &[(80, "http", "HTTP")], own);
    let dot = Some(&["."][..]);
    entry(b, x, "hid-a", &c.hidden, &[(8080, "http", "HTTP")], dot);
}

/// [`by_age`]'s second wave: the newer copies, and what routes to them.
fn newer_copies(b: &mut Builder, c: &AgeCase) {
    let AgeCase {
        app, ext, x, y, vh, ..
    } = c;
    // The newer public copy does not stand in for the older one its
    // namespace's index slot holds, hidden from app: no hidden cluster
    // for app/hidden.
    entry(b, x, "hid-b", &c.hidden, &[(9090, "http", "HTTP")], None);
    b.istio(
        VirtualServiceDoc::new(vh, "to-hidden")
            .host(&c.hfront)
            .destination((c.hidden.clone(), None, None))
            .yaml(),
    );
    let hfront = format!("{vh}/{}", c.hfront);
    proxy(b, app, "hidden", Some(vec![(None, vec![hfront])]));
    // Merged (80 and 443) by default; 1.31's lookup by name sees the older
    // entry alone (80).
    entry(b, ext, "m-b", &c.merged, &[(443, "tls", "TLS")], None);
    // Other labels: no merge, the older stays (80).
    let unlike_b = ServiceEntryDoc::new(ext, "u-b")
        .host(&c.unlike)
        .port(443, "tls", "TLS")
        .yaml();
    b.istio(labelled(&unlike_b, "{team: x}"));
    // Public copies in two namespaces: the older (x's 80), even when an
    // entry names y's next to `*/` (the scan keeps candidate order).
    entry(b, y, "twin", &c.twin, &[(8080, "http", "HTTP")], None);
    // A copy exported to app by name comes first on the scan (y's 8080);
    // 1.31's lookup by name takes the older (x's 80).
    let to_app = Some(&[app.as_str()][..]);
    entry(b, y, "named", &c.named, &[(8080, "http", "HTTP")], to_app);
    // A destination no namespace of the proxy defines: the oldest copy
    // (zeta's 9090), not the VirtualService's own namespace's.
    entry(b, vh, "dest", &c.dest, &[(8080, "http", "HTTP")], None);
    b.istio(
        VirtualServiceDoc::new(vh, "front")
            .host(&c.front)
            .destination((c.dest.clone(), None, None))
            .yaml(),
    );
    // A port-specific listener can pick only y's copy (8443); the catch-all
    // picks x's, which the scope then drops: 8443 alone.
    let ports = [(80, "http", "HTTP"), (8443, "tls", "TLS")];
    entry(b, y, "ported", &c.ported, &ports, None);
    // Same visibility, another exportTo as written: no merge (x's 80 alone).
    let dot = Some(&["."][..]);
    entry(b, x, "r-b", &c.raw, &[(81, "http2", "HTTP")], dot);
}

/// [`by_age`]'s proxies, each importing copies of one host.
fn age_proxies(b: &mut Builder, c: &AgeCase) {
    let AgeCase {
        app,
        ext,
        x,
        y,
        vh,
        merged,
        twin,
        named,
        ported,
        front,
        ..
    } = c;
    proxy(b, app, "sleep", None);
    proxy(b, x, "sleep", None);
    let exact = vec![
        format!("{ext}/{merged}"),
        format!("{x}/{named}"),
        format!("{y}/{named}"),
    ];
    proxy(b, app, "exact", Some(vec![(None, exact)]));
    let both = vec![format!("{y}/{twin}"), format!("*/{twin}")];
    proxy(b, app, "both", Some(vec![(None, both)]));
    proxy(
        b,
        app,
        "front",
        Some(vec![(None, vec![format!("{vh}/{front}")])]),
    );
    let ported = vec![
        (Some((8443, "TLS")), vec![format!("*/{ported}")]),
        (None, vec![format!("*/{ported}")]),
    ];
    proxy(b, app, "ported", Some(ported));
}

/// Several Services and ServiceEntries of one hostname.
fn same_hostname(slot: u64) -> Scenario {
    let mut b = Builder::new(slot);
    let ns = |n: &str| format!("uc{slot}-{n}");
    let (ext, app, shop, data, x, y) = (
        ns("ext"),
        ns("app"),
        ns("shop"),
        ns("data"),
        ns("x"),
        ns("y"),
    );
    for n in [&ext, &app, &shop, &data, &x, &y] {
        b.namespace(n);
    }
    // Like entries of one host in one namespace merge their ports
    // (push_context.go canMergeServices): clusters for 80 and 443.
    let api = format!("api.{slot}.example.com");
    entry(&mut b, &ext, "a", &api, &[(80, "http", "HTTP")], None);
    entry(&mut b, &ext, "b", &api, &[(443, "tls", "TLS")], None);
    // A Service and a ServiceEntry of its hostname: the Service's ports
    // only (a Kubernetes Service is never merged with an entry).
    b.service(&shop, "web", vec![SvcPort::new("http", 8080)], false);
    entry(
        &mut b,
        &shop,
        "web-se",
        &fqdn("web", &shop),
        &[(9090, "tcp", "TCP")],
        None,
    );
    // One host in two namespaces: a copy exported to `app` by name comes
    // before a public one there; elsewhere each namespace keeps its own.
    let twin = format!("foo.{slot}.example.com");
    entry(&mut b, &x, "f", &twin, &[(80, "http", "HTTP")], None);
    entry(
        &mut b,
        &y,
        "f",
        &twin,
        &[(8080, "http", "HTTP")],
        Some(&[app.as_str()]),
    );
    // A Service's hostname defined again by an entry elsewhere: the
    // Service, except in the entry's own namespace.
    b.service(&data, "db", vec![SvcPort::new("tcp-db", 5432)], false);
    entry(
        &mut b,
        &x,
        "db",
        &fqdn("db", &data),
        &[(5433, "tcp", "TCP")],
        None,
    );
    // app/sleep: api 80+443, web 8080, foo 8080 (y's), db 5432.
    proxy(&mut b, &app, "sleep", None);
    // x/sleep: foo 80 (own), db 5433 (own); y/sleep: foo 8080 (own).
    proxy(&mut b, &x, "sleep", None);
    proxy(&mut b, &y, "sleep", None);
    // The scan path (a wildcard host) merges as the default scope does.
    proxy(
        &mut b,
        &app,
        "scan",
        Some(vec![(None, vec![format!("{ext}/*")])]),
    );
    b.finish("case-same-hostname".into(), DEFAULT_MESH.into())
}

/// VirtualService destinations and egress listeners.
fn destinations(slot: u64) -> Scenario {
    let mut b = Builder::new(slot);
    let ns = |n: &str| format!("uc{slot}-{n}");
    let (app, vh, data, x, y, v, z) = (
        ns("app"),
        ns("vh"),
        ns("data"),
        ns("x"),
        ns("y"),
        ns("v"),
        ns("z"),
    );
    for n in [&app, &vh, &data, &x, &y, &v, &z] {
        b.namespace(n);
    }
    // A Kubernetes destination replaces an entry of its hostname that an
    // egress host imported (sidecar.go appendSidecarServices): 5432 only.
    let front = format!("front.{slot}.example.com");
    let db = fqdn("db", &data);
    b.istio(
        VirtualServiceDoc::new(&vh, "front")
            .host(&front)
            .destination((db.clone(), None, None))
            .yaml(),
    );
    b.service(&data, "db", vec![SvcPort::new("tcp-db", 5432)], false);
    entry(&mut b, &x, "db", &db, &[(5433, "tcp", "TCP")], None);
    proxy(
        &mut b,
        &app,
        "pulls",
        Some(vec![(
            None,
            vec![format!("{vh}/{front}"), format!("{x}/{db}")],
        )]),
    );
    // An exclusion removes a VirtualService only through the host it
    // excludes: imported through its other host, and a wildcard host is
    // not excluded by one of its names; exclusions never stop
    // destinations. dest and dest2 clusters.
    let (a, bb, w) = (
        format!("a.{slot}.com"),
        format!("b.{slot}.com"),
        format!("*.w{slot}.com"),
    );
    let (dest, dest2) = (
        format!("dest.{slot}.example.com"),
        format!("dest2.{slot}.example.com"),
    );
    b.istio(
        VirtualServiceDoc::new(&v, "r")
            .host(a.clone())
            .host(bb)
            .destination((dest.clone(), None, None))
            .yaml(),
    );
    b.istio(
        VirtualServiceDoc::new(&v, "r2")
            .host(w)
            .destination((dest2.clone(), None, None))
            .yaml(),
    );
    entry(&mut b, &z, "dest", &dest, &[(80, "http", "HTTP")], None);
    entry(&mut b, &z, "d2", &dest2, &[(80, "http", "HTTP")], None);
    proxy(
        &mut b,
        &app,
        "excl",
        Some(vec![(None, vec![format!("{v}/*"), format!("~{v}/{a}")])]),
    );
    proxy(
        &mut b,
        &app,
        "excl2",
        Some(vec![(
            None,
            vec![format!("{v}/*"), format!("~/a.w{slot}.com")],
        )]),
    );
    proxy(
        &mut b,
        &app,
        "excl3",
        Some(vec![(None, vec![format!("{v}/*"), format!("~{z}/*")])]),
    );
    // The first listener's copy of a hostname is the scope's: y's 8080,
    // not x's 80 from the catch-all listener.
    let api = format!("api.{slot}.example.com");
    entry(&mut b, &x, "a", &api, &[(80, "http", "HTTP")], None);
    entry(&mut b, &y, "a", &api, &[(8080, "http", "HTTP")], None);
    proxy(
        &mut b,
        &app,
        "listeners",
        Some(vec![
            (Some((8080, "HTTP")), vec![format!("{y}/{api}")]),
            (None, vec![format!("{x}/{api}")]),
        ]),
    );
    b.finish("case-destinations".into(), DEFAULT_MESH.into())
}

/// The `networking.istio.io/exportTo` annotation's combinations.
fn exports(slot: u64) -> Scenario {
    let mut b = Builder::new(slot);
    let ns = |n: &str| format!("uc{slot}-{n}");
    let (app, own, other) = (ns("app"), ns("b"), ns("c"));
    for n in [&app, &own, &other] {
        b.namespace(n);
    }
    let cases = [
        ("empty", String::new()),
        ("blank", " ".to_string()),
        ("spaced", format!(" {app} , . ")),
        ("star-tilde", "~,*".to_string()),
        ("tilde-app", format!("~,{app}")),
        ("dot", ".".to_string()),
    ];
    for (name, export) in &cases {
        b.service(&own, name, vec![SvcPort::new("http", 80)], false);
        b.export_service(&own, name, export);
    }
    proxy(&mut b, &app, "sleep", None);
    proxy(&mut b, &own, "sleep", None);
    proxy(&mut b, &other, "sleep", None);
    // The exact-host path of 1.31 looks the Service up by name.
    proxy(
        &mut b,
        &app,
        "exact",
        Some(vec![(
            None,
            vec![format!("{own}/{}", fqdn("tilde-app", &own))],
        )]),
    );
    b.finish("case-exports".into(), DEFAULT_MESH.into())
}
