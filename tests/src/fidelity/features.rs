//! The features of the random scenarios beyond hosts and exportTo, each
//! drawn from a stream of its own so that older seeds keep their
//! scenarios as new features are added ([`features`]).

use std::fmt::Write as _;

use super::docs::DestinationRuleDoc;
use super::draw::{chance, pick, SvcRef};
use super::gateway::{ingress_gateway, mesh_routes};
use super::scenario::{fqdn, Builder};
use crate::bench::Rng;

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
pub(super) fn features(
    b: &mut Builder,
    mesh: &mut String,
    seed: u64,
    nss: &[String],
    svcs: &[SvcRef],
) {
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
        b.istio(
            DestinationRuleDoc::new(&ns, "se-dr", host)
                .subsets(&["v1"])
                .yaml(),
        );
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
