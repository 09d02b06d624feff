//! API failures: what was asked, why it failed (classified from kube's
//! errors), and one line naming the cause and the fix.

use std::fmt;
use std::time::Duration;

use super::grants::{rbac_file, REVIEW};
use crate::duration::show_duration;

/// An API failure, with what we were doing.
#[derive(Debug)]
pub struct ApiFailure {
    pub verb: &'static str,
    pub resource: String,
    pub namespace: Option<String>,
    pub server: String,
    pub kind: FailureKind,
}

#[derive(Debug)]
pub enum FailureKind {
    Forbidden(String),
    NotFound(String),
    /// The credentials were rejected (401).
    Unauthorized,
    Unreachable(String),
    /// The server's certificate is not trusted.
    Tls(String),
    /// No answer within `--request-timeout` (the bound, when known).
    Timeout(Option<Duration>),
    Other(String),
}

impl ApiFailure {
    pub fn from_kube(
        e: kube::Error,
        verb: &'static str,
        resource: &str,
        namespace: Option<&str>,
        server: &str,
    ) -> Self {
        let kind = match e {
            kube::Error::Api(s) if s.code == 401 => FailureKind::Unauthorized,
            // RBAC says "User \"x\" cannot list ..."; a quota or an admission
            // webhook also answer 403, about the object.
            kube::Error::Api(s) if s.code == 403 && s.message.contains(" cannot ") => {
                FailureKind::Forbidden(s.message.clone())
            }
            kube::Error::Api(s) if s.code == 404 => FailureKind::NotFound(s.message.clone()),
            kube::Error::Api(s) if s.code == 504 || s.reason == "Timeout" => {
                FailureKind::Timeout(None)
            }
            kube::Error::Api(s) => {
                FailureKind::Other(format!("{} ({})", s.message.trim_end(), s.code))
            }
            other => {
                let chain = error_chain(&other);
                if chain.contains("timed out")
                    || chain.contains("Elapsed")
                    || chain.contains("deadline")
                {
                    FailureKind::Timeout(None)
                } else if chain.contains("certificate") {
                    FailureKind::Tls(chain)
                } else if chain.contains("onnect")
                    || chain.contains("dns")
                    || chain.contains("refused")
                {
                    FailureKind::Unreachable(chain)
                } else {
                    FailureKind::Other(chain)
                }
            }
        };
        Self {
            verb,
            resource: resource.to_string(),
            namespace: namespace.map(str::to_string),
            server: server.to_string(),
            kind,
        }
    }

    fn where_(&self) -> String {
        where_(self.namespace.as_deref())
    }

    /// What was asked: `list pods in namespace "shop"`.
    fn asked(&self) -> String {
        asked(self.verb, &self.resource, self.namespace.as_deref())
    }

    /// The minimal Role (or ClusterRole) that would allow the failed call.
    pub fn minimal_role(&self) -> String {
        let (group, plural) = match self.resource.split_once('.') {
            Some((p, g)) => (g.to_string(), p.to_string()),
            None => (String::new(), self.resource.clone()),
        };
        let (kind, ns_line) = match &self.namespace {
            Some(ns) => ("Role", format!("\n  namespace: {ns}")),
            None => ("ClusterRole", String::new()),
        };
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: meshscope-{verb}-{}{ns_line}\nrules:\n- apiGroups: [\"{group}\"]\n  resources: [\"{plural}\"]\n  verbs: [\"{verb}\"]",
            plural.replace('/', "-"),
            verb = self.verb,
        )
    }

    /// Whether every object of a batch failing this way means the batch
    /// as a whole failed (no permission, no server), not one object.
    pub fn is_systemic(&self) -> bool {
        matches!(
            self.kind,
            FailureKind::Forbidden(_)
                | FailureKind::Unauthorized
                | FailureKind::Unreachable(_)
                | FailureKind::Tls(_)
                | FailureKind::Timeout(_)
        ) || matches!(&self.kind, FailureKind::NotFound(_) if self.resource.ends_with("networking.istio.io"))
    }
}

pub(super) fn asked(verb: &str, resource: &str, ns: Option<&str>) -> String {
    if resource == REVIEW {
        "the permission check (SelfSubjectAccessReview)".to_string()
    } else {
        format!("{verb} {resource} {}", where_(ns))
    }
}

pub(super) fn where_(ns: Option<&str>) -> String {
    match ns {
        Some(ns) => format!("in namespace {ns:?}"),
        None => "in all namespaces".to_string(),
    }
}

/// An error's text with its causes, each said once: kube's and hyper's
/// wrappers (`ServiceError: client error (Connect): ...`) repeat what
/// their source says.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = cur {
        let mut t = s.to_string();
        for wrapper in ["ServiceError: ", "HyperError: ", "HttpError: "] {
            if let Some(rest) = t.strip_prefix(wrapper) {
                t = rest.to_string();
            }
        }
        match parts.last() {
            // The outer text already says the inner one.
            Some(last) if last.contains(&t) => {}
            Some(last) if t.contains(last.as_str()) => {
                parts.pop();
                parts.push(t);
            }
            _ => parts.push(t),
        }
        cur = s.source();
    }
    // hyper's "client error (Connect)" only says that a cause follows.
    if parts.len() > 1 {
        parts.retain(|p| !(p.starts_with("client error (") && p.ends_with(')')));
    }
    clean_quotes(&parts.join(": "))
}

/// kube formats paths with `'{:?}'`, which quotes them twice.
pub(super) fn clean_quotes(s: &str) -> String {
    s.replace("'\"", "\"").replace("\"'", "\"")
}

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FailureKind::Forbidden(msg) => write!(
                f,
                "RBAC forbids {} on {} {} ({msg}); grant {}, or at least:\n{}",
                self.verb,
                self.resource,
                self.where_(),
                rbac_file(self.verb, &self.resource),
                self.minimal_role()
            ),
            FailureKind::NotFound(_) if self.resource.ends_with("networking.istio.io") => write!(
                f,
                "Istio CRDs are not installed: the API server at {} does not serve {}; install Istio (or its CRDs) first (recommend, audit, explain, impact, report and version can read files instead, with --manifests)",
                self.server, self.resource
            ),
            FailureKind::NotFound(msg) => write!(f, "{} {} {}: not found ({msg})", self.verb, self.resource, self.where_()),
            FailureKind::Unauthorized => write!(
                f,
                "the API server at {} rejected the kubeconfig's credentials (401 Unauthorized); log in again or renew them, or pick another --context",
                self.server
            ),
            FailureKind::Unreachable(cause) => write!(
                f,
                "cannot reach the API server at {} ({cause}); check that the cluster is up and that --context/--kubeconfig point at it",
                self.server
            ),
            FailureKind::Tls(cause) => write!(
                f,
                "the API server at {} is not trusted ({cause}); check the cluster's certificate-authority in the kubeconfig, or that --context points at the right cluster",
                self.server
            ),
            FailureKind::Timeout(bound) => write!(
                f,
                "the API server at {} did not answer {}{}; check that it is up, or raise --request-timeout",
                self.server,
                self.asked(),
                bound.map(|d| format!(" within {} (--request-timeout)", show_duration(d))).unwrap_or_else(|| " in time".into())
            ),
            FailureKind::Other(msg) => write!(f, "{} {} {} failed: {msg}", self.verb, self.resource, self.where_()),
        }
    }
}

impl std::error::Error for ApiFailure {}

/// The cause a failure's text shares with every other failure like it,
/// when that cause is the connection or RBAC rather than the object:
/// `RBAC forbids patch on sidecars.networking.istio.io`, `cannot reach the
/// API server at URL`. `None` for a failure of one object.
pub fn systemic_cause(why: &str) -> Option<String> {
    if let Some(rest) = why.strip_prefix("RBAC forbids ") {
        let what = rest.split(" in ").next()?;
        return Some(format!("RBAC forbids {what}"));
    }
    if why.starts_with("cannot reach the API server at ") {
        return why.split(" (").next().map(str::to_string);
    }
    if why.starts_with("Istio CRDs are not installed") {
        return Some("Istio CRDs are not installed".into());
    }
    let rest = why.strip_prefix("the API server at ")?;
    [
        "did not answer",
        "rejected the kubeconfig's credentials",
        "is not trusted",
    ]
    .iter()
    .find_map(|p| {
        let (server, _) = rest.split_once(&format!(" {p}"))?;
        Some(format!("the API server at {server} {p}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(kind: FailureKind, resource: &str, ns: Option<&str>) -> ApiFailure {
        ApiFailure {
            verb: "list",
            resource: resource.into(),
            namespace: ns.map(String::from),
            server: "https://10.0.0.1:6443".into(),
            kind,
        }
    }

    #[test]
    fn missing_istio_crds_name_the_cause_and_the_fix() {
        let f = failure(
            FailureKind::NotFound("the server could not find the requested resource".into()),
            "sidecars.networking.istio.io",
            None,
        );
        let m = f.to_string();
        assert!(m.starts_with("Istio CRDs are not installed"), "{m}");
        assert!(m.contains("https://10.0.0.1:6443"), "{m}");
        // One text for every command: it does not tell apply, diff or
        // verify (which refuse --manifests) to read manifests.
        assert!(
            m.contains(
                "(recommend, audit, explain, impact, report and version can read files instead, with --manifests)"
            ),
            "{m}"
        );
        assert_eq!(m.lines().count(), 1);
    }

    #[test]
    fn forbidden_prints_the_minimal_role() {
        let f = failure(
            FailureKind::Forbidden("User \"bob\" cannot list resource".into()),
            "deployments.apps",
            Some("shop"),
        );
        let m = f.to_string();
        assert!(
            m.starts_with("RBAC forbids list on deployments.apps in namespace \"shop\""),
            "{m}"
        );
        assert!(
            m.contains("kind: Role\n")
                && m.contains("namespace: shop")
                && m.contains("apiGroups: [\"apps\"]"),
            "{m}"
        );
        let f = failure(FailureKind::Forbidden("no".into()), "namespaces", None);
        assert!(
            f.minimal_role().contains("kind: ClusterRole")
                && f.minimal_role().contains("apiGroups: [\"\"]")
        );
    }

    #[test]
    fn timeouts_name_the_bound() {
        let m = failure(
            FailureKind::Timeout(Some(Duration::from_millis(1500))),
            "pods",
            Some("a"),
        )
        .to_string();
        assert_eq!(
            m,
            "the API server at https://10.0.0.1:6443 did not answer list pods in namespace \"a\" within 1.5s (--request-timeout); check that it is up, or raise --request-timeout"
        );
    }

    #[test]
    fn error_chains_say_each_cause_once() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl fmt::Display for E {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E(
            "ServiceError: client error (Connect)",
            Some(Box::new(E(
                "client error (Connect)",
                Some(Box::new(E(
                    "tcp connect error: Connection refused (os error 111)",
                    Some(Box::new(E("Connection refused (os error 111)", None))),
                ))),
            ))),
        );
        assert_eq!(
            error_chain(&e),
            "tcp connect error: Connection refused (os error 111)"
        );
        assert_eq!(
            clean_quotes("failed to read file '\"/x/ca.crt\"': gone"),
            "failed to read file \"/x/ca.crt\": gone"
        );
    }

    #[test]
    fn failures_of_the_connection_or_rbac_share_a_cause_and_others_do_not() {
        let f = |kind, ns| failure(kind, "sidecars.networking.istio.io", Some(ns)).to_string();
        let forbidden = |ns| {
            f(
                FailureKind::Forbidden(format!("User \"bob\" cannot list sidecars \"{ns}\"")),
                ns,
            )
        };
        assert_eq!(
            systemic_cause(&forbidden("a")).as_deref(),
            Some("RBAC forbids list on sidecars.networking.istio.io")
        );
        assert_eq!(
            systemic_cause(&forbidden("a")),
            systemic_cause(&forbidden("b"))
        );
        let down = |ns| f(FailureKind::Unreachable(format!("refused {ns}")), ns);
        assert_eq!(
            systemic_cause(&down("a")).as_deref(),
            Some("cannot reach the API server at https://10.0.0.1:6443")
        );
        assert_eq!(systemic_cause(&down("a")), systemic_cause(&down("b")));
        for kind in [
            FailureKind::Timeout(Some(Duration::from_secs(2))),
            FailureKind::Unauthorized,
            FailureKind::Tls("UnknownIssuer".into()),
        ] {
            let failure = ApiFailure {
                kind,
                ..failure(FailureKind::Unauthorized, "sidecars", Some("a"))
            };
            assert!(failure.is_systemic());
            assert!(
                systemic_cause(&failure.to_string())
                    .is_some_and(|c| c.starts_with("the API server at https://10.0.0.1:6443 ")),
                "{failure}"
            );
        }
        let invalid = f(
            FailureKind::Other("spec.egress: Invalid value (422)".into()),
            "a",
        );
        assert_eq!(systemic_cause(&invalid), None);
    }
}
