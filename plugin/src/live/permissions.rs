//! Permissions: what a command needs ([`Purpose`], [`Need`]), checked in
//! one pass (SelfSubjectAccessReview) before anything is read, and one
//! error naming everything missing with the Role that grants it.

use futures::{StreamExt, TryStreamExt};
use kube::api::Api;

use super::client::{qualified, Live, PARALLELISM};
use super::failure::{where_, ApiFailure, FailureKind};
use super::grants::{rbac_file, REVIEW};

/// What a command does with the cluster besides reading the mesh, so that
/// the one-pass RBAC check asks for all of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Purpose {
    /// recommend, explain, audit, impact.
    #[default]
    Read,
    /// apply: server-side apply of Sidecars (and deleting them with
    /// `prune`); `istiod`: the namespace of the istiod `--wait`
    /// port-forwards to.
    Apply { prune: bool, istiod: Option<String> },
    /// diff: server-side dry-run applies of Sidecars (a `patch`, and a
    /// `create` where the Sidecar is new), checked before anything is read.
    Diff,
    /// verify: port-forwards to istiod in this namespace (`None` with
    /// `--istiod-url`).
    Verify { istiod: Option<String> },
    /// apply --watch: what apply needs, and holding the Lease
    /// `(namespace, name)` that elects the writer among replicas (`None`:
    /// one replica, no election; see `live/lease.rs`).
    Watch {
        prune: bool,
        istiod: Option<String>,
        lease: Option<(String, String)>,
    },
    /// apply --exports and diff --exports: reading (`get`) and server-side
    /// applying (`patch`, never `create`) the exportTo of Services,
    /// ServiceEntries, VirtualServices and DestinationRules in `namespace`
    /// (`-n`; the context's when `None`, see [`Purpose::in_context`]), or
    /// in all namespaces with `all`; `istiod`: the namespace of the
    /// istiod `--wait` port-forwards to.
    Exports {
        namespace: Option<String>,
        all: bool,
        istiod: Option<String>,
    },
}

impl Purpose {
    /// The purpose with the kubeconfig context's namespace where it writes
    /// in "the namespace" without `-n` (`--exports`).
    pub fn in_context(&self, context_ns: &str) -> Purpose {
        match self {
            Purpose::Exports {
                namespace: None,
                all: false,
                istiod,
            } => Purpose::Exports {
                namespace: Some(context_ns.to_string()),
                all: false,
                istiod: istiod.clone(),
            },
            other => other.clone(),
        }
    }

    /// The Role name printed for what is missing.
    fn role_name(&self) -> &'static str {
        match self {
            Purpose::Read => "meshscope-reader",
            Purpose::Apply { .. } | Purpose::Diff | Purpose::Exports { .. } => "meshscope-applier",
            Purpose::Verify { .. } => "meshscope-verifier",
            Purpose::Watch { .. } => "meshscope-watch",
        }
    }

    /// What the command needs in namespace `ns` (`None`: all) besides
    /// reading.
    pub(super) fn needs(&self, ns: Option<&str>) -> Vec<Need> {
        let need = Need::new;
        let istiod = |ns: &str| {
            vec![
                need("list", "", "pods", Some(ns)),
                need("get", "", "pods/portforward", Some(ns)),
                need("create", "", "pods/portforward", Some(ns)),
            ]
        };
        match self {
            Purpose::Read => Vec::new(),
            Purpose::Apply { prune, istiod: i } => {
                let g = meshscope_shared::istio::NETWORKING_GROUP;
                let mut v = vec![
                    need("get", g, "sidecars", ns),
                    need("create", g, "sidecars", ns),
                    need("patch", g, "sidecars", ns),
                ];
                if *prune {
                    v.push(need("list", g, "sidecars", ns));
                    v.push(need("delete", g, "sidecars", ns));
                }
                v.extend(i.as_deref().map(istiod).unwrap_or_default());
                v
            }
            Purpose::Diff => {
                let g = meshscope_shared::istio::NETWORKING_GROUP;
                vec![
                    need("create", g, "sidecars", ns),
                    need("patch", g, "sidecars", ns),
                ]
            }
            Purpose::Verify { istiod: i } => i.as_deref().map(istiod).unwrap_or_default(),
            Purpose::Exports {
                namespace,
                all,
                istiod: i,
            } => {
                let g = meshscope_shared::istio::NETWORKING_GROUP;
                let at = if *all { None } else { namespace.as_deref() };
                let mut v = Vec::new();
                for (group, resource) in [
                    ("", "services"),
                    (g, "serviceentries"),
                    (g, "virtualservices"),
                    (g, "destinationrules"),
                ] {
                    v.push(need("get", group, resource, at));
                    v.push(need("patch", group, resource, at));
                }
                v.extend(i.as_deref().map(istiod).unwrap_or_default());
                v
            }
            Purpose::Watch {
                prune,
                istiod,
                lease,
            } => {
                let mut v = Purpose::Apply {
                    prune: *prune,
                    istiod: istiod.clone(),
                }
                .needs(ns);
                if let Some((lns, name)) = lease {
                    v.extend(lease_needs(lns, name));
                }
                v
            }
        }
    }
}

/// What holding the Lease `ns/name` takes (`live/lease.rs`, through
/// kube-lease-manager): reading it (`get`) and taking, renewing and
/// releasing it (`patch`: server-side apply and strategic merge), both
/// limited to its name; and `create`, for when it does not exist yet
/// (RBAC cannot limit `create` to a name). Never `update`, `list` or
/// `watch`.
pub fn lease_needs(ns: &str, name: &str) -> Vec<Need> {
    vec![
        Need::named("get", LEASE_GROUP, "leases", ns, name),
        Need::named("patch", LEASE_GROUP, "leases", ns, name),
        Need::new("create", LEASE_GROUP, "leases", Some(ns)),
    ]
}

/// The API group of Leases.
pub const LEASE_GROUP: &str = "coordination.k8s.io";

/// A permission a command needs, for the one-pass RBAC check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    pub verb: &'static str,
    pub group: &'static str,
    /// `pods` or `pods/portforward`.
    pub resource: &'static str,
    pub namespace: Option<String>,
    /// The one object it is about (RBAC's `resourceNames`), when it is
    /// not every object of the resource.
    pub name: Option<String>,
}

impl Need {
    /// `verb` on `resource` of API group `group` in namespace `ns`
    /// (cluster-wide when `None`).
    pub fn new(
        verb: &'static str,
        group: &'static str,
        resource: &'static str,
        ns: Option<&str>,
    ) -> Need {
        Need {
            verb,
            group,
            resource,
            namespace: ns.map(str::to_string),
            name: None,
        }
    }

    /// `verb` on the object `name` of `resource` in namespace `ns`.
    pub fn named(
        verb: &'static str,
        group: &'static str,
        resource: &'static str,
        ns: &str,
        name: &str,
    ) -> Need {
        Need {
            name: Some(name.to_string()),
            ..Need::new(verb, group, resource, Some(ns))
        }
    }
}

impl Live {
    /// Asks the API server (SelfSubjectAccessReview) which of `needs` the
    /// caller lacks, all at once and within one `--request-timeout`. A
    /// server that cannot answer a review (old, or the review itself
    /// forbidden) lacks nothing here: the calls then fail one by one with
    /// their own message. A server that does not answer, or rejects the
    /// credentials, is an error.
    pub async fn check(&self, needs: &[Need]) -> Result<Vec<Need>, ApiFailure> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        let mut unique: Vec<&Need> = Vec::new();
        for n in needs {
            if !unique.contains(&n) {
                unique.push(n);
            }
        }
        let api: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        let checks = unique.into_iter().map(|n| {
            let api = api.clone();
            async move {
                let (resource, sub) = match n.resource.split_once('/') {
                    Some((r, s)) => (r, Some(s.to_string())),
                    None => (n.resource, None),
                };
                let review = SelfSubjectAccessReview {
                    spec: SelfSubjectAccessReviewSpec {
                        resource_attributes: Some(ResourceAttributes {
                            verb: Some(n.verb.into()),
                            group: Some(n.group.into()),
                            resource: Some(resource.into()),
                            subresource: sub,
                            namespace: n.namespace.clone(),
                            name: n.name.clone(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let allowed = match api.create(&Default::default(), &review).await {
                    Ok(r) => r.status.is_none_or(|s| s.allowed),
                    Err(e) => {
                        let f = ApiFailure::from_kube(e, "create", REVIEW, None, &self.server);
                        match f.kind {
                            FailureKind::Forbidden(_)
                            | FailureKind::NotFound(_)
                            | FailureKind::Other(_) => true,
                            _ => return Err(f),
                        }
                    }
                };
                Ok((!allowed).then(|| n.clone()))
            }
        });
        let all = async {
            let answers: Vec<Option<Need>> = futures::stream::iter(checks)
                .buffered(4 * PARALLELISM)
                .try_collect()
                .await?;
            Ok(answers.into_iter().flatten().collect())
        };
        self.bounded("create", REVIEW, None, all).await
    }
}

/// One error for everything missing: what RBAC forbids, by namespace and
/// verb, the files in `deploy/rbac/` that grant it, and one Role (or
/// ClusterRole) with exactly that.
pub fn rbac_error(missing: &[Need], purpose: &Purpose) -> String {
    // The verbs of each resource, then the resources of each namespace
    // that lack the same verbs: "get, patch on sidecars... in namespace x".
    let mut verbs: Vec<(String, Option<&str>, Vec<&str>)> = Vec::new();
    for n in missing {
        let mut what = qualified(n.group, n.resource);
        if let Some(name) = &n.name {
            what = format!("{what}/{name}");
        }
        let ns = n.namespace.as_deref();
        match verbs.iter_mut().find(|(w, s, _)| *w == what && *s == ns) {
            Some((_, _, v)) if !v.contains(&n.verb) => v.push(n.verb),
            Some(_) => {}
            None => verbs.push((what, ns, vec![n.verb])),
        }
    }
    let mut groups: Vec<(Vec<&str>, Option<&str>, Vec<String>)> = Vec::new();
    for (what, ns, v) in verbs {
        match groups.iter_mut().find(|(gv, gs, _)| *gv == v && *gs == ns) {
            Some((_, _, list)) => list.push(what),
            None => groups.push((v, ns, vec![what])),
        }
    }
    let said: Vec<String> = groups
        .iter()
        .map(|(v, ns, list)| format!("{} on {} {}", v.join(", "), list.join(", "), where_(*ns)))
        .collect();
    let mut files: Vec<&str> = Vec::new();
    for n in missing {
        let f = rbac_file(n.verb, n.resource);
        if !files.contains(&f) {
            files.push(f);
        }
    }
    // Port-forwards have a way around them.
    let forward = missing
        .iter()
        .find(|n| n.resource == "pods/portforward")
        .and_then(|n| n.namespace.as_deref())
        .map(|ns| {
            format!(
                "\nor run `kubectl port-forward -n {ns} deploy/istiod 15014` with other credentials and pass --istiod-url http://localhost:15014"
            )
        })
        .unwrap_or_default();
    format!(
        "RBAC forbids {}; grant {}, or at least:\n{}{forward}",
        said.join(", and "),
        files.join(" and "),
        roles_for(purpose, missing)
    )
}

/// The Roles that grant `missing`: the reads under the reader's name (as
/// `deploy/rbac/meshscope-reader.yaml` names its ClusterRole), and what
/// the command needs besides under the command's, so that a command's
/// role never carries the reader's rules.
fn roles_for(purpose: &Purpose, missing: &[Need]) -> String {
    let (own, reads): (Vec<Need>, Vec<Need>) = missing
        .iter()
        .cloned()
        .partition(|n| purpose.needs(n.namespace.as_deref()).contains(n));
    let mut roles = Vec::new();
    if !reads.is_empty() {
        roles.push(role_for(Purpose::Read.role_name(), &reads));
    }
    if !own.is_empty() {
        roles.push(role_for(purpose.role_name(), &own));
    }
    roles.join("\n---\n")
}

/// One Role (or ClusterRole, when a need is cluster-wide) granting every
/// missing permission, named after the command: one rule per API group
/// and set of verbs.
pub fn role_for(name: &str, missing: &[Need]) -> String {
    let ns = missing.iter().find_map(|n| n.namespace.clone());
    let cluster_wide =
        missing.iter().any(|n| n.namespace.is_none()) || missing.iter().any(|n| n.namespace != ns);
    let mut out = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: {}\nmetadata:\n  name: {name}{}\nrules:",
        if cluster_wide { "ClusterRole" } else { "Role" },
        match (&ns, cluster_wide) {
            (Some(ns), false) => format!("\n  namespace: {ns}"),
            _ => String::new(),
        }
    );
    // The verbs of each resource (and object, for a named need)...
    type Verbs<'a> = Vec<&'a str>;
    let mut by_resource: Vec<(&str, &str, Option<&str>, Verbs<'_>)> = Vec::new();
    for n in missing {
        let name = n.name.as_deref();
        match by_resource
            .iter_mut()
            .find(|(g, r, o, _)| *g == n.group && *r == n.resource && *o == name)
        {
            Some((_, _, _, verbs)) if !verbs.contains(&n.verb) => verbs.push(n.verb),
            Some(_) => {}
            None => by_resource.push((n.group, n.resource, name, vec![n.verb])),
        }
    }
    // ...and the resources of each group that take the same verbs (on
    // the same object).
    let mut rules: Vec<(&str, Vec<&str>, Option<&str>, Verbs<'_>)> = Vec::new();
    for (g, r, name, verbs) in by_resource {
        match rules
            .iter_mut()
            .find(|(rg, _, ro, rv)| *rg == g && *ro == name && *rv == verbs)
        {
            Some((_, resources, _, _)) => resources.push(r),
            None => rules.push((g, vec![r], name, verbs)),
        }
    }
    let quoted = |v: &[&str]| {
        v.iter()
            .map(|x| format!("\"{x}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (g, resources, name, verbs) in rules {
        out.push_str(&format!(
            "\n- apiGroups: [\"{g}\"]\n  resources: [{}]{}\n  verbs: [{}]",
            quoted(&resources),
            name.map(|n| format!("\n  resourceNames: [\"{n}\"]"))
                .unwrap_or_default(),
            quoted(&verbs)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_role_for_everything_missing() {
        let need = |verb, resource, ns: Option<&str>| Need {
            verb,
            group: "",
            resource,
            namespace: ns.map(String::from),
            name: None,
        };
        let r = role_for(
            "meshscope-verifier",
            &[
                need("list", "pods", Some("istio-system")),
                need("get", "pods/portforward", Some("istio-system")),
                need("create", "pods/portforward", Some("istio-system")),
            ],
        );
        assert_eq!(
            r,
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: meshscope-verifier\n  namespace: istio-system\nrules:\n- apiGroups: [\"\"]\n  resources: [\"pods\"]\n  verbs: [\"list\"]\n- apiGroups: [\"\"]\n  resources: [\"pods/portforward\"]\n  verbs: [\"get\", \"create\"]"
        );
        let r = role_for("x", &[need("list", "pods", None)]);
        assert!(
            r.contains("kind: ClusterRole") && !r.contains("namespace:"),
            "{r}"
        );
    }

    /// issue #35 item 20: verify missing cluster-wide reads and its
    /// port-forward prints the reads under the reader's ClusterRole, and
    /// only the port-forward under meshscope-verifier, a Role in istiod's
    /// namespace as deploy/rbac/meshscope-verifier.yaml is.
    #[test]
    fn reads_and_a_commands_own_needs_are_granted_under_their_own_names() {
        let need = |verb, resource, ns: Option<&str>| Need {
            verb,
            group: "",
            resource,
            namespace: ns.map(String::from),
            name: None,
        };
        let verify = Purpose::Verify {
            istiod: Some("istio-system".into()),
        };
        let missing = [
            need("list", "pods", None),
            need("get", "pods/portforward", Some("istio-system")),
            need("create", "pods/portforward", Some("istio-system")),
        ];
        let roles = roles_for(&verify, &missing);
        let docs: Vec<&str> = roles.split("\n---\n").collect();
        assert_eq!(docs.len(), 2, "{roles}");
        assert!(
            docs[0].contains("kind: ClusterRole\nmetadata:\n  name: meshscope-reader\n"),
            "{roles}"
        );
        assert!(
            docs[1].contains(
                "kind: Role\nmetadata:\n  name: meshscope-verifier\n  namespace: istio-system\n"
            ) && !docs[1].contains("resources: [\"pods\"]"),
            "{roles}"
        );
        // Only its own needs missing: one Role, as before.
        let roles = roles_for(&verify, &missing[1..]);
        assert!(
            !roles.contains("---") && roles.contains("name: meshscope-verifier"),
            "{roles}"
        );
    }

    #[test]
    fn watch_mode_holds_its_lease_by_name() {
        let purpose = Purpose::Watch {
            prune: false,
            istiod: None,
            lease: Some(("meshscope-system".into(), "meshscope-watch".into())),
        };
        let needs = purpose.needs(None);
        for n in lease_needs("meshscope-system", "meshscope-watch") {
            assert!(needs.contains(&n), "{n:?}");
        }
        assert!(!needs.iter().any(|n| n.verb == "delete"), "{needs:?}");
        let one = Purpose::Watch {
            prune: false,
            istiod: None,
            lease: None,
        };
        assert!(!one.needs(None).iter().any(|n| n.resource == "leases"));
        let r = role_for(
            "meshscope-watch",
            &lease_needs("meshscope-system", "meshscope-watch"),
        );
        assert_eq!(
            r,
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: meshscope-watch\n  namespace: meshscope-system\nrules:\n- apiGroups: [\"coordination.k8s.io\"]\n  resources: [\"leases\"]\n  resourceNames: [\"meshscope-watch\"]\n  verbs: [\"get\", \"patch\"]\n- apiGroups: [\"coordination.k8s.io\"]\n  resources: [\"leases\"]\n  verbs: [\"create\"]"
        );
        let e = rbac_error(&lease_needs("ns", "w")[..2], &purpose);
        assert!(
            e.starts_with("RBAC forbids get, patch on leases.coordination.k8s.io/w in namespace \"ns\"; grant deploy/watch/rbac.yaml"),
            "{e}"
        );
    }

    #[test]
    fn one_error_for_everything_rbac_forbids() {
        let need = |verb, group, resource, ns: Option<&str>| Need {
            verb,
            group,
            resource,
            namespace: ns.map(String::from),
            name: None,
        };
        let e = rbac_error(
            &[
                need("list", "", "namespaces", None),
                need("list", "", "pods", Some("shop")),
                need("list", "apps", "deployments", Some("shop")),
                need("list", "apps", "replicasets", Some("shop")),
                need("patch", "networking.istio.io", "sidecars", Some("shop")),
            ],
            &Purpose::Apply {
                prune: false,
                istiod: None,
            },
        );
        assert_eq!(
            e,
            "RBAC forbids list on namespaces in all namespaces, and list on pods, deployments.apps, replicasets.apps in namespace \"shop\", and patch on sidecars.networking.istio.io in namespace \"shop\"; grant deploy/rbac/meshscope-reader.yaml and deploy/rbac/meshscope-applier.yaml, or at least:\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: meshscope-reader\nrules:\n- apiGroups: [\"\"]\n  resources: [\"namespaces\", \"pods\"]\n  verbs: [\"list\"]\n- apiGroups: [\"apps\"]\n  resources: [\"deployments\", \"replicasets\"]\n  verbs: [\"list\"]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: meshscope-applier\n  namespace: shop\nrules:\n- apiGroups: [\"networking.istio.io\"]\n  resources: [\"sidecars\"]\n  verbs: [\"patch\"]"
        );
    }
}
