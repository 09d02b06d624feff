//! Live mode: the only module that talks to the API server. It lists what
//! the scope engine needs (paginated, concurrently, with bounded
//! parallelism) and turns every failure into one line naming the cause and
//! the fix.

use std::collections::BTreeSet;
use std::fmt;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, LogParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use meshscope_shared::inject::PROXY_CONTAINER;
use meshscope_shared::inputs::Pod as ObservedPod;
use meshscope_shared::observe::{LogIngest, Observations};
use meshscope_shared::snapshot::PodId;
use meshscope_shared::{Inputs, MeshSnapshot};

use crate::args::Common;

/// What a finished list adds to the inputs.
type Fill = Box<dyn FnOnce(&mut Inputs) -> Result<(), ApiFailure> + Send>;
type Listed = Result<Fill, ApiFailure>;

/// Lists (and log streams) in flight at once.
pub const PARALLELISM: usize = 6;

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
    Unreachable(String),
    Timeout,
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
            kube::Error::Api(s) if s.code == 403 => FailureKind::Forbidden(s.message.clone()),
            kube::Error::Api(s) if s.code == 404 => FailureKind::NotFound(s.message.clone()),
            kube::Error::Api(s) if s.code == 504 || s.reason == "Timeout" => FailureKind::Timeout,
            kube::Error::Api(s) => {
                FailureKind::Other(format!("{} ({})", s.message.trim_end(), s.code))
            }
            other => {
                let text = format!("{other}");
                let chain = error_chain(&other);
                if chain.contains("timed out")
                    || chain.contains("Elapsed")
                    || chain.contains("deadline")
                {
                    FailureKind::Timeout
                } else if chain.contains("onnect")
                    || chain.contains("dns")
                    || chain.contains("refused")
                {
                    FailureKind::Unreachable(chain)
                } else {
                    FailureKind::Other(if chain.is_empty() { text } else { chain })
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
        match &self.namespace {
            Some(ns) => format!("in namespace {ns:?}"),
            None => "in all namespaces".to_string(),
        }
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
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: {kind}\nmetadata:\n  name: meshscope-{verb}-{plural}{ns_line}\nrules:\n- apiGroups: [\"{group}\"]\n  resources: [\"{plural}\"]\n  verbs: [\"{verb}\"]",
            verb = self.verb,
        )
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !parts.contains(&t) {
            parts.push(t);
        }
        cur = s.source();
    }
    parts.join(": ")
}

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            FailureKind::Forbidden(msg) => write!(
                f,
                "RBAC forbids {} on {} {} ({msg}); grant deploy/rbac/meshscope-reader.yaml (or -apply.yaml), or at least:\n{}",
                self.verb,
                self.resource,
                self.where_(),
                self.minimal_role()
            ),
            FailureKind::NotFound(_) if self.resource.ends_with("networking.istio.io") => write!(
                f,
                "Istio CRDs are not installed: the API server at {} does not serve {}; install Istio (or its CRDs) first, or read manifests with --manifests",
                self.server, self.resource
            ),
            FailureKind::NotFound(msg) => write!(f, "{} {} {}: not found ({msg})", self.verb, self.resource, self.where_()),
            FailureKind::Unreachable(cause) => write!(
                f,
                "cannot reach the API server at {} ({cause}); check that the cluster is up and that --context/--kubeconfig point at it",
                self.server
            ),
            FailureKind::Timeout => write!(
                f,
                "the API server at {} did not answer in time ({} {} {}); retry, or raise --request-timeout",
                self.server,
                self.verb,
                self.resource,
                self.where_()
            ),
            FailureKind::Other(msg) => write!(f, "{} {} {} failed: {msg}", self.verb, self.resource, self.where_()),
        }
    }
}

impl std::error::Error for ApiFailure {}

pub struct Live {
    pub client: Client,
    pub server: String,
    pub default_namespace: String,
    /// Items per page when listing.
    pub page_size: u32,
}

impl Live {
    /// Connects like kubectl: --kubeconfig, else KUBECONFIG, else
    /// ~/.kube/config, else the in-cluster service account.
    pub async fn connect(c: &Common) -> anyhow::Result<Live> {
        let opts = KubeConfigOptions {
            context: c.context.clone(),
            cluster: None,
            user: None,
        };
        let kubeconfig =
            match &c.kubeconfig {
                Some(p) => Some(Kubeconfig::read_from(p).map_err(|e| {
                    anyhow::anyhow!("cannot read --kubeconfig {}: {e}", p.display())
                })?),
                None => match Kubeconfig::read() {
                    Ok(k) => Some(k),
                    Err(e) => {
                        if std::env::var_os("KUBECONFIG").is_some() {
                            anyhow::bail!("cannot read KUBECONFIG: {e}");
                        }
                        None
                    }
                },
            };
        let mut config = match kubeconfig {
            Some(k) => Config::from_custom_kubeconfig(k, &opts).await.map_err(|e| {
                anyhow::anyhow!(
                    "invalid kubeconfig{}: {e}",
                    c.context.as_deref().map(|x| format!(" (context {x:?})")).unwrap_or_default()
                )
            })?,
            None => Config::incluster().map_err(|_| {
                anyhow::anyhow!(
                    "no kubeconfig found: pass --kubeconfig or set KUBECONFIG (or read files with --manifests)"
                )
            })?,
        };
        let timeout = Duration::from_secs(c.request_timeout.max(1));
        config.connect_timeout = Some(timeout);
        config.read_timeout = Some(timeout);
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string();
        let default_namespace = config.default_namespace.clone();
        let client = Client::try_from(config)
            .map_err(|e| anyhow::anyhow!("cannot create a client for {server}: {e}"))?;
        Ok(Live {
            client,
            server,
            default_namespace,
            page_size: c.chunk_size.max(1),
        })
    }

    fn fail(
        &self,
        e: kube::Error,
        verb: &'static str,
        ar: &ApiResource,
        ns: Option<&str>,
    ) -> ApiFailure {
        let resource = if ar.group.is_empty() {
            ar.plural.clone()
        } else {
            format!("{}.{}", ar.plural, ar.group)
        };
        ApiFailure::from_kube(e, verb, &resource, ns, &self.server)
    }

    /// Lists one resource through `api`, page by page.
    async fn pages<K>(
        &self,
        api: Api<K>,
        ar: &ApiResource,
        ns: Option<&str>,
    ) -> Result<Vec<K>, ApiFailure>
    where
        K: Clone + serde::de::DeserializeOwned + fmt::Debug,
    {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut lp = ListParams::default().limit(self.page_size);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = api
                .list(&lp)
                .await
                .map_err(|e| self.fail(e, "list", ar, ns))?;
            out.extend(page.items);
            match page.metadata.continue_ {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => break,
            }
        }
        Ok(out)
    }

    /// Lists a Kubernetes kind decoded straight into its typed form (no
    /// intermediate JSON tree), and returns how to add it to the inputs.
    async fn list_typed<K>(&self, ns: Option<&str>, add: fn(&mut Inputs, Vec<K>)) -> Listed
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + fmt::Debug
            + Send
            + 'static,
    {
        let ar = ApiResource::erase::<K>(&());
        let api: Api<K> = match ns {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let items = self.pages(api, &ar, ns).await?;
        Ok(Box::new(move |inputs: &mut Inputs| {
            add(inputs, items);
            Ok(())
        }))
    }

    /// Lists an Istio kind (a CRD that may be missing) as JSON objects.
    async fn list_istio(&self, ar: ApiResource) -> Listed {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let items = self.pages(api, &ar, None).await?;
        let server = self.server.clone();
        Ok(Box::new(move |inputs: &mut Inputs| {
            for item in items {
                let mut v = serde_json::to_value(&item).unwrap_or_default();
                if let Some(m) = v.as_object_mut() {
                    m.insert("apiVersion".into(), ar.api_version.clone().into());
                    m.insert("kind".into(), ar.kind.clone().into());
                }
                // Objects the API server returned passed its schema; a decode
                // failure names the object and why.
                inputs.add(v).map_err(|e| ApiFailure {
                    verb: "decode",
                    resource: ar.plural.clone(),
                    namespace: None,
                    server: server.clone(),
                    kind: FailureKind::Other(e.to_string()),
                })?;
            }
            Ok(())
        }))
    }

    /// Everything the scope engine reads. Workloads and pods come from
    /// `namespaces` (all when `None`); services, routing and Sidecars from
    /// every namespace, since visibility crosses namespaces.
    pub async fn inputs(
        &self,
        namespaces: Option<&BTreeSet<String>>,
    ) -> Result<Inputs, ApiFailure> {
        use futures::future::BoxFuture;
        use futures::FutureExt;
        let mut jobs: Vec<BoxFuture<'_, Listed>> = vec![
            async {
                let ar = ApiResource::erase::<Namespace>(&());
                let api: Api<Namespace> = Api::all(self.client.clone());
                let items = self.pages(api, &ar, None).await?;
                Ok(Box::new(move |i: &mut Inputs| {
                    i.namespaces.extend(items);
                    Ok(())
                }) as Fill)
            }
            .boxed(),
            self.list_typed::<Service>(None, |i, v| i.services.extend(v))
                .boxed(),
        ];
        for (kind, plural) in [
            ("Sidecar", "sidecars"),
            ("ServiceEntry", "serviceentries"),
            ("VirtualService", "virtualservices"),
            ("DestinationRule", "destinationrules"),
        ] {
            jobs.push(self.list_istio(istio(kind, plural)).boxed());
        }
        let scopes: Vec<Option<&str>> = match namespaces {
            None => vec![None],
            Some(set) => set.iter().map(|n| Some(n.as_str())).collect(),
        };
        for ns in scopes {
            // Pods decode straight into the engine's lean form.
            jobs.push(
                self.list_typed::<ObservedPod>(ns, |i, v| i.pods.extend(v))
                    .boxed(),
            );
            jobs.push(
                self.list_typed::<Deployment>(ns, |i, v| i.deployments.extend(v))
                    .boxed(),
            );
            jobs.push(
                self.list_typed::<ReplicaSet>(ns, |i, v| i.replicasets.extend(v))
                    .boxed(),
            );
            jobs.push(
                self.list_typed::<StatefulSet>(ns, |i, v| i.statefulsets.extend(v))
                    .boxed(),
            );
            jobs.push(
                self.list_typed::<DaemonSet>(ns, |i, v| i.daemonsets.extend(v))
                    .boxed(),
            );
            jobs.push(self.list_typed::<Job>(ns, |i, v| i.jobs.extend(v)).boxed());
            jobs.push(
                self.list_typed::<CronJob>(ns, |i, v| i.cronjobs.extend(v))
                    .boxed(),
            );
        }
        let results: Vec<Listed> = futures::stream::iter(jobs)
            .buffer_unordered(PARALLELISM)
            .collect()
            .await;
        let mut inputs = Inputs::default();
        for r in results {
            r?(&mut inputs)?;
        }
        // The mesh config: ConfigMap istio in istio-system; missing means defaults.
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), "istio-system");
        match cms.get_opt("istio").await {
            Ok(Some(cm)) => {
                let mut v = serde_json::to_value(&cm).unwrap_or_default();
                if let Some(m) = v.as_object_mut() {
                    m.insert("apiVersion".into(), "v1".into());
                    m.insert("kind".into(), "ConfigMap".into());
                }
                let _ = inputs.add(v);
            }
            Ok(None) => {}
            Err(e) => {
                let ar = ApiResource::erase::<ConfigMap>(&());
                let f = self.fail(e, "get", &ar, Some("istio-system"));
                if !matches!(f.kind, FailureKind::Forbidden(_) | FailureKind::NotFound(_)) {
                    return Err(f);
                }
            }
        }
        Ok(inputs)
    }

    /// Reads the istio-proxy log of each pod (and the previous container's
    /// after a restart), with bounded concurrency. Pods whose logs cannot
    /// be read are returned, not fatal.
    pub async fn pod_logs(
        &self,
        snap: &MeshSnapshot,
        pods: &[PodId],
        since: Duration,
        live_pods: &[ObservedPod],
        err: &mut dyn Write,
    ) -> (Observations, Vec<(String, String)>) {
        let tty = std::io::stderr().is_terminal();
        let total = pods.len();
        let mut done = 0usize;
        let mut failed = Vec::new();
        let mut obs = Observations::default();
        // Pods whose istio-proxy restarted: their previous log is read too.
        let restarted: std::collections::HashSet<(&str, &str)> = live_pods
            .iter()
            .filter(|p| {
                p.status.as_ref().is_some_and(|s| {
                    s.container_statuses
                        .iter()
                        .any(|c| c.name == PROXY_CONTAINER && c.restart_count > 0)
                })
            })
            .filter_map(|p| {
                Some((
                    p.metadata.namespace.as_deref()?,
                    p.metadata.name.as_deref()?,
                ))
            })
            .collect();
        let restarted = |name: &str, ns: &str| restarted.contains(&(ns, name));
        let jobs: Vec<(PodId, bool)> = pods
            .iter()
            .flat_map(|p| {
                let pod = &snap.pods[*p];
                let prev = restarted(&pod.name, &pod.namespace);
                std::iter::once((*p, false)).chain(prev.then_some((*p, true)))
            })
            .collect();
        let mut stream = futures::stream::iter(jobs)
            .map(|(p, previous)| async move {
                let pod = &snap.pods[p];
                let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
                let lp = LogParams {
                    container: Some(PROXY_CONTAINER.into()),
                    since_seconds: Some(since.as_secs().max(1) as i64),
                    previous,
                    ..Default::default()
                };
                let mut ingest = LogIngest::new(snap, "pod-logs").for_pod(p);
                let res: Result<(), String> = async {
                    let reader = api.log_stream(&pod.name, &lp).await.map_err(|e| {
                        ApiFailure::from_kube(
                            e,
                            "get",
                            "pods/log",
                            Some(&pod.namespace),
                            &self.server,
                        )
                        .to_string()
                    })?;
                    let mut lines = reader.lines();
                    while let Some(line) = lines.try_next().await.map_err(|e| e.to_string())? {
                        ingest.line(&line);
                    }
                    Ok(())
                }
                .await;
                (p, previous, res, ingest.finish())
            })
            .buffer_unordered(PARALLELISM);
        while let Some((p, previous, res, o)) = stream.next().await {
            done += 1;
            if tty {
                let _ = write!(err, "\rreading istio-proxy logs: {done}/{}", total);
            }
            match res {
                Ok(()) => obs.merge(o),
                Err(e) if previous => {
                    // A previous container that is gone is not a failure.
                    let _ = e;
                }
                Err(e) => {
                    let pod = &snap.pods[p];
                    failed.push((format!("{}/{}", pod.namespace, pod.name), e));
                }
            }
        }
        if tty {
            let _ = writeln!(err);
        }
        (obs, failed)
    }
}

/// A permission a command needs, for the one-pass RBAC check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    pub verb: &'static str,
    pub group: &'static str,
    /// `pods` or `pods/portforward`.
    pub resource: &'static str,
    pub namespace: Option<String>,
}

impl Live {
    /// Asks the API server (SelfSubjectAccessReview) which of `needs` the
    /// caller lacks, all at once. A server that cannot answer (old, or
    /// the review itself forbidden) lacks nothing here: the calls then
    /// fail one by one with their own message.
    pub async fn missing(&self, needs: &[Need]) -> Vec<Need> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        let api: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        let checks = needs.iter().map(|n| {
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
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let allowed = match api.create(&Default::default(), &review).await {
                    Ok(r) => r.status.is_none_or(|s| s.allowed),
                    Err(_) => true,
                };
                (!allowed).then(|| n.clone())
            }
        });
        futures::future::join_all(checks)
            .await
            .into_iter()
            .flatten()
            .collect()
    }
}

/// One Role (or ClusterRole, when a need is cluster-wide) granting every
/// missing permission, named after the command.
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
    let mut rules: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    for n in missing {
        match rules
            .iter_mut()
            .find(|(g, r, _)| *g == n.group && *r == n.resource)
        {
            Some((_, _, verbs)) if !verbs.contains(&n.verb) => verbs.push(n.verb),
            Some(_) => {}
            None => rules.push((n.group, n.resource, vec![n.verb])),
        }
    }
    for (g, r, verbs) in rules {
        out.push_str(&format!(
            "\n- apiGroups: [\"{g}\"]\n  resources: [\"{r}\"]\n  verbs: [{}]",
            verbs
                .iter()
                .map(|v| format!("\"{v}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    out
}

pub fn istio(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: meshscope_shared::istio::NETWORKING_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{}/v1", meshscope_shared::istio::NETWORKING_GROUP),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Parses durations like `90s`, `30m`, `24h`, `7d`.
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| anyhow::anyhow!("invalid duration {s:?} (expected e.g. 30m, 24h, 7d)"))?;
    let secs = match unit {
        "s" | "" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86400,
        "w" => n * 7 * 86400,
        _ => anyhow::bail!("invalid duration unit in {s:?} (use s, m, h, d or w)"),
    };
    Ok(Duration::from_secs(secs))
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
        assert!(
            m.contains("https://10.0.0.1:6443") && m.contains("--manifests"),
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
    fn one_role_for_everything_missing() {
        let need = |verb, resource, ns: Option<&str>| Need {
            verb,
            group: "",
            resource,
            namespace: ns.map(String::from),
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

    #[test]
    fn timeouts_and_durations() {
        let m = failure(FailureKind::Timeout, "pods", Some("a")).to_string();
        assert!(
            m.contains("did not answer in time") && m.contains("--request-timeout"),
            "{m}"
        );
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86400)
        );
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert!(parse_duration("soon").is_err());
    }
}
