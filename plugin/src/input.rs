//! Offline inputs: manifest files, access logs and `--mesh-config`. The
//! only module that reads the files a command is given (the kubeconfig is
//! read by `live`, through kube's loader).

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use meshscope_shared::accesslog;
use meshscope_shared::observe::{LineOutcome, LogIngest, Observations};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::output::plural;
use meshscope_shared::{Inputs, MeshConfig, MeshSnapshot};
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

/// A `--mesh-config` file: either the mesh YAML itself or the whole
/// `istio` ConfigMap.
pub fn read_mesh_config(path: &Path) -> Result<MeshConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read --mesh-config {}", path.display()))?;
    mesh_from_text(&text).with_context(|| format!("in --mesh-config {}", path.display()))
}

fn mesh_from_text(text: &str) -> Result<MeshConfig> {
    let v: serde_yaml::Value = serde_yaml::from_str(text).context("invalid YAML")?;
    if v.get("kind").and_then(|k| k.as_str()) == Some("ConfigMap") {
        let mesh = v
            .get("data")
            .and_then(|d| d.get("mesh"))
            .and_then(|m| m.as_str())
            .unwrap_or("");
        return Ok(MeshConfig::from_yaml(mesh)?);
    }
    Ok(MeshConfig::from_yaml(text)?)
}

/// Loads every object from YAML/JSON manifests (multi-document, `List`s);
/// `-` is stdin.
pub fn load_manifests(paths: &[PathBuf]) -> Result<Inputs> {
    load_manifests_into(paths, Inputs::default())
}

/// [`load_manifests`] into `inputs` as configured (ConfigMaps kept for
/// manifest hints, say).
pub fn load_manifests_into(paths: &[PathBuf], inputs: Inputs) -> Result<Inputs> {
    load_objects_into("--manifests", paths, inputs)
}

/// Reads the objects of `paths` (files, directories, `-` for stdin) into
/// `inputs`; `flag` names where they were given, for errors.
pub fn load_objects_into(flag: &str, paths: &[PathBuf], mut inputs: Inputs) -> Result<Inputs> {
    for p in paths {
        if p.as_os_str() == "-" {
            let mut text = String::new();
            io::stdin()
                .lock()
                .read_to_string(&mut text)
                .with_context(|| format!("cannot read {flag} - (stdin)"))?;
            add_documents(&mut inputs, &text).with_context(|| format!("in {flag} - (stdin)"))?;
            continue;
        }
        for file in expand(p, Some(MANIFEST_EXTS))? {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            add_documents(&mut inputs, &text).with_context(|| format!("in {}", file.display()))?;
        }
    }
    Ok(inputs)
}

/// The documents of YAML or JSON manifest files, as they are written
/// (every field kept), for commands that print them back changed.
pub fn read_documents(paths: &[PathBuf]) -> Result<Vec<serde_json::Value>> {
    let mut out = Vec::new();
    for p in paths {
        for file in expand(p, Some(MANIFEST_EXTS))? {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            for doc in serde_yaml::Deserializer::from_str(&text) {
                let v = serde_json::Value::deserialize(doc)
                    .with_context(|| format!("in {}", file.display()))?;
                if v.is_object() {
                    out.push(v);
                }
            }
        }
    }
    Ok(out)
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

/// Opens a log path: `-` is stdin; `.gz` is decompressed, and `read`
/// counts the compressed bytes taken from the file.
fn open_log(path: &Path, read: &Arc<AtomicU64>) -> Result<Box<dyn Read>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(io::stdin().lock()));
    }
    let f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    if is_gz(path) {
        let counted = Counted {
            inner: f,
            read: Arc::clone(read),
        };
        Ok(Box::new(flate2::read::MultiGzDecoder::new(counted)))
    } else {
        Ok(Box::new(f))
    }
}

fn is_gz(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "gz")
}

/// A reader that counts what it read.
struct Counted<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Where a compressed log stopped making sense.
struct Cut {
    /// Compressed bytes read from the file when decompression failed.
    offset: u64,
    error: io::Error,
}

/// How many malformed lines are printed before they are only counted.
pub const SHOWN_MALFORMED: usize = 5;
/// Bytes of log a worker takes at a time.
const CHUNK: usize = 1 << 20;

/// A malformed line: its number, why, and its first 160 characters.
type Malformed = (u64, &'static str, String);

/// What a worker saw in one chunk: the lines it held, and its first malformed
/// lines numbered from the chunk's start.
struct ChunkDone {
    index: usize,
    lines: u64,
    malformed: Vec<Malformed>,
}

/// Streams access logs into observations, on every core. Memory does not
/// grow with input size: one chunk buffer per worker, and aggregates keyed
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
            let (o, malformed, cut) = ingest_file(snap, &file, threads)?;
            if let Some(cut) = cut {
                let msg = format!(
                    "{}: compressed data ends or breaks at byte {} ({}); the {} read before it are kept",
                    file.display(),
                    cut.offset,
                    cut.error,
                    plural(o.stats.lines as usize, "line", "lines"),
                );
                if strict {
                    bail!("{msg}; remove --strict to go on with them");
                }
                writeln!(err, "warning: {msg}")?;
            }
            // A file without one access-log line is said in one line and
            // never quoted: under a directory it may be anything, a
            // kubeconfig or a key among them.
            if o.stats.access_lines == 0 {
                if let Some(o) = no_access_lines(&file, o, &malformed, strict, err)? {
                    obs.merge(o);
                }
                continue;
            }
            if strict {
                if let Some((line, why, _)) = malformed.first() {
                    bail!(
                        "{}:{line}: malformed access-log line ({why}); remove --strict to count and skip such lines",
                        file.display()
                    );
                }
            }
            for m in malformed.iter().take(SHOWN_MALFORMED.saturating_sub(shown)) {
                shown += 1;
                writeln!(err, "warning: {}", malformed_line(&file, m))?;
            }
            obs.merge(o);
        }
    }
    if obs.sources.is_empty() {
        obs.sources.insert("access-log".into());
    }
    obs.sort_unregistered();
    Ok(obs)
}

/// Says why `file`, which held no access-log line, is not read as a log:
/// what it looks like instead (then it is skipped: `None`), or the likely
/// cause from its lines (then its counts are kept). An error with
/// `--strict`.
fn no_access_lines(
    file: &Path,
    o: Observations,
    malformed: &[Malformed],
    strict: bool,
    err: &mut dyn Write,
) -> Result<Option<Observations>> {
    let binary = malformed.iter().any(|(_, _, text)| {
        text.chars()
            .any(|c| c == char::REPLACEMENT_CHARACTER || (c.is_control() && c != '\t'))
    });
    let looks = (o.stats.lines > 0)
        .then(|| head(file))
        .flatten()
        .and_then(|h| accesslog::not_an_access_log(&h));
    let msg = match looks {
        Some(like) => format!("{}: not an access log: {like}", file.display()),
        None => format!(
            "{}: no access-log lines in {} ({})",
            file.display(),
            plural(o.stats.lines as usize, "line", "lines"),
            o.stats.no_access_lines_cause(binary)
        ),
    };
    if strict {
        bail!("{msg}; remove --strict to go on without it");
    }
    let skipped = if looks.is_some() { "; skipped" } else { "" };
    writeln!(err, "warning: {msg}{skipped}")?;
    Ok(looks.is_none().then_some(o))
}

/// The first bytes of a log file (decompressed), as text; `None` for
/// stdin, which cannot be read again, or a file that cannot be.
fn head(file: &Path) -> Option<String> {
    const HEAD: u64 = 8192;
    if file.as_os_str() == "-" {
        return None;
    }
    let f = File::open(file).ok()?;
    let mut bytes = Vec::new();
    let read = if is_gz(file) {
        flate2::read::MultiGzDecoder::new(f)
            .take(HEAD)
            .read_to_end(&mut bytes)
    } else {
        f.take(HEAD).read_to_end(&mut bytes)
    };
    // A broken gzip stream still has a head.
    if read.is_err() && bytes.is_empty() {
        return None;
    }
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// `FILE:LINE: malformed access-log line (why): TEXT`, with binary junk
/// escaped (never written raw to a terminal), and without the text when
/// it may hold a credential.
fn malformed_line(file: &Path, (line, why, text): &Malformed) -> String {
    if accesslog::may_hold_secret(text) {
        return format!(
            "{}:{line}: malformed access-log line ({why}); not shown: it may hold a credential",
            file.display()
        );
    }
    let text: String = text
        .chars()
        .flat_map(|c| {
            let plain = !c.is_control() || c == '\t';
            plain
                .then_some(c)
                .into_iter()
                .chain(c.escape_default().filter(move |_| !plain))
        })
        .collect();
    format!(
        "{}:{line}: malformed access-log line ({why}): {text}",
        file.display()
    )
}

/// Ingests one file; returns its observations, its first malformed lines
/// in file order, and where a compressed file broke off.
fn ingest_file(
    snap: &MeshSnapshot,
    file: &Path,
    threads: usize,
) -> Result<(Observations, Vec<Malformed>, Option<Cut>)> {
    let plain = file.as_os_str() != "-" && !is_gz(file);
    let meta = if plain {
        Some(std::fs::metadata(file).with_context(|| format!("cannot read {}", file.display()))?)
    } else {
        None
    };
    let read = Arc::new(AtomicU64::new(0));
    let (obs, chunks, broke) = match meta {
        Some(m) if m.is_file() => {
            let f = File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
            let (o, c) = ingest_positional(snap, &f, m.len(), threads, CHUNK)
                .with_context(|| format!("cannot read {}", file.display()))?;
            (o, c, None)
        }
        _ => ingest_stream(snap, open_log(file, &read)?, threads, CHUNK)
            .with_context(|| format!("cannot read {}", file.display()))?,
    };
    // A compressed log that breaks off keeps what came before; any other
    // read error is one.
    let cut = match broke {
        None => None,
        Some(error) if is_gz(file) => Some(Cut {
            offset: read.load(Ordering::Relaxed),
            error,
        }),
        Some(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    Ok((obs, number_malformed(chunks), cut))
}

/// Turns per-chunk line numbers into file line numbers, in file order.
fn number_malformed(mut chunks: Vec<ChunkDone>) -> Vec<Malformed> {
    chunks.sort_by_key(|c| c.index);
    let mut before = 0u64;
    let mut out = Vec::new();
    for c in chunks {
        for (n, why, text) in c.malformed {
            if out.len() < SHOWN_MALFORMED {
                out.push((before + n, why, text));
            }
        }
        before += c.lines;
    }
    out
}

/// Feeds the lines of `chunk` to `ingest`; returns how many lines it held.
/// Malformed lines are numbered from 1 within the chunk; the first
/// [`SHOWN_MALFORMED`] go to `malformed` (line, reason, first 160
/// characters). Public for the fuzz targets (fuzz/).
pub fn ingest_chunk(
    ingest: &mut LogIngest<'_>,
    chunk: &[u8],
    malformed: &mut Vec<Malformed>,
) -> u64 {
    let mut n = 0u64;
    let mut one = |text: &str, n: u64| {
        if text.is_empty() {
            return;
        }
        if let LineOutcome::Malformed(why) = ingest.line(text) {
            if malformed.len() < SHOWN_MALFORMED {
                let cut: String = text.trim_end().chars().take(160).collect();
                malformed.push((n, why, cut));
            }
        }
    };
    // Validating the chunk once is cheaper than validating every line.
    match std::str::from_utf8(chunk) {
        Ok(text) => {
            for line in text.split_terminator('\n') {
                n += 1;
                one(line, n);
            }
        }
        Err(_) => {
            let mut rest = chunk;
            while !rest.is_empty() {
                let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
                n += 1;
                one(&String::from_utf8_lossy(&rest[..end]), n);
                rest = &rest[(end + 1).min(rest.len())..];
            }
        }
    }
    n
}

/// A regular file: each worker reads its own byte ranges with positional
/// reads into one reused buffer. A range owns the lines that start in it.
fn ingest_positional(
    snap: &MeshSnapshot,
    file: &File,
    len: u64,
    threads: usize,
    chunk: usize,
) -> io::Result<(Observations, Vec<ChunkDone>)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let step = chunk;
    let chunk = chunk as u64;
    let count = len.div_ceil(chunk) as usize;
    let next = AtomicUsize::new(0);
    let threads = threads.min(count.max(1));
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let next = &next;
                scope.spawn(move || -> io::Result<(Observations, Vec<ChunkDone>)> {
                    let mut ingest = LogIngest::new(snap, "access-log");
                    let mut done = Vec::new();
                    let mut buf: Vec<u8> = Vec::new();
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= count {
                            break;
                        }
                        let lo = index as u64 * chunk;
                        let hi = (lo + chunk).min(len);
                        let (start, end) = read_range(file, len, lo, hi, step, &mut buf)?;
                        let mut malformed = Vec::new();
                        let lines = ingest_chunk(&mut ingest, &buf[start..end], &mut malformed);
                        done.push(ChunkDone {
                            index,
                            lines,
                            malformed,
                        });
                    }
                    Ok((ingest.finish(), done))
                })
            })
            .collect();
        let mut obs = Observations::default();
        let mut done = Vec::new();
        for w in workers {
            let (o, d) = w
                .join()
                .map_err(|_| io::Error::other("an access-log worker panicked"))??;
            obs.merge(o);
            done.extend(d);
        }
        Ok((obs, done))
    })
}

/// Reads into `buf` the lines that start in `[lo, hi)`; returns their span
/// in `buf`. Reads one byte before `lo` to know whether a line starts there,
/// and past `hi` until the last of those lines ends.
fn read_range(
    file: &File,
    len: u64,
    lo: u64,
    hi: u64,
    step: usize,
    buf: &mut Vec<u8>,
) -> io::Result<(usize, usize)> {
    use std::os::unix::fs::FileExt;
    let from = lo.saturating_sub(1);
    let mut want = ((hi - from) as usize + step / 16).min((len - from) as usize);
    buf.resize(want, 0);
    file.read_exact_at(&mut buf[..want], from)?;
    let start = if lo == 0 {
        0
    } else {
        match memchr::memchr(b'\n', &buf[..want]) {
            Some(i) => i + 1,
            None => return Ok((0, 0)),
        }
    };
    if from + start as u64 >= hi {
        return Ok((0, 0));
    }
    // The last line starting before `hi` ends at the first newline at or
    // after `hi - 1`.
    let mut search = (hi - 1 - from) as usize;
    loop {
        if let Some(i) = memchr::memchr(b'\n', &buf[search..want]) {
            return Ok((start, search + i + 1));
        }
        if from + want as u64 >= len {
            return Ok((start, want));
        }
        search = want;
        let more = (want + step).min((len - from) as usize);
        buf.resize(more, 0);
        file.read_exact_at(&mut buf[want..more], from + want as u64)?;
        want = more;
    }
}

/// Standard input or a decompressed stream: one reader hands whole-line
/// chunks to the workers; the buffers go back to it, so memory stays flat.
/// A read error ends the stream: what came before it is returned with it
/// (the partial line at the break is dropped).
#[allow(clippy::type_complexity)]
fn ingest_stream(
    snap: &MeshSnapshot,
    mut reader: Box<dyn Read>,
    threads: usize,
    chunk: usize,
) -> io::Result<(Observations, Vec<ChunkDone>, Option<io::Error>)> {
    use std::sync::mpsc::{channel, sync_channel};
    use std::sync::{Arc, Mutex};
    std::thread::scope(|scope| {
        let (tx, rx) = sync_channel::<(usize, Vec<u8>, usize)>(threads);
        let rx = Arc::new(Mutex::new(rx));
        let (pool_tx, pool_rx) = channel::<Vec<u8>>();
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let rx = Arc::clone(&rx);
                let pool_tx = pool_tx.clone();
                scope.spawn(move || {
                    let mut ingest = LogIngest::new(snap, "access-log");
                    let mut done = Vec::new();
                    loop {
                        let msg = rx.lock().map(|r| r.recv());
                        let Ok(Ok((index, buf, len))) = msg else {
                            break;
                        };
                        let mut malformed = Vec::new();
                        let lines = ingest_chunk(&mut ingest, &buf[..len], &mut malformed);
                        done.push(ChunkDone {
                            index,
                            lines,
                            malformed,
                        });
                        let _ = pool_tx.send(buf);
                    }
                    (ingest.finish(), done)
                })
            })
            .collect();
        drop(pool_tx);
        // Whole lines only: the bytes after the last newline carry over.
        let mut carry: Vec<u8> = Vec::new();
        let mut index = 0;
        let mut read_err = None;
        loop {
            let mut buf = pool_rx.try_recv().unwrap_or_default();
            let start = carry.len();
            if buf.len() < start + chunk {
                buf.resize(start + chunk, 0);
            }
            buf[..start].copy_from_slice(&carry);
            carry.clear();
            let n = match reader.read(&mut buf[start..]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    carry.extend_from_slice(&buf[..start]);
                    continue;
                }
                Err(e) => {
                    read_err = Some(e);
                    break;
                }
            };
            let filled = start + n;
            if n == 0 {
                if filled > 0 && tx.send((index, buf, filled)).is_err() {
                    break;
                }
                break;
            }
            match memchr::memrchr(b'\n', &buf[..filled]) {
                Some(cut) => {
                    carry.extend_from_slice(&buf[cut + 1..filled]);
                    if tx.send((index, buf, cut + 1)).is_err() {
                        break;
                    }
                    index += 1;
                }
                None => {
                    buf.truncate(filled);
                    carry = buf;
                }
            }
        }
        drop(tx);
        let mut obs = Observations::default();
        let mut done = Vec::new();
        for w in workers {
            let (o, d) = w
                .join()
                .map_err(|_| io::Error::other("an access-log worker panicked"))?;
            obs.merge(o);
            done.extend(d);
        }
        Ok((obs, done, read_err))
    })
}

pub mod tail;
#[cfg(test)]
mod tests;
