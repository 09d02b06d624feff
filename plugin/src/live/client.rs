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

    /// Runs one call (a list with all its pages, or a single request),
    /// bounded by `--request-timeout` as a whole, with [`Live::noting`]'s
    /// note.
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

    pub(super) fn fail(
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
}

/// An Istio networking kind (`v1`).
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
