//! The soak's flags and the names it uses on the cluster and the webhook.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// How long a read of the admin port may stall.
pub const ADMIN_READ: Duration = Duration::from_secs(2);

pub const SERVICE_ACCOUNT: &str = "system:serviceaccount:meshscope-system:meshscope-webhook";
pub const NS_ENFORCE: &str = "soak-enforce";
pub const NS_WARN: &str = "soak-warn";
pub const NS_FLIP: &str = "soak-flip";

#[derive(Parser, Debug)]
#[command(about = "Soak test of the release meshscope-webhook")]
pub struct Args {
    /// Requests per second (open loop)
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    /// Seconds of load before SIGTERM
    #[arg(long, default_value_t = 60)]
    pub duration: u64,
    /// HTTP/2 connections (requests alternate between HTTP/2 and HTTP/1.1)
    #[arg(long, default_value_t = 4)]
    pub h2_connections: usize,
    /// HTTP/1.1 connections
    #[arg(long, default_value_t = 16)]
    pub h1_connections: usize,
    /// The webhook binary (release)
    #[arg(long)]
    pub webhook: PathBuf,
    /// Work directory (certificates, logs)
    #[arg(long, default_value = "/tmp/meshscope-soak-work")]
    pub work: PathBuf,
    /// Control plane state directory (its own, not the shared test cluster)
    #[arg(long, default_value = "/tmp/meshscope-soak")]
    pub cluster_dir: PathBuf,
    /// Leave the control plane running at the end
    #[arg(long)]
    pub keep_cluster: bool,
}
