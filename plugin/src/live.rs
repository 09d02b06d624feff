//! Live mode: the only module that talks to the API server. It checks in
//! one pass (SelfSubjectAccessReview) every permission a command needs,
//! lists what the scope engine needs (paginated, concurrently, with
//! bounded parallelism, each list bounded by `--request-timeout` as a
//! whole), and turns every failure into one line naming the cause and the
//! fix.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, LogParams};
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};
use meshscope_shared::inject::PROXY_CONTAINER;
use meshscope_shared::inputs::Pod as ObservedPod;
use meshscope_shared::inputs::{EndpointSlice, DISCOVERY_GROUP, HEADLESS_LABEL};
use meshscope_shared::observe::{LogIngest, Observations};
use meshscope_shared::snapshot::PodId;
use meshscope_shared::{Inputs, MeshSnapshot};

pub use crate::duration::{
    parse_duration, parse_request_timeout, show_duration, RequestTimeout, DEFAULT_REQUEST_TIMEOUT,
};

/// What a finished list adds to the inputs.
type Fill = Box<dyn FnOnce(&mut Inputs) -> Result<(), ApiFailure> + Send>;
type Listed = Result<Fill, ApiFailure>;

/// Lists (and log streams) in flight at once.
pub const PARALLELISM: usize = 6;

/// How long a call may take before a terminal is told what it waits for.
pub const NOTE_AFTER: Duration = Duration::from_secs(3);

/// The RBAC files in `deploy/rbac/`, by what they grant.
pub const READER_FILE: &str = "deploy/rbac/meshscope-reader.yaml";
pub const APPLIER_FILE: &str = "deploy/rbac/meshscope-applier.yaml";
pub const VERIFIER_FILE: &str = "deploy/rbac/meshscope-verifier.yaml";

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

/// The review of what a command needs.
const REVIEW: &str = "selfsubjectaccessreviews.authorization.k8s.io";

fn asked(verb: &str, resource: &str, ns: Option<&str>) -> String {
    if resource == REVIEW {
        "the permission check (SelfSubjectAccessReview)".to_string()
    } else {
        format!("{verb} {resource} {}", where_(ns))
    }
}

fn where_(ns: Option<&str>) -> String {
    match ns {
        Some(ns) => format!("in namespace {ns:?}"),
        None => "in all namespaces".to_string(),
    }
}

/// The file in `deploy/rbac/` that grants `verb` on `resource`.
pub fn rbac_file(verb: &str, resource: &str) -> &'static str {
    let read = matches!(verb, "get" | "list" | "watch");
    if resource.starts_with("pods/portforward") {
        VERIFIER_FILE
    } else if resource.starts_with("sidecars") && !read {
        APPLIER_FILE
    } else {
        READER_FILE
    }
}

/// An error's text with its causes, each said once: kube's and hyper's
/// wrappers (`ServiceError: client error (Connect): ...`) repeat what
/// their source says.
fn error_chain(e: &dyn std::error::Error) -> String {
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
fn clean_quotes(s: &str) -> String {
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
                "Istio CRDs are not installed: the API server at {} does not serve {}; install Istio (or its CRDs) first, or read manifests with --manifests",
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
    /// verify: port-forwards to istiod in this namespace (`None` with
    /// `--istiod-url`).
    Verify { istiod: Option<String> },
}

impl Purpose {
    /// The Role name printed for what is missing.
    fn role_name(&self) -> &'static str {
        match self {
            Purpose::Read => "meshscope-reader",
            Purpose::Apply { .. } => "meshscope-applier",
            Purpose::Verify { .. } => "meshscope-verifier",
        }
    }

    /// What the command needs in namespace `ns` (`None`: all) besides
    /// reading.
    fn needs(&self, ns: Option<&str>) -> Vec<Need> {
        let need = |verb, group, resource, ns: Option<&str>| Need {
            verb,
            group,
            resource,
            namespace: ns.map(str::to_string),
        };
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
            Purpose::Verify { istiod: i } => i.as_deref().map(istiod).unwrap_or_default(),
        }
    }
}

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
/// too).
const SHARED: [(&str, &str); 7] = [
    ("", "services"),
    ("networking.istio.io", "sidecars"),
    ("networking.istio.io", "serviceentries"),
    ("networking.istio.io", "virtualservices"),
    ("networking.istio.io", "destinationrules"),
    ("telemetry.istio.io", "telemetries"),
    ("security.istio.io", "authorizationpolicies"),
];

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

pub struct Live {
    pub client: Client,
    pub server: String,
    pub default_namespace: String,
    /// Items per page when listing.
    pub page_size: u32,
    /// The bound on each call, retries and pages included.
    pub timeout: Option<Duration>,
    /// Whether a terminal was told what we wait for.
    noted: Arc<AtomicBool>,
    /// What the reads had to do differently, for stderr (a list that
    /// expired mid-way and was listed again).
    notes: Arc<std::sync::Mutex<Vec<String>>>,
}

/// `KUBECONFIG`, `--kubeconfig` or `~/.kube/config`, for error texts.
fn read_kubeconfig(path: &Path, what: &str) -> anyhow::Result<Kubeconfig> {
    Kubeconfig::read_from(path).map_err(|e| match e {
        KubeconfigError::ReadConfig(io, _) => anyhow::anyhow!(
            "cannot read {what} {}: {}; point {what} at a kubeconfig file",
            path.display(),
            io_text(&io)
        ),
        KubeconfigError::Parse(p) => anyhow::anyhow!(
            "cannot parse {what} {}: {}; fix its YAML",
            path.display(),
            p.to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
        ),
        other => anyhow::anyhow!(
            "invalid {what} {}: {}",
            path.display(),
            clean_quotes(&other.to_string())
        ),
    })
}

/// `No such file or directory (os error 2)` as `no such file or directory`.
fn io_text(e: &std::io::Error) -> String {
    let t = e.to_string();
    let t = t.split(" (os error").next().unwrap_or_default();
    let mut c = t.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

/// The kubeconfig as kubectl finds it: `--kubeconfig`, else every file
/// of `KUBECONFIG` that exists, merged (the first to set a value wins),
/// else `~/.kube/config`; `None` when there is none.
pub fn load_kubeconfig(flag: Option<&Path>) -> anyhow::Result<Option<(Kubeconfig, String)>> {
    if let Some(p) = flag {
        let what = format!("--kubeconfig {}", p.display());
        return Ok(Some((read_kubeconfig(p, "--kubeconfig")?, what)));
    }
    if let Some(v) = std::env::var_os("KUBECONFIG") {
        let paths: Vec<PathBuf> = std::env::split_paths(&v)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if !paths.is_empty() {
            let existing: Vec<&PathBuf> = paths.iter().filter(|p| p.exists()).collect();
            if existing.is_empty() {
                anyhow::bail!(
                    "no file in KUBECONFIG exists ({}); set KUBECONFIG to your kubeconfig, or pass --kubeconfig",
                    paths
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            let mut merged = Kubeconfig::default();
            for p in &existing {
                let k = read_kubeconfig(p, "KUBECONFIG file")?;
                merged = merged.merge(k).map_err(|e| {
                    anyhow::anyhow!(
                        "cannot merge KUBECONFIG file {} with the ones before it: {e}",
                        p.display()
                    )
                })?;
            }
            let what = if existing.len() == 1 {
                format!("KUBECONFIG {}", existing[0].display())
            } else {
                format!(
                    "KUBECONFIG ({})",
                    existing
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Ok(Some((merged, what)));
        }
    }
    let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
        return Ok(None);
    };
    let default = PathBuf::from(home).join(".kube").join("config");
    if !default.exists() {
        return Ok(None);
    }
    let what = default.display().to_string();
    Ok(Some((read_kubeconfig(&default, "kubeconfig")?, what)))
}

/// A kubeconfig that does not name a usable context, cluster or URL, as
/// one line with the fix.
fn kubeconfig_error(e: KubeconfigError, k: &Kubeconfig, from: &str) -> anyhow::Error {
    let contexts = || {
        let names: Vec<&str> = k.contexts.iter().map(|c| c.name.as_str()).collect();
        if names.is_empty() {
            "it has none".to_string()
        } else {
            format!("it has {}", names.join(", "))
        }
    };
    match e {
        KubeconfigError::CurrentContextNotSet => anyhow::anyhow!(
            "{from} sets no current-context ({}); pass --context, or run `kubectl config use-context NAME`",
            contexts()
        ),
        KubeconfigError::LoadContext(name) => anyhow::anyhow!(
            "context {name:?} is not in {from} ({}); pass one of them with --context",
            contexts()
        ),
        KubeconfigError::LoadClusterOfContext(cluster) => anyhow::anyhow!(
            "the context names cluster {cluster:?}, which {from} does not define; fix the context, or pass another --context"
        ),
        KubeconfigError::MissingClusterUrl => anyhow::anyhow!(
            "the context's cluster in {from} has no server URL; set clusters[].cluster.server"
        ),
        KubeconfigError::ParseClusterUrl(u) => anyhow::anyhow!(
            "the context's cluster in {from} has an invalid server URL ({u}); fix clusters[].cluster.server"
        ),
        KubeconfigError::LoadCertificateAuthority(e) => anyhow::anyhow!(
            "cannot load the certificate authority named in {from} ({}); fix the cluster's certificate-authority(-data)",
            error_chain(&e)
        ),
        KubeconfigError::LoadClientCertificate(e) | KubeconfigError::LoadClientKey(e) => {
            anyhow::anyhow!(
                "cannot load the client certificate or key named in {from} ({}); fix the user's client-certificate(-data) and client-key(-data)",
                error_chain(&e)
            )
        }
        other => anyhow::anyhow!("invalid {from}: {}", error_chain(&other)),
    }
}

/// How to reach the API server: the connection flags, validated.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    pub request_timeout: RequestTimeout,
    /// Objects per page of a list (`--chunk-size`).
    pub chunk_size: u32,
}

impl Live {
    /// Connects like kubectl: --kubeconfig, else KUBECONFIG, else
    /// ~/.kube/config, else the in-cluster service account.
    pub async fn connect(c: &ConnectOptions) -> anyhow::Result<Live> {
        let opts = KubeConfigOptions {
            context: c.context.clone(),
            cluster: None,
            user: None,
        };
        let mut config = match load_kubeconfig(c.kubeconfig.as_deref())? {
            Some((k, from)) => Config::from_custom_kubeconfig(k.clone(), &opts)
                .await
                .map_err(|e| kubeconfig_error(e, &k, &from))?,
            None => Config::incluster().map_err(|_| {
                anyhow::anyhow!(
                    "no kubeconfig found: pass --kubeconfig or set KUBECONFIG (or read files with --manifests)"
                )
            })?,
        };
        let timeout = c.request_timeout.get();
        if let Some(t) = timeout {
            // Per connection and per read; `bounded` bounds each call as a
            // whole (kube's retries and every page included).
            config.connect_timeout = Some(t);
            config.read_timeout = Some(t);
            // Count from the request, not from when a pooled connection
            // went idle.
            config.reset_reader_on_write = true;
        }
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string();
        let default_namespace = config.default_namespace.clone();
        let client = Client::try_from(config).map_err(|e| {
            anyhow::anyhow!(
                "cannot create a client for {server}: {}; check the user's credentials in the kubeconfig",
                error_chain(&e)
            )
        })?;
        Ok(Live {
            client,
            server,
            default_namespace,
            page_size: c.chunk_size.max(1),
            timeout,
            noted: Arc::new(AtomicBool::new(false)),
            notes: Arc::default(),
        })
    }

    /// Runs one call (a list with all its pages, or a single request),
    /// bounded by `--request-timeout` as a whole. On a terminal, says
    /// once after a few seconds what is being waited for.
    async fn bounded<T>(
        &self,
        verb: &'static str,
        resource: &str,
        ns: Option<&str>,
        call: impl Future<Output = Result<T, ApiFailure>>,
    ) -> Result<T, ApiFailure> {
        let note = async {
            tokio::time::sleep(NOTE_AFTER).await;
            if std::io::stderr().is_terminal() && !self.noted.swap(true, Ordering::SeqCst) {
                eprintln!(
                    "waiting for the API server at {} to answer {} (gives up after {}; see --request-timeout)",
                    self.server,
                    asked(verb, resource, ns),
                    RequestTimeout(self.timeout),
                );
            }
            std::future::pending::<()>().await;
        };
        let call = async {
            tokio::select! {
                r = call => r,
                () = note => unreachable!("the note never finishes"),
            }
        };
        match self.timeout {
            None => call.await,
            Some(t) => match tokio::time::timeout(t, call).await {
                // The connection's own timeouts are the same bound.
                Ok(Err(ApiFailure {
                    kind: FailureKind::Timeout(None),
                    verb,
                    resource,
                    namespace,
                    server,
                })) => Err(ApiFailure {
                    kind: FailureKind::Timeout(Some(t)),
                    verb,
                    resource,
                    namespace,
                    server,
                }),
                Ok(r) => r,
                Err(_) => Err(ApiFailure {
                    verb,
                    resource: resource.to_string(),
                    namespace: ns.map(str::to_string),
                    server: self.server.clone(),
                    kind: FailureKind::Timeout(Some(t)),
                }),
            },
        }
    }

    fn fail(
        &self,
        e: kube::Error,
        verb: &'static str,
        ar: &ApiResource,
        ns: Option<&str>,
    ) -> ApiFailure {
        ApiFailure::from_kube(e, verb, &resource_name(ar), ns, &self.server)
    }

    /// The notes the reads so far left, taken (each is said once).
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Lists one resource through `api`, page by page, within the timeout.
    ///
    /// A continue token the API server has compacted away (410 Gone on a
    /// later page) restarts the list from the start, once, and leaves a
    /// note: the pages read so far are of an older state and are dropped,
    /// never mixed with newer ones. A second expiry is an error.
    async fn pages<K>(
        &self,
        api: Api<K>,
        ar: &ApiResource,
        ns: Option<&str>,
    ) -> Result<Vec<K>, ApiFailure>
    where
        K: Clone + serde::de::DeserializeOwned + fmt::Debug,
    {
        self.pages_selected(api, ar, ns, None).await
    }

    /// [`Live::pages`] of the objects with the label selector `selector`.
    async fn pages_selected<K>(
        &self,
        api: Api<K>,
        ar: &ApiResource,
        ns: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<K>, ApiFailure>
    where
        K: Clone + serde::de::DeserializeOwned + fmt::Debug,
    {
        let all = async {
            let mut out = Vec::new();
            let mut token: Option<String> = None;
            let mut restarted = false;
            loop {
                let mut lp = ListParams::default().limit(self.page_size);
                if let Some(sel) = selector {
                    lp = lp.labels(sel);
                }
                if let Some(t) = &token {
                    lp = lp.continue_token(t);
                }
                let page = match api.list(&lp).await {
                    Ok(page) => page,
                    Err(kube::Error::Api(s)) if s.code == 410 && token.is_some() => {
                        let what = format!("the list of {} {}", resource_name(ar), where_(ns));
                        if restarted {
                            return Err(ApiFailure {
                                verb: "list",
                                resource: resource_name(ar),
                                namespace: ns.map(str::to_string),
                                server: self.server.clone(),
                                kind: FailureKind::Other(format!(
                                    "the list expired mid-way twice (410 Gone: {}); the API server compacts faster than {} pages of {} can be read: retry with a larger --chunk-size",
                                    s.message,
                                    out.len().div_ceil(self.page_size as usize).max(1),
                                    self.page_size
                                )),
                            });
                        }
                        restarted = true;
                        self.notes.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                            "{what} expired after {} (410 Gone: the API server compacted the state the pages were read from); listed again from the start",
                            crate::output::plural(out.len(), "item", "items"),
                        ));
                        out.clear();
                        token = None;
                        continue;
                    }
                    Err(e) => return Err(self.fail(e, "list", ar, ns)),
                };
                out.extend(page.items);
                match page.metadata.continue_ {
                    Some(t) if !t.is_empty() => token = Some(t),
                    _ => break,
                }
            }
            Ok(out)
        };
        self.bounded("list", &resource_name(ar), ns, all).await
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
    async fn list_istio(&self, ar: ApiResource, ns: Option<String>) -> Listed {
        let api: Api<DynamicObject> = match &ns {
            Some(n) => Api::namespaced_with(self.client.clone(), n, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let items = self.pages(api, &ar, ns.as_deref()).await?;
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
    /// (explain, impact) but were given `-n`: the namespace to read alone
    /// when the caller may not read them all.
    pub async fn read(
        &self,
        namespaces: Option<&BTreeSet<String>>,
        fallback: Option<&str>,
        purpose: &Purpose,
        pod_logs: bool,
    ) -> anyhow::Result<Read> {
        let first = self.read_scoped(namespaces, purpose, pod_logs).await;
        let (Err(ReadError::Rbac(missing)), None, Some(ns)) = (&first, namespaces, fallback) else {
            return first.map_err(|e| e.into_anyhow(purpose));
        };
        let set = BTreeSet::from([ns.to_string()]);
        let mut read = self
            .read_scoped(Some(&set), purpose, pod_logs)
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

    async fn read_scoped(
        &self,
        namespaces: Option<&BTreeSet<String>>,
        purpose: &Purpose,
        pod_logs: bool,
    ) -> Result<Read, ReadError> {
        let need = |verb, group, resource, ns: Option<&str>| Need {
            verb,
            group,
            resource,
            namespace: ns.map(str::to_string),
        };
        let scopes: Vec<Option<&str>> = match namespaces {
            None => vec![None],
            Some(set) => set.iter().map(|n| Some(n.as_str())).collect(),
        };
        // What the result cannot do without: reads in the namespaces in
        // scope, and what the command itself does there.
        let mut required: Vec<Need> = Vec::new();
        for ns in &scopes {
            for (g, r) in WORKLOADS.iter().chain(&SHARED) {
                required.push(need("list", g, r, *ns));
            }
            if pod_logs {
                required.push(need("get", "", "pods/log", *ns));
            }
            required.extend(purpose.needs(*ns));
        }
        // What a complete result needs besides: the shared kinds from every
        // namespace, and the namespaces' labels.
        let mut wide: Vec<Need> = vec![need("list", "", "namespaces", None)];
        if namespaces.is_some() {
            wide.extend(SHARED.iter().map(|(g, r)| need("list", g, r, None)));
            wide.push(need("list", DISCOVERY_GROUP, "endpointslices", None));
        }
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
        let mut limitations = Vec::new();
        let shared_wide_denied: Vec<(&str, &str)> = SHARED
            .iter()
            .copied()
            .filter(|(g, r)| wide_denied.contains(&need("list", g, r, None)))
            .collect();
        if let (Some(set), false) = (namespaces, shared_wide_denied.is_empty()) {
            limitations.push(format!(
                "cross-namespace dependencies unknown: cannot list {} in all namespaces, so only those in {} are read; grant {READER_FILE} for the rest",
                shared_wide_denied
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
        let list_namespaces = !wide_denied.contains(&need("list", "", "namespaces", None));
        // Under -n, the pods of other namespaces are not read: the
        // EndpointSlices of headless Services name their IPs.
        let slices = namespaces.is_some()
            && !wide_denied.contains(&need("list", DISCOVERY_GROUP, "endpointslices", None));
        if namespaces.is_some() && !slices {
            limitations.push(format!(
                "calls to pod IPs of headless Services in other namespaces are not mapped back: cannot list endpointslices.{DISCOVERY_GROUP} in all namespaces; grant {READER_FILE}"
            ));
        }
        let mut inputs = self
            .list(namespaces, &shared_wide_denied, list_namespaces, slices)
            .await?;
        if !list_namespaces {
            let set = namespaces.expect("listing namespaces is required with -A");
            let got = self.namespaces_one_by_one(set, &mut limitations).await?;
            inputs.namespaces.extend(got);
        }
        // The mesh config: ConfigMap istio in istio-system; missing means
        // defaults.
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), "istio-system");
        let cm = self
            .bounded("get", "configmaps", Some("istio-system"), async {
                cms.get_opt("istio").await.map_err(|e| {
                    let ar = ApiResource::erase::<ConfigMap>(&());
                    self.fail(e, "get", &ar, Some("istio-system"))
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
            Err(e) => return Err(e.into()),
        }
        Ok(Read {
            inputs,
            limitations,
        })
    }

    /// Lists everything, concurrently; the first failure ends the read.
    /// The kinds in `shared_in_scope` are listed per namespace in scope
    /// instead of cluster-wide.
    async fn list(
        &self,
        namespaces: Option<&BTreeSet<String>>,
        shared_in_scope: &[(&str, &str)],
        list_namespaces: bool,
        headless_slices: bool,
    ) -> Result<Inputs, ApiFailure> {
        use futures::future::BoxFuture;
        use futures::FutureExt;
        let scopes: Vec<Option<&str>> = match namespaces {
            None => vec![None],
            Some(set) => set.iter().map(|n| Some(n.as_str())).collect(),
        };
        let mut jobs: Vec<BoxFuture<'_, Listed>> = Vec::new();
        if list_namespaces {
            jobs.push(
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
            );
        }
        let per_scope = |plural: &str| -> Vec<Option<String>> {
            if shared_in_scope.iter().any(|(_, r)| *r == plural) {
                scopes.iter().map(|s| s.map(str::to_string)).collect()
            } else {
                vec![None]
            }
        };
        if headless_slices {
            jobs.push(
                async {
                    let ar = ApiResource::erase::<EndpointSlice>(&());
                    let api: Api<EndpointSlice> = Api::all(self.client.clone());
                    let items = self
                        .pages_selected(api, &ar, None, Some(HEADLESS_LABEL))
                        .await?;
                    Ok(Box::new(move |i: &mut Inputs| {
                        i.endpoint_slices.extend(items);
                        Ok(())
                    }) as Fill)
                }
                .boxed(),
            );
        }
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
        for (group, kind, plural) in [
            (
                meshscope_shared::istio::TELEMETRY_GROUP,
                "Telemetry",
                "telemetries",
            ),
            (
                meshscope_shared::istio::SECURITY_GROUP,
                "AuthorizationPolicy",
                "authorizationpolicies",
            ),
        ] {
            for ns in per_scope(plural) {
                // Without these CRDs there are none of them: not an error.
                jobs.push(
                    async move {
                        match self.list_istio(istio_in(group, kind, plural), ns).await {
                            Err(ApiFailure {
                                kind: FailureKind::NotFound(_),
                                ..
                            }) => Ok(Box::new(|_: &mut Inputs| Ok(())) as Fill),
                            other => other,
                        }
                    }
                    .boxed(),
                );
            }
        }
        for ns in scopes.iter().copied() {
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
        // try_collect stops at the first failure, so a server that hangs
        // costs one timeout, not one per wave of PARALLELISM lists.
        let fills: Vec<Fill> = futures::stream::iter(jobs)
            .buffer_unordered(PARALLELISM)
            .try_collect()
            .await?;
        let mut inputs = Inputs::default();
        for fill in fills {
            fill(&mut inputs)?;
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

/// `pods`, `deployments.apps`, `sidecars.networking.istio.io`.
fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

fn resource_name(ar: &ApiResource) -> String {
    qualified(&ar.group, &ar.plural)
}

/// One error for everything missing: what RBAC forbids, by namespace and
/// verb, the files in `deploy/rbac/` that grant it, and one Role (or
/// ClusterRole) with exactly that.
pub fn rbac_error(missing: &[Need], purpose: &Purpose) -> String {
    // The verbs of each resource, then the resources of each namespace
    // that lack the same verbs: "get, patch on sidecars... in namespace x".
    let mut verbs: Vec<(String, Option<&str>, Vec<&str>)> = Vec::new();
    for n in missing {
        let what = qualified(n.group, n.resource);
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
        role_for(purpose.role_name(), missing)
    )
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
    // The verbs of each resource...
    let mut by_resource: Vec<(&str, &str, Vec<&str>)> = Vec::new();
    for n in missing {
        match by_resource
            .iter_mut()
            .find(|(g, r, _)| *g == n.group && *r == n.resource)
        {
            Some((_, _, verbs)) if !verbs.contains(&n.verb) => verbs.push(n.verb),
            Some(_) => {}
            None => by_resource.push((n.group, n.resource, vec![n.verb])),
        }
    }
    // ...and the resources of each group that take the same verbs.
    let mut rules: Vec<(&str, Vec<&str>, Vec<&str>)> = Vec::new();
    for (g, r, verbs) in by_resource {
        match rules
            .iter_mut()
            .find(|(rg, _, rv)| *rg == g && *rv == verbs)
        {
            Some((_, resources, _)) => resources.push(r),
            None => rules.push((g, vec![r], verbs)),
        }
    }
    let quoted = |v: &[&str]| {
        v.iter()
            .map(|x| format!("\"{x}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (g, resources, verbs) in rules {
        out.push_str(&format!(
            "\n- apiGroups: [\"{g}\"]\n  resources: [{}]\n  verbs: [{}]",
            quoted(&resources),
            quoted(&verbs)
        ));
    }
    out
}

pub fn istio(kind: &str, plural: &str) -> ApiResource {
    istio_in(meshscope_shared::istio::NETWORKING_GROUP, kind, plural)
}

/// An Istio kind (`v1`) of another API group.
pub fn istio_in(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: kind.into(),
        plural: plural.into(),
    }
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
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86400)
        );
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn request_timeouts_read_as_kubectl_reads_them() {
        let t = |s: &str| parse_request_timeout(s).map(RequestTimeout::get);
        assert_eq!(t("30s"), Ok(Some(Duration::from_secs(30))));
        assert_eq!(t("1m"), Ok(Some(Duration::from_secs(60))));
        assert_eq!(t("500ms"), Ok(Some(Duration::from_millis(500))));
        assert_eq!(t("1m30s"), Ok(Some(Duration::from_secs(90))));
        assert_eq!(t("1.5h"), Ok(Some(Duration::from_secs(5400))));
        assert_eq!(t("7"), Ok(Some(Duration::from_secs(7))));
        assert_eq!(t("0"), Ok(None));
        assert_eq!(t("0s"), Ok(None));
        assert!(t("-1s").unwrap_err().contains("negative"));
        assert!(t("5d").unwrap_err().contains("unknown unit \"d\""));
        assert!(t("soon").is_err() && t("").is_err() && t("1.2.3s").is_err());
        assert_eq!(RequestTimeout(Some(Duration::from_millis(500))).secs(), 1);
        assert_eq!(RequestTimeout(None).secs(), u64::MAX);
        assert_eq!(RequestTimeout::default().to_string(), "30s");
    }

    #[test]
    fn one_error_for_everything_rbac_forbids() {
        let need = |verb, group, resource, ns: Option<&str>| Need {
            verb,
            group,
            resource,
            namespace: ns.map(String::from),
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
            "RBAC forbids list on namespaces in all namespaces, and list on pods, deployments.apps, replicasets.apps in namespace \"shop\", and patch on sidecars.networking.istio.io in namespace \"shop\"; grant deploy/rbac/meshscope-reader.yaml and deploy/rbac/meshscope-applier.yaml, or at least:\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: meshscope-applier\nrules:\n- apiGroups: [\"\"]\n  resources: [\"namespaces\", \"pods\"]\n  verbs: [\"list\"]\n- apiGroups: [\"apps\"]\n  resources: [\"deployments\", \"replicasets\"]\n  verbs: [\"list\"]\n- apiGroups: [\"networking.istio.io\"]\n  resources: [\"sidecars\"]\n  verbs: [\"patch\"]"
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
