//! Offline inputs: manifest files and access logs. The only module that
//! reads files.

use std::fs::File;
use std::io::{self, Read, Write};
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
        // Items are kept as raw text and decoded one at a time, so a large
        // `kubectl get -o json` dump is never a whole tree in memory.
        #[derive(Deserialize)]
        struct List<'a> {
            #[serde(borrow)]
            items: Vec<&'a serde_json::value::RawValue>,
        }
        let raw: Vec<&serde_json::value::RawValue> = if trimmed.starts_with('[') {
            serde_json::from_str(text).context("invalid JSON")?
        } else {
            match serde_json::from_str::<List<'_>>(text) {
                Ok(l) => l.items,
                Err(_) => vec![serde_json::from_str(text).context("invalid JSON")?],
            }
        };
        for item in raw {
            let v: serde_json::Value = serde_json::from_str(item.get()).context("invalid JSON")?;
            inputs.add(v)?;
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
const SHOWN_MALFORMED: usize = 5;
/// Bytes handed to a worker at a time.
const CHUNK: usize = 1 << 20;

/// What one worker saw: its observations, the first malformed lines
/// (line number, reason, text), and in strict mode the first error.
struct WorkerResult {
    obs: Observations,
    malformed: Vec<Malformed>,
}

/// A malformed line: its number, why, and its first 160 characters.
type Malformed = (u64, &'static str, String);

/// Streams access logs into observations, on every core. Memory does not
/// grow with input size: a few 1 MiB chunks in flight, and aggregates keyed
/// by (workload, destination).
pub fn read_access_logs(
    snap: &MeshSnapshot,
    paths: &[PathBuf],
    strict: bool,
    err: &mut dyn Write,
) -> Result<Observations> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 16);
    let mut obs = Observations::default();
    let mut shown = 0;
    for p in paths {
        for file in expand(p, None)? {
            let reader = open_log(&file)?;
            let (o, mut malformed) = ingest_file(snap, reader, &file, threads)?;
            malformed.sort_by_key(|m| m.0);
            if strict {
                if let Some((line, why, _)) = malformed.first() {
                    bail!(
                        "{}:{line}: malformed access-log line ({why}); remove --strict to count and skip such lines",
                        file.display()
                    );
                }
            }
            for (line, why, text) in malformed {
                if shown >= SHOWN_MALFORMED {
                    break;
                }
                shown += 1;
                writeln!(
                    err,
                    "warning: {}:{line}: malformed access-log line ({why}): {text}",
                    file.display()
                )?;
            }
            obs.merge(o);
        }
    }
    if obs.sources.is_empty() {
        obs.sources.insert("access-log".into());
    }
    obs.unregistered
        .sort_by(|a, b| b.requests.cmp(&a.requests).then(a.address.cmp(&b.address)));
    Ok(obs)
}

fn ingest_file(
    snap: &MeshSnapshot,
    mut reader: Box<dyn Read>,
    file: &Path,
    threads: usize,
) -> Result<(Observations, Vec<Malformed>)> {
    use std::sync::mpsc::sync_channel;
    use std::sync::{Arc, Mutex};
    std::thread::scope(|scope| {
        let (tx, rx) = sync_channel::<(Vec<u8>, u64)>(threads);
        let rx = Arc::new(Mutex::new(rx));
        // Chunk buffers go back to the reader: a fixed set of buffers is
        // reused for the whole input, so memory stays flat.
        let (pool_tx, pool_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let rx = Arc::clone(&rx);
                let pool_tx = pool_tx.clone();
                scope.spawn(move || {
                    let mut ingest = LogIngest::new(snap, "access-log");
                    let mut malformed = Vec::new();
                    loop {
                        let msg = rx.lock().map(|r| r.recv());
                        let Ok(Ok((chunk, first_line))) = msg else {
                            break;
                        };
                        let mut lineno = first_line;
                        for raw in chunk.split(|b| *b == b'\n') {
                            if raw.is_empty() {
                                lineno += 1;
                                continue;
                            }
                            let text = match std::str::from_utf8(raw) {
                                Ok(t) => std::borrow::Cow::Borrowed(t),
                                Err(_) => String::from_utf8_lossy(raw),
                            };
                            if let LineOutcome::Malformed(why) = ingest.line(&text) {
                                if malformed.len() < SHOWN_MALFORMED {
                                    let cut: String = text.trim_end().chars().take(160).collect();
                                    malformed.push((lineno, why, cut));
                                }
                            }
                            lineno += 1;
                        }
                        let _ = pool_tx.send(chunk);
                    }
                    WorkerResult {
                        obs: ingest.finish(),
                        malformed,
                    }
                })
            })
            .collect();
        // The reader: whole lines only, with the number of the first.
        let mut carry: Vec<u8> = Vec::new();
        let mut next_line = 1u64;
        let mut read_err = None;
        loop {
            let mut buf = pool_rx.try_recv().unwrap_or_default();
            buf.clear();
            buf.extend_from_slice(&carry);
            carry.clear();
            let start = buf.len();
            buf.resize(start + CHUNK, 0);
            let n = match reader.read(&mut buf[start..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    buf.truncate(start);
                    carry.extend_from_slice(&buf);
                    continue;
                }
                Err(e) => {
                    read_err = Some(e);
                    break;
                }
            };
            buf.truncate(start + n);
            if n == 0 {
                if !buf.is_empty() {
                    let _ = tx.send((buf, next_line));
                }
                break;
            }
            match buf.iter().rposition(|b| *b == b'\n') {
                Some(cut) => {
                    carry.extend_from_slice(&buf[cut + 1..]);
                    buf.truncate(cut + 1);
                    let lines = buf.iter().filter(|b| **b == b'\n').count() as u64;
                    if tx.send((buf, next_line)).is_err() {
                        break;
                    }
                    next_line += lines;
                }
                None => carry = buf,
            }
        }
        drop(pool_rx);
        drop(tx);
        let mut obs = Observations::default();
        let mut malformed = Vec::new();
        for w in workers {
            let r = w
                .join()
                .map_err(|_| anyhow::anyhow!("an access-log worker panicked"))?;
            obs.merge(r.obs);
            malformed.extend(r.malformed);
        }
        if let Some(e) = read_err {
            return Err(anyhow::Error::new(e).context(format!("cannot read {}", file.display())));
        }
        Ok((obs, malformed))
    })
}
