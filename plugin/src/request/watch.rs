//! `apply --watch`: the watch flags, checked.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};

use crate::args::{Common, DryRun, EventOutput, WatchFlags};
use crate::duration::parse_duration;

/// How `apply --watch` runs.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    /// Between the starts of two passes.
    pub interval: Duration,
    /// `--prune-after`: narrow hosts unseen for this long.
    pub prune_after: Option<Duration>,
    pub metrics_addr: Option<SocketAddr>,
    /// `--heartbeat`: how often to say the watcher is at work (`None`: never).
    pub heartbeat: Option<Duration>,
    /// `--lease NAMESPACE/NAME`.
    pub lease: Option<(String, String)>,
    /// This replica's name in the Lease.
    pub identity: String,
    pub output: EventOutput,
}

/// The flags that mean something only with `--watch`, as given.
fn watch_only(w: &WatchFlags) -> Option<&'static str> {
    if w.interval != "30s" {
        Some("--interval")
    } else if w.prune_after.is_some() {
        Some("--prune-after")
    } else if w.metrics_addr.is_some() {
        Some("--metrics-addr")
    } else if w.heartbeat != "10m" {
        Some("--heartbeat")
    } else if w.lease.is_some() {
        Some("--lease")
    } else if w.identity.is_some() {
        Some("--identity")
    } else if w.output != EventOutput::Text {
        Some("-o")
    } else {
        None
    }
}

impl WatchRequest {
    /// `None` without `--watch`; the checks that make `--watch` sensible
    /// with the rest of apply's flags.
    pub fn parse(
        w: &WatchFlags,
        c: &Common,
        dry_run: DryRun,
        diff: bool,
        prune_hosts: bool,
    ) -> Result<Option<WatchRequest>> {
        if !w.watch {
            if let Some(flag) = watch_only(w) {
                bail!("{flag} is a --watch flag; add --watch, or drop {flag}");
            }
            return Ok(None);
        }
        if dry_run != DryRun::None {
            bail!("--watch writes as traffic changes; it cannot be a --dry-run (use `kubectl meshscope diff` to see one pass)");
        }
        if diff {
            bail!("--watch reports each change as a line; drop --diff");
        }
        if prune_hosts {
            bail!("--prune-hosts drops every host the window does not show; with --watch use --prune-after DURATION, which drops a host only once no traffic reached it for that long");
        }
        if c.traffic.sources().is_empty() {
            bail!("--watch needs a traffic source to follow: --from-pod-logs, --prometheus URL or --access-log FILE");
        }
        if c.traffic.access_logs.iter().any(|p| p.as_os_str() == "-") {
            bail!("--watch follows --access-log files as they grow; stdin (-) cannot be read again each pass: write it to a file");
        }
        let interval = parse_duration(&w.interval).map_err(|e| anyhow!("--interval: {e}"))?;
        if interval < Duration::from_secs(1) {
            bail!(
                "--interval {}: a pass takes at least a second; use 1s or more",
                w.interval
            );
        }
        let prune_after = w
            .prune_after
            .as_deref()
            .map(|d| parse_duration(d).map_err(|e| anyhow!("--prune-after: {e}")))
            .transpose()?;
        if prune_after.is_some_and(|p| p < interval) {
            bail!("--prune-after is shorter than --interval: a host would be dropped before one pass could see it called again");
        }
        let heartbeat = parse_duration(&w.heartbeat).map_err(|e| anyhow!("--heartbeat: {e}"))?;
        Ok(Some(WatchRequest {
            interval,
            prune_after,
            heartbeat: (!heartbeat.is_zero()).then_some(heartbeat),
            metrics_addr: w.metrics_addr.as_deref().map(metrics_addr).transpose()?,
            lease: w.lease.as_deref().map(lease).transpose()?,
            identity: w.identity.clone().unwrap_or_else(default_identity),
            output: w.output,
        }))
    }
}

/// `:9090` (every interface) or `HOST:PORT`.
fn metrics_addr(s: &str) -> Result<SocketAddr> {
    let full = match s.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => s.to_string(),
    };
    full.parse().map_err(|_| {
        anyhow!("--metrics-addr {s:?}: expected :PORT or IP:PORT, such as :9090 or 127.0.0.1:9090")
    })
}

/// `NAMESPACE/NAME`, both DNS labels.
fn lease(s: &str) -> Result<(String, String)> {
    let ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 63
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    match s.split_once('/') {
        Some((ns, name)) if ok(ns) && ok(name) => Ok((ns.to_string(), name.to_string())),
        _ => bail!(
            "--lease {s:?}: expected NAMESPACE/NAME, such as meshscope-system/meshscope-watch"
        ),
    }
}

/// `$POD_NAME` (the downward API), else the host name, with a random
/// suffix of this process: two replicas that share a host name (two
/// processes on one machine, or a restarted container) never share an
/// identity.
fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "meshscope-watch".to_string());
    format!("{base}-{:08x}", random_u32())
}

/// A random number, from the standard library's per-process hash keys.
fn random_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_leases_are_checked() {
        assert_eq!(metrics_addr(":9090").unwrap().to_string(), "0.0.0.0:9090");
        assert_eq!(
            metrics_addr("127.0.0.1:8080").unwrap().to_string(),
            "127.0.0.1:8080"
        );
        assert!(metrics_addr("localhost").is_err());
        assert_eq!(
            lease("meshscope-system/watch").unwrap(),
            ("meshscope-system".into(), "watch".into())
        );
        for bad in ["watch", "/x", "a/", "A/b", "a/b/c"] {
            assert!(lease(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn default_identities_differ_per_process_and_keep_the_name() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b);
        let (base, suffix) = a.rsplit_once('-').unwrap();
        assert!(!base.is_empty());
        assert_eq!(suffix.len(), 8, "{a}");
        assert!(b.starts_with(&format!("{base}-")), "{a} {b}");
    }
}
