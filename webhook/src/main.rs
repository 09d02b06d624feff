#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use meshscope_webhook::{init_tracing, serve, Args};

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(e) = init_tracing(&args.log_level) {
        eprintln!("error: {e:#}");
        return ExitCode::from(2);
    }
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        eprintln!("error: a rustls crypto provider was already installed");
        return ExitCode::from(2);
    }
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::from(1)
        }
    }
}
