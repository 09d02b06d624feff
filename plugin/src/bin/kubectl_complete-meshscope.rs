//! `kubectl_complete-meshscope`: kubectl runs it from PATH to complete
//! `kubectl meshscope ...`, passing the words after `meshscope` (the last
//! one being completed). See `kubectl_meshscope::complete`.

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

use std::io::{self, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let words: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let result = kubectl_meshscope::complete::run(&words, &mut out, &mut io::stderr())
        .and_then(|()| out.flush());
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // kubectl discards the output of a completer that fails.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(2),
    }
}
