//! Which pods run an Envoy sidecar (`docs/istio-semantics.md` §6).
//!
//! Mirrors the default-revision injector's webhook selectors and the
//! in-webhook checks, then the ambient enrolment rules.
//!
//! Gateway and waypoint pods run `istio-proxy` too, but not as sidecars:
//! the agent's first argument names the proxy's type (`proxy router`,
//! `proxy waypoint`; `initProxy` in `pilot/cmd/pilot-agent/app/cmd.go`,
//! istio 1.31), and istiod gives router and waypoint proxies the default
//! scope of their namespace whatever Sidecar exists (`doGetSidecarScope`
//! in `pilot/pkg/model/push_context.go`). The Deployments istiod renders
//! for a Gateway API Gateway carry the arguments themselves
//! (`files/kube-gateway.yaml`, `files/waypoint.yaml` of the
//! istio-discovery chart); a classic gateway installed by the `gateway`
//! chart has a bare `istio-proxy` the injector fills from its `gateway`
//! template (`inject.istio.io/templates: gateway`, `proxy router`).

use crate::labels::Labels;
use crate::mesh::Options;
use crate::meta::NamespaceInfo;

pub const INJECTION_LABEL: &str = "istio-injection";
pub const REV_LABEL: &str = "istio.io/rev";
pub const INJECT_LABEL: &str = "sidecar.istio.io/inject";
pub const STATUS_ANNOTATION: &str = "sidecar.istio.io/status";
/// The injected proxy's container: its presence marks a pod as injected,
/// and its log is the access log.
pub const PROXY_CONTAINER: &str = "istio-proxy";
pub const DATAPLANE_LABEL: &str = "istio.io/dataplane-mode";
pub const AMBIENT_REDIRECTION_ANNOTATION: &str = "ambient.istio.io/redirection";
/// The injection templates a pod asks for, comma-separated.
pub const TEMPLATES_ANNOTATION: &str = "inject.istio.io/templates";

/// A proxy that is not a sidecar: istiod ignores Sidecars for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Gateway {
    /// `proxy router`: an ingress, egress or east-west gateway.
    Router,
    /// `proxy waypoint`: an ambient waypoint.
    Waypoint,
}

impl Gateway {
    /// The type the proxy's arguments name: `router` or `waypoint`.
    pub fn as_str(self) -> &'static str {
        match self {
            Gateway::Router => "router",
            Gateway::Waypoint => "waypoint",
        }
    }

    /// The gateway type the arguments of an `istio-proxy` container name
    /// (`proxy router ...`), if they name one; `proxy sidecar`, or no
    /// arguments, is a sidecar.
    pub fn of_args<S: AsRef<str>>(args: &[S]) -> Option<Gateway> {
        match args {
            [cmd, kind, ..] if cmd.as_ref() == "proxy" => match kind.as_ref() {
                "router" => Some(Gateway::Router),
                "waypoint" => Some(Gateway::Waypoint),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Namespaces the injector never touches.
pub const NEVER_INJECTED: &[&str] = &[
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "local-path-storage",
];

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Injection {
    /// The pod runs an Envoy sidecar.
    pub sidecar: bool,
    /// The pod is enrolled in ambient mode (no sidecar; Sidecars do not apply).
    pub ambient: bool,
    /// Why the injector's rules inject the pod, when it runs without a
    /// proxy all the same: it was created before they applied to it (its
    /// namespace labelled after it started, say) or while the injector
    /// was down. Only for pods that exist ([`PodFacts::admitted`]);
    /// `sidecar` is then false.
    pub missing: Option<String>,
    /// The pod runs a gateway or waypoint proxy (`sidecar` is then false).
    pub gateway: Option<Gateway>,
    /// Why, in one phrase.
    pub reason: String,
}

impl Injection {
    /// Whether the pod runs an `istio-proxy` of any kind: its log is an
    /// access log, and its calls are traffic.
    pub fn runs_proxy(&self) -> bool {
        self.sidecar || self.gateway.is_some()
    }
}

pub struct PodFacts<'a> {
    pub namespace: &'a str,
    pub labels: &'a Labels,
    pub annotations: &'a Labels,
    /// It has the proxy container ([`is_proxy`]).
    pub has_proxy: bool,
    /// The gateway type that container's arguments name
    /// ([`Gateway::of_args`]).
    pub proxy_gateway: Option<Gateway>,
    pub host_network: bool,
    /// The pod exists: the API server admitted it, so the injector has
    /// already run (or never will), and only its containers say whether
    /// it runs a proxy. `false` for pod templates, for manifests not yet
    /// applied and for the object under admission, which the injector's
    /// rules decide.
    pub admitted: bool,
}

/// Whether a pod's container is the injected proxy: `istio-proxy` among
/// its containers, or among its init containers with `restartPolicy:
/// Always` (a Kubernetes native sidecar, as the injector writes it when
/// native sidecars are on).
pub fn is_proxy(name: &str, init: bool, restart_policy: Option<&str>) -> bool {
    name == PROXY_CONTAINER && (!init || restart_policy == Some("Always"))
}

fn sidecar(reason: impl Into<String>) -> Injection {
    Injection {
        sidecar: true,
        reason: reason.into(),
        ..Injection::default()
    }
}

fn none(reason: impl Into<String>) -> Injection {
    Injection {
        reason: reason.into(),
        ..Injection::default()
    }
}

fn ambient(reason: String) -> Injection {
    Injection {
        ambient: true,
        reason,
        ..Injection::default()
    }
}

fn gateway(g: Gateway, why: String) -> Injection {
    Injection {
        gateway: Some(g),
        reason: format!(
            "a {} proxy, not a sidecar ({why}): istiod ignores Sidecars for it and gives it every Service exported to its namespace",
            g.as_str()
        ),
        ..Injection::default()
    }
}

/// The gateway a pod runs, if it runs one: its `istio-proxy` says so in
/// its arguments, or asks the injector for the `gateway` template (the
/// injector then writes `proxy router`) and gets it.
fn gateway_of(pod: &PodFacts<'_>, ns: &NamespaceInfo, options: &Options) -> Option<Injection> {
    if let Some(g) = pod.proxy_gateway.filter(|_| pod.has_proxy) {
        let why = format!(
            "its {PROXY_CONTAINER} container runs `proxy {}`",
            g.as_str()
        );
        return Some(gateway(g, why));
    }
    let templates = pod.annotations.get(TEMPLATES_ANNOTATION)?;
    if !templates.split(',').any(|t| t.trim() == "gateway") {
        return None;
    }
    let injected = if pod.admitted {
        pod.has_proxy
    } else {
        pod.has_proxy || sidecar_decision(pod, ns, options).sidecar
    };
    injected.then(|| {
        let why = format!("annotation {TEMPLATES_ANNOTATION}={templates}");
        gateway(Gateway::Router, why)
    })
}

pub fn evaluate(pod: &PodFacts<'_>, ns: &NamespaceInfo, options: &Options) -> Injection {
    if let Some(g) = gateway_of(pod, ns, options) {
        return g;
    }
    let mut decided = sidecar_decision(pod, ns, options);
    // A pod that exists has the proxy it was created with: the label
    // rules only say what the injector would do to a new one.
    if pod.admitted && decided.sidecar && !pod.has_proxy {
        decided = Injection {
            reason: format!(
                "{}, but the pod runs no {PROXY_CONTAINER} container: it was created before injection applied to it; restart it to inject the proxy",
                decided.reason
            ),
            missing: Some(decided.reason),
            ..Injection::default()
        };
    }
    if decided.sidecar {
        return decided;
    }
    // Ambient enrolment: never for pods with a sidecar or on the host network.
    if !pod.host_network {
        if pod
            .annotations
            .get(AMBIENT_REDIRECTION_ANNOTATION)
            .map(String::as_str)
            == Some("enabled")
        {
            return ambient(format!(
                "annotation {AMBIENT_REDIRECTION_ANNOTATION}=enabled (ambient)"
            ));
        }
        match pod.labels.get(DATAPLANE_LABEL).map(String::as_str) {
            Some("ambient") => return ambient(format!("pod label {DATAPLANE_LABEL}=ambient")),
            Some("none") => {}
            _ => {
                if ns.labels.get(DATAPLANE_LABEL).map(String::as_str) == Some("ambient") {
                    return ambient(format!(
                        "namespace {} has label {DATAPLANE_LABEL}=ambient",
                        pod.namespace
                    ));
                }
            }
        }
    }
    decided
}

fn sidecar_decision(pod: &PodFacts<'_>, ns: &NamespaceInfo, options: &Options) -> Injection {
    if pod.has_proxy {
        return sidecar("has an istio-proxy container");
    }
    if pod.annotations.contains_key(STATUS_ANNOTATION) {
        return sidecar(format!("has the {STATUS_ANNOTATION} annotation"));
    }
    if NEVER_INJECTED.contains(&pod.namespace) {
        return none(format!("namespace {} is never injected", pod.namespace));
    }
    if pod.host_network {
        return none("hostNetwork pods are never injected");
    }
    let pod_label = pod.labels.get(INJECT_LABEL).map(String::as_str);
    let pod_rev = pod.labels.get(REV_LABEL);
    // Inside the injector the label beats the deprecated annotation; only
    // `true` and `false` are honoured.
    let policy = pod_label
        .or_else(|| pod.annotations.get(INJECT_LABEL).map(String::as_str))
        .filter(|v| *v == "true" || *v == "false");
    let opted_out = policy == Some("false");
    let ns_injection = ns.labels.get(INJECTION_LABEL).map(String::as_str);
    let ns_rev = ns.labels.get(REV_LABEL);
    match (ns_injection, ns_rev) {
        (Some("enabled"), _) if opted_out => none(format!(
            "namespace has {INJECTION_LABEL}=enabled but the pod sets {INJECT_LABEL}=false"
        )),
        (Some("enabled"), _) => sidecar(format!(
            "namespace {} has label {INJECTION_LABEL}=enabled",
            pod.namespace
        )),
        (Some("disabled"), _) => none(format!(
            "namespace {} has label {INJECTION_LABEL}=disabled",
            pod.namespace
        )),
        (Some(other), _) => none(format!(
            "namespace label {INJECTION_LABEL}={other} matches no injector webhook"
        )),
        (None, Some(rev)) if opted_out => none(format!(
            "namespace has {REV_LABEL}={rev} but the pod sets {INJECT_LABEL}=false"
        )),
        (None, Some(rev)) => sidecar(format!(
            "namespace {} has label {REV_LABEL}={rev}",
            pod.namespace
        )),
        (None, None) => {
            if let Some(rev) = pod_rev {
                if opted_out {
                    none(format!(
                        "pod label {REV_LABEL}={rev} but {INJECT_LABEL}=false"
                    ))
                } else {
                    sidecar(format!("pod label {REV_LABEL}={rev}"))
                }
            } else if pod_label == Some("true") {
                sidecar(format!("pod label {INJECT_LABEL}=true"))
            } else if options.inject_by_default && !opted_out {
                sidecar("injection is enabled for unlabeled namespaces (enableNamespacesByDefault)")
            } else if pod.annotations.get(INJECT_LABEL).map(String::as_str) == Some("true") {
                none(format!(
                    "only the annotation {INJECT_LABEL}=true is set; the injector is called for the label, not the annotation"
                ))
            } else {
                none(format!(
                    "namespace {} has no {INJECTION_LABEL} or {REV_LABEL} label and the pod does not opt in",
                    pod.namespace
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn eval(
        ns: &str,
        ns_labels: &[(&str, &str)],
        labels: &[(&str, &str)],
        ann: &[(&str, &str)],
    ) -> Injection {
        evaluate(
            &PodFacts {
                namespace: ns,
                labels: &l(labels),
                annotations: &l(ann),
                has_proxy: false,
                proxy_gateway: None,
                host_network: false,
                admitted: false,
            },
            &NamespaceInfo {
                labels: l(ns_labels),
            },
            &Options::default(),
        )
    }

    #[test]
    fn namespace_label_enables_unless_pod_label_says_false() {
        assert!(eval("a", &[("istio-injection", "enabled")], &[], &[]).sidecar);
        assert!(
            !eval(
                "a",
                &[("istio-injection", "enabled")],
                &[("sidecar.istio.io/inject", "false")],
                &[]
            )
            .sidecar
        );
    }

    #[test]
    fn annotation_alone_can_only_disable() {
        assert!(!eval("a", &[], &[], &[("sidecar.istio.io/inject", "true")]).sidecar);
        assert!(
            !eval(
                "a",
                &[("istio-injection", "enabled")],
                &[],
                &[("sidecar.istio.io/inject", "false")]
            )
            .sidecar
        );
        // the label beats the annotation
        assert!(
            eval(
                "a",
                &[("istio-injection", "enabled")],
                &[("sidecar.istio.io/inject", "true")],
                &[("sidecar.istio.io/inject", "false")]
            )
            .sidecar
        );
    }

    #[test]
    fn revision_labels_inject_and_istio_injection_wins() {
        assert!(eval("a", &[("istio.io/rev", "canary")], &[], &[]).sidecar);
        assert!(
            !eval(
                "a",
                &[("istio-injection", "disabled"), ("istio.io/rev", "canary")],
                &[],
                &[]
            )
            .sidecar
        );
        assert!(eval("a", &[], &[("istio.io/rev", "default")], &[]).sidecar);
        assert!(eval("a", &[], &[("sidecar.istio.io/inject", "true")], &[]).sidecar);
    }

    #[test]
    fn system_namespaces_and_host_network_are_never_injected() {
        assert!(!eval("kube-system", &[("istio-injection", "enabled")], &[], &[]).sidecar);
        let i = evaluate(
            &PodFacts {
                namespace: "a",
                labels: &Labels::new(),
                annotations: &Labels::new(),
                has_proxy: false,
                proxy_gateway: None,
                host_network: true,
                admitted: false,
            },
            &NamespaceInfo {
                labels: l(&[("istio-injection", "enabled")]),
            },
            &Options::default(),
        );
        assert!(!i.sidecar);
    }

    #[test]
    fn an_istio_proxy_container_means_injected_whatever_the_labels() {
        let i = evaluate(
            &PodFacts {
                namespace: "kube-system",
                labels: &l(&[("sidecar.istio.io/inject", "false")]),
                annotations: &Labels::new(),
                has_proxy: true,
                proxy_gateway: None,
                host_network: false,
                admitted: true,
            },
            &NamespaceInfo::default(),
            &Options::default(),
        );
        assert!(i.sidecar);
    }

    fn admitted(ns_labels: &[(&str, &str)], has_proxy: bool) -> Injection {
        evaluate(
            &PodFacts {
                namespace: "a",
                labels: &Labels::new(),
                annotations: &Labels::new(),
                has_proxy,
                proxy_gateway: None,
                host_network: false,
                admitted: true,
            },
            &NamespaceInfo {
                labels: l(ns_labels),
            },
            &Options::default(),
        )
    }

    #[test]
    fn a_running_pod_without_the_proxy_has_none_whatever_the_namespace_label() {
        // Created before the namespace was labelled: the label rules would
        // inject it, but it runs only its own containers.
        let i = admitted(&[("istio-injection", "enabled")], false);
        assert!(!i.sidecar && !i.ambient, "{i:?}");
        assert_eq!(
            i.missing.as_deref(),
            Some("namespace a has label istio-injection=enabled")
        );
        assert!(
            i.reason.contains("istio-injection=enabled")
                && i.reason.contains("runs no istio-proxy container"),
            "{}",
            i.reason
        );
        assert!(admitted(&[("istio.io/rev", "canary")], false)
            .missing
            .is_some());
        // Injected: as before.
        let i = admitted(&[("istio-injection", "enabled")], true);
        assert!(i.sidecar && i.missing.is_none());
        // Nothing expected: not missing either.
        let i = admitted(&[], false);
        assert!(!i.sidecar && i.missing.is_none());
        // An ambient namespace enrols the pod that has no sidecar.
        let i = admitted(
            &[
                ("istio-injection", "enabled"),
                ("istio.io/dataplane-mode", "ambient"),
            ],
            false,
        );
        assert!(i.ambient && i.missing.is_none());
        // The same pod as a template (or under admission) is injected.
        assert!(eval("a", &[("istio-injection", "enabled")], &[], &[]).sidecar);
    }

    #[test]
    fn the_proxy_is_a_container_or_a_native_sidecar_init_container() {
        assert!(is_proxy("istio-proxy", false, None));
        assert!(is_proxy("istio-proxy", true, Some("Always")));
        assert!(!is_proxy("istio-proxy", true, None));
        assert!(!is_proxy("istio-init", true, Some("Always")));
        assert!(!is_proxy("app", false, None));
    }

    #[test]
    fn ambient_namespaces_have_no_sidecar_unless_injection_is_also_on() {
        let i = eval("a", &[("istio.io/dataplane-mode", "ambient")], &[], &[]);
        assert!(i.ambient && !i.sidecar);
        let i = eval(
            "a",
            &[("istio.io/dataplane-mode", "ambient")],
            &[("istio.io/dataplane-mode", "none")],
            &[],
        );
        assert!(!i.ambient && !i.sidecar);
        let i = eval(
            "a",
            &[
                ("istio.io/dataplane-mode", "ambient"),
                ("istio-injection", "enabled"),
            ],
            &[],
            &[],
        );
        assert!(i.sidecar && !i.ambient);
    }

    fn with_proxy(
        ns_labels: &[(&str, &str)],
        labels: &[(&str, &str)],
        ann: &[(&str, &str)],
        (has_proxy, proxy_gateway): (bool, Option<Gateway>),
        admitted: bool,
    ) -> Injection {
        evaluate(
            &PodFacts {
                namespace: "a",
                labels: &l(labels),
                annotations: &l(ann),
                has_proxy,
                proxy_gateway,
                host_network: false,
                admitted,
            },
            &NamespaceInfo {
                labels: l(ns_labels),
            },
            &Options::default(),
        )
    }

    #[test]
    fn the_proxys_first_argument_names_a_gateway() {
        assert_eq!(
            Gateway::of_args(&["proxy", "router", "--domain", "x"]),
            Some(Gateway::Router)
        );
        assert_eq!(
            Gateway::of_args(&["proxy", "waypoint"]),
            Some(Gateway::Waypoint)
        );
        assert_eq!(Gateway::of_args(&["proxy", "sidecar"]), None);
        assert_eq!(Gateway::of_args(&["proxy"]), None);
        assert_eq!(Gateway::of_args::<&str>(&[]), None);
        assert_eq!(Gateway::of_args(&["router"]), None);
    }

    #[test]
    fn gateway_and_waypoint_proxies_are_not_sidecars() {
        let enabled = [("istio-injection", "enabled")];
        // As istiod's deployment controller renders a Gateway's pods.
        let off = [("sidecar.istio.io/inject", "false")];
        for (g, admitted) in [(Gateway::Router, true), (Gateway::Waypoint, false)] {
            let i = with_proxy(&enabled, &off, &[], (true, Some(g)), admitted);
            assert!(!i.sidecar && !i.ambient && i.runs_proxy(), "{i:?}");
            assert_eq!(i.gateway, Some(g));
            assert!(i.reason.contains("istiod ignores Sidecars"), "{}", i.reason);
        }
        // `proxy sidecar` is a sidecar.
        let i = with_proxy(&enabled, &[], &[], (true, None), true);
        assert!(i.sidecar && i.gateway.is_none(), "{i:?}");
    }

    #[test]
    fn a_pod_asking_for_the_gateway_template_is_a_gateway_once_injected() {
        let enabled = [("istio-injection", "enabled")];
        let tpl = [(TEMPLATES_ANNOTATION, "gateway")];
        let opt_in = [("sidecar.istio.io/inject", "true")];
        // The gateway chart's bare istio-proxy, before and after injection.
        let i = with_proxy(&[], &opt_in, &tpl, (true, None), false);
        assert_eq!(i.gateway, Some(Gateway::Router), "{i:?}");
        let i = with_proxy(&[], &opt_in, &tpl, (true, Some(Gateway::Router)), true);
        assert_eq!(i.gateway, Some(Gateway::Router), "{i:?}");
        // No proxy container yet: a gateway if the injector would run.
        let i = with_proxy(
            &enabled,
            &[],
            &[(TEMPLATES_ANNOTATION, "sidecar,gateway")],
            (false, None),
            false,
        );
        assert_eq!(i.gateway, Some(Gateway::Router), "{i:?}");
        let i = with_proxy(&[], &[], &tpl, (false, None), false);
        assert!(i.gateway.is_none() && !i.sidecar, "{i:?}");
        // A pod that exists without the proxy runs none.
        let i = with_proxy(&enabled, &[], &tpl, (false, None), true);
        assert!(i.gateway.is_none() && !i.sidecar, "{i:?}");
    }
}
