//! Command-line arguments. Doc comments are the help text.

use std::path::PathBuf;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand, ValueEnum};
use meshscope_shared::admission::Policy;

use crate::install;

pub use crate::format::{Format, FormatParser, WithJson};

#[derive(Debug, Parser)]
#[command(
    name = "kubectl meshscope",
    bin_name = "kubectl meshscope",
    version,
    about = "Right-size Istio sidecar scopes: recommend, apply, explain and audit Sidecar resources",
    long_about = "Right-size Istio sidecar scopes.\n\nBy default istiod sends every sidecar the configuration of every service in the mesh. kubectl meshscope recommends a Sidecar per workload from observed traffic, explains which scope a pod has and why, shows which proxies a change is pushed to, and audits namespaces for unscoped workloads and risky ServiceEntries.\n\nInputs are offline files (--manifests, --access-log) or, without --manifests, the current kubeconfig context. As with kubectl, -n and the connection flags (--context, --kubeconfig, --cluster, --user, --server, --token, --as, ...) may also come before the command: kubectl meshscope -n bookinfo audit.",
    after_help = "Examples:\n  kubectl meshscope audit -A --manifests examples/bookinfo/manifests.yaml\n  kubectl meshscope recommend --manifests examples/bookinfo --access-log examples/bookinfo/access.log | kubectl apply -f -\n  kubectl meshscope explain pod productpage-v1-6b746f74dc-x7k2p -n bookinfo --manifests examples/bookinfo\n  kubectl meshscope codes MS0001"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Recommend a Sidecar per workload from observed traffic
    #[command(
        after_help = "Examples:\n  kubectl meshscope recommend --manifests examples/bookinfo --access-log examples/bookinfo/access.log -o table\n  kubectl meshscope recommend --manifests examples/bookinfo --access-log examples/bookinfo/access.log --workload reviews-v1 | kubectl apply -f -\n  kubectl meshscope recommend -n bookinfo --from-pod-logs --since 24h -o table\n  kubectl meshscope recommend -n bookinfo --prometheus http://prometheus.istio-system:9090 --since 7d -o wide"
    )]
    Recommend(RecommendArgs),
    /// Apply the recommended Sidecars to the cluster with server-side apply
    #[command(
        mut_arg("namespace", |a| a.help("Namespace to look at (default: the context's namespace)")),
        after_help = "Examples:\n  kubectl meshscope apply -n bookinfo --access-log examples/bookinfo/access.log --diff --dry-run=server\n  kubectl meshscope apply -n bookinfo --from-pod-logs --since 24h --wait=2m\n  kubectl meshscope apply --watch -n bookinfo --from-pod-logs --interval 1m --prune-after 7d\n\nExit codes: 0 every object applied (or unchanged, pruned, or skipped as user-owned), 1 some objects failed or were skipped on a conflict, 2 error, including every object failing for the same cause (RBAC, an unreachable API server, a quota)."
    )]
    Apply(Box<ApplyArgs>),
    /// Audit namespaces for unscoped workloads, risky ServiceEntries and broken Sidecars
    #[command(
        after_help = "Examples:\n  kubectl meshscope audit -A\n  kubectl meshscope audit -n bookinfo --fail-on warning -o json\n  kubectl meshscope audit --manifests examples/bookinfo --code MS0001,MS0002 -o name\n  kubectl meshscope audit --manifests examples/bookinfo --suppress 'MS0002=ServiceEntry/bookinfo/*' --fail-on warning\n\nExit codes: 0 no finding at or above --fail-on (after --code and --suppress), 1 some, 2 error."
    )]
    Audit(AuditArgs),
    /// Explain which Sidecar scope a pod or workload has, and why
    #[command(
        after_help = "Examples:\n  kubectl meshscope explain pod productpage-v1-6b746f74dc-x7k2p -n bookinfo\n  kubectl meshscope explain deployment/reviews-v1 -n bookinfo --access-log examples/bookinfo/access.log -o wide\n  kubectl meshscope explain pod productpage-v1-6b746f74dc-x7k2p -n bookinfo --manifests examples/bookinfo -o json\n  kubectl meshscope explain gateway/public -n istio-ingress --manifests examples/gateways -o wide"
    )]
    Explain(ExplainArgs),
    /// Show which proxies a change to a service or routing object is pushed to
    #[command(
        after_help = "Examples:\n  kubectl meshscope impact service/reviews -n bookinfo\n  kubectl meshscope impact virtualservice/reviews -n bookinfo --manifests examples/bookinfo --access-log examples/bookinfo/access.log -o wide"
    )]
    Impact(ImpactArgs),
    /// Show how `apply` would change the cluster's Sidecars, as a unified diff
    #[command(
        mut_arg("namespace", |a| a.help("Namespace to look at (default: the context's namespace)")),
        after_help = "Examples:\n  kubectl meshscope diff -n bookinfo --access-log examples/bookinfo/access.log\n  kubectl meshscope diff -n bookinfo --from-pod-logs --prune\n\nExit codes (as kubectl diff): 0 apply would change nothing, 1 it would change something (or a Sidecar would stay different from the recommendation because apply skips it on a conflict), 2 error. User-owned Sidecars are shown, but apply skips them and they do not count."
    )]
    Diff(DiffArgs),
    /// Check against the cluster's istiod what each proxy really got
    #[command(
        mut_arg("namespace", |a| a.help("Namespace to look at (default: the context's namespace)")),
        after_help = "Examples:\n  kubectl meshscope verify -n bookinfo\n  kubectl meshscope verify deployment/reviews-v1 -n bookinfo --from-pod-logs\n  kubectl meshscope verify -A -o json\n  kubectl -n istio-system port-forward deploy/istiod 15014 &\n  kubectl meshscope verify -n bookinfo --istiod-url http://localhost:15014\n\nExit codes: 0 every proxy matches, 1 any difference, missing edge, stale or unconnected proxy, 2 error."
    )]
    Verify(VerifyArgs),
    /// Write a self-contained HTML report: per namespace the recommended scopes, xDS before and after, findings and the dependency graph
    #[command(
        after_help = "Examples:\n  kubectl meshscope report -A --from-pod-logs --since 24h > report.html\n  kubectl meshscope report --manifests examples/bookinfo --access-log examples/bookinfo/access.log > bookinfo.html\n\nThe page needs no network to open: no script, and nothing fetched. Exit codes: 0 written, 2 error."
    )]
    Report(ReportArgs),
    /// Document the finding codes (MS0001...)
    #[command(
        after_help = "Examples:\n  kubectl meshscope codes\n  kubectl meshscope codes MS0006\n  kubectl meshscope codes -o name"
    )]
    Codes(CodesArgs),
    /// Print the client version and the Istio versions the cluster (or --manifests) runs
    #[command(
        after_help = "Examples:\n  kubectl meshscope version\n  kubectl meshscope version --client -o json\n  kubectl meshscope version --manifests examples/bookinfo -o yaml"
    )]
    Version(VersionArgs),
    /// Print a shell completion script
    #[command(
        after_help = "Examples:\n  source <(kubectl meshscope completion bash)\n\nThe script completes the kubectl-meshscope binary run on its own. kubectl (1.26 or later) completes `kubectl meshscope ...` without it: it runs kubectl_complete-meshscope from PATH."
    )]
    Completion(CompletionArgs),
    /// Admission webhook helpers
    #[command(
        after_help = "Examples:\n  kubectl meshscope webhook manifests --image registry.example.com/meshscope-webhook:0.1.0 | kubectl apply -f -"
    )]
    Webhook(WebhookArgs),
}

/// What part of the mesh to look at.
#[derive(Debug, Args, Clone, Default)]
pub struct Selection {
    /// Namespace to look at (default: the context's namespace; with --manifests, all namespaces)
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Look at all namespaces
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only workloads whose pod-template labels match this selector, as kubectl's (k=v, k!=v, k in (a,b), k notin (a), k, !k)
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
}

/// The cluster to read, and how (live mode): kubectl's connection flags.
/// They may also come before the command (`kubectl meshscope -n NS audit`),
/// as kubectl's global flags do; see [`crate::hoist`].
#[derive(Debug, Args, Clone, Default, PartialEq, Eq)]
pub struct Connection {
    /// The kubeconfig context to use
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Path to the kubeconfig file (default: KUBECONFIG or ~/.kube/config)
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig cluster to use (instead of the context's)
    #[arg(long, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The kubeconfig user to use (instead of the context's)
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// The address and port of the API server (instead of the cluster's)
    #[arg(short = 's', long, value_name = "URL")]
    pub server: Option<String>,
    /// Bearer token for authentication to the API server (instead of the user's credentials)
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Path to a PEM file of the certificate authorities that sign the API server's certificate
    #[arg(long, value_name = "FILE")]
    pub certificate_authority: Option<PathBuf>,
    /// Do not check the API server's certificate (insecure: anyone in the path can read and change the traffic)
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// User to impersonate for the operation (a user name or a service account, system:serviceaccount:NS:NAME)
    #[arg(long = "as", value_name = "USER")]
    pub impersonate: Option<String>,
    /// Group to impersonate for the operation (repeatable; needs --as)
    #[arg(long = "as-group", value_name = "GROUP")]
    pub impersonate_groups: Vec<String>,
    /// UID to impersonate for the operation (needs --as)
    #[arg(long = "as-uid", value_name = "UID")]
    pub impersonate_uid: Option<String>,
    /// List in pages of this many objects (as kubectl's --chunk-size)
    #[arg(long, default_value_t = 500, value_name = "N")]
    pub chunk_size: u32,
    /// How long to wait for each request to the API server (one page of a list, or one call with its retries), as kubectl's (30s, 1m, 500ms, or seconds; 0 waits forever)
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = crate::duration::parse_request_timeout)]
    pub request_timeout: crate::duration::RequestTimeout,
}

impl Connection {
    /// The flags, for [`crate::live::Live::connect`], checked.
    pub fn options(&self) -> anyhow::Result<crate::live::ConnectOptions> {
        if self.impersonate.is_none()
            && (!self.impersonate_groups.is_empty() || self.impersonate_uid.is_some())
        {
            anyhow::bail!("--as-group and --as-uid impersonate a user's groups and UID: give the user with --as too");
        }
        if self.insecure_skip_tls_verify && self.certificate_authority.is_some() {
            anyhow::bail!("--insecure-skip-tls-verify skips the check --certificate-authority is for: give one of them");
        }
        Ok(crate::live::ConnectOptions {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
            cluster: self.cluster.clone(),
            user: self.user.clone(),
            server: self.server.clone(),
            token: self.token.clone(),
            certificate_authority: self.certificate_authority.clone(),
            insecure_skip_tls_verify: self.insecure_skip_tls_verify,
            impersonate: self.impersonate.clone(),
            impersonate_groups: self.impersonate_groups.clone(),
            impersonate_uid: self.impersonate_uid.clone(),
            request_timeout: self.request_timeout,
            chunk_size: self.chunk_size,
        })
    }
}

/// What meshscope otherwise reads from istiod's and the proxies' pods.
#[derive(Debug, Args, Clone, Default)]
pub struct Detection {
    /// Istio version whose semantics to apply, 1.28 to 1.32 (the meaning of ~ changed in 1.31) [default: istiod's, else the proxies' image version, else 1.31]
    #[arg(long, value_name = "VERSION")]
    pub istio_version: Option<String>,
    /// Kubernetes cluster DNS domain [default: the one the pods were injected with, else cluster.local]
    #[arg(long, value_name = "DOMAIN")]
    pub cluster_domain: Option<String>,
}

/// The traffic the commands that read a mesh go on.
#[derive(Debug, Args, Clone, Default)]
pub struct Traffic {
    /// Envoy access logs: files, directories, .gz files, or - for stdin (repeatable)
    #[arg(long = "access-log", value_name = "PATH")]
    pub access_logs: Vec<PathBuf>,
    /// Make malformed access-log lines fatal
    #[arg(long)]
    pub strict: bool,
    /// Live: read each injected pod's istio-proxy log through the API (pods/log)
    #[arg(long)]
    pub from_pod_logs: bool,
    /// Live: read edges from Istio's metrics in this Prometheus (e.g. http://prometheus.istio-system:9090)
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// How far back to look: pod logs (default 24h) and Prometheus (default 7d); e.g. 30m, 24h, 7d
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
}

impl Traffic {
    /// The sources given, in the order they are read.
    pub fn sources(&self) -> Vec<crate::traffic::TrafficSource> {
        use crate::traffic::TrafficSource;
        let mut out = Vec::new();
        if !self.access_logs.is_empty() {
            out.push(TrafficSource::AccessLogs(self.access_logs.clone()));
        }
        if self.from_pod_logs {
            out.push(TrafficSource::PodLogs);
        }
        if let Some(url) = &self.prometheus {
            out.push(TrafficSource::Prometheus(url.clone()));
        }
        out
    }
}

/// How the mesh's configuration is read, besides its objects.
#[derive(Debug, Args, Clone, Default)]
pub struct MeshSettings {
    /// A mesh config file (the `mesh` key of ConfigMap istio); overrides the cluster's, or the one in --manifests
    #[arg(long, value_name = "FILE")]
    pub mesh_config: Option<PathBuf>,
    /// Treat unlabeled namespaces as injected (sidecarInjectorWebhook.enableNamespacesByDefault)
    #[arg(long)]
    pub inject_by_default: bool,
}

/// What the commands print besides their data.
#[derive(Debug, Args, Clone, Default)]
pub struct Printing {
    /// Do not print table headers (as kubectl get --no-headers)
    #[arg(long)]
    pub no_headers: bool,
    /// Do not print summaries on stderr (ingest counts, finding and Sidecar totals); errors and warnings still go there
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// `impact`'s selection: the target's namespace (a change reaches
/// proxies in every namespace, so there is no `-A`).
#[derive(Debug, Args, Clone, Default)]
pub struct TargetSelection {
    /// Namespace the target is in (default: the context's namespace; with --manifests, the one namespace holding an object of that name)
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Count only the proxies of workloads whose pod-template labels match this selector, as kubectl's (k=v, k!=v, k in (a,b), k notin (a), k, !k)
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
}

impl From<&TargetSelection> for Selection {
    fn from(t: &TargetSelection) -> Selection {
        Selection {
            namespace: t.namespace.clone(),
            all_namespaces: false,
            selector: t.selector.clone(),
        }
    }
}

/// The inputs of a command that reads a mesh from files or a cluster,
/// besides what part of it to look at.
#[derive(Debug, Args, Clone, Default)]
pub struct MeshFlags {
    /// Read the mesh from these YAML/JSON files or directories instead of a cluster (repeatable; `kubectl get -A -o yaml` dumps work)
    #[arg(long = "manifests", value_name = "PATH")]
    pub manifests: Vec<PathBuf>,
    #[command(flatten)]
    pub traffic: Traffic,
    #[command(flatten)]
    pub detection: Detection,
    #[command(flatten)]
    pub settings: MeshSettings,
    #[command(flatten)]
    pub connection: Connection,
    #[command(flatten)]
    pub printing: Printing,
}

/// The inputs of a command that works on a cluster (`apply`, `diff`,
/// `verify`): [`MeshFlags`] without `--manifests`, which is kept hidden
/// only so that the request layer can say what to run instead.
#[derive(Debug, Args, Clone, Default)]
pub struct ClusterMeshFlags {
    /// Not taken: this command works on a cluster (hidden; refused with what to run instead)
    #[arg(long = "manifests", value_name = "PATH", hide = true)]
    pub manifests: Vec<PathBuf>,
    #[command(flatten)]
    pub traffic: Traffic,
    #[command(flatten)]
    pub detection: Detection,
    #[command(flatten)]
    pub settings: MeshSettings,
    #[command(flatten)]
    pub connection: Connection,
    #[command(flatten)]
    pub printing: Printing,
}

/// Where the mesh comes from and what part of it to look at: every input
/// flag of the commands that read a mesh, as the request layer reads
/// them. Each command's clap struct holds only the flags it takes; the
/// others are left at their defaults here.
#[derive(Debug, Clone, Default)]
pub struct Common {
    pub namespace: Option<String>,
    pub all_namespaces: bool,
    pub selector: Option<String>,
    pub connection: Connection,
    pub manifests: Vec<PathBuf>,
    /// The traffic flags, as given.
    pub traffic: Traffic,
    pub mesh_config: Option<PathBuf>,
    pub istio_version: Option<String>,
    pub cluster_domain: Option<String>,
    pub inject_by_default: bool,
    pub no_headers: bool,
    pub quiet: bool,
}

impl Common {
    /// The connection flags, for [`crate::live::Live::connect`], checked.
    pub fn connect_options(&self) -> anyhow::Result<crate::live::ConnectOptions> {
        self.connection.options()
    }

    /// The flags of every group; `manifests` as given.
    fn of(
        s: &Selection,
        manifests: &[PathBuf],
        t: &Traffic,
        d: &Detection,
        m: &MeshSettings,
        c: &Connection,
        p: &Printing,
    ) -> Common {
        Common {
            namespace: s.namespace.clone(),
            all_namespaces: s.all_namespaces,
            selector: s.selector.clone(),
            connection: c.clone(),
            manifests: manifests.to_vec(),
            traffic: t.clone(),
            mesh_config: m.mesh_config.clone(),
            istio_version: d.istio_version.clone(),
            cluster_domain: d.cluster_domain.clone(),
            inject_by_default: m.inject_by_default,
            no_headers: p.no_headers,
            quiet: p.quiet,
        }
    }
}

impl MeshFlags {
    /// With what part of the mesh to look at.
    pub fn common(&self, s: &Selection) -> Common {
        let (t, d, m) = (&self.traffic, &self.detection, &self.settings);
        Common::of(
            s,
            &self.manifests,
            t,
            d,
            m,
            &self.connection,
            &self.printing,
        )
    }
}

impl ClusterMeshFlags {
    /// With what part of the cluster to look at.
    pub fn common(&self, s: &Selection) -> Common {
        let (t, d, m) = (&self.traffic, &self.detection, &self.settings);
        Common::of(
            s,
            &self.manifests,
            t,
            d,
            m,
            &self.connection,
            &self.printing,
        )
    }
}

impl Command {
    /// The `-o jsonpath=` template, if given.
    pub fn jsonpath(&self) -> Option<&str> {
        match self {
            Command::Recommend(a) => a.output.template(),
            Command::Audit(a) => a.output.template(),
            Command::Explain(a) => a.output.template(),
            Command::Impact(a) => a.output.template(),
            Command::Verify(a) => a.output.template(),
            Command::Codes(a) => a.output.template(),
            Command::Version(a) => a.output.as_ref().and_then(|o| o.template()),
            Command::Apply(_)
            | Command::Diff(_)
            | Command::Report(_)
            | Command::Completion(_)
            | Command::Webhook(_) => None,
        }
    }

    /// The input flags of the commands that read a mesh (`version`: the
    /// ones it takes).
    pub fn common(&self) -> Option<Common> {
        match self {
            Command::Recommend(a) => Some(a.mesh.common(&a.selection)),
            Command::Apply(a) => Some(a.mesh.common(&a.selection)),
            Command::Diff(a) => Some(a.mesh.common(&a.selection)),
            Command::Audit(a) => Some(a.mesh.common(&a.selection)),
            Command::Explain(a) => Some(a.mesh.common(&a.selection)),
            Command::Impact(a) => Some(a.mesh.common(&(&a.selection).into())),
            Command::Verify(a) => Some(a.mesh.common(&a.selection)),
            Command::Report(a) => Some(a.mesh.common(&a.selection)),
            Command::Version(a) => Some(Common::of(
                &Selection::default(),
                &a.manifests,
                &Traffic::default(),
                &a.detection,
                &MeshSettings::default(),
                &a.connection,
                &Printing::default(),
            )),
            Command::Codes(_) | Command::Completion(_) | Command::Webhook(_) => None,
        }
    }
}

impl WithJson for RecommendOutput {
    const JSON: Self = RecommendOutput::Json;
}

impl WithJson for ReportOutput {
    const JSON: Self = ReportOutput::Json;
}

impl WithJson for VersionOutput {
    const JSON: Self = VersionOutput::Json;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecommendOutput {
    Yaml,
    Json,
    Table,
    Wide,
    Name,
    /// The observed dependency graph with each workload's scope, for
    /// Graphviz (`dot -Tsvg`).
    Dot,
    /// The same graph as a Mermaid flowchart.
    Mermaid,
}

impl RecommendOutput {
    /// Whether it prints the objects themselves (not a table or names).
    pub fn prints_objects(self) -> bool {
        matches!(self, RecommendOutput::Yaml | RecommendOutput::Json)
    }
}

#[derive(Debug, Args)]
pub struct RecommendArgs {
    #[command(flatten)]
    pub selection: Selection,
    #[command(flatten)]
    pub mesh: MeshFlags,
    /// Output format: yaml (for kubectl apply -f -), json (a v1 List, with the estimated savings beside its items), table, wide (every dependency), name (each Sidecar as sidecar.networking.istio.io/NAME), dot or mermaid (the observed dependency graph with each workload's scope, for Graphviz or Mermaid), or jsonpath=TEMPLATE (kubectl's, over the json)
    #[arg(short = 'o', long, default_value = "yaml", value_parser = FormatParser::<RecommendOutput>::new())]
    pub output: Format<RecommendOutput>,
    #[command(flatten)]
    pub rec: RecommendFlags,
    /// Drop hosts of managed Sidecars that were not seen in the observed window
    #[arg(long)]
    pub prune_hosts: bool,
    /// Was --prune-hosts: --prune deletes Sidecars in apply and diff, so recommend refuses it
    #[arg(long, hide = true)]
    pub prune: bool,
}

/// `diff` takes `apply`'s inputs and the flags that change what it would write.
#[derive(Debug, Args)]
pub struct DiffArgs {
    #[command(flatten)]
    pub selection: Selection,
    #[command(flatten)]
    pub mesh: ClusterMeshFlags,
    #[command(flatten)]
    pub rec: RecommendFlags,
    /// Diff as if with --force-conflicts: take over fields another field manager owns on meshscope's Sidecars
    #[arg(long)]
    pub force_conflicts: bool,
    /// Also show the deletion of managed Sidecars whose workload no longer exists (neither its controller nor any pod of it)
    #[arg(long)]
    pub prune: bool,
    /// Drop hosts of managed Sidecars that were not seen in the observed window
    #[arg(long)]
    pub prune_hosts: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DryRun {
    None,
    Server,
    Client,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub selection: Selection,
    #[command(flatten)]
    pub mesh: ClusterMeshFlags,
    #[command(flatten)]
    pub rec: RecommendFlags,
    /// Do not persist: `server` asks the API server (server-side dry run), `client` only compares (the default of a bare --dry-run)
    #[arg(long, value_enum, default_value = "none", default_missing_value = "client", num_args = 0..=1)]
    pub dry_run: DryRun,
    /// Show a unified diff of each Sidecar against the live object
    #[arg(long)]
    pub diff: bool,
    /// Take over fields another field manager owns on meshscope's Sidecars
    #[arg(long)]
    pub force_conflicts: bool,
    /// Delete managed Sidecars whose workload no longer exists, neither its controller nor any pod of it (and only those)
    #[arg(long)]
    pub prune: bool,
    /// Drop hosts of managed Sidecars that were not seen in the observed window
    #[arg(long)]
    pub prune_hosts: bool,
    /// Wait until istiod has pushed the new scopes (Sidecars, or with --exports the new exportTo) and the proxies ACKed them, then verify them (default timeout 5m)
    #[arg(long, value_name = "TIMEOUT", num_args = 0..=1, require_equals = true, default_missing_value = "5m")]
    pub wait: Option<String>,
    #[command(flatten)]
    pub istiod: IstiodFlags,
    #[command(flatten)]
    pub watch: WatchFlags,
}

/// `apply --watch`: keep scopes current as traffic shows new dependencies.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Watch mode")]
pub struct WatchFlags {
    /// Keep running: each pass reads the traffic since the last one and widens the managed Sidecars whose workloads called hosts outside their scope, confirmed on istiod as --wait does
    #[arg(long)]
    pub watch: bool,
    /// Time between the starts of two passes (--watch)
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub interval: String,
    /// Remove a host from a managed Sidecar once no traffic reached it for this long (--watch; never a host the mesh requires; default: never narrow)
    #[arg(long, value_name = "DURATION")]
    pub prune_after: Option<String>,
    /// Say every so often, as a `heartbeat` event, how many passes ran, how many failed and how many Sidecars were written since the last one (--watch; 0: never)
    #[arg(long, value_name = "DURATION", default_value = "10m")]
    pub heartbeat: String,
    /// Serve /metrics (Prometheus text) and /healthz on this address, such as :9090 or 127.0.0.1:9090 (--watch)
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<String>,
    /// Elect one writer among replicas through this coordination.k8s.io Lease, as NAMESPACE/NAME (--watch)
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub lease: Option<String>,
    /// This replica's name in the Lease, unique among the replicas (--watch; default: $POD_NAME, else the host name, with a random suffix)
    #[arg(long, value_name = "NAME")]
    pub identity: Option<String>,
    /// How --watch reports each change: text lines on stderr, or json (one object per line on stdout)
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: EventOutput,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum EventOutput {
    #[default]
    Text,
    Json,
}

/// How to reach istiod's debug endpoints (`verify`, `apply --wait`).
#[derive(Debug, Args, Clone)]
pub struct IstiodFlags {
    /// Reach istiod at this URL instead of port-forwarding to its pods (repeatable, one per replica)
    #[arg(long = "istiod-url", value_name = "URL")]
    pub istiod_urls: Vec<String>,
    /// The namespace istiod runs in
    #[arg(long, default_value = "istio-system", value_name = "NAMESPACE")]
    pub istio_namespace: String,
    /// The istiod revision (the istio.io/rev label of its pods)
    #[arg(long, value_name = "REVISION")]
    pub revision: Option<String>,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub selection: Selection,
    #[command(flatten)]
    pub mesh: ClusterMeshFlags,
    /// Only this pod or workload: pod/NAME or KIND/NAME (e.g. deployment/reviews-v1)
    #[arg(value_name = "pod/NAME | KIND/NAME")]
    pub target: Option<String>,
    /// Output format: table, wide (adds the proxies' versions and route counts), json, yaml, or name (each proxy checked as pod/NAME), or jsonpath=TEMPLATE (kubectl's, over the json)
    #[arg(short = 'o', long, default_value = "table", value_parser = FormatParser::<ReportOutput>::new())]
    pub output: Format<ReportOutput>,
    #[command(flatten)]
    pub istiod: IstiodFlags,
}

/// Flags shared by `recommend` and `apply`.
#[derive(Debug, Args, Clone)]
pub struct RecommendFlags {
    /// Only this workload (NAME or KIND/NAME)
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,
    /// Add this egress host (ns/host) to every recommendation (repeatable)
    #[arg(long, value_name = "HOST")]
    pub include: Vec<String>,
    /// Give workloads with no observed traffic a closed scope instead of skipping them
    #[arg(long)]
    pub allow_idle: bool,
    /// Emit one selector-less Sidecar per namespace instead of one per workload
    #[arg(long)]
    pub per_namespace: bool,
    /// Also import the hosts each workload's manifests name (env values, args, command, and the ConfigMaps it mounts or reads), so a workload with no traffic yet gets a scope; only hosts a Service or ServiceEntry defines
    #[arg(long)]
    pub from_manifest_hints: bool,
    /// Plan as if these manifests were applied (live only): their objects join the cluster's or replace those of the same kind, namespace and name, so a Deployment not created yet (say one the webhook denies) gets its Sidecar first (repeatable; a file, a directory, or - for stdin)
    #[arg(short = 'f', long = "filename", value_name = "PATH")]
    pub filename: Vec<PathBuf>,
    /// Recommend exportTo instead of Sidecars: for each Service (its networking.istio.io/exportTo annotation), ServiceEntry, VirtualService and DestinationRule of -n (every namespace with -A), the namespaces observed calling it plus those that need it without traffic showing it (its own, gateways that route to it, Sidecars that import it by name, mesh-config providers); needs a traffic source, read from every namespace
    #[arg(long)]
    pub exports: bool,
    /// With --exports: also recommend (and write) exportTo on objects whose owner already set it
    #[arg(long, requires = "exports")]
    pub force_exports: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    Error,
    Warning,
    Info,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportOutput {
    Table,
    Wide,
    Json,
    Yaml,
    Name,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub selection: Selection,
    #[command(flatten)]
    pub mesh: MeshFlags,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub selection: Selection,
    #[command(flatten)]
    pub mesh: MeshFlags,
    /// Output format: table, wide (whole messages), json, yaml, or name (each object with a finding as kind.group/NAME, e.g. deployment.apps/reviews-v1), or jsonpath=TEMPLATE (kubectl's, over the json)
    #[arg(short = 'o', long, default_value = "table", value_parser = FormatParser::<ReportOutput>::new())]
    pub output: Format<ReportOutput>,
    /// Exit with code 1 when a finding at or above this severity is found (after --code and --suppress)
    #[arg(long, value_enum, default_value = "error")]
    pub fail_on: FailOn,
    /// Only findings with this code (repeatable, or comma-separated: MS0001,MS0006)
    #[arg(long = "code", value_name = "CODE", value_delimiter = ',')]
    pub codes: Vec<String>,
    /// Silence a code, everywhere or on matching objects; `*` globs the object (repeatable, or comma-separated: MS0006=Sidecar/shop/*)
    #[arg(long, value_name = "CODE[=KIND/NS/NAME]", value_delimiter = ',')]
    pub suppress: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub selection: Selection,
    #[command(flatten)]
    pub mesh: MeshFlags,
    /// What to explain: pod NAME, KIND NAME (deployment, statefulset, daemonset, replicaset, job, cronjob), workload KIND/NAME, kubectl's pod/NAME and KIND/NAME, or gateway/NAME (a pod serving that Istio or Gateway API Gateway: its clusters with and without PILOT_FILTER_GATEWAY_CLUSTER_CONFIG)
    #[arg(value_name = "TYPE[/NAME]")]
    pub what: String,
    /// The pod or workload name (not with TYPE/NAME)
    #[arg(value_name = "NAME")]
    pub name: Option<String>,
    /// Output format: table, wide (lists every visible service), json, yaml, or name (the pod explained as pod/NAME, a workload as kind.group/NAME, e.g. deployment.apps/reviews-v1), or jsonpath=TEMPLATE (kubectl's, over the json)
    #[arg(short = 'o', long, default_value = "table", value_parser = FormatParser::<ReportOutput>::new())]
    pub output: Format<ReportOutput>,
}

#[derive(Debug, Args)]
pub struct ImpactArgs {
    #[command(flatten)]
    pub selection: TargetSelection,
    #[command(flatten)]
    pub mesh: MeshFlags,
    /// service/NAME, serviceentry/NAME, virtualservice/NAME, destinationrule/NAME, a Gateway API route: httproute/NAME, grpcroute/NAME, tcproute/NAME, tlsroute/NAME, or gateway/NAME (a Gateway of either API: pushed to gateways' proxies only)
    #[arg(value_name = "KIND/NAME")]
    pub target: String,
    /// Output format: table, wide (lists every workload), json, yaml, or name (each workload the change is pushed to now as kind.group/NAME, e.g. deployment.apps/reviews-v1), or jsonpath=TEMPLATE (kubectl's, over the json)
    #[arg(short = 'o', long, default_value = "table", value_parser = FormatParser::<ReportOutput>::new())]
    pub output: Format<ReportOutput>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum VersionOutput {
    Json,
    Yaml,
}

#[derive(Debug, Args)]
pub struct VersionArgs {
    /// Read the pods from these YAML/JSON files or directories instead of a cluster (repeatable)
    #[arg(long = "manifests", value_name = "PATH")]
    pub manifests: Vec<PathBuf>,
    #[command(flatten)]
    pub detection: Detection,
    #[command(flatten)]
    pub connection: Connection,
    /// Print only the client version (no cluster)
    #[arg(long)]
    pub client: bool,
    /// Output format: json, yaml, or jsonpath=TEMPLATE (kubectl's, over the json) (default: text)
    #[arg(short = 'o', long, value_parser = FormatParser::<VersionOutput>::new())]
    pub output: Option<Format<VersionOutput>>,
}

#[derive(Debug, Args)]
pub struct CodesArgs {
    /// Show one code (e.g. MS0001)
    pub code: Option<String>,
    /// Output format: table, wide (each code's description and fix), json, yaml, or name (the codes, one a line, e.g. MS0001), or jsonpath=TEMPLATE (kubectl's, over the json)
    #[arg(short = 'o', long, default_value = "table", value_parser = FormatParser::<ReportOutput>::new())]
    pub output: Format<ReportOutput>,
    /// Do not print the table header
    #[arg(long)]
    pub no_headers: bool,
}

#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The command line as the binary parses it: [`Cli::command`], with each
/// `Examples:` block of an `after_help` printed as written. Clap wraps
/// `after_help` to the terminal's width (at most 100 columns), which
/// breaks the example commands across lines so that they cannot be
/// pasted; the literal text of a help template is not wrapped, so the
/// examples move there and the rest of the `after_help` (exit codes,
/// prose) stays, wrapped as before. [`Cli::command`] keeps the examples
/// in `after_help`, where the tests read them.
pub fn command() -> clap::Command {
    unwrap_examples(<Cli as clap::CommandFactory>::command())
}

fn unwrap_examples(cmd: clap::Command) -> clap::Command {
    let cmd = cmd.mut_subcommands(unwrap_examples);
    let Some(after) = cmd.get_after_help().map(|s| s.to_string()) else {
        return cmd;
    };
    let Some((examples, rest)) = split_examples(&after) else {
        return cmd;
    };
    // The default template, with the examples before the after_help.
    let template = format!(
        "{{before-help}}{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{{all-args}}\n\n{examples}{{after-help}}"
    );
    let cmd = cmd.help_template(template);
    match rest {
        Some(rest) => cmd.after_help(rest),
        None => cmd.after_help(None::<&str>),
    }
}

/// `Examples:` and its lines, and what follows them after a blank line.
/// `None` when the text does not start with examples, or when they hold
/// a `{` (which a template would read as a tag).
fn split_examples(after: &str) -> Option<(String, Option<String>)> {
    if !after.starts_with("Examples:\n") || after.contains('{') {
        return None;
    }
    Some(match after.split_once("\n\n") {
        Some((examples, rest)) => (examples.to_string(), Some(rest.to_string())),
        None => (after.to_string(), None),
    })
}

#[derive(Debug, Args)]
pub struct WebhookArgs {
    #[command(subcommand)]
    pub command: WebhookCommand,
}

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Print the full install (namespace, RBAC, Deployment, Service, PDB, webhook configurations) with a fresh CA and serving certificate, for kubectl apply -f -
    #[command(
        after_help = "Examples:\n  kubectl meshscope webhook manifests --image registry.example.com/meshscope-webhook:0.1.0 | kubectl apply -f -\n  kubectl meshscope webhook manifests -n mesh-tools --default-policy enforce --image registry.example.com/meshscope-webhook:0.1.0 | kubectl apply -f -"
    )]
    Manifests(ManifestsArgs),
}

#[derive(Debug, Args)]
pub struct ManifestsArgs {
    /// Namespace to install the webhook into
    #[arg(short = 'n', long, default_value = install::BASE_NAMESPACE)]
    pub namespace: String,
    /// The meshscope-webhook image, by tag or digest (a release's images.txt names them; scripts/release builds them)
    #[arg(long)]
    pub image: Option<String>,
    /// Policy of namespaces without a meshscope.io/policy label: enforce, warn or off
    #[arg(long, default_value = "warn", value_parser = policy_parser())]
    pub default_policy: Policy,
    /// Set exportTo: ["."] on DNS ServiceEntries without exportTo instead of denying or warning
    #[arg(long)]
    pub mutate_serviceentry_exportto: bool,
    /// Istio's root namespace (holds the mesh config; never sent to the webhook except for its Sidecars)
    #[arg(long, default_value = install::BASE_ISTIO_NAMESPACE)]
    pub istio_namespace: String,
    /// Days the generated CA and serving certificate are valid
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=3650))]
    pub validity_days: u32,
}

/// `--default-policy`: one of [`Policy::ALL`], each with what it does
/// (shown by `--help` and offered by completion).
fn policy_parser() -> impl TypedValueParser<Value = Policy> {
    let values = Policy::ALL.map(|p| PossibleValue::new(p.as_str()).help(p.summary()));
    PossibleValuesParser::new(values)
        .map(|s| s.parse::<Policy>().expect("a possible value is a policy"))
}
