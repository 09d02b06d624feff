//! The [`Live`] handle: connecting as kubectl does, and the bounded call
//! every other file of `live` goes through.

use kube::api::ApiResource;
use kube::config::KubeConfigOptions;
use kube::{Client, Config};
use std::future::Future;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::failure::{asked, error_chain, ApiFailure, FailureKind};
use super::kubeconfig::{kubeconfig_error, load_kubeconfig};
use crate::duration::RequestTimeout;

/// Lists (and log streams) in flight at once.
pub const PARALLELISM: usize = 6;

/// How long a call may take before a terminal is told what it waits for.
pub const NOTE_AFTER: Duration = Duration::from_secs(3);

/// A connection to one API server, and how calls to it are bounded.
/// Clones share the connection and the notes.
#[derive(Clone)]
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
    pub(super) notes: Arc<std::sync::Mutex<Vec<String>>>,
}

/// How to reach the API server: the connection flags, validated.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// `--cluster`, `--user`: the kubeconfig's, instead of the context's.
    pub cluster: Option<String>,
    pub user: Option<String>,
    /// `-s/--server`: the API server's URL, instead of the cluster's.
    pub server: Option<String>,
    pub token: Option<String>,
    pub certificate_authority: Option<PathBuf>,
    pub insecure_skip_tls_verify: bool,
    /// `--as`, `--as-group`, `--as-uid`.
    pub impersonate: Option<String>,
    pub impersonate_groups: Vec<String>,
    pub impersonate_uid: Option<String>,
    pub request_timeout: RequestTimeout,
    /// Objects per page of a list (`--chunk-size`).
    pub chunk_size: u32,
}

impl Live {
    /// Connects like kubectl: --kubeconfig, else KUBECONFIG, else
    /// ~/.kube/config, else (with --server) none, else the in-cluster
    /// service account; then the connection flags override it.
    pub async fn connect(c: &ConnectOptions) -> anyhow::Result<Live> {
        let mut config = base_config(c).await?;
        overrides(c, &mut config)?;
        let timeout = c.request_timeout.get();
        if let Some(t) = timeout {
            // Per connection and per read; `bounded` bounds each call as a
            // whole (kube's retries included; each page of a list is one).
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
        let client = Client::try_from(config).map_err(|e| client_error(&server, &e))?;
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

    /// Never prints the note [`Live::bounded`] prints on a terminal while
    /// it waits (for completion, whose stderr is the user's prompt).
    pub fn quiet(self) -> Live {
        Live {
            noted: Arc::new(AtomicBool::new(true)),
            ..self
        }
    }

    /// Runs `call` and, on a terminal, says once after a few seconds what
    /// is being waited for.
    pub(super) async fn noting<T>(
        &self,
        verb: &'static str,
        resource: &str,
        ns: Option<&str>,
        call: impl Future<Output = T>,
    ) -> T {
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
        tokio::select! {
            r = call => r,
            () = note => unreachable!("the note never finishes"),
        }
    }

    /// Runs one call (one page of a list, or a single request with
    /// kube's retries), bounded by `--request-timeout` as a whole, with
    /// [`Live::noting`]'s note.
    pub(super) async fn bounded<T>(
        &self,
        verb: &'static str,
        resource: &str,
        ns: Option<&str>,
        call: impl Future<Output = Result<T, ApiFailure>>,
    ) -> Result<T, ApiFailure> {
        let call = self.noting(verb, resource, ns, call);
        let Some(t) = self.timeout else {
            return call.await;
        };
        match tokio::time::timeout(t, call).await {
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
        }
    }

    /// A failure of a call made inside [`Live::bounded`]: a timeout of the
    /// connection's own is the same bound, and says so.
    pub(super) fn limited(&self, mut f: ApiFailure) -> ApiFailure {
        if let (FailureKind::Timeout(None), Some(t)) = (&f.kind, self.timeout) {
            f.kind = FailureKind::Timeout(Some(t));
        }
        f
    }

    pub(super) fn fail(
        &self,
        e: kube::Error,
        verb: &'static str,
        ar: &ApiResource,
        ns: Option<&str>,
    ) -> ApiFailure {
        ApiFailure::from_kube(e, verb, &resource_name(ar), ns, &self.server)
    }

    /// Leaves `note` for [`Live::take_notes`], unless it is already there.
    pub(super) fn note_once(&self, note: String) {
        let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
        if !notes.contains(&note) {
            notes.push(note);
        }
    }

    /// The notes the reads so far left, taken (each is said once).
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.notes.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// An Istio networking kind (`v1`).
pub fn istio(kind: &str, plural: &str) -> ApiResource {
    istio_in(meshscope_shared::istio::NETWORKING_GROUP, kind, plural)
}

/// A `v1` kind of API group `group` (another of Istio's, or any other).
pub fn istio_in(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// `pods`, `deployments.apps`, `sidecars.networking.istio.io`.
pub(super) fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

pub(super) fn resource_name(ar: &ApiResource) -> String {
    qualified(&ar.group, &ar.plural)
}

/// The kubeconfig's (or the service account's) connection, before the
/// flags override it.
async fn base_config(c: &ConnectOptions) -> anyhow::Result<Config> {
    let opts = KubeConfigOptions {
        context: c.context.clone(),
        cluster: c.cluster.clone(),
        user: c.user.clone(),
    };
    match load_kubeconfig(c.kubeconfig.as_deref())? {
        Some((k, from)) => Config::from_custom_kubeconfig(k.clone(), &opts)
            .await
            .map_err(|e| kubeconfig_error(e, &k, &from)),
        // As kubectl: --server alone (with --token, say) needs no file.
        None if c.server.is_some() => Ok(Config::new(server_url(c.server.as_deref().unwrap_or_default())?)),
        None => Config::incluster().map_err(|_| {
            anyhow::anyhow!(
                "no kubeconfig found: pass --kubeconfig or set KUBECONFIG (or read files with --manifests)"
            )
        }),
    }
}

/// `--server` as kubectl takes it: a URL, or HOST:PORT for https.
fn server_url(s: &str) -> anyhow::Result<hyper::Uri> {
    let full = if s.contains("://") {
        s.to_string()
    } else {
        format!("https://{s}")
    };
    full.parse::<hyper::Uri>()
        .ok()
        .filter(|u| u.host().is_some())
        .ok_or_else(|| anyhow::anyhow!("--server {s:?} is not a URL; give it as https://HOST:PORT"))
}

/// The connection flags, over the kubeconfig's values.
fn overrides(c: &ConnectOptions, config: &mut Config) -> anyhow::Result<()> {
    if let Some(s) = &c.server {
        config.cluster_url = server_url(s)?;
    }
    if let Some(path) = &c.certificate_authority {
        config.root_cert = Some(read_certificate_authority(path)?);
        config.root_cert_file = None;
    }
    if c.insecure_skip_tls_verify {
        config.accept_invalid_certs = true;
        config.root_cert = None;
        config.root_cert_file = None;
    }
    let auth = &mut config.auth_info;
    if let Some(t) = &c.token {
        // The token replaces the user's other ways of getting one.
        auth.token = Some(t.clone().into());
        auth.token_file = None;
        auth.exec = None;
        auth.auth_provider = None;
        auth.username = None;
        auth.password = None;
    }
    if let Some(user) = &c.impersonate {
        auth.impersonate = Some(user.clone());
        auth.impersonate_groups = Some(c.impersonate_groups.clone()).filter(|g| !g.is_empty());
        auth.impersonate_uid = c.impersonate_uid.clone();
    }
    Ok(())
}

/// The DER certificates of a `--certificate-authority` PEM file.
fn read_certificate_authority(path: &std::path::Path) -> anyhow::Result<Vec<Vec<u8>>> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let shown = path.display();
    let bytes = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("cannot read --certificate-authority {shown}: {e}"))?;
    let certs: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(&bytes)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--certificate-authority {shown} is not PEM: {e}"))?;
    if certs.is_empty() {
        anyhow::bail!("--certificate-authority {shown} holds no certificate (expected PEM \"BEGIN CERTIFICATE\" blocks)");
    }
    Ok(certs)
}

/// Why no client could be made, as one line with the fix.
fn client_error(server: &str, e: &kube::Error) -> anyhow::Error {
    let chain = error_chain(e);
    // rustls (through webpki) reads only X.509 v3 certificates; openssl
    // x509 -req without extensions issues v1 ones, which kubectl takes.
    if chain.contains("UnsupportedCertVersion") {
        return anyhow::anyhow!(
            "the client certificate for {server} is an X.509 v1 certificate, which meshscope's TLS library (rustls) does not accept (kubectl's does); reissue it as v3, e.g. `openssl x509 -req -in USER.csr -CA ca.crt -CAkey ca.key -days 365 -out USER.crt -extfile <(printf 'keyUsage=critical,digitalSignature,keyEncipherment\\nextendedKeyUsage=clientAuth')`, or through the Kubernetes CSR API (kubectl certificate approve)"
        );
    }
    anyhow::anyhow!(
        "cannot create a client for {server}: {chain}; check the user's credentials in the kubeconfig"
    )
}
