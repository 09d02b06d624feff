//! Command-line flags. Each one can also be set from the environment
//! (`MESHSCOPE_<FLAG>`), which is how the Deployment in deploy/ sets them.
//! Doc comments are the help text.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use meshscope_shared::admission::Policy;

#[derive(Clone, Debug, Parser)]
#[command(
    name = "meshscope-webhook",
    version,
    about = "Admission webhook that warns on or rejects unscoped Istio workloads and DNS ServiceEntries without exportTo"
)]
pub struct Args {
    /// Address of the HTTPS admission server (POST /validate, POST /mutate)
    #[arg(long, env = "MESHSCOPE_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,

    /// Address of the plain-HTTP admin server (/healthz, /readyz, /metrics)
    #[arg(long, env = "MESHSCOPE_ADMIN_LISTEN", default_value = "0.0.0.0:8080")]
    pub admin_listen: SocketAddr,

    /// PEM serving certificate chain; re-read when it changes
    #[arg(
        long,
        env = "MESHSCOPE_TLS_CERT",
        default_value = "/var/run/meshscope/tls/tls.crt"
    )]
    pub tls_cert: PathBuf,

    /// PEM private key of the serving certificate; re-read when it changes
    #[arg(
        long,
        env = "MESHSCOPE_TLS_KEY",
        default_value = "/var/run/meshscope/tls/tls.key"
    )]
    pub tls_key: PathBuf,

    /// Policy of namespaces without a meshscope.io/policy label: enforce, warn or off
    #[arg(long, env = "MESHSCOPE_DEFAULT_POLICY", default_value = "warn", value_parser = parse_policy)]
    pub default_policy: Policy,

    /// On /mutate, set exportTo: ["."] on DNS ServiceEntries without exportTo instead of denying or warning
    #[arg(long, env = "MESHSCOPE_MUTATE_SERVICEENTRY_EXPORTTO")]
    pub mutate_serviceentry_exportto: bool,

    /// Log filter (tracing EnvFilter syntax, e.g. info or meshscope_webhook=debug,info)
    #[arg(long, env = "MESHSCOPE_LOG_LEVEL", default_value = "info")]
    pub log_level: String,

    /// Treat unlabeled namespaces as injected (istiod's sidecarInjectorWebhook.enableNamespacesByDefault)
    #[arg(long, env = "MESHSCOPE_INJECT_BY_DEFAULT")]
    pub inject_by_default: bool,

    /// Namespace of the mesh config (ConfigMap istio)
    #[arg(
        long,
        env = "MESHSCOPE_ISTIO_NAMESPACE",
        default_value = "istio-system"
    )]
    pub istio_namespace: String,

    /// Seconds between full re-lists of the watched objects
    #[arg(long, env = "MESHSCOPE_RESYNC_SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(10..))]
    pub resync_seconds: u64,
}

impl Args {
    pub fn resync(&self) -> Duration {
        Duration::from_secs(self.resync_seconds)
    }
}

fn parse_policy(s: &str) -> Result<Policy, String> {
    s.parse()
        .map_err(|e: meshscope_shared::admission::InvalidPolicy| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_deploy_manifests() {
        let a = Args::try_parse_from(["meshscope-webhook"]).unwrap();
        assert_eq!(a.listen.port(), 8443);
        assert_eq!(a.admin_listen.port(), 8080);
        assert_eq!(a.default_policy, Policy::Warn);
        assert!(!a.mutate_serviceentry_exportto);
    }

    #[test]
    fn bad_policies_are_usage_errors() {
        let e =
            Args::try_parse_from(["meshscope-webhook", "--default-policy", "block"]).unwrap_err();
        assert!(
            e.to_string().contains("expected enforce, warn or off"),
            "{e}"
        );
    }
}
