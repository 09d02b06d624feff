use std::io::{self, Write};
use std::process::ExitCode;

use clap::FromArgMatches;
use kubectl_meshscope::{args, run, Outcome};

// Snapshot building is allocation-heavy; mimalloc cuts its cost markedly.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    no_transparent_huge_pages();
    // As `Cli::parse`, with the help's examples printed unwrapped, and
    // kubectl's global flags taken before the command too.
    let argv = kubectl_meshscope::hoist::hoist(std::env::args_os().collect());
    let cli = args::Cli::from_arg_matches(&args::command().get_matches_from(argv))
        .unwrap_or_else(|e| e.format(&mut args::command()).exit());
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut err = io::stderr();
    let result = run(cli, &mut out, &mut err).and_then(|o| Ok(out.flush().map(|_| o)?));
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Findings) => ExitCode::from(1),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(err, "error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// A short-lived process that builds its snapshot once gains nothing from
/// transparent huge pages and pays for them: every 2 MiB page the allocator
/// returns and touches again is zeroed again by the kernel. Measured on the
/// ingest benchmark's fixed cost: 0.92 s with THP, 0.41 s without
/// (BENCHMARKS.md).
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes plain integer arguments and only sets
    // a flag on this process; a failure (old kernel) changes nothing.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
