//! Command-line flags. Each one can also be set from the environment
//! (`MESHSCOPE_<FLAG>`), which is how the Deployment in deploy/ sets them.
//! Doc comments are the help text.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use meshscope_shared::admission::Policy;

use crate::limits::Limits;

#[derive(Clone, Debug, Parser)]
#[command(
    name = "meshscope-webhook",
    // The version and the commit the build came from (webhook/build.rs).
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("MESHSCOPE_COMMIT"), ")"),
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

    /// Seconds a watch may keep failing before the caches count as stale (decisions still come from them, with a warning; /readyz and /metrics say so)
    #[arg(long, env = "MESHSCOPE_STALE_AFTER_SECONDS", default_value = "30", value_parser = parse_seconds)]
    pub stale_after_seconds: Duration,

    /// Most open HTTPS connections; at the cap the longest-idle one is closed for a new one, or the new one is refused
    #[arg(long, env = "MESHSCOPE_MAX_CONNECTIONS", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,

    /// Seconds a client has to complete the TLS handshake
    #[arg(long, env = "MESHSCOPE_HANDSHAKE_TIMEOUT_SECONDS", default_value = "10", value_parser = parse_seconds)]
    pub handshake_timeout_seconds: Duration,

    /// Seconds an HTTP/1.1 request head may take to arrive, from the connection's start or the previous response (so also the keep-alive idle limit of HTTP/1.1)
    #[arg(long, env = "MESHSCOPE_HEADER_READ_TIMEOUT_SECONDS", default_value = "10", value_parser = parse_seconds)]
    pub header_read_timeout_seconds: Duration,

    /// Seconds a request body may take to arrive in full (then HTTP 408)
    #[arg(long, env = "MESHSCOPE_BODY_READ_TIMEOUT_SECONDS", default_value = "10", value_parser = parse_seconds)]
    pub body_read_timeout_seconds: Duration,

    /// Seconds a connection may stay open with no request in flight before it is closed
    #[arg(long, env = "MESHSCOPE_IDLE_TIMEOUT_SECONDS", default_value = "90", value_parser = parse_seconds)]
    pub idle_timeout_seconds: Duration,

    /// Largest request body in bytes (larger ones get HTTP 400 unread); the API server sends objects up to 3 MiB, two in an UPDATE
    #[arg(long, env = "MESHSCOPE_MAX_BODY_BYTES", default_value_t = crate::admission::MAX_BODY_BYTES as u64, value_parser = clap::value_parser!(u64).range(1024..=268_435_456))]
    pub max_body_bytes: u64,
}

impl Args {
    pub fn resync(&self) -> Duration {
        Duration::from_secs(self.resync_seconds)
    }

    /// The connection and request limits of the HTTPS server.
    pub fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections as usize,
            handshake_timeout: self.handshake_timeout_seconds,
            header_read_timeout: self.header_read_timeout_seconds,
            body_read_timeout: self.body_read_timeout_seconds,
            idle_timeout: self.idle_timeout_seconds,
            max_body_bytes: self.max_body_bytes as usize,
        }
    }
}

/// A positive number of seconds, fractions allowed (`0.5`), at most a day.
fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected seconds, like 10 or 0.5, got {s:?}"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!(
            "expected more than 0 and at most 86400 seconds, got {s}"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
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
        assert_eq!(a.limits(), Limits::default());
        assert_eq!(a.stale_after_seconds, crate::state::STALE_AFTER);
    }

    #[test]
    fn help_says_stale_caches_still_decide() {
        use clap::CommandFactory;
        let help = Args::command().render_long_help().to_string();
        // As one line, whatever the wrapping.
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(help.contains("decisions still come from them"), "{help}");
        assert!(!help.contains("allowed unchecked"), "{help}");
    }

    #[test]
    fn limits_take_fractional_seconds_and_refuse_zero() {
        let a = Args::try_parse_from([
            "meshscope-webhook",
            "--header-read-timeout-seconds",
            "0.5",
            "--max-connections",
            "200",
        ])
        .unwrap();
        assert_eq!(a.limits().header_read_timeout, Duration::from_millis(500));
        assert_eq!(a.limits().max_connections, 200);
        for bad in ["0", "90000", "soon"] {
            let e = Args::try_parse_from(["meshscope-webhook", "--idle-timeout-seconds", bad])
                .unwrap_err();
            assert!(e.to_string().contains("seconds"), "{e}");
        }
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
