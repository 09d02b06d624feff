//! The finding codes (MS0001…): the [`Code`] type, and each code's
//! severity and documented meaning ([`CODES`]), as `kubectl meshscope
//! codes` prints them. A leaf: the rules that raise them are in
//! [`crate::audit`].

use std::fmt;

use serde::{Serialize, Serializer};

/// Declares [`Code`] with [`Code::ALL`] and [`Code::as_str`] from one
/// list, so that the three cannot disagree.
macro_rules! codes {
    ($($variant:ident = $code:literal,)+) => {
        /// A finding code. It prints and serializes as users write it
        /// (`MS0001`); [`Code::doc`] is its documentation.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Code {
            $(#[doc = $code] $variant,)+
        }

        impl Code {
            /// Every code, in order: MS0001 first, then one number at a time.
            pub const ALL: &[Code] = &[$(Code::$variant,)+];

            /// The code as users write it: `MS0001`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $code,)+
                }
            }
        }
    };
}

codes! {
    UnscopedWorkload = "MS0001",
    DnsServiceEntryMeshWide = "MS0002",
    SidecarSelectsNothing = "MS0003",
    SeveralWorkloadSidecars = "MS0004",
    SeveralNamespaceSidecars = "MS0005",
    SidecarWithoutEgress = "MS0006",
    EgressHostMatchesNothing = "MS0007",
    RootSidecarWithSelector = "MS0008",
    SidecarSelectsAmbient = "MS0009",
    SidecarImportsEverything = "MS0010",
    TrafficOutsideScope = "MS0011",
    ScopedByOtherSidecar = "MS0012",
    SidecarLacksProvider = "MS0013",
    HostPortsDiffer = "MS0014",
    UninjectedPods = "MS0015",
    CatchAllServiceEntryExported = "MS0016",
    WildcardServiceEntryMeshWide = "MS0017",
    WildcardDestinationRule = "MS0018",
    ExportHidesFromCaller = "MS0019",
    NamespaceNotNeeded = "MS0020",
    ManagedSidecarEdited = "MS0021",
    WebhookNotReady = "MS0022",
    RouteToHiddenService = "MS0023",
    RouteWithoutReferenceGrant = "MS0024",
    GatewayFilterDropsNeededCluster = "MS0025",
    GatewayFilterSafe = "MS0026",
}

impl Code {
    /// The code `s` names, in any case (`ms0001` too).
    pub fn parse(s: &str) -> Option<Code> {
        Code::ALL
            .iter()
            .copied()
            .find(|c| c.as_str().eq_ignore_ascii_case(s))
    }

    /// The code's documentation: its entry in [`CODES`], which lists
    /// them in the order of [`Code::ALL`] (checked at compile time).
    pub const fn doc(self) -> &'static CodeDoc {
        &CODES[self as usize]
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "info" => Some(Severity::Info),
            "warning" => Some(Severity::Warning),
            "error" => Some(Severity::Error),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The documentation of one code.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct CodeDoc {
    pub code: Code,
    pub severity: Severity,
    pub title: &'static str,
    pub description: &'static str,
    pub fix: &'static str,
}

/// Every code's documentation, in the order of [`Code::ALL`].
pub const CODES: &[CodeDoc] = &[
    CodeDoc {
        code: Code::UnscopedWorkload,
        severity: Severity::Warning,
        title: "Unscoped injected workload",
        description: "The workload runs an Envoy sidecar and no Sidecar applies to it: none selects it, its namespace has no default, and the root namespace has no mesh default. Its proxies receive the configuration of every service visible to the namespace, and every change anywhere in the mesh is pushed to them.",
        fix: "Apply a Sidecar made from the workload's observed traffic: kubectl meshscope apply -n NS --workload KIND/NAME --from-pod-logs (or --prometheus URL, or recommend --access-log FILE | kubectl apply -f -). For a workload that is not running yet (no traffic to learn from), a Sidecar made from the hosts its manifests name (env values, args, the ConfigMaps it reads; only hosts a Service or ServiceEntry defines) scopes it: kubectl meshscope apply -n NS --workload KIND/NAME --from-manifest-hints --allow-idle (a workload whose manifests name no such host gets a closed scope); its traffic widens it later. A Deployment whose creation the webhook denies is not in the cluster yet: add -f FILE (the manifest being applied) to that command, which plans as if FILE were applied, then apply FILE again. Or write a namespace or mesh default Sidecar yourself.",
    },
    CodeDoc {
        code: Code::DnsServiceEntryMeshWide,
        severity: Severity::Warning,
        title: "DNS ServiceEntry exported to the whole mesh",
        description: "A ServiceEntry with resolution DNS or DNS_ROUND_ROBIN and no exportTo, while the mesh default exports services everywhere and (Istio 1.31+) meshConfig.serviceEntryVisibility does not keep its namespace's ServiceEntries to their namespace (NAMESPACE) or hide them (NONE) for sidecars (applyToSidecars: true). Every sidecar that imports it resolves its hosts itself, and unscoped sidecars all do.",
        fix: "Set spec.exportTo to the namespaces that call the hosts: kubectl meshscope recommend --exports -n NS --from-pod-logs (or --access-log FILE, --prometheus URL) -o table lists them for each object of the namespace, from the traffic of every namespace plus the namespaces that need it without traffic showing it; kubectl meshscope apply --exports -n NS with the same source writes them (exportTo only, server-side apply). The webhook, which sees no traffic, names that command. On Istio 1.31+, or cap ServiceEntries mesh-wide: meshConfig.serviceEntryVisibility with visibility NAMESPACE for the namespace (a policy with a namespaceSelector, or defaultVisibility) and applyToSidecars: true.",
    },
    CodeDoc {
        code: Code::SidecarSelectsNothing,
        severity: Severity::Warning,
        title: "Sidecar selects nothing",
        description: "The Sidecar's workloadSelector matches no pod and no workload template in its namespace, so it has no effect.",
        fix: "Fix the selector labels, or delete the Sidecar.",
    },
    CodeDoc {
        code: Code::SeveralWorkloadSidecars,
        severity: Severity::Error,
        title: "Several Sidecars select one workload",
        description: "More than one Sidecar with a workloadSelector selects the workload. istiod uses the oldest (then the first by name) and ignores the others; Istio calls this undefined behaviour.",
        fix: "Merge the Sidecars into one, or narrow their selectors so that exactly one selects each workload.",
    },
    CodeDoc {
        code: Code::SeveralNamespaceSidecars,
        severity: Severity::Error,
        title: "Several namespace-wide Sidecars",
        description: "More than one Sidecar without a workloadSelector in one namespace. istiod uses the oldest and ignores the others.",
        fix: "Keep one selector-less Sidecar per namespace.",
    },
    CodeDoc {
        code: Code::SidecarWithoutEgress,
        severity: Severity::Warning,
        title: "Sidecar without egress",
        description: "A Sidecar with no egress section imports the whole mesh (*/*). It does not inherit the namespace or mesh default, so a Sidecar written only for ingress or connection-pool settings widens its workloads.",
        fix: "Add an egress section listing the hosts the workloads call.",
    },
    CodeDoc {
        code: Code::EgressHostMatchesNothing,
        severity: Severity::Warning,
        title: "Egress host matches nothing",
        description: "An egress host entry matches no service and no VirtualService visible to the Sidecar's namespace. Egress hosts do no short-name expansion: prod/reviews does not match reviews.prod.svc.cluster.local.",
        fix: "Use <namespace>/<fully-qualified host> (or a wildcard), and check the service's exportTo.",
    },
    CodeDoc {
        code: Code::RootSidecarWithSelector,
        severity: Severity::Warning,
        title: "Root-namespace Sidecar with a selector",
        description: "A Sidecar in the root namespace with a workloadSelector is not a mesh default: it applies only to pods in the root namespace.",
        fix: "Remove the workloadSelector to make it the mesh default, or move it to the workload's namespace.",
    },
    CodeDoc {
        code: Code::SidecarSelectsAmbient,
        severity: Severity::Warning,
        title: "Sidecar selects an ambient workload",
        description: "The Sidecar selects pods enrolled in ambient mode. They have no Envoy sidecar, so the Sidecar has no effect on them.",
        fix: "Delete the Sidecar or narrow its selector; ambient traffic is scoped by waypoints, not Sidecars.",
    },
    CodeDoc {
        code: Code::SidecarImportsEverything,
        severity: Severity::Warning,
        title: "Sidecar imports everything",
        description: "An egress entry */* imports every visible service: the Sidecar is scoped in name only.",
        fix: "Replace */* with the hosts the workloads call (kubectl meshscope recommend).",
    },
    CodeDoc {
        code: Code::TrafficOutsideScope,
        severity: Severity::Error,
        title: "Observed traffic outside the scope",
        description: "The workload was seen calling a registered service that its scope does not import. The message names what each such edge meets: passthrough (outbound policy ALLOW_ANY: it leaves through PassthroughCluster without routing, retries or mTLS, and fails against a STRICT peer), egress-proxy (ALLOW_ANY with the Sidecar's egressProxy), blackholed (REGISTRY_ONLY: a 502 or a reset), dns-failure (DNS capture on, and the name is one only the proxy's name table resolves, which follows the scope), or dynamic-forward-proxy (mesh-wide ALLOW_ANY_DYNAMIC_DNS, Istio 1.31+, for plaintext HTTP). The outbound policy is the Sidecar's outboundTrafficPolicy, else the mesh config's.",
        fix: "Add the host to the Sidecar's egress (kubectl meshscope recommend shows the full list).",
    },
    CodeDoc {
        code: Code::ScopedByOtherSidecar,
        severity: Severity::Warning,
        title: "Scoped by another workload's Sidecar",
        description: "A Sidecar that meshscope generated for one workload (its meshscope.io/workload-kind and meshscope.io/workload-name labels) selects this workload's pods too. The workload runs with a scope made from the other workload's traffic: hosts only it calls leave through PassthroughCluster without routing rules or mTLS, or are blocked under REGISTRY_ONLY, and its scope changes whenever the other workload's Sidecar is re-applied or pruned. This happens when a selector was chosen from labels that another workload later took (a new Deployment with the same version label, say), or from labels that change with each release.",
        fix: "Re-apply the Sidecars of the namespace (kubectl meshscope apply -n NS --from-pod-logs): generated selectors start from each workload's own spec.selector, use only labels that stay true, never select another workload's pods, and the old Sidecar's selector is replaced. Or give the workloads labels that tell them apart.",
    },
    CodeDoc {
    code: Code::SidecarLacksProvider,
    severity: Severity::Error,
    title: "Sidecar lacks a service the mesh config makes Envoy call",
    description: "The mesh config's extensionProviders make the workload's Envoy call a service itself: a tracing collector (defaultProviders.tracing or a Telemetry), an access-log service, or an ext_authz server (an AuthorizationPolicy with action CUSTOM selecting it). These calls appear in no access log and no metric, and istiod adds no provider service to a proxy's scope: the Sidecar that applies to the workload does not import it, so its cluster is missing from the proxy's CDS and span export, access-log streaming or ext_authz fails (requests to a CUSTOM-protected workload are denied).",
    fix: "Add the provider's <namespace>/<fqdn> to the Sidecar's egress; kubectl meshscope recommend adds it (annotation meshscope.io/required-by) and names it for Sidecars it does not own.",
},
    CodeDoc {
        code: Code::HostPortsDiffer,
        severity: Severity::Warning,
        title: "Hostname defined in several namespaces with different ports",
        description: "Services or ServiceEntries in more than one namespace define the same hostname, with different ports or protocols. A proxy gets one copy: its own namespace's, else (among the copies exported to its namespace) a Kubernetes Service's over a ServiceEntry's, else the oldest; so which ports and endpoints a call to the name reaches depends on the caller's namespace. An egress host <namespace>/<fqdn> imports only that namespace's copy. The message lists each definition and which namespaces' proxies get it.",
        fix: "Give the definitions distinct hostnames, or narrow their exportTo so that each namespace sees the one it means. kubectl meshscope recommend writes each host from the namespace whose copy the traffic used.",
    },
    CodeDoc {
        code: Code::UninjectedPods,
        severity: Severity::Warning,
        title: "Running pods without the sidecar that injection gives new ones",
        description: "The workload's pods run without an istio-proxy container (or native sidecar init container), although the injector's rules inject pods like them (the namespace's istio-injection or istio.io/rev label, the pod's sidecar.istio.io/inject label): they were created before those rules applied to them, typically when the namespace was labelled after the workload started, or while the injector was down. Injection happens only when a pod is created, so these pods stay outside the mesh (no mTLS, no Sidecar scope, no traffic in the proxies' logs) until they are re-created; meshscope counts them as having no proxy.",
        fix: "Re-create the pods so that the injector adds the proxy: kubectl rollout restart -n NS deployment/NAME (statefulset, daemonset); delete the pods of other controllers, and re-create a bare pod.",
    },
    CodeDoc {
        code: Code::CatchAllServiceEntryExported,
        severity: Severity::Error,
        title: "ServiceEntry with a catch-all address exported beyond its namespace",
        description: "A ServiceEntry lists the address 0.0.0.0/0 or ::/0 and has a TCP (or unset-protocol) port, and its exportTo (or the mesh default, after serviceEntryVisibility) shows it to other namespaces. istiod builds no destination match for such a range, so in every proxy that imports it the entry becomes the match-all filter chain of the port: every TCP connection on that port that no other listener claims goes to its cluster. With resolution NONE that bypasses REGISTRY_ONLY for every destination on the port; with STATIC it hijacks them to the entry's endpoints; under ALLOW_ANY its DestinationRule applies to all of that traffic and access logs name arbitrary destinations as this host.",
        fix: "Give the entry real addresses, or set spec.exportTo to [\".\"] (or the few namespaces that call it: kubectl meshscope recommend --exports -n NS lists them from observed traffic).",
    },
    CodeDoc {
        code: Code::WildcardServiceEntryMeshWide,
        severity: Severity::Warning,
        title: "Wildcard-host ServiceEntry exported to the whole mesh",
        description: "A ServiceEntry with a wildcard host (*.example.com) is exported to every namespace: every unscoped sidecar, and every Sidecar importing */* or its namespace, gets its cluster and (for HTTP) a virtual host; with TCP ports and no addresses it is a catch-all on those ports in all of them.",
        fix: "Set spec.exportTo to the namespaces that call it (kubectl meshscope recommend --exports -n NS --from-pod-logs lists them), or replace the wildcard with the hosts called.",
    },
    CodeDoc {
        code: Code::WildcardDestinationRule,
        severity: Severity::Warning,
        title: "Wildcard DestinationRule shadows other namespaces' rules",
        description: "A DestinationRule outside the root namespace has a wildcard host (*.svc.cluster.local, *.local, ...) that covers services of other namespaces. For proxies of its own namespace istiod looks in their namespace first and takes its most specific match, so for every such service without a more specific rule there, this one applies and the owners' DestinationRules (their subsets, TLS settings, load balancing, outlier detection) never do: routes to their subsets fail with 503 NC from that namespace. The message names the services covered and the rules shadowed.",
        fix: "Narrow the host to the namespace's own services (*.NS.svc.cluster.local), add a more specific DestinationRule in that namespace for the services it must not cover, or move a mesh-wide default to the root namespace (where it is only a fallback).",
    },
    CodeDoc {
        code: Code::ExportHidesFromCaller,
        severity: Severity::Error,
        title: "exportTo hides an object from a namespace that calls it",
        description: "Observed traffic (or a gateway's route) shows a namespace calling a Service, ServiceEntry, VirtualService or DestinationRule whose exportTo (or the mesh default) does not include that namespace. Its proxies get no cluster for a hidden service (503 NC, a closed TCP connection, or passthrough), no routes from a hidden VirtualService, and no subsets or traffic policy from a hidden DestinationRule: an outage in progress, or one waiting for the next push.",
        fix: "Add the namespaces to exportTo: kubectl meshscope apply --exports --force-exports -n NS with the same traffic source writes the full list (exportTo only), or edit the owner's manifest.",
    },
    CodeDoc {
        code: Code::NamespaceNotNeeded,
        severity: Severity::Info,
        title: "Namespace istiod need not watch",
        description: "The namespace has no injected workload, no gateway, and no mesh traffic in either direction (nothing observed calls into it, none of its workloads call out, no Sidecar imports it by name, no mesh-config provider lives there), and it is neither the root namespace nor istiod's. istiod still watches its Services, EndpointSlices, pods and Istio config and pushes their changes. meshConfig.discoverySelectors that do not select it drop all of that from istiod's view; the message carries the selectors that drop every such namespace at once. Only from observed traffic: a namespace called rarely may not show.",
        fix: "Set meshConfig.discoverySelectors as the message says (it keeps every namespace except those named, through the kubernetes.io/metadata.name label, and keeps any selectors already set), after checking that nothing outside the observed window calls the namespaces. istiod keeps no exception for its own or the root namespace: they must stay selected.",
    },
    CodeDoc {
        code: Code::ManagedSidecarEdited,
        severity: Severity::Warning,
        title: "Sidecar meshscope manages was edited by hand",
        description: "A Sidecar labelled app.kubernetes.io/managed-by: kubectl-meshscope has fields meshscope writes (its spec, or its meshscope.io/ annotations and labels) owned by another field manager: someone edited it with kubectl edit, kubectl apply or another tool. meshscope writes with server-side apply and never takes over another manager's fields on its own, so apply skips this Sidecar on a field-ownership conflict and apply --watch skips it pass after pass: its scope no longer follows the traffic, and a new dependency of its workload stays outside it (passthrough, or blocked under REGISTRY_ONLY) while the edit stands.",
        fix: "Take the fields back with kubectl meshscope apply -n NS --force-conflicts (once), or run the watcher with apply --watch --force-conflicts (at every pass); to keep the hand edit instead, remove the label app.kubernetes.io/managed-by so that the Sidecar is the user's and meshscope never writes it.",
    },
    CodeDoc {
        code: Code::WebhookNotReady,
        severity: Severity::Warning,
        title: "meshscope's admission webhook has no ready endpoint",
        description: "A ValidatingWebhookConfiguration labelled app.kubernetes.io/part-of: meshscope calls a Service with no ready endpoint (its pods never started, crash, or fail readiness). The API server cannot call the webhook: with failurePolicy Ignore (the shipped default) it skips it, so unscoped workloads and DNS ServiceEntries without exportTo are admitted without a warning and the install enforces nothing; with failurePolicy Fail it rejects every request the webhook matches.",
        fix: "Find why the pods the Service selects are not ready: kubectl describe service -n NS NAME, kubectl get pods -n NS, and their events and logs (an image that cannot be pulled, a missing TLS Secret). kubectl meshscope version lists each webhook with its ready endpoints.",
    },
    CodeDoc {
        code: Code::RouteToHiddenService,
        severity: Severity::Error,
        title: "Gateway API route sends requests to a service hidden where it applies",
        description: "A Gateway API route (HTTPRoute, GRPCRoute, TCPRoute, TLSRoute) names a Service or ServiceEntry that the exportTo of the object (or the mesh default) hides from proxies the route applies to. A route bound to a Gateway is served by the gateway's pods in the Gateway's namespace: a backend hidden there gets no cluster, and requests through the gateway fail (HTTP 500). A mesh route (a Service parent) applies to the proxies that see its parent, and an HTTP or gRPC route in another namespace than its parent only to the proxies of its own namespace: a parent hidden from that namespace drops the route everywhere, and a backend hidden from a namespace where the route applies leaves its proxies a route to a cluster they lack (HTTP 503 NC for the share of requests sent there). Found from the objects alone, without traffic.",
        fix: "Export each service the message names to the namespaces it names: its networking.istio.io/exportTo annotation (a ServiceEntry's spec.exportTo), or widen the mesh default. With a traffic source, kubectl meshscope apply --exports --force-exports -n NS keeps a route's parent and backends exported to every namespace that calls the parent and to the gateway's namespace.",
    },
    CodeDoc {
        code: Code::RouteWithoutReferenceGrant,
        severity: Severity::Error,
        title: "Gateway route sends requests to another namespace without a ReferenceGrant",
        description: "A Gateway API route (HTTPRoute, GRPCRoute, TCPRoute, TLSRoute) bound to a Gateway names a backend in another namespace than the route's, and no ReferenceGrant in the backend's namespace permits routes of that kind from the route's namespace to it (by name, or to every Service). istiod refuses such a backend (reason RefNotPermitted in the route's status) and routes its share of the requests to a cluster named UnknownService: requests through the gateway that the route would send there fail. A grant permits Services only, so a ServiceEntry in another namespace is always refused. Routes whose parent is a Service (mesh routes) are not checked, as istiod does not check them.",
        fix: "Add a ReferenceGrant in the backend's namespace: spec.from [{group: gateway.networking.k8s.io, kind: <the route's kind>, namespace: <the route's namespace>}], spec.to [{group: \"\", kind: Service, name: <the backend>}] (omit name for every Service there); or move the route to the backend's namespace.",
    },
    CodeDoc {
        code: Code::GatewayFilterDropsNeededCluster,
        severity: Severity::Warning,
        title: "Gateway would lose a cluster it needs with PILOT_FILTER_GATEWAY_CLUSTER_CONFIG",
        description: "With istiod's PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true, a gateway's router proxy gets only the clusters of the Services its Gateways' routes send requests to, the mesh's extension providers name, and the EnvoyFilters applying to it list in their envoyfilter.istio.io/referenced-services annotation. This gateway needs a cluster that is none of those: an EnvoyFilter applying to it names the cluster in its patches (a Lua httpCall, say) without listing the Service in that annotation, or its observed traffic went to that Service. With the flag on, those requests would fail (no cluster). The flag is one setting for the whole mesh, so this gateway blocks turning it on. Reported for gateway workloads only (pods whose istio-proxy runs `proxy router`).",
        fix: "Add each Service, as namespace/host, to the annotation envoyfilter.istio.io/referenced-services of the EnvoyFilter that uses it, or route the traffic through a VirtualService or Gateway API route bound to the gateway; then check again.",
    },
    CodeDoc {
        code: Code::GatewayFilterSafe,
        severity: Severity::Info,
        title: "Gateway ready for PILOT_FILTER_GATEWAY_CLUSTER_CONFIG",
        description: "Nothing this gateway uses, as far as meshscope can see (its routes, the EnvoyFilters applying to it, the mesh's extension providers and, when given, its observed traffic), would be dropped by istiod's PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true. The message gives the gateway's estimated clusters and bytes with the flag on and off, per replica. meshscope cannot see cluster names compiled into Wasm modules or configuration outside the cluster's API.",
        fix: "None needed. When no gateway of the mesh has MS0025, the flag can be turned on in istiod's environment (meshConfig does not hold it): pilot.env.PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true with istioctl or Helm.",
    },
];

// `Code::doc` indexes CODES by the code: entry `i` must document `ALL[i]`.
const _: () = {
    assert!(CODES.len() == Code::ALL.len());
    let mut i = 0;
    while i < CODES.len() {
        assert!(CODES[i].code as usize == i && Code::ALL[i] as usize == i);
        i += 1;
    }
};

/// The documentation of the code `code` names, in any case.
pub fn code_doc(code: &str) -> Option<&'static CodeDoc> {
    Code::parse(code).map(Code::doc)
}

#[cfg(test)]
mod tests {
    use super::{Code, CODES};

    /// Every code is documented by its own entry, and `ALL` lists them
    /// all, in order, numbered from MS0001 without a gap.
    #[test]
    fn every_code_is_documented_in_order() {
        assert_eq!(Code::ALL.len(), CODES.len());
        for (i, &code) in Code::ALL.iter().enumerate() {
            assert_eq!(code.as_str(), format!("MS{:04}", i + 1));
            assert_eq!(code.doc().code, code);
            assert_eq!(CODES[i].code, code);
        }
    }

    #[test]
    fn parse_takes_any_case_and_nothing_else() {
        for &code in Code::ALL {
            assert_eq!(Code::parse(code.as_str()), Some(code));
            assert_eq!(Code::parse(&code.as_str().to_lowercase()), Some(code));
        }
        for s in ["", "MS0000", "MS0027", "MS9999", "MS001", " MS0001", "0001"] {
            assert_eq!(Code::parse(s), None, "{s:?}");
        }
    }

    #[test]
    fn prints_and_serializes_as_written() {
        let c = Code::UnscopedWorkload;
        assert_eq!(c.to_string(), "MS0001");
        assert_eq!(format!("{c:<8}|"), "MS0001  |");
        assert_eq!(serde_json::to_string(&c).unwrap(), "\"MS0001\"");
        let doc = serde_json::to_value(c.doc()).unwrap();
        assert_eq!(doc["code"], "MS0001");
    }
}
