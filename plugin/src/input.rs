//! Offline inputs: manifest files and access logs. The only module that
//! reads files.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use meshscope_shared::observe::{LineOutcome, LogIngest, Observations};
use meshscope_shared::{Inputs, MeshSnapshot};
use serde::Deserialize;

/// Files under `path` (recursively, sorted), or `path` itself.
pub fn expand(path: &Path, exts: Option<&[&str]>) -> Result<Vec<PathBuf>> {
    if path.as_os_str() == "-" {
        return Ok(vec![path.to_path_buf()]);
    }
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot list {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                stack.push(p);
            } else if exts.is_none_or(|exts| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                exts.iter().any(|e| name.ends_with(e))
            }) {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

const MANIFEST_EXTS: &[&str] = &[".yaml", ".yml", ".json"];

/// Loads every object from YAML/JSON manifests (multi-document, `List`s).
pub fn load_manifests(paths: &[PathBuf]) -> Result<Inputs> {
    let mut inputs = Inputs::default();
    for p in paths {
        for file in expand(p, Some(MANIFEST_EXTS))? {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            add_documents(&mut inputs, &text).with_context(|| format!("in {}", file.display()))?;
        }
    }
    Ok(inputs)
}

pub fn add_documents(inputs: &mut Inputs, text: &str) -> Result<()> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let v: serde_json::Value = serde_json::from_str(text).context("invalid JSON")?;
        let items = match v {
            serde_json::Value::Array(a) => a,
            v => vec![v],
        };
        for item in items {
            inputs.add(item)?;
        }
        return Ok(());
    }
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v = serde_json::Value::deserialize(doc)
            .with_context(|| format!("YAML document {} is invalid", i + 1))?;
        if v.is_null() {
            continue;
        }
        if v.get("kind").is_none() {
            continue;
        }
        inputs.add(v)?;
    }
    Ok(())
}

/// Opens a log path: `-` is stdin; `.gz` is decompressed.
fn open_log(path: &Path) -> Result<Box<dyn Read>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(io::stdin().lock()));
    }
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    if path.extension().is_some_and(|e| e == "gz") {
        Ok(Box::new(flate2::read::MultiGzDecoder::new(f)))
    } else {
        Ok(Box::new(f))
    }
}

/// How many malformed lines are printed before they are only counted.
const SHOWN_MALFORMED: u64 = 5;

/// Streams access logs into observations. Memory does not grow with input
/// size: one line buffer, and aggregates keyed by (workload, destination).
pub fn read_access_logs(
    snap: &MeshSnapshot,
    paths: &[PathBuf],
    strict: bool,
    err: &mut dyn Write,
) -> Result<Observations> {
    let mut ingest = LogIngest::new(snap, "access-log");
    let mut shown = 0;
    let mut buf = Vec::with_capacity(4096);
    for p in paths {
        for file in expand(p, None)? {
            let mut reader = BufReader::with_capacity(1 << 20, open_log(&file)?);
            let mut lineno = 0u64;
            loop {
                buf.clear();
                let n = reader
                    .read_until(b'\n', &mut buf)
                    .with_context(|| format!("cannot read {}", file.display()))?;
                if n == 0 {
                    break;
                }
                lineno += 1;
                let outcome = match std::str::from_utf8(&buf) {
                    Ok(line) => ingest.line(line),
                    Err(_) => ingest.line(&String::from_utf8_lossy(&buf)),
                };
                if let LineOutcome::Malformed(why) = outcome {
                    if strict {
                        bail!(
                            "{}:{lineno}: malformed access-log line ({why}); remove --strict to count and skip such lines",
                            file.display()
                        );
                    }
                    if shown < SHOWN_MALFORMED {
                        shown += 1;
                        let text = String::from_utf8_lossy(&buf);
                        let text = text.trim_end();
                        let cut: String = text.chars().take(160).collect();
                        let _ = writeln!(
                            err,
                            "warning: {}:{lineno}: malformed access-log line ({why}): {cut}",
                            file.display()
                        );
                    }
                }
            }
        }
    }
    Ok(ingest.finish())
}
