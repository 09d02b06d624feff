//! Reading the mesh: the permissions checked in one pass, then every kind
//! the scope engine needs listed concurrently, page by page (a list that
//! expires mid-way is listed again), and what could not be read named as
//! limitations.

use std::collections::BTreeSet;
use std::fmt;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use kube::api::{Api, ApiResource};
use meshscope_shared::gateway_api::{RouteKind, GATEWAY_API_GROUP};
use meshscope_shared::inputs::Pod as ObservedPod;
use meshscope_shared::inputs::{EndpointSlice, DISCOVERY_GROUP, HEADLESS_LABEL};
use meshscope_shared::Inputs;

use super::client::{istio, istio_in, qualified, Live, PARALLELISM};
use super::failure::{ApiFailure, FailureKind};
use super::grants::READER_FILE;
use super::list::Select;
use super::permissions::{rbac_error, Need, Purpose};

/// What a finished list adds to the inputs.
type Fill = Box<dyn FnOnce(&mut Inputs) -> Result<(), ApiFailure> + Send>;
type Listed = Result<Fill, ApiFailure>;
/// One list of a read, in flight.
type Listing<'a> = BoxFuture<'a, Listed>;

/// The kinds read per namespace in scope: workloads and their pods.
const WORKLOADS: [(&str, &str); 7] = [
    ("", "pods"),
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
];

/// The kinds read from every namespace, since visibility crosses
/// namespaces; a user who cannot list them cluster-wide gets those of the
/// namespaces in scope. Telemetries and AuthorizationPolicies name the
/// extension providers a workload's Envoy calls (from the root namespace
/// too). The Gateway API's routes route as VirtualServices do, and
/// ReferenceGrants decide which backends in other namespaces a Gateway's
/// routes may use; a Gateway's pods get its routes.
const SHARED: [(&str, &str); 13] = [
    ("", "services"),
    ("networking.istio.io", "sidecars"),
    ("networking.istio.io", "serviceentries"),
    ("networking.istio.io", "virtualservices"),
    ("networking.istio.io", "destinationrules"),
    ("telemetry.istio.io", "telemetries"),
    ("security.istio.io", "authorizationpolicies"),
    (GATEWAY_API_GROUP, "httproutes"),
    (GATEWAY_API_GROUP, "grpcroutes"),
    (GATEWAY_API_GROUP, "tcproutes"),
    (GATEWAY_API_GROUP, "tlsroutes"),
    (GATEWAY_API_GROUP, "referencegrants"),
    (GATEWAY_API_GROUP, "gateways"),
];

/// GatewayClasses (cluster-scoped) say which Gateways are istiod's.
const GATEWAY_CLASSES: &str = "gatewayclasses";

/// Said once when the cluster has no HTTPRoute CRD (clusters with it may
/// lack the less common route kinds: those are not said).
const NO_GATEWAY_API: &str = "no Gateway API routes read: the cluster has no httproutes.gateway.networking.k8s.io CRD (Gateway API not installed), so only Istio's VirtualServices route";

/// What reading `namespaces` (all when `None`) and `purpose` need, as
/// [`Live::read`] checks it: what the result cannot do without (reads in
/// the namespaces in scope, and what the command itself does there), and
/// what only a complete result needs besides (the shared kinds from every
/// namespace, and the namespaces' labels).
pub fn read_needs(
    namespaces: Option<&BTreeSet<String>>,
    purpose: &Purpose,
    pod_logs: bool,
    config_maps: bool,
) -> (Vec<Need>, Vec<Need>) {
    let mut required: Vec<Need> = Vec::new();
    for ns in scopes(namespaces) {
        for (g, r) in WORKLOADS.iter().chain(&SHARED) {
            required.push(Need::new("list", g, r, ns));
        }
        if pod_logs {
            required.push(Need::new("get", "", "pods/log", ns));
        }
        if config_maps {
            required.push(Need::new("list", "", "configmaps", ns));
        }
        required.extend(purpose.needs(ns));
    }
    let mut wide: Vec<Need> = vec![Need::new("list", "", "namespaces", None)];
    if namespaces.is_some() {
        wide.extend(SHARED.iter().map(|(g, r)| Need::new("list", g, r, None)));
        wide.push(Need::new("list", DISCOVERY_GROUP, "endpointslices", None));
    }
    wide.push(Need::new("list", GATEWAY_API_GROUP, GATEWAY_CLASSES, None));
    (required, wide)
}

/// Everything a command reading all namespaces (`-A`) with `purpose` asks
/// of the API server, each once: [`read_needs`], and the mesh config
/// (ConfigMap `istio` in `istio-system`), which a read does without when
/// forbidden. What `deploy/watch/rbac.yaml` grants (a test compares them).
pub fn everything_needed(purpose: &Purpose, pod_logs: bool, config_maps: bool) -> Vec<Need> {
    let (required, wide) = read_needs(None, purpose, pod_logs, config_maps);
    let mut all: Vec<Need> = Vec::new();
    let mesh = Need::named("get", "", "configmaps", MESH_NAMESPACE, "istio");
    for n in required.into_iter().chain(wide).chain([mesh]) {
        if !all.contains(&n) {
            all.push(n);
        }
    }
    all
}

/// Where the mesh config is read from.
const MESH_NAMESPACE: &str = "istio-system";

/// Why a read failed: permissions (all of those missing), or a call.
enum ReadError {
    Rbac(Vec<Need>),
    Api(ApiFailure),
}

impl From<ApiFailure> for ReadError {
    fn from(f: ApiFailure) -> Self {
        ReadError::Api(f)
    }
}

impl ReadError {
    fn into_anyhow(self, purpose: &Purpose) -> anyhow::Error {
        match self {
            ReadError::Rbac(missing) => anyhow::anyhow!("{}", rbac_error(&missing, purpose)),
            ReadError::Api(f) => f.into(),
        }
    }
}

/// What `Live::read` got, and what it could not read.
pub struct Read {
    pub inputs: Inputs,
    /// Limitations of the result, one line each (for stderr).
    pub limitations: Vec<String>,
}

/// What a read lists, given what the permission check denied beyond the
/// namespaces in scope, and the limitations that leaves.
struct Plan {
    /// The shared kinds listed per namespace in scope, not cluster-wide.
    shared_in_scope: Vec<(&'static str, &'static str)>,
    list_namespaces: bool,
    /// The GatewayClasses (a Gateway of another controller's class binds
    /// no route).
    gateway_classes: bool,
    /// Under -n, the pods of other namespaces are not read: the
    /// EndpointSlices of headless Services name their IPs.
    headless_slices: bool,
    /// The ConfigMaps of the namespaces in scope (`--from-manifest-hints`).
    config_maps: bool,
    limitations: Vec<String>,
}

impl Plan {
    fn new(namespaces: Option<&BTreeSet<String>>, wide_denied: &[Need]) -> Plan {
        let denied = |g, r| wide_denied.contains(&Need::new("list", g, r, None));
        let mut limitations = Vec::new();
        let shared_in_scope: Vec<(&str, &str)> = SHARED
            .iter()
            .copied()
            .filter(|(g, r)| denied(g, r))
            .collect();
        if let (Some(set), false) = (namespaces, shared_in_scope.is_empty()) {
            limitations.push(format!(
                "cross-namespace dependencies unknown: cannot list {} in all namespaces, so only those in {} are read; grant {READER_FILE} for the rest",
                shared_in_scope
                    .iter()
                    .map(|(g, r)| qualified(g, r))
                    .collect::<Vec<_>>()
                    .join(", "),
                match set.len() {
                    1 => format!("namespace {:?}", set.iter().next().expect("one")),
                    _ => format!(
                        "namespaces {}",
                        set.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                }
            ));
        }
        let headless_slices = namespaces.is_some() && !denied(DISCOVERY_GROUP, "endpointslices");
        if namespaces.is_some() && !headless_slices {
            limitations.push(format!(
                "calls to pod IPs of headless Services in other namespaces are not mapped back: cannot list endpointslices.{DISCOVERY_GROUP} in all namespaces; grant {READER_FILE}"
            ));
        }
        let gateway_classes = !denied(GATEWAY_API_GROUP, GATEWAY_CLASSES);
        if !gateway_classes {
            limitations.push(format!(
                "gateway classes unknown: cannot list {GATEWAY_CLASSES}.{GATEWAY_API_GROUP}, so every Gateway counts as istiod's (its routes bind); grant {READER_FILE}"
            ));
        }
        Plan {
            shared_in_scope,
            list_namespaces: !denied("", "namespaces"),
            gateway_classes,
            headless_slices,
            config_maps: false,
            limitations,
        }
    }
}

/// ConfigMaps for manifest hints, without their binary data (never read).
fn add_config_maps(inputs: &mut Inputs, items: Vec<ConfigMap>) {
    inputs.config_maps.extend(items.into_iter().map(|mut cm| {
        cm.binary_data = None;
        cm
    }));
}

/// The namespaces in scope, one by one; `None` alone for all of them.
fn scopes(namespaces: Option<&BTreeSet<String>>) -> Vec<Option<&str>> {
    match namespaces {
        None => vec![None],
        Some(set) => set.iter().map(|n| Some(n.as_str())).collect(),
    }
}

impl Live {
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
        let items = self.list::<K>(ns, Select::ALL).await?;
        Ok(Box::new(move |inputs: &mut Inputs| {
            add(inputs, items);
            Ok(())
        }))
    }

    /// Lists an Istio kind (a CRD that may be missing) as JSON objects.
    async fn list_istio(&self, ar: ApiResource, ns: Option<String>) -> Listed {
        let items = self.list_dynamic(&ar, ns.as_deref(), Select::ALL).await?;
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

    /// The Namespace objects of `namespaces`, read one by one with `get`
    /// (for a user who may not list them); one that cannot be read is
    /// synthesised without labels, and said so.
    async fn namespaces_one_by_one(
        &self,
        namespaces: &BTreeSet<String>,
        limitations: &mut Vec<String>,
    ) -> Result<Vec<Namespace>, ApiFailure> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let mut out = Vec::new();
        for ns in namespaces {
            let got = self
                .bounded("get", "namespaces", None, async {
                    api.get_opt(ns).await.map_err(|e| {
                        ApiFailure::from_kube(e, "get", "namespaces", None, &self.server)
                    })
                })
                .await;
            match got {
                Ok(Some(n)) => out.push(n),
                // Left out: the caller says the namespace does not exist.
                Ok(None) => {}
                Err(ApiFailure {
                    kind: FailureKind::Forbidden(_),
                    ..
                }) => {
                    limitations.push(format!(
                        "injection in namespace {ns:?} unknown: cannot get namespaces/{ns} (nor list namespaces), so its istio-injection and istio.io/rev labels are not known and it is taken as unlabeled; grant get on namespaces ({READER_FILE})"
                    ));
                    let mut n = Namespace::default();
                    n.metadata.name = Some(ns.clone());
                    out.push(n);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Checks in one pass every permission reading the mesh (and
    /// `purpose`) needs, then reads it. Workloads and pods come from
    /// `namespaces` (all when `None`); services, routing and Sidecars from
    /// every namespace, since visibility crosses namespaces. A user who
    /// may read only the namespaces in scope gets a result built from
    /// those, with its limitations named; one who lacks a permission the
    /// result cannot do without gets one error naming everything missing
    /// and one Role granting it.
    ///
    /// `fallback`: for commands that read every namespace to be complete
    /// (explain, impact, verify) for one namespace's answer: the namespace to read alone
    /// when the caller may not read them all.
    pub async fn read(
        &self,
        namespaces: Option<&BTreeSet<String>>,
        fallback: Option<&str>,
        purpose: &Purpose,
        pod_logs: bool,
        config_maps: bool,
    ) -> anyhow::Result<Read> {
        let first = self
            .read_scoped(namespaces, purpose, pod_logs, config_maps)
            .await;
        let (Err(ReadError::Rbac(missing)), None, Some(ns)) = (&first, namespaces, fallback) else {
            return first.map_err(|e| e.into_anyhow(purpose));
        };
        let set = BTreeSet::from([ns.to_string()]);
        let mut read = self
            .read_scoped(Some(&set), purpose, pod_logs, config_maps)
            .await
            .map_err(|e| e.into_anyhow(purpose))?;
        let elsewhere: Vec<String> = missing
            .iter()
            .filter(|n| {
                n.verb == "list"
                    && WORKLOADS
                        .iter()
                        .any(|(g, r)| *g == n.group && *r == n.resource)
            })
            .map(|n| qualified(n.group, n.resource))
            .collect();
        if !elsewhere.is_empty() {
            read.limitations.insert(
                0,
                format!(
                    "other namespaces' workloads unknown: cannot list {} in all namespaces, so only namespace {ns:?} is read; grant {READER_FILE} for the rest",
                    elsewhere.join(", ")
                ),
            );
        }
        Ok(read)
    }

    /// [`Live::read`] of the workloads of `namespaces` (all when `None`),
    /// and of their ConfigMaps with `config_maps` (manifest hints).
    async fn read_scoped(
        &self,
        namespaces: Option<&BTreeSet<String>>,
        purpose: &Purpose,
        pod_logs: bool,
        config_maps: bool,
    ) -> Result<Read, ReadError> {
        let wide_denied = self
            .permitted(namespaces, purpose, pod_logs, config_maps)
            .await?;
        let mut plan = Plan::new(namespaces, &wide_denied);
        plan.config_maps = config_maps;
        let mut limitations = plan.limitations.clone();
        let mut inputs = self.list_everything(namespaces, &plan).await?;
        if !plan.list_namespaces {
            let set = namespaces.expect("listing namespaces is required with -A");
            let got = self.namespaces_one_by_one(set, &mut limitations).await?;
            inputs.namespaces.extend(got);
        }
        self.mesh_config(&mut inputs, &mut limitations).await?;
        Ok(Read {
            inputs,
            limitations,
        })
    }

    /// Checks in one pass what reading `namespaces` (all when `None`) and
    /// `purpose` need. What the result cannot do without and is denied is
    /// the error; what only a complete result needs and is denied is
    /// returned.
    async fn permitted(
        &self,
        namespaces: Option<&BTreeSet<String>>,
        purpose: &Purpose,
        pod_logs: bool,
        config_maps: bool,
    ) -> Result<Vec<Need>, ReadError> {
        let (required, wide) = read_needs(namespaces, purpose, pod_logs, config_maps);
        let mut all = required.clone();
        all.extend(wide.iter().cloned());
        let denied = self.check(&all).await?;
        let missing: Vec<Need> = required
            .iter()
            .filter(|n| denied.contains(n))
            .cloned()
            .collect();
        let wide_denied: Vec<Need> = wide
            .iter()
            .filter(|n| denied.contains(n))
            .cloned()
            .collect();
        if !missing.is_empty() {
            let mut everything = wide_denied.clone();
            everything.extend(missing);
            return Err(ReadError::Rbac(everything));
        }
        Ok(wide_denied)
    }

    /// The mesh config: ConfigMap istio in istio-system, added to
    /// `inputs`; missing means defaults, forbidden is a limitation.
    async fn mesh_config(
        &self,
        inputs: &mut Inputs,
        limitations: &mut Vec<String>,
    ) -> Result<(), ApiFailure> {
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), MESH_NAMESPACE);
        let cm = self
            .bounded("get", "configmaps", Some(MESH_NAMESPACE), async {
                cms.get_opt("istio").await.map_err(|e| {
                    let ar = ApiResource::erase::<ConfigMap>(&());
                    self.fail(e, "get", &ar, Some(MESH_NAMESPACE))
                })
            })
            .await;
        match cm {
            Ok(Some(cm)) => {
                let mut v = serde_json::to_value(&cm).unwrap_or_default();
                if let Some(m) = v.as_object_mut() {
                    m.insert("apiVersion".into(), "v1".into());
                    m.insert("kind".into(), "ConfigMap".into());
                }
                let _ = inputs.add(v);
            }
            Ok(None)
            | Err(ApiFailure {
                kind: FailureKind::NotFound(_),
                ..
            }) => {}
            Err(ApiFailure {
                kind: FailureKind::Forbidden(_),
                ..
            }) => limitations.push(format!(
                "mesh config unknown: cannot get configmaps/istio in namespace \"istio-system\", so Istio's defaults are used; grant {READER_FILE}, or pass --mesh-config"
            )),
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Lists everything `plan` says, concurrently; the first failure ends
    /// the read.
    async fn list_everything(
        &self,
        namespaces: Option<&BTreeSet<String>>,
        plan: &Plan,
    ) -> Result<Inputs, ApiFailure> {
        let scopes = scopes(namespaces);
        let mut jobs: Vec<Listing<'_>> = Vec::new();
        if plan.list_namespaces {
            jobs.push(
                async {
                    let items = self.namespaces().await?;
                    Ok(Box::new(move |i: &mut Inputs| {
                        i.namespaces.extend(items);
                        Ok(())
                    }) as Fill)
                }
                .boxed(),
            );
        }
        if plan.gateway_classes {
            jobs.push(self.optional_list(
                istio_in(GATEWAY_API_GROUP, "GatewayClass", GATEWAY_CLASSES),
                None,
            ));
        }
        if plan.headless_slices {
            jobs.push(
                async {
                    let items = self
                        .list::<EndpointSlice>(None, Select::labels(HEADLESS_LABEL))
                        .await?;
                    Ok(Box::new(move |i: &mut Inputs| {
                        i.endpoint_slices.extend(items);
                        Ok(())
                    }) as Fill)
                }
                .boxed(),
            );
        }
        // The kinds in `shared_in_scope` are listed per namespace in scope
        // instead of cluster-wide.
        let per_scope = |plural: &str| -> Vec<Option<String>> {
            if plan.shared_in_scope.iter().any(|(_, r)| *r == plural) {
                scopes.iter().map(|s| s.map(str::to_string)).collect()
            } else {
                vec![None]
            }
        };
        jobs.extend(self.shared_jobs(per_scope));
        for ns in scopes.iter().copied() {
            jobs.extend(self.workload_jobs(ns));
            if plan.config_maps {
                jobs.push(self.list_typed::<ConfigMap>(ns, add_config_maps).boxed());
            }
        }
        // try_collect stops at the first failure, so a server that hangs
        // costs one timeout, not one per wave of PARALLELISM lists.
        let fills: Vec<Fill> = futures::stream::iter(jobs)
            .buffer_unordered(PARALLELISM)
            .try_collect()
            .await?;
        let mut inputs = Inputs {
            manifest_hints: plan.config_maps,
            ..Default::default()
        };
        for fill in fills {
            fill(&mut inputs)?;
        }
        Ok(inputs)
    }

    /// The lists of the kinds read from every namespace (or, per
    /// `per_scope`, from those in scope): Services and Istio's kinds.
    fn shared_jobs(&self, per_scope: impl Fn(&str) -> Vec<Option<String>>) -> Vec<Listing<'_>> {
        let mut jobs: Vec<Listing<'_>> = Vec::new();
        for ns in per_scope("services") {
            jobs.push(
                async move {
                    self.list_typed::<Service>(ns.as_deref(), |i, v| i.services.extend(v))
                        .await
                }
                .boxed(),
            );
        }
        for (kind, plural) in [
            ("Sidecar", "sidecars"),
            ("ServiceEntry", "serviceentries"),
            ("VirtualService", "virtualservices"),
            ("DestinationRule", "destinationrules"),
        ] {
            for ns in per_scope(plural) {
                jobs.push(self.list_istio(istio(kind, plural), ns).boxed());
            }
        }
        let optional = [
            istio_in(
                meshscope_shared::istio::TELEMETRY_GROUP,
                "Telemetry",
                "telemetries",
            ),
            istio_in(
                meshscope_shared::istio::SECURITY_GROUP,
                "AuthorizationPolicy",
                "authorizationpolicies",
            ),
            // istio 1.31 reads ReferenceGrants at v1beta1, which every
            // Gateway API release since v0.6 serves.
            ApiResource {
                version: "v1beta1".into(),
                api_version: format!("{GATEWAY_API_GROUP}/v1beta1"),
                ..istio_in(GATEWAY_API_GROUP, "ReferenceGrant", "referencegrants")
            },
            istio_in(GATEWAY_API_GROUP, "Gateway", "gateways"),
        ]
        .into_iter()
        .chain(RouteKind::ALL.map(|k| istio_in(GATEWAY_API_GROUP, k.as_str(), k.plural())));
        for ar in optional {
            for ns in per_scope(&ar.plural) {
                jobs.push(self.optional_list(ar.clone(), ns));
            }
        }
        jobs
    }

    /// A list of a kind whose CRD may be missing: without it there are
    /// none of them, not an error (the Gateway API's absence is said once).
    fn optional_list(&self, ar: ApiResource, ns: Option<String>) -> Listing<'_> {
        async move {
            let plural = ar.plural.clone();
            match self.list_istio(ar, ns).await {
                Err(ApiFailure {
                    kind: FailureKind::NotFound(_),
                    ..
                }) => {
                    if plural == RouteKind::Http.plural() {
                        self.note_once(NO_GATEWAY_API.into());
                    }
                    Ok(Box::new(|_: &mut Inputs| Ok(())) as Fill)
                }
                other => other,
            }
        }
        .boxed()
    }

    /// The lists of the workloads of `ns` (all namespaces when `None`) and
    /// their pods.
    fn workload_jobs<'a>(&'a self, ns: Option<&'a str>) -> [Listing<'a>; 7] {
        [
            // Pods decode straight into the engine's lean form.
            self.list_typed::<ObservedPod>(ns, |i, v| i.add_pods(v))
                .boxed(),
            self.list_typed::<Deployment>(ns, |i, v| i.deployments.extend(v))
                .boxed(),
            self.list_typed::<ReplicaSet>(ns, |i, v| i.replicasets.extend(v))
                .boxed(),
            self.list_typed::<StatefulSet>(ns, |i, v| i.statefulsets.extend(v))
                .boxed(),
            self.list_typed::<DaemonSet>(ns, |i, v| i.daemonsets.extend(v))
                .boxed(),
            self.list_typed::<Job>(ns, |i, v| i.jobs.extend(v)).boxed(),
            self.list_typed::<CronJob>(ns, |i, v| i.cronjobs.extend(v))
                .boxed(),
        ]
    }
}

impl Live {
    /// Every networking.istio.io Gateway, as objects `Inputs::add` reads,
    /// for commands that follow VirtualService `gateways` (`--exports`) or
    /// keep gateway namespaces (MS0020). Checked like every read: RBAC that
    /// forbids listing them is an error naming the grant when `needed`,
    /// else `None`; a cluster without the CRD has none.
    pub async fn gateways(&self, needed: bool) -> anyhow::Result<Option<Vec<serde_json::Value>>> {
        self.networking_everywhere("Gateway", "gateways", needed)
            .await
    }

    /// Every EnvoyFilter, read beside the Gateways: which Services a
    /// gateway keeps for them with `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG`.
    /// `None` when RBAC forbids listing them.
    pub async fn envoy_filters(&self) -> anyhow::Result<Option<Vec<serde_json::Value>>> {
        self.networking_everywhere("EnvoyFilter", "envoyfilters", false)
            .await
    }

    /// Every networking.istio.io `kind` in all namespaces, as
    /// [`Live::gateways`] reads them.
    async fn networking_everywhere(
        &self,
        kind: &'static str,
        plural: &'static str,
        needed: bool,
    ) -> anyhow::Result<Option<Vec<serde_json::Value>>> {
        // EnvoyFilter is served at v1alpha3 only (Istio 1.31's CRDs).
        let version = match kind {
            "EnvoyFilter" => "v1alpha3",
            _ => "v1",
        };
        let g = meshscope_shared::istio::NETWORKING_GROUP;
        let need = Need::new("list", g, plural, None);
        if !self.check(std::slice::from_ref(&need)).await?.is_empty() {
            if !needed {
                return Ok(None);
            }
            anyhow::bail!(
                "RBAC forbids list on {plural}.{g} in all namespaces: --exports keeps each object exported to the namespaces of the gateways that route to it, so it reads them; grant {READER_FILE}"
            );
        }
        let g = meshscope_shared::istio::NETWORKING_GROUP;
        let ar = ApiResource {
            version: version.into(),
            api_version: format!("{g}/{version}"),
            ..istio(kind, plural)
        };
        let items = match self.list_dynamic(&ar, None, Select::ALL).await {
            Err(ApiFailure {
                kind: FailureKind::NotFound(_),
                ..
            }) => Vec::new(),
            other => other?,
        };
        Ok(Some(
            items
                .into_iter()
                .map(|item| {
                    let mut v = serde_json::to_value(&item).unwrap_or_default();
                    if let Some(m) = v.as_object_mut() {
                        m.insert("apiVersion".into(), ar.api_version.clone().into());
                        m.insert("kind".into(), ar.kind.clone().into());
                    }
                    v
                })
                .collect(),
        ))
    }
}
