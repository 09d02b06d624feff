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

/// `-` read twice, or by two flags, would see stdin empty the second time:
/// refuse before reading anything.
pub fn check_stdin(c: &crate::args::Common) -> Result<()> {
    let dash = |paths: &[PathBuf]| paths.iter().filter(|p| p.as_os_str() == "-").count();
    let (manifests, logs) = (dash(&c.manifests), dash(&c.access_logs));
    if manifests > 0 && logs > 0 {
        bail!("--manifests - and --access-log - cannot both read stdin; write one of them to a file and pass its path");
    }
    if manifests > 1 {
        bail!("--manifests - is given more than once; stdin is read once, so pass it once");
    }
    if logs > 1 {
        bail!("--access-log - is given more than once; stdin is read once, so pass it once");
    }
    Ok(())
}

/// Loads every object from YAML/JSON manifests (multi-document, `List`s);
/// `-` is stdin.
pub fn load_manifests(paths: &[PathBuf]) -> Result<Inputs> {
    let mut inputs = Inputs::default();
    for p in paths {
        if p.as_os_str() == "-" {
            let mut text = String::new();
            io::stdin()
                .lock()
                .read_to_string(&mut text)
                .context("cannot read --manifests - (stdin)")?;
            add_documents(&mut inputs, &text).context("in --manifests - (stdin)")?;
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
            let (o, malformed) = ingest_file(snap, &file, threads)?;
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

/// Ingests one file; returns its observations and its first malformed lines
/// in file order.
fn ingest_file(
    snap: &MeshSnapshot,
    file: &Path,
    threads: usize,
) -> Result<(Observations, Vec<Malformed>)> {
    let plain = file.as_os_str() != "-" && file.extension().is_none_or(|e| e != "gz");
    let meta = if plain {
        Some(std::fs::metadata(file).with_context(|| format!("cannot read {}", file.display()))?)
    } else {
        None
    };
    let (obs, chunks) = match meta {
        Some(m) if m.is_file() => {
            let f = File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
            ingest_positional(snap, &f, m.len(), threads, CHUNK)
        }
        _ => ingest_stream(snap, open_log(file)?, threads, CHUNK),
    }
    .with_context(|| format!("cannot read {}", file.display()))?;
    Ok((obs, number_malformed(chunks)))
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
fn ingest_stream(
    snap: &MeshSnapshot,
    mut reader: Box<dyn Read>,
    threads: usize,
    chunk: usize,
) -> io::Result<(Observations, Vec<ChunkDone>)> {
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
        match read_err {
            Some(e) => Err(e),
            None => Ok((obs, done)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshscope_shared::mesh::Options;

    fn bookinfo() -> (MeshSnapshot, Vec<u8>) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
        let inputs = load_manifests(&[root.join("manifests.yaml")]).unwrap();
        let snap = MeshSnapshot::build(&inputs, Options::default()).unwrap();
        let mut log = std::fs::read(root.join("access.log")).unwrap();
        // Blank lines, proxy output, malformed lines, CRLF, invalid UTF-8,
        // and a last line without a newline: every chunking must agree.
        let mut extra = Vec::new();
        extra.extend_from_slice(b"\n\n2026-11-28T09:00:00.000000Z\tinfo\txdsproxy\tconnected\n");
        extra.extend_from_slice(b"{broken json\n");
        extra.extend_from_slice(&log[..log.len() / 2]);
        extra.extend_from_slice(
            b"\r\n[2026-11-28T09:00:00Z] \"GET / HTTP/1.1\" 200 \"a\" \"b\" outbound|80||x\r\n",
        );
        extra.extend_from_slice(b"\xff\xfe not utf-8 \xff\n");
        log.extend_from_slice(&extra);
        log.extend_from_slice(b"{\"also\": \"broken\"");
        (snap, log)
    }

    fn summary(obs: &Observations, chunks: Vec<ChunkDone>) -> String {
        let lines: u64 = chunks.iter().map(|c| c.lines).sum();
        let malformed = number_malformed(chunks);
        format!(
            "{lines}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
            obs.stats, obs.traffic, obs.unregistered, obs.window, malformed
        )
    }

    #[test]
    fn every_chunk_size_and_reader_gives_the_same_result() {
        let (snap, log) = bookinfo();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        std::fs::write(&path, &log).unwrap();
        let file = File::open(&path).unwrap();
        let len = log.len() as u64;
        let whole = {
            let (o, c) = ingest_positional(&snap, &file, len, 1, 1 << 20).unwrap();
            summary(&o, c)
        };
        let newlines = log.iter().filter(|b| **b == b'\n').count() as u64;
        assert!(whole.starts_with(&format!("{}\n", newlines + 1)), "{whole}");
        assert!(whole.contains("invalid JSON"), "{whole}");
        for chunk in [1, 2, 7, 64, 333, 1000, 4096] {
            for threads in [1, 3] {
                let (o, c) = ingest_positional(&snap, &file, len, threads, chunk).unwrap();
                assert_eq!(
                    summary(&o, c),
                    whole,
                    "positional, chunk {chunk}, {threads} threads"
                );
                let reader: Box<dyn Read> = Box::new(std::io::Cursor::new(log.clone()));
                let (o, c) = ingest_stream(&snap, reader, threads, chunk).unwrap();
                assert_eq!(
                    summary(&o, c),
                    whole,
                    "stream, chunk {chunk}, {threads} threads"
                );
            }
        }
    }

    #[test]
    fn malformed_lines_are_numbered_in_file_order() {
        let (snap, log) = bookinfo();
        let reader: Box<dyn Read> = Box::new(std::io::Cursor::new(log.clone()));
        let (_, chunks) = ingest_stream(&snap, reader, 2, 50).unwrap();
        let malformed = number_malformed(chunks);
        let numbers: Vec<u64> = malformed.iter().map(|m| m.0).collect();
        // The oracle: each line parsed on its own, numbered from 1.
        let expected: Vec<u64> = log
            .split(|b| *b == b'\n')
            .enumerate()
            .filter(|(_, l)| {
                let text = String::from_utf8_lossy(l);
                matches!(
                    meshscope_shared::accesslog::parse_line(&text),
                    meshscope_shared::accesslog::Line::Malformed(_)
                )
            })
            .map(|(i, _)| i as u64 + 1)
            .take(SHOWN_MALFORMED)
            .collect();
        assert!(expected.len() >= 3, "{expected:?}");
        assert_eq!(numbers, expected);
    }
}
