//! Requests: the clap structs of [`crate::args`], parsed once into typed
//! values with every flag checked up front, so that the commands never see
//! a raw flag. Each check keeps the error text it had when the commands
//! made it; the order of the checks is the order they were made in.

pub(crate) mod suppress;
mod watch;
mod webhook;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use meshscope_shared as scope;
use scope::audit::{self, Code, CodeDoc, Severity};
use scope::explain::Target;
use scope::IstioVersion;

use crate::args::{
    self, Command, Common, DryRun, Format, RecommendOutput, ReportOutput, VersionOutput,
};
use crate::duration::parse_duration;
use crate::jsonpath::Template;
use crate::live::{ConnectOptions, Purpose};
use crate::selector::Selector;
use crate::traffic::TrafficSource;

pub use suppress::Suppression;
pub use watch::WatchRequest;
pub use webhook::{ManifestsRequest, WebhookRequest};

/// Whose istio-proxy logs `--from-pod-logs` reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PodLogScope {
    /// The pods of the namespaces listed.
    #[default]
    Listed,
    /// The pods of `-n`, or of the context's namespace without it
    /// (commands that read every namespace's objects for one namespace's
    /// answer narrow it).
    Namespace,
}

/// Where the mesh comes from and what part of it to look at: the input
/// flags every mesh-reading command shares, checked.
#[derive(Debug, Clone, Default)]
pub struct MeshRequest {
    pub namespace: Option<String>,
    pub all_namespaces: bool,
    pub selector: Option<Selector>,
    pub manifests: Vec<PathBuf>,
    /// Where the traffic is observed, in the order the sources are read.
    pub sources: Vec<TrafficSource>,
    pub mesh_config: Option<PathBuf>,
    /// `--istio-version`, one of the releases meshscope knows.
    pub istio_version: Option<IstioVersion>,
    pub cluster_domain: Option<String>,
    pub inject_by_default: bool,
    pub strict: bool,
    /// `--since`, parsed when a source reads it (pod logs, Prometheus).
    pub since: Option<Duration>,
    pub connect: ConnectOptions,
    /// What the command does besides reading, for the one-pass RBAC check.
    pub purpose: Purpose,
    pub pod_logs: PodLogScope,
    /// `--from-manifest-hints`: read the ConfigMaps workloads use, for the
    /// hosts their manifests name.
    pub manifest_hints: bool,
    /// `-f`: objects about to be applied, laid over the cluster's.
    pub planned: Vec<PathBuf>,
    /// Every namespace is read for an answer about one (`-n`, else the
    /// context's): a user who may not read them all gets that one's.
    pub narrowable: bool,
    /// Whether networking.istio.io Gateways are read too.
    pub gateways: GatewayRead,
}

/// Whether a live read lists networking.istio.io Gateways.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GatewayRead {
    #[default]
    No,
    /// `--exports`: a forbidden list is an error.
    Needed,
    /// `audit` with a traffic source (MS0020): a forbidden list is a
    /// warning, and the advice that needs them is left out.
    IfAllowed,
}

impl MeshRequest {
    /// How far back pod logs are read.
    pub fn pod_log_window(&self) -> Duration {
        self.since.unwrap_or(Duration::from_secs(24 * 3600))
    }

    /// How far back Prometheus is asked.
    pub fn prometheus_window(&self) -> Duration {
        self.since.unwrap_or(Duration::from_secs(7 * 24 * 3600))
    }

    /// The access-log files given (`--access-log`), if any.
    pub fn access_logs(&self) -> &[PathBuf] {
        self.sources
            .iter()
            .find_map(|s| match s {
                TrafficSource::AccessLogs(paths) => Some(paths.as_slice()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// Whether the proxies' logs are read (`--from-pod-logs`).
    pub fn reads_pod_logs(&self) -> bool {
        self.sources.contains(&TrafficSource::PodLogs)
    }

    /// The Prometheus asked (`--prometheus`), if any.
    pub fn prometheus(&self) -> Option<&str> {
        self.sources.iter().find_map(|s| match s {
            TrafficSource::Prometheus(url) => Some(url.as_str()),
            _ => None,
        })
    }

    /// Whether the mesh is read from a cluster.
    pub fn is_live(&self) -> bool {
        self.manifests.is_empty()
    }

    /// The checks in the order loading the world made them.
    fn parse(c: &Common) -> Result<MeshRequest> {
        check_sources(c)?;
        let version = istio_version(c)?;
        Self::parse_rest(c, version)
    }

    /// Everything after the sources and `--istio-version`.
    fn parse_rest(c: &Common, istio_version: Option<IstioVersion>) -> Result<MeshRequest> {
        let selector = c.selector.as_deref().map(Selector::parse).transpose()?;
        let sources = c.traffic.sources();
        let reads_since = c.manifests.is_empty() && sources.iter().any(TrafficSource::from_cluster);
        let since = c.traffic.since.as_deref().map(parse_duration).transpose()?;
        if since.is_some() && !reads_since {
            bail!("--since sets how far back --from-pod-logs and --prometheus read; --access-log files and --manifests are read whole (cut a file to the lines you want first)");
        }
        Ok(MeshRequest {
            namespace: c.namespace.clone(),
            all_namespaces: c.all_namespaces,
            selector,
            manifests: c.manifests.clone(),
            sources,
            mesh_config: c.mesh_config.clone(),
            istio_version,
            cluster_domain: c.cluster_domain.clone(),
            inject_by_default: c.inject_by_default,
            strict: c.traffic.strict,
            since,
            connect: c.connect_options()?,
            purpose: Purpose::Read,
            pod_logs: PodLogScope::Listed,
            manifest_hints: false,
            planned: Vec::new(),
            narrowable: false,
            gateways: GatewayRead::No,
        })
    }

    /// The same mesh, read in every namespace; with `-n`, traffic only
    /// for the answer's namespace (its pods' logs).
    fn everywhere(mut self) -> MeshRequest {
        if !self.all_namespaces {
            self.pod_logs = PodLogScope::Namespace;
            self.narrowable = true;
        }
        self.all_namespaces = true;
        self
    }
}

/// Pod logs and Prometheus are read from a cluster.
fn check_sources(c: &Common) -> Result<()> {
    let from_cluster = c.traffic.sources().iter().any(TrafficSource::from_cluster);
    if !c.manifests.is_empty() && from_cluster {
        bail!("--from-pod-logs and --prometheus read from a cluster; they cannot be combined with --manifests");
    }
    Ok(())
}

/// `--istio-version`, checked against the releases meshscope knows.
fn istio_version(c: &Common) -> Result<Option<IstioVersion>> {
    c.istio_version
        .as_deref()
        .map(scope::detect::known_version)
        .transpose()
        .map_err(|e| anyhow!("--istio-version: {e}"))
}

/// `-` read twice, or by two flags, would see stdin empty the second time:
/// refuse before reading anything.
fn check_stdin(c: &Common) -> Result<()> {
    let dash = |paths: &[PathBuf]| paths.iter().filter(|p| p.as_os_str() == "-").count();
    let (manifests, logs) = (dash(&c.manifests), dash(&c.traffic.access_logs));
    if manifests > 0 && logs > 0 {
        bail!("--manifests - and --access-log - cannot both read stdin; write one of them to a file and pass its path");
    }
    if manifests > 1 {
        bail!("--manifests - is given more than once; stdin is read once, so pass it once");
    }
    if logs > 1 {
        bail!("--access-log - is given more than once; stdin is read once, so pass it once");
    }
    Ok(())
}

/// `-f`: only live (offline, the files are the mesh: `--manifests`), and
/// stdin read once.
fn check_planned(c: &Common, files: &[PathBuf]) -> Result<Vec<PathBuf>> {
    if files.is_empty() {
        return Ok(Vec::new());
    }
    if !c.manifests.is_empty() {
        bail!("-f lays objects over a cluster's; offline, pass those files with --manifests too");
    }
    let stdin = files.iter().filter(|p| p.as_os_str() == "-").count();
    if stdin > 1 || (stdin == 1 && c.traffic.access_logs.iter().any(|p| p.as_os_str() == "-")) {
        bail!("-f - reads stdin, which is read once: give it once, and no --access-log -");
    }
    Ok(files.to_vec())
}

/// What `recommend`, `apply` and `diff` recommend.
#[derive(Debug, Clone)]
pub struct RecommendSpec {
    pub mesh: MeshRequest,
    /// `--workload`: only this workload (NAME or KIND/NAME).
    pub workload: Option<String>,
    /// `--include`, each a valid host for the Istio version.
    pub include: Vec<String>,
    pub allow_idle: bool,
    pub per_namespace: bool,
    /// Drop hosts of managed Sidecars not seen in the observed window.
    pub prune_hosts: bool,
    /// `--exports`: exportTo recommendations instead of Sidecars (boxed:
    /// most requests have none).
    pub exports: Option<Box<ExportsSpec>>,
}

/// `--exports`: whose exportTo to recommend. The mesh and the traffic are
/// read from every namespace (callers live elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportsSpec {
    /// `--force-exports`: objects whose owner set exportTo too.
    pub force: bool,
    /// The objects' namespace: `-n`, else the context's (resolved when the
    /// world is loaded); `None` with `-A`.
    pub namespace: Option<String>,
    /// `-A`: the objects of every namespace.
    pub all_namespaces: bool,
}

impl ExportsSpec {
    /// Checks that the Sidecar-only flags are absent and that a traffic
    /// source is given.
    /// `plans`: `recommend`, which plans the exportTo of `-f`'s objects
    /// (not in the cluster yet) into their manifests; `apply` and `diff`
    /// patch objects in the cluster and refuse `-f`.
    fn parse(
        c: &Common,
        flags: &args::RecommendFlags,
        prune_hosts: bool,
        plans: bool,
    ) -> Result<Option<Box<Self>>> {
        if !flags.exports {
            return Ok(None);
        }
        let sidecar_only = [
            ("--workload", flags.workload.is_some()),
            ("--include", !flags.include.is_empty()),
            ("--allow-idle", flags.allow_idle),
            ("--per-namespace", flags.per_namespace),
            ("--from-manifest-hints", flags.from_manifest_hints),
            ("--prune-hosts", prune_hosts),
        ];
        if let Some((flag, _)) = sidecar_only.iter().find(|(_, given)| *given) {
            bail!("{flag} shapes Sidecars; --exports recommends exportTo and does not take it");
        }
        if !flags.filename.is_empty() && !plans {
            bail!("--exports patches objects in the cluster, and -f's are not there yet: plan their exportTo with `kubectl meshscope recommend --exports -f FILE` and apply the manifest it prints");
        }
        if flags.filename.iter().any(|f| f.as_os_str() == "-") {
            bail!("recommend --exports -f prints the files back with their exportTo, so it reads them twice: give a file, not -");
        }
        if c.traffic.sources().is_empty() {
            bail!("--exports keeps the namespaces observed calling each object: give a traffic source (--access-log FILE, --from-pod-logs or --prometheus URL)");
        }
        Ok(Some(Box::new(ExportsSpec {
            force: flags.force_exports,
            namespace: if c.all_namespaces {
                None
            } else {
                c.namespace.clone()
            },
            all_namespaces: c.all_namespaces,
        })))
    }
}

impl RecommendSpec {
    /// `plans`: see [`ExportsSpec::parse`].
    fn parse(
        c: &Common,
        flags: &args::RecommendFlags,
        prune_hosts: bool,
        plans: bool,
    ) -> Result<Self> {
        let exports = ExportsSpec::parse(c, flags, prune_hosts, plans)?;
        let version = istio_version(c)?;
        for h in &flags.include {
            scope::notes::check_include(h, version.unwrap_or_default()).map_err(|e| anyhow!(e))?;
        }
        check_sources(c)?;
        let mut mesh = MeshRequest::parse_rest(c, version)?;
        mesh.manifest_hints = flags.from_manifest_hints;
        mesh.planned = check_planned(c, &flags.filename)?;
        if exports.is_some() {
            // Callers live in other namespaces: every namespace's objects
            // and traffic.
            mesh.all_namespaces = true;
            mesh.gateways = GatewayRead::Needed;
        } else {
            // A gateway's readiness for cluster filtering (MS0025, MS0026)
            // follows its Gateways' routes and EnvoyFilters.
            mesh.gateways = GatewayRead::IfAllowed;
        }
        Ok(RecommendSpec {
            exports,
            mesh,
            workload: flags.workload.clone(),
            include: flags.include.clone(),
            allow_idle: flags.allow_idle,
            per_namespace: flags.per_namespace,
            prune_hosts,
        })
    }
}

#[derive(Debug)]
pub struct RecommendRequest {
    pub spec: RecommendSpec,
    pub output: RecommendOutput,
}

/// How to reach istiod's debug endpoints (`verify`, `apply --wait`).
#[derive(Debug, Clone)]
pub struct IstiodRequest {
    pub urls: Vec<String>,
    pub namespace: String,
    pub revision: Option<String>,
}

impl IstiodRequest {
    fn parse(f: &args::IstiodFlags) -> Self {
        IstiodRequest {
            urls: f.istiod_urls.clone(),
            namespace: f.istio_namespace.clone(),
            revision: f.revision.clone(),
        }
    }

    /// The namespace to port-forward to, unless `--istiod-url` is given.
    fn port_forward_namespace(&self) -> Option<String> {
        self.urls.is_empty().then(|| self.namespace.clone())
    }
}

/// `apply --wait`: how long, as given and parsed.
#[derive(Debug, Clone)]
pub struct Wait {
    pub limit: Duration,
    /// As the user spelled it, for the timeout message.
    pub given: String,
}

#[derive(Debug)]
pub struct ApplyRequest {
    pub spec: RecommendSpec,
    pub dry_run: DryRun,
    pub diff: bool,
    pub force_conflicts: bool,
    pub prune: bool,
    pub wait: Option<Wait>,
    pub istiod: IstiodRequest,
    /// The request timeout, for istiod's port-forwards.
    pub timeout_secs: u64,
    /// `--watch`: keep running.
    pub watch: Option<Box<WatchRequest>>,
}

impl ApplyRequest {
    fn parse(a: args::ApplyArgs, c: &Common) -> Result<Self> {
        if !c.manifests.is_empty() {
            bail!("apply changes a cluster: drop --manifests (use `recommend --manifests ... | kubectl apply -f -` for files)");
        }
        let watch =
            WatchRequest::parse(&a.watch, c, a.dry_run, a.diff, a.prune_hosts)?.map(Box::new);
        if watch.is_some() && !a.rec.filename.is_empty() {
            bail!("--watch follows the cluster: create the objects of -f first (kubectl apply -f), then watch them");
        }
        let wait = match &a.wait {
            Some(_) if a.dry_run != DryRun::None => {
                bail!("--wait waits for istiod to push what was written; a dry run writes nothing")
            }
            Some(t) => Some(Wait {
                limit: parse_duration(t).map_err(|e| anyhow!("--wait: {e}"))?,
                given: t.clone(),
            }),
            // --watch confirms each write on istiod.
            None if watch.is_some() => Some(Wait {
                limit: WATCH_WAIT,
                given: "2m".into(),
            }),
            None => None,
        };
        let istiod = IstiodRequest::parse(&a.istiod);
        let mut spec = RecommendSpec::parse(c, &a.rec, a.prune_hosts, false)?;
        if let Some(e) = &spec.exports {
            let sidecar_only = [
                ("--prune", a.prune),
                ("--watch", watch.is_some()),
                ("--diff", a.diff),
            ];
            if let Some((flag, _)) = sidecar_only.iter().find(|(_, given)| *given) {
                bail!("{flag} is for Sidecars; apply --exports writes exportTo only (see what it would change with diff --exports)");
            }
            if a.dry_run != DryRun::Client {
                spec.mesh.purpose = Purpose::Exports {
                    namespace: e.namespace.clone(),
                    all: e.all_namespaces,
                    istiod: wait.as_ref().and_then(|_| istiod.port_forward_namespace()),
                };
            }
        } else if a.dry_run != DryRun::Client {
            // Every permission apply needs is checked with the reads, in one pass.
            let istiod = wait.as_ref().and_then(|_| istiod.port_forward_namespace());
            spec.mesh.purpose = match &watch {
                Some(w) => Purpose::Watch {
                    prune: a.prune,
                    istiod,
                    lease: w.lease.clone(),
                },
                None => Purpose::Apply {
                    prune: a.prune,
                    istiod,
                },
            };
        }
        Ok(ApplyRequest {
            spec,
            dry_run: a.dry_run,
            diff: a.diff,
            force_conflicts: a.force_conflicts,
            prune: a.prune,
            wait,
            istiod,
            timeout_secs: c.connection.request_timeout.secs(),
            watch,
        })
    }
}

/// How long `--watch` waits for istiod to confirm a pass's writes, unless
/// `--wait` says.
const WATCH_WAIT: Duration = Duration::from_secs(120);

#[derive(Debug)]
pub struct DiffRequest {
    pub spec: RecommendSpec,
    pub force_conflicts: bool,
    pub prune: bool,
}

impl DiffRequest {
    fn parse(a: args::DiffArgs, c: &Common) -> Result<Self> {
        if !c.manifests.is_empty() {
            bail!("diff compares with the cluster: drop --manifests (for files, `recommend --manifests ...` prints the Sidecars)");
        }
        let mut spec = RecommendSpec::parse(c, &a.rec, a.prune_hosts, false)?;
        // The dry-run applies are checked with the reads, in one pass.
        spec.mesh.purpose = match &spec.exports {
            Some(_) if a.prune => {
                bail!("--prune deletes Sidecars; diff --exports shows exportTo changes only")
            }
            Some(e) => Purpose::Exports {
                namespace: e.namespace.clone(),
                all: e.all_namespaces,
                istiod: None,
            },
            None => Purpose::Diff,
        };
        Ok(DiffRequest {
            spec,
            force_conflicts: a.force_conflicts,
            prune: a.prune,
        })
    }
}

#[derive(Debug)]
pub struct VerifyRequest {
    /// Every namespace (predictions need them all), with `purpose` set.
    pub mesh: MeshRequest,
    /// `-n` as given.
    pub namespace: Option<String>,
    /// `-A` as given.
    pub all_namespaces: bool,
    /// `pod/NAME` or `KIND/NAME`.
    pub target: Option<String>,
    pub output: ReportOutput,
    pub istiod: IstiodRequest,
    pub timeout_secs: u64,
}

impl VerifyRequest {
    fn parse(a: args::VerifyArgs, c: &Common) -> Result<Self> {
        if !c.manifests.is_empty() {
            bail!("verify asks the cluster's istiod: drop --manifests");
        }
        if let Some(t) = a.target.as_deref().filter(|t| !t.contains('/')) {
            bail!("expected pod/NAME or KIND/NAME (e.g. deployment/reviews-v1), got {t:?}");
        }
        let istiod = IstiodRequest::parse(&a.istiod);
        let mut mesh = MeshRequest::parse(c)?.everywhere();
        // Reaching istiod is checked with the reads, in one pass.
        mesh.purpose = Purpose::Verify {
            istiod: istiod.port_forward_namespace(),
        };
        Ok(VerifyRequest {
            mesh,
            namespace: c.namespace.clone(),
            all_namespaces: c.all_namespaces,
            target: a.target,
            output: a.output.get(),
            istiod,
            timeout_secs: c.connection.request_timeout.secs(),
        })
    }
}

#[derive(Debug)]
pub struct AuditRequest {
    pub mesh: MeshRequest,
    pub output: ReportOutput,
    /// Exit 1 at or above this severity (`None`: never).
    pub fail_on: Option<Severity>,
    /// `--code`: only these (empty: all).
    pub codes: BTreeSet<Code>,
    pub suppressions: Vec<Suppression>,
}

impl AuditRequest {
    fn parse(a: args::AuditArgs, c: &Common) -> Result<Self> {
        let codes = a
            .codes
            .iter()
            .map(|c| suppress::known_code(c, "--code"))
            .collect::<Result<_>>()?;
        let suppressions = a
            .suppress
            .iter()
            .map(|s| Suppression::parse(s))
            .collect::<Result<_>>()?;
        let fail_on = match a.fail_on {
            args::FailOn::Error => Some(Severity::Error),
            args::FailOn::Warning => Some(Severity::Warning),
            args::FailOn::Info => Some(Severity::Info),
            args::FailOn::None => None,
        };
        let mut mesh = MeshRequest::parse(c)?;
        // MS0020 never proposes dropping a namespace that holds a Gateway,
        // and a gateway's readiness for cluster filtering (MS0025, MS0026)
        // follows its Gateways' routes and EnvoyFilters.
        mesh.gateways = GatewayRead::IfAllowed;
        Ok(AuditRequest {
            mesh,
            output: a.output.get(),
            fail_on,
            codes,
            suppressions,
        })
    }
}

/// `report`: what recommend (with its defaults) and audit say, as one page.
#[derive(Debug)]
pub struct ReportRequest {
    pub spec: RecommendSpec,
}

impl ReportRequest {
    fn parse(c: &Common) -> Result<Self> {
        let version = istio_version(c)?;
        check_sources(c)?;
        let mut mesh = MeshRequest::parse_rest(c, version)?;
        if !mesh.sources.is_empty() {
            // MS0020 never proposes dropping a namespace that holds a Gateway.
            mesh.gateways = GatewayRead::IfAllowed;
        }
        Ok(ReportRequest {
            spec: RecommendSpec {
                mesh,
                workload: None,
                include: Vec::new(),
                allow_idle: false,
                per_namespace: false,
                prune_hosts: false,
                exports: None,
            },
        })
    }
}

/// What `explain` explains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Explained {
    /// `pod NAME`.
    Pod(String),
    /// `workload KIND/NAME`, or `KIND NAME`.
    Workload(String),
    /// `gateway/NAME`: a pod serving that Gateway (Istio's or the
    /// Gateway API's).
    Gateway(String),
}

#[derive(Debug)]
pub struct ExplainRequest {
    /// Every namespace: one proxy's scope depends on pods everywhere.
    pub mesh: MeshRequest,
    /// `-n` as given: where the target is.
    pub namespace: Option<String>,
    /// `-A`: the target is looked for in every namespace.
    pub all_namespaces: bool,
    pub target: Explained,
    pub output: ReportOutput,
}

impl ExplainRequest {
    fn parse(a: args::ExplainArgs, c: &Common) -> Result<Self> {
        // `pod NAME`, `deployment NAME`, or kubectl's `pod/NAME`, `deployment/NAME`.
        let (what, name) = match (a.what.split_once('/'), &a.name) {
            (Some((w, n)), None) => (w.to_string(), n.to_string()),
            (None, Some(n)) => (a.what.clone(), n.clone()),
            (Some(_), Some(n)) => bail!(
                "explain {} {n}: give TYPE NAME or TYPE/NAME, not both",
                a.what
            ),
            (None, None) => bail!(
                "explain {}: name what to explain, as pod NAME, pod/NAME or KIND/NAME (such as deployment/reviews-v1)",
                a.what
            ),
        };
        if name.is_empty() {
            bail!("explain {}: the name is empty", a.what);
        }
        let target = match what.to_ascii_lowercase().as_str() {
            "pod" | "pods" | "po" => Explained::Pod(name),
            "workload" => Explained::Workload(name),
            "gateway" | "gateways" | "gw" | "gtw" => Explained::Gateway(name),
            other => Explained::Workload(format!("{other}/{name}")),
        };
        let mut mesh = MeshRequest::parse(c)?.everywhere();
        // A gateway's pod gets the routes of the Istio Gateways it serves,
        // and keeps clusters for EnvoyFilters (read beside them).
        mesh.gateways = GatewayRead::IfAllowed;
        Ok(ExplainRequest {
            mesh,
            namespace: c.namespace.clone(),
            all_namespaces: c.all_namespaces,
            target,
            output: a.output.get(),
        })
    }
}

#[derive(Debug)]
pub struct ImpactRequest {
    /// Every namespace: a change reaches proxies everywhere.
    pub mesh: MeshRequest,
    /// `-n` as given: where the target is.
    pub namespace: Option<String>,
    /// The target as given, for messages.
    pub spec: String,
    pub target: Target,
    pub output: ReportOutput,
}

impl ImpactRequest {
    fn parse(a: args::ImpactArgs, c: &Common) -> Result<Self> {
        let target = Target::parse(&a.target, "").ok_or_else(|| {
            anyhow!(
                "expected service/NAME, serviceentry/NAME, virtualservice/NAME, destinationrule/NAME, httproute/NAME, grpcroute/NAME, tcproute/NAME, tlsroute/NAME or gateway/NAME, got {:?}",
                a.target
            )
        })?;
        let mut mesh = MeshRequest::parse(c)?;
        mesh.all_namespaces = true;
        mesh.narrowable = true;
        // The target may be istio's Gateway (the Gateway API's are always
        // read), and which gateways a change reaches with cluster filtering
        // on follows their Gateways' routes and EnvoyFilters.
        mesh.gateways = GatewayRead::IfAllowed;
        Ok(ImpactRequest {
            mesh,
            namespace: c.namespace.clone(),
            spec: a.target,
            target,
            output: a.output.get(),
        })
    }
}

/// Where `version` reads the pods: `--manifests`, or the cluster.
#[derive(Debug)]
pub enum VersionSource {
    /// `--client`: nowhere.
    Client,
    Manifests(Vec<PathBuf>),
    Cluster(Box<ConnectOptions>),
}

#[derive(Debug)]
pub struct VersionRequest {
    pub source: VersionSource,
    pub istio_version: Option<IstioVersion>,
    /// `--cluster-domain`.
    pub cluster_domain: Option<String>,
    pub output: Option<VersionOutput>,
}

impl VersionRequest {
    fn parse(a: args::VersionArgs, c: &Common) -> Result<Self> {
        if a.client {
            return Ok(VersionRequest {
                source: VersionSource::Client,
                istio_version: None,
                cluster_domain: None,
                output: a.output.as_ref().map(Format::get),
            });
        }
        let istio_version = istio_version(c)?;
        let source = if c.manifests.is_empty() {
            VersionSource::Cluster(Box::new(c.connect_options()?))
        } else {
            VersionSource::Manifests(c.manifests.clone())
        };
        Ok(VersionRequest {
            source,
            istio_version,
            cluster_domain: c.cluster_domain.clone(),
            output: a.output.as_ref().map(Format::get),
        })
    }
}

#[derive(Debug)]
pub struct CodesRequest {
    pub docs: Vec<&'static CodeDoc>,
    /// One code was asked for.
    pub one: bool,
    pub output: ReportOutput,
}

impl CodesRequest {
    fn parse(a: &args::CodesArgs) -> Result<Self> {
        let docs = match &a.code {
            Some(c) => vec![Code::parse(c).map(Code::doc).ok_or_else(|| {
                anyhow!("unknown code {c:?}; `kubectl meshscope codes` lists them")
            })?],
            None => audit::CODES.iter().collect(),
        };
        Ok(CodesRequest {
            docs,
            one: a.code.is_some(),
            output: a.output.get(),
        })
    }
}

/// One command's request.
#[derive(Debug)]
pub enum Request {
    Recommend(RecommendRequest),
    Apply(ApplyRequest),
    Diff(DiffRequest),
    Verify(VerifyRequest),
    Audit(AuditRequest),
    Explain(ExplainRequest),
    Impact(ImpactRequest),
    Report(ReportRequest),
    Codes(CodesRequest),
    Version(VersionRequest),
    Webhook(WebhookRequest),
    Completion(clap_complete::Shell),
}

/// How the output looks: `--no-headers`, `-q`, `-o jsonpath=`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// Tables print no header row.
    pub no_headers: bool,
    /// Summaries on stderr are not printed (errors and warnings are).
    pub quiet: bool,
    /// The json output goes through this template.
    pub jsonpath: Option<Template>,
}

impl Request {
    /// Parses and checks the command line, and says how to print.
    pub fn parse(command: Command) -> Result<(Request, Style)> {
        let common = command.common();
        let jsonpath = command
            .jsonpath()
            .map(|t| Template::parse(t).map_err(|e| anyhow!("-o jsonpath={t}: {e}")))
            .transpose()?;
        let style = match (&command, &common) {
            (Command::Codes(a), _) => Style {
                no_headers: a.no_headers,
                quiet: false,
                jsonpath,
            },
            (_, Some(c)) => Style {
                no_headers: c.no_headers,
                quiet: c.quiet,
                jsonpath,
            },
            (_, None) => Style::default(),
        };
        if let Some(c) = &common {
            check_stdin(c)?;
        }
        let c = &common.unwrap_or_default();
        let request = match command {
            Command::Recommend(a) if a.prune => bail!(
                "recommend --prune is now --prune-hosts (drop hosts not seen in the window); --prune means deleting Sidecars of workloads that are gone, in apply and diff"
            ),
            Command::Recommend(a) => {
                let spec = RecommendSpec::parse(c, &a.rec, a.prune_hosts, true)?;
                let output = a.output.get();
                if spec.exports.is_some()
                    && matches!(output, RecommendOutput::Dot | RecommendOutput::Mermaid)
                {
                    bail!("-o dot and -o mermaid draw the Sidecar recommendations' dependency graph; --exports prints exportTo (-o table, wide, yaml, json or name)");
                }
                Request::Recommend(RecommendRequest { spec, output })
            }
            Command::Apply(a) => Request::Apply(ApplyRequest::parse(*a, c)?),
            Command::Diff(a) => Request::Diff(DiffRequest::parse(a, c)?),
            Command::Verify(a) => Request::Verify(VerifyRequest::parse(a, c)?),
            Command::Audit(a) => Request::Audit(AuditRequest::parse(a, c)?),
            Command::Explain(a) => Request::Explain(ExplainRequest::parse(a, c)?),
            Command::Impact(a) => Request::Impact(ImpactRequest::parse(a, c)?),
            Command::Report(_) => Request::Report(ReportRequest::parse(c)?),
            Command::Codes(a) => Request::Codes(CodesRequest::parse(&a)?),
            Command::Version(a) => Request::Version(VersionRequest::parse(a, c)?),
            Command::Webhook(a) => Request::Webhook(WebhookRequest::parse(a)?),
            Command::Completion(a) => Request::Completion(a.shell),
        };
        Ok((request, style))
    }
}

#[cfg(test)]
mod tests;
