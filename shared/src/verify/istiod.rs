//! Reading istiod's debug endpoints: which proxies ACKed the last push
//! (`/debug/syncz`), which Sidecar a proxy's scope came from
//! (`/debug/sidecarz`) and what istiod generates for it
//! (`/debug/config_dump`). Fetching them is the plugin's job.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Error;

/// istiod's id for a sidecar proxy: `<pod>.<namespace>`.
pub fn proxy_id(pod: &str, namespace: &str) -> String {
    format!("{pod}.{namespace}")
}

fn invalid(what: &str, reason: impl std::fmt::Display) -> Error {
    Error::Object {
        kind: "istiod response".into(),
        name: what.into(),
        reason: reason.to_string(),
    }
}

/// One proxy's line in `/debug/syncz`: per xDS type, the last nonce sent
/// and the last one the proxy ACKed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SyncStatus {
    pub proxy: String,
    pub istio_version: String,
    /// Short type (`cds`, `lds`, ...) → (sent, acked).
    pub nonces: BTreeMap<String, (String, String)>,
    /// Short type → the proxy's last NACK message.
    pub errors: BTreeMap<String, String>,
}

impl SyncStatus {
    /// Types whose last push the proxy has not ACKed yet.
    pub fn pending(&self) -> Vec<String> {
        self.nonces
            .iter()
            .filter(|(_, (sent, acked))| !sent.is_empty() && sent != acked)
            .map(|(t, _)| t.clone())
            .collect()
    }

    pub fn in_sync(&self) -> bool {
        self.pending().is_empty() && self.errors.is_empty()
    }

    /// The nonce of the last CDS push: it changes with every full push.
    pub fn cds_sent(&self) -> &str {
        self.nonces.get("cds").map_or("", |(s, _)| s.as_str())
    }
}

/// `cds` for `type.googleapis.com/envoy.config.cluster.v3.Cluster`.
pub fn short_type(type_url: &str) -> String {
    let t = type_url.rsplit('/').next().unwrap_or(type_url);
    match t {
        "envoy.config.cluster.v3.Cluster" => "cds".into(),
        "envoy.config.listener.v3.Listener" => "lds".into(),
        "envoy.config.route.v3.RouteConfiguration" => "rds".into(),
        "envoy.config.endpoint.v3.ClusterLoadAssignment" => "eds".into(),
        "envoy.extensions.transport_sockets.tls.v3.Secret" => "sds".into(),
        "envoy.config.core.v3.TypedExtensionConfig" => "ecds".into(),
        "istio.workload.Address" => "wds".into(),
        other => other.to_string(),
    }
}

#[derive(Deserialize)]
struct RawSync {
    #[serde(default)]
    proxy: String,
    #[serde(default)]
    istio_version: String,
    #[serde(default)]
    resources: BTreeMap<String, RawResource>,
    #[serde(flatten)]
    fields: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
struct RawResource {
    #[serde(default)]
    sent: String,
    #[serde(default)]
    acked: String,
    #[serde(default, rename = "lastError")]
    last_error: String,
}

/// Parses `/debug/syncz`. Per-type nonces come from `resources` (istiod
/// 1.22+), else from the `cluster_sent`/`cluster_acked`... fields.
pub fn parse_syncz(body: &[u8]) -> Result<Vec<SyncStatus>, Error> {
    let raw: Vec<RawSync> = serde_json::from_slice(body).map_err(|e| invalid("/debug/syncz", e))?;
    Ok(raw
        .into_iter()
        .map(|r| {
            let mut s = SyncStatus {
                proxy: r.proxy,
                istio_version: r.istio_version,
                ..SyncStatus::default()
            };
            if r.resources.is_empty() {
                for (field, short) in [
                    ("cluster", "cds"),
                    ("listener", "lds"),
                    ("route", "rds"),
                    ("endpoint", "eds"),
                    ("extensionconfig", "ecds"),
                ] {
                    let get = |k: &str| {
                        r.fields
                            .get(&format!("{field}_{k}"))
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string()
                    };
                    let (sent, acked) = (get("sent"), get("acked"));
                    if !sent.is_empty() || !acked.is_empty() {
                        s.nonces.insert(short.into(), (sent, acked));
                    }
                }
            }
            for (url, res) in r.resources {
                let t = short_type(&url);
                if !res.last_error.is_empty() {
                    s.errors.insert(t.clone(), res.last_error);
                }
                s.nonces.insert(t, (res.sent, res.acked));
            }
            s
        })
        .collect())
}

/// The SidecarScope istiod computed for a proxy (`/debug/sidecarz`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AppliedScope {
    /// `ns/name` of the Sidecar it came from; `None` for istiod's implicit
    /// default (no Sidecar at all). A root-namespace default is shown
    /// under the proxy's namespace, as istiod evaluates it there.
    pub sidecar: Option<String>,
    /// The egress hosts of that Sidecar, flattened and sorted.
    pub hosts: Vec<String>,
    /// istiod's push version the scope was computed for.
    pub version: String,
}

pub fn parse_sidecarz(body: &[u8]) -> Result<AppliedScope, Error> {
    let v: Value = serde_json::from_slice(body).map_err(|e| invalid("/debug/sidecarz", e))?;
    if !v.is_object() {
        return Err(invalid("/debug/sidecarz", "expected a JSON object"));
    }
    let version = v["version"].as_str().unwrap_or("").to_string();
    if v["sidecar"].is_null() {
        return Ok(AppliedScope {
            sidecar: None,
            hosts: Vec::new(),
            version,
        });
    }
    let name = v["name"].as_str().unwrap_or("");
    let ns = v["namespace"].as_str().unwrap_or("");
    let mut hosts: Vec<String> = v["sidecar"]["egress"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["hosts"].as_array().into_iter().flatten())
        .filter_map(|h| h.as_str().map(String::from))
        .collect();
    hosts.sort();
    hosts.dedup();
    Ok(AppliedScope {
        sidecar: Some(format!("{ns}/{name}")),
        hosts,
        version,
    })
}

/// What istiod generates for a proxy (`/debug/config_dump?types=cds,lds,rds`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Generated {
    pub clusters: BTreeSet<String>,
    pub listeners: usize,
    pub routes: usize,
    /// Per virtual-host domain (over every route configuration), the
    /// clusters its routes name, plain or weighted.
    #[serde(skip)]
    pub virtual_hosts: BTreeMap<String, BTreeSet<String>>,
    /// The same per (port, domain): the port a RouteConfiguration is for,
    /// from its name (`80`, or `HOST:PORT` for a sniffed port at an
    /// address).
    #[serde(skip)]
    pub port_virtual_hosts: BTreeMap<(u32, String), BTreeSet<String>>,
    /// Per listener name (`ADDRESS_PORT`), each filter chain that proxies
    /// TCP: the SNI names it matches (none: any) and the clusters its
    /// `tcp_proxy` names, plain or weighted.
    #[serde(skip)]
    pub tcp_chains: BTreeMap<String, Vec<TcpChain>>,
}

/// One listener filter chain's TCP proxy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpChain {
    pub server_names: Vec<String>,
    pub clusters: BTreeSet<String>,
}

impl Generated {
    /// The clusters compared with a prediction: `outbound|...`, and a
    /// waypoint's `inbound-vip|...` (istiod builds those for waypoints
    /// alone); not the fixed ones.
    pub fn outbound_clusters(&self) -> impl Iterator<Item = &String> {
        self.clusters
            .iter()
            .filter(|c| c.starts_with("outbound|") || c.starts_with("inbound-vip|"))
    }
}

pub fn parse_config_dump(body: &[u8]) -> Result<Generated, Error> {
    let v: Value = serde_json::from_slice(body).map_err(|e| invalid("/debug/config_dump", e))?;
    let configs = v
        .get("configs")
        .map(|c| {
            c.as_array()
                .ok_or_else(|| invalid("/debug/config_dump", "configs is not a list"))
        })
        .transpose()?
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut g = Generated::default();
    for c in configs {
        match short_type(c["@type"].as_str().unwrap_or("")).as_str() {
            "cds" => {
                if let Some(n) = c["name"].as_str() {
                    g.clusters.insert(n.to_string());
                }
            }
            "lds" => {
                g.listeners += 1;
                add_tcp_chains(&mut g, c);
            }
            "rds" => {
                g.routes += 1;
                add_virtual_hosts(&mut g, c);
            }
            _ => {}
        }
    }
    Ok(g)
}

/// A field of an Envoy resource as JSON, under its proto3 JSON name
/// (`virtualHosts`) or its proto name (`virtual_hosts`).
fn field<'a>(v: &'a Value, camel: &str, snake: &str) -> &'a Value {
    v.get(camel).unwrap_or(&v[snake])
}

fn items<'a>(v: &'a Value, camel: &str, snake: &str) -> &'a [Value] {
    field(v, camel, snake)
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Adds a listener's filter chains that proxy TCP (a `tcp_proxy` network
/// filter), with the SNI names each matches. A sniffed port's TCP chain is
/// the listener's default filter chain, which matches no name (random
/// fidelity seed 717600 at ed37b57: a TCP route on a sniffed port).
fn add_tcp_chains(g: &mut Generated, l: &Value) {
    let Some(name) = l["name"].as_str() else {
        return;
    };
    let default = field(l, "defaultFilterChain", "default_filter_chain");
    let chains = items(l, "filterChains", "filter_chains")
        .iter()
        .chain(default.is_object().then_some(default));
    for fc in chains {
        let m = field(fc, "filterChainMatch", "filter_chain_match");
        let server_names = items(m, "serverNames", "server_names")
            .iter()
            .filter_map(|n| n.as_str().map(str::to_string))
            .collect();
        for f in items(fc, "filters", "filters") {
            let tc = field(f, "typedConfig", "typed_config");
            if !tc["@type"]
                .as_str()
                .is_some_and(|t| t.ends_with(".TcpProxy"))
            {
                continue;
            }
            let mut clusters: BTreeSet<String> = tc["cluster"]
                .as_str()
                .map(str::to_string)
                .into_iter()
                .collect();
            let weighted = field(tc, "weightedClusters", "weighted_clusters");
            for c in items(weighted, "clusters", "clusters") {
                clusters.extend(c["name"].as_str().map(str::to_string));
            }
            g.tcp_chains
                .entry(name.to_string())
                .or_default()
                .push(TcpChain {
                    server_names: Vec::clone(&server_names),
                    clusters,
                });
        }
    }
}

/// Adds a RouteConfiguration's virtual hosts: each domain, and the
/// clusters the host's routes name (`route.cluster`, or each of
/// `route.weighted_clusters.clusters`).
fn add_virtual_hosts(g: &mut Generated, rc: &Value) {
    let name = rc["name"].as_str().unwrap_or("");
    let port: Option<u32> = name.rsplit(':').next().and_then(|p| p.parse().ok());
    // A sniffed port at a service's address has a route configuration of
    // its own, `HOST:PORT`, whose one virtual host istiod gives the domain
    // `*` (`getVirtualHostsForSniffedServicePort`,
    // `pilot/pkg/networking/core/httproute.go`, istio 1.31): it is HOST's.
    let sniffed_host = name
        .rsplit_once(':')
        .filter(|(h, p)| !h.is_empty() && p.parse::<u32>().is_ok())
        .map(|(h, _)| h);
    for vh in items(rc, "virtualHosts", "virtual_hosts") {
        let mut clusters = BTreeSet::new();
        for r in items(vh, "routes", "routes") {
            let action = &r["route"];
            clusters.extend(action["cluster"].as_str().map(str::to_string));
            let weighted = field(action, "weightedClusters", "weighted_clusters");
            for c in items(weighted, "clusters", "clusters") {
                clusters.extend(c["name"].as_str().map(str::to_string));
            }
        }
        let domains = items(vh, "domains", "domains")
            .iter()
            .filter_map(Value::as_str);
        let domains: Vec<&str> = match (sniffed_host, domains.collect::<Vec<_>>()) {
            (Some(host), d) if d == ["*"] => vec![host],
            (_, d) => d,
        };
        for d in domains {
            g.virtual_hosts
                .entry(d.to_string())
                .or_default()
                .extend(clusters.iter().cloned());
            if let Some(p) = port {
                g.port_virtual_hosts
                    .entry((p, d.to_string()))
                    .or_default()
                    .extend(clusters.iter().cloned());
            }
        }
    }
}

/// Does istiod send a cluster for traffic to `host:port` (any subset)?
pub(crate) fn has_cluster(clusters: &BTreeSet<String>, host: &str, port: u32) -> bool {
    let plain = format!("outbound|{port}||{host}");
    if clusters.contains(&plain) {
        return true;
    }
    let prefix = format!("outbound|{port}|");
    let suffix = format!("|{host}");
    clusters
        .range(prefix.clone()..)
        .take_while(|c| c.starts_with(&prefix))
        .any(|c| c.ends_with(&suffix))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNCZ: &str = r#"[
      {"cluster_id":"Kubernetes","proxy":"sleep-0.apps","proxy_type":"sidecar","istio_version":"1.31.0",
       "cluster_sent":"a1","cluster_acked":"a1","listener_sent":"b1","listener_acked":"b0",
       "resources":{
         "type.googleapis.com/envoy.config.cluster.v3.Cluster":{"sent":"a1","acked":"a1","sentTime":"2026-12-01T10:00:00Z"},
         "type.googleapis.com/envoy.config.listener.v3.Listener":{"sent":"b1","acked":"b0"},
         "type.googleapis.com/envoy.config.route.v3.RouteConfiguration":{"sent":"c1","acked":"c1","lastError":"route rejected"}
       }},
      {"proxy":"old.apps","cluster_sent":"x","cluster_acked":"x","endpoint_sent":"y","endpoint_acked":""}
    ]"#;

    #[test]
    fn syncz_gives_per_type_nonces_pending_types_and_nacks() {
        let s = parse_syncz(SYNCZ.as_bytes()).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].proxy, "sleep-0.apps");
        assert_eq!(s[0].istio_version, "1.31.0");
        assert_eq!(s[0].pending(), vec!["lds"]);
        assert_eq!(s[0].errors["rds"], "route rejected");
        assert_eq!(s[0].cds_sent(), "a1");
        assert!(!s[0].in_sync());
        // Without `resources` (older istiod), the flat fields.
        assert_eq!(s[1].pending(), vec!["eds"]);
        assert_eq!(s[1].nonces["cds"], ("x".to_string(), "x".to_string()));
        assert!(parse_syncz(b"{\"not\": \"a list\"}").is_err());
        assert!(parse_syncz(b"<html>").is_err());
    }

    #[test]
    fn sidecarz_names_the_sidecar_and_its_hosts() {
        let z = parse_sidecarz(
            br#"{"version":"2026-12-01T10:00:00Z/7","name":"sleep","namespace":"apps",
                 "sidecar":{"egress":[{"hosts":["./*","istio-system/*"]},{"port":{"number":9080},"hosts":["./*"]}]}}"#,
        )
        .unwrap();
        assert_eq!(z.sidecar.as_deref(), Some("apps/sleep"));
        assert_eq!(z.hosts, vec!["./*", "istio-system/*"]);
        let d = parse_sidecarz(br#"{"name":"default-sidecar","namespace":"apps","sidecar":null}"#)
            .unwrap();
        assert_eq!(d.sidecar, None);
        assert!(parse_sidecarz(b"[]").is_err());
        assert!(parse_sidecarz(b"Proxy not connected").is_err());
    }

    #[test]
    fn config_dump_counts_resources_by_type() {
        let g = parse_config_dump(
            br#"{"configs":[
              {"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"outbound|80||a.apps.svc.cluster.local"},
              {"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"outbound|80|v1|b.apps.svc.cluster.local"},
              {"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"BlackHoleCluster"},
              {"@type":"type.googleapis.com/envoy.config.listener.v3.Listener","name":"virtualOutbound"},
              {"@type":"type.googleapis.com/envoy.config.route.v3.RouteConfiguration","name":"80"}
            ]}"#,
        )
        .unwrap();
        assert_eq!(g.clusters.len(), 3);
        assert_eq!(g.outbound_clusters().count(), 2);
        assert_eq!((g.listeners, g.routes), (1, 1));
        assert!(has_cluster(&g.clusters, "b.apps.svc.cluster.local", 80));
        assert!(has_cluster(&g.clusters, "a.apps.svc.cluster.local", 80));
        assert!(!has_cluster(&g.clusters, "a.apps.svc.cluster.local", 81));
        assert!(!has_cluster(&g.clusters, "c.apps.svc.cluster.local", 80));
        assert_eq!(parse_config_dump(b"{}").unwrap(), Generated::default());
        assert!(g.virtual_hosts.is_empty());
        assert!(parse_config_dump(br#"{"configs": 3}"#).is_err());
    }

    #[test]
    fn a_sniffed_ports_own_route_configuration_is_its_hosts() {
        let body = r#"{"configs":[{"@type":"type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
          "name":"svc3.b.svc.cluster.local:7000",
          "virtualHosts":[{"name":"svc3.b.svc.cluster.local:7000","domains":["*"],
            "routes":[{"route":{"cluster":"outbound|7000||svc3.b.svc.cluster.local"}}]}]}]}"#;
        let g = parse_config_dump(body.as_bytes()).unwrap();
        let want = BTreeSet::from(["outbound|7000||svc3.b.svc.cluster.local".to_string()]);
        assert_eq!(g.virtual_hosts["svc3.b.svc.cluster.local"], want);
        assert_eq!(
            g.port_virtual_hosts[&(7000, "svc3.b.svc.cluster.local".to_string())],
            want
        );
        assert!(!g.virtual_hosts.contains_key("*"));
    }

    #[test]
    fn config_dump_gives_each_virtual_hosts_clusters_by_domain() {
        let g = parse_config_dump(
            br#"{"configs":[
              {"@type":"type.googleapis.com/envoy.config.route.v3.RouteConfiguration","name":"80",
               "virtualHosts":[
                 {"name":"a.app.svc.cluster.local:80","domains":["a.app.svc.cluster.local","a.app"],
                  "routes":[{"route":{"weightedClusters":{"clusters":[
                    {"name":"outbound|80||b.app.svc.cluster.local","weight":50},
                    {"name":"outbound|80||c.app.svc.cluster.local","weight":50}]}}}]},
                 {"name":"allow_any","domains":["*"],"routes":[{"route":{"cluster":"PassthroughCluster"}}]}]},
              {"@type":"type.googleapis.com/envoy.config.route.v3.RouteConfiguration","name":"8080",
               "virtual_hosts":[
                 {"domains":["a.app.svc.cluster.local"],
                  "routes":[{"route":{"cluster":"outbound|8080||a.app.svc.cluster.local"}},
                            {"redirect":{"path_redirect":"/"}}]}]}
            ]}"#,
        )
        .unwrap();
        assert_eq!(g.routes, 2);
        let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(
            g.virtual_hosts["a.app.svc.cluster.local"],
            set(&[
                "outbound|80||b.app.svc.cluster.local",
                "outbound|80||c.app.svc.cluster.local",
                "outbound|8080||a.app.svc.cluster.local"
            ])
        );
        assert_eq!(g.virtual_hosts["a.app"].len(), 2);
        assert_eq!(
            g.port_virtual_hosts[&(8080, "a.app.svc.cluster.local".to_string())],
            set(&["outbound|8080||a.app.svc.cluster.local"])
        );
        assert_eq!(g.virtual_hosts["*"], set(&["PassthroughCluster"]));
    }
}
