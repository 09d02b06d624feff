//! `meshscope-webhook-soak`: the release webhook under an open-loop load of
//! AdmissionReviews over TLS on loopback while its certificate rotates, its
//! API server is killed and restarted, a namespace's policy flips, and
//! finally SIGTERM arrives. Bench code, not product code; run it through
//! `tests/bench/run webhook-soak`.
//!
//! It starts its own control plane (`tests/cluster/up` with
//! MESHSCOPE_CLUSTER_DIR, default /tmp/meshscope-soak) and stops it at the
//! end. Every answer is checked against the decision expected for that
//! request at that moment. Prints a markdown table per phase and, last, one
//! JSON line; exits 1 when a target is missed (0 lost or reset requests,
//! 0 wrong decisions, RSS within 10%, policy flips followed within 1 s, every
//! new connection after a rotation served the new certificate).

mod client;
mod control;
mod events;
mod figures;
mod mix;
mod pki;
mod records;
mod settings;
mod soak;
mod state;
mod targets;
mod timeline;

use anyhow::{bail, Result};
use clap::Parser;

use crate::control::cluster_down;
use crate::settings::Args;
use crate::soak::soak;

fn main() -> std::process::ExitCode {
    meshscope_e2e::tool_exit(try_main())
}

fn try_main() -> Result<()> {
    let args = Args::parse();
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        bail!("a rustls provider was already installed");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let cluster_dir = args.cluster_dir.clone();
    let keep = args.keep_cluster;
    let result = rt.block_on(soak(args));
    if !keep {
        eprintln!(
            "[soak] stopping the soak control plane ({})",
            cluster_dir.display()
        );
        cluster_down(&cluster_dir);
    }
    match result {
        Ok(true) => Ok(()),
        Ok(false) => std::process::exit(1),
        Err(e) => Err(e),
    }
}
