//! Access-log files read a pass at a time (`apply --watch`): each pass
//! reads what was added since the last, across rotations.
//!
//! A position belongs to the file (its device and inode), not to its path,
//! so that a rotation loses nothing:
//!
//! - **rename** (`access.log` → `access.log.1`, a new `access.log`): the
//!   old file is found again by its inode, under its new name beside the
//!   old one, and its unread tail is read before the new file, from its
//!   start. Passing the directory reads both as usual, each from where it
//!   was left.
//! - **copytruncate** (copied, then truncated in place): the same inode,
//!   but its first bytes are no longer the ones read, even when it has
//!   grown past the old offset again by the next pass; it is read from its
//!   start. A file shorter than the offset is read from its start too.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufRead, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use meshscope_shared::observe::{Applied, LineOutcome, LogIngest, Observations};
use meshscope_shared::MeshSnapshot;

use super::{expand, ingest_file, is_gz};
use crate::output::plural;

/// How many of a file's first bytes identify its contents.
const HEAD_LEN: usize = 1024;

/// A file, whatever its name: its device and inode.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(meta: &std::fs::Metadata) -> FileId {
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// Where a file was read to.
#[derive(Clone, Debug)]
struct Position {
    /// Its name when it was last read.
    path: PathBuf,
    /// After the last whole line read.
    offset: u64,
    /// How many lines that is, to number the next.
    line: u64,
    /// Its first bytes then (up to [`HEAD_LEN`]).
    head: Vec<u8>,
    /// Named on the command line itself, not found in a directory given.
    named: bool,
}

/// Where each access-log file was read to, between passes of
/// `apply --watch` (see the module doc for rotations).
#[derive(Debug, Default, Clone)]
pub struct FileOffsets {
    at: HashMap<FileId, Position>,
    /// Compressed files, read once, whole.
    gz: HashSet<PathBuf>,
}

/// The access-log lines added to `paths` since `offsets` (all of a file
/// not seen before; compressed files once), moving `offsets` to the last
/// whole line read. A line still being written is left for the next pass.
///
/// Lines `applied` says a managed Sidecar already accounts for are skipped
/// (the first pass of a watcher that starts or takes over).
pub fn tail_access_logs(
    snap: &MeshSnapshot,
    paths: &[PathBuf],
    offsets: &mut FileOffsets,
    applied: Option<&Applied>,
    err: &mut dyn Write,
) -> Result<Observations> {
    let mut obs = Observations::default();
    let mut read = HashSet::new();
    for p in paths {
        for file in expand(p, None)? {
            if is_gz(&file) {
                if offsets.gz.insert(file.clone()) {
                    obs.merge(ingest_file(snap, &file, 1)?.0);
                }
                continue;
            }
            let named = file == *p;
            let (id, o) = tail_one(snap, &file, named, offsets, applied, err)?;
            read.insert(id);
            obs.merge(o);
        }
    }
    obs.merge(rotated_away(snap, offsets, &read, applied, err)?);
    if obs.sources.is_empty() {
        obs.sources.insert("access-log".into());
    }
    obs.sort_unregistered();
    Ok(obs)
}

/// Reads `file` from where its file was left (from its start when it is
/// new, shorter, or no longer begins as it did) and records the position.
fn tail_one(
    snap: &MeshSnapshot,
    file: &Path,
    named: bool,
    offsets: &mut FileOffsets,
    applied: Option<&Applied>,
    err: &mut dyn Write,
) -> Result<(FileId, Observations)> {
    let mut f = File::open(file).with_context(|| format!("cannot open {}", file.display()))?;
    let meta = f
        .metadata()
        .with_context(|| format!("cannot read {}", file.display()))?;
    let id = FileId::of(&meta);
    let head = read_head(&mut f).with_context(|| format!("cannot read {}", file.display()))?;
    let known = offsets.at.get(&id);
    let (start, line) = match known {
        Some(pos) if pos.offset <= meta.len() && head.starts_with(&pos.head) => {
            (pos.offset, pos.line)
        }
        _ => (0, 0),
    };
    // Truncated in place (copytruncate): what the last pass left unread
    // is in the copy beside it.
    let copied = match known {
        Some(pos) if start == 0 && named && pos.offset > 0 => {
            copy_tail(snap, file, id, pos, applied, err)?
        }
        _ => None,
    };
    let read = read_lines(snap, f, file, (start, line), applied)?;
    warn_malformed(file, &read, known.is_some(), err)?;
    let (mut o, offset, line) = (read.obs, read.offset, read.line);
    if let Some(c) = copied {
        o.merge(c);
    }
    let pos = Position {
        path: file.to_path_buf(),
        offset,
        line,
        head,
        named,
    };
    offsets.at.insert(id, pos);
    Ok((id, o))
}

/// The files read before but not this pass: renamed away (their unread
/// tail is read from their new name, found beside the old one by inode)
/// or removed. Either way they are no longer followed. A file named on the
/// command line that is gone without a trace is said once; one found in a
/// directory is not (rotation deletes the oldest files of a directory as
/// a matter of course, and they were read when they were current).
fn rotated_away(
    snap: &MeshSnapshot,
    offsets: &mut FileOffsets,
    read: &HashSet<FileId>,
    applied: Option<&Applied>,
    err: &mut dyn Write,
) -> Result<Observations> {
    let mut obs = Observations::default();
    let gone: Vec<FileId> = offsets
        .at
        .keys()
        .filter(|id| !read.contains(id))
        .copied()
        .collect();
    for id in gone {
        let pos = offsets.at.remove(&id).expect("listed above");
        let Some((renamed, f)) = find_by_id(&pos.path, id) else {
            if !pos.named {
                continue;
            }
            writeln!(
                err,
                "warning: {} was rotated or removed and its old file is not beside it: what was written to it since the last pass, if anything, was not read",
                pos.path.display()
            )?;
            continue;
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len > pos.offset {
            let read = read_lines(snap, f, &renamed, (pos.offset, pos.line), applied)?;
            warn_malformed(&renamed, &read, true, err)?;
            obs.merge(read.obs);
        }
    }
    Ok(obs)
}

/// The unread tail of `file`'s copy, after `file` was truncated in place
/// (logrotate's copytruncate): a file beside it, not `file` itself, that
/// begins as `file` began when it was last read and is at least as long as
/// what was read then; read from there. `None` when there is no such copy.
fn copy_tail(
    snap: &MeshSnapshot,
    file: &Path,
    id: FileId,
    pos: &Position,
    applied: Option<&Applied>,
    err: &mut dyn Write,
) -> Result<Option<Observations>> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(None);
    };
    for e in entries.filter_map(|e| e.ok()) {
        let Ok(meta) = e.metadata() else { continue };
        if !meta.is_file() || FileId::of(&meta) == id || meta.len() < pos.offset {
            continue;
        }
        let Ok(mut f) = File::open(e.path()) else {
            continue;
        };
        if !read_head(&mut f).is_ok_and(|h| h.starts_with(&pos.head)) {
            continue;
        }
        let read = read_lines(snap, f, &e.path(), (pos.offset, pos.line), applied)?;
        warn_malformed(&e.path(), &read, true, err)?;
        return Ok(Some(read.obs));
    }
    Ok(None)
}

/// The file `id` in the directory of `was` (where rotation renames it),
/// open, with its name.
fn find_by_id(was: &Path, id: FileId) -> Option<(PathBuf, File)> {
    let dir = match was.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .find(|e| {
            e.metadata()
                .is_ok_and(|m| m.is_file() && FileId::of(&m) == id)
        })
        .and_then(|e| File::open(e.path()).ok().map(|f| (e.path(), f)))
}

/// Up to [`HEAD_LEN`] of `f`'s first bytes.
fn read_head(f: &mut File) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(HEAD_LEN);
    Read::take(&mut *f, HEAD_LEN as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// What one read of a file gave.
struct FileRead {
    obs: Observations,
    /// After the last whole line read, and how many lines that is.
    offset: u64,
    line: u64,
    /// The first malformed lines: number, reason, text.
    malformed: Vec<super::Malformed>,
}

/// The whole lines of `f` from `start` (an offset, and the number of the
/// lines before it).
fn read_lines(
    snap: &MeshSnapshot,
    f: File,
    file: &Path,
    (start, mut line_no): (u64, u64),
    applied: Option<&Applied>,
) -> Result<FileRead> {
    let mut reader = io::BufReader::new(f);
    reader
        .seek(SeekFrom::Start(start))
        .with_context(|| format!("cannot read {}", file.display()))?;
    let mut ingest = LogIngest::new(snap, "access-log").applied(applied);
    let mut malformed = Vec::new();
    let mut at = start;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .with_context(|| format!("cannot read {}", file.display()))?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        at += n as u64;
        line_no += 1;
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if text.is_empty() {
            continue;
        }
        if let LineOutcome::Malformed(why) = ingest.line(text) {
            if malformed.len() < super::SHOWN_MALFORMED {
                malformed.push((line_no, why, text.chars().take(160).collect()));
            }
        }
    }
    Ok(FileRead {
        obs: ingest.finish(),
        offset: at,
        line: line_no,
        malformed,
    })
}

/// Says how many lines of `file` this pass could not read as access-log
/// lines ("since the last pass" only when there was one for it).
fn warn_malformed(file: &Path, read: &FileRead, followed: bool, err: &mut dyn Write) -> Result<()> {
    let count = read.obs.stats.malformed;
    if count == 0 {
        return Ok(());
    }
    writeln!(
        err,
        "warning: {}: {}{}",
        file.display(),
        plural(
            count as usize,
            "malformed access-log line",
            "malformed access-log lines"
        ),
        if followed { " since the last pass" } else { "" }
    )?;
    for m in &read.malformed {
        writeln!(err, "warning: {}", super::malformed_line(file, m))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshscope_test_support::access_log;
    use meshscope_test_support::fixtures::snap;

    /// A mesh where 10.0.0.1 (web) calls cart.
    fn mesh() -> MeshSnapshot {
        snap("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0\n  namespace: shop\n  labels: {app: web}\nspec:\n  containers: [{name: c, image: x}, {name: istio-proxy, image: proxyv2}]\nstatus:\n  podIP: 10.0.0.1\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: cart\n  namespace: shop\nspec:\n  clusterIP: 10.96.0.2\n  ports:\n  - {name: http, port: 80}\n")
    }

    /// `n` calls from web to cart, each with its own request id `tag-i`.
    fn calls(tag: &str, n: usize) -> String {
        (0..n)
            .map(|i| {
                access_log::line(
                    "10.0.0.1",
                    &format!("{tag}-{i}"),
                    "outbound|80||cart.shop.svc.cluster.local",
                    "10.96.0.2:80",
                )
            })
            .collect()
    }

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    /// Truncated in place, as copytruncate leaves it (the same inode).
    fn truncate(path: &Path) {
        let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        f.set_len(0).unwrap();
    }

    /// One pass over `path` (a file or a directory): the lines read and
    /// what was said.
    fn pass(s: &MeshSnapshot, path: &Path, offsets: &mut FileOffsets) -> (u64, String) {
        let mut err = Vec::new();
        let o = tail_access_logs(s, &[path.to_path_buf()], offsets, None, &mut err).unwrap();
        (o.stats.lines, String::from_utf8(err).unwrap())
    }

    #[test]
    fn each_pass_reads_what_was_added_and_leaves_a_partial_line() {
        let (s, dir) = (mesh(), tempfile::tempdir().unwrap());
        let log = dir.path().join("access.log");
        append(&log, &calls("a", 3));
        let mut at = FileOffsets::default();
        assert_eq!(pass(&s, &log, &mut at).0, 3);
        assert_eq!(pass(&s, &log, &mut at).0, 0);
        let more = calls("b", 2);
        append(&log, &more[..more.len() - 10]);
        assert_eq!(pass(&s, &log, &mut at).0, 1);
        append(&log, &more[more.len() - 10..]);
        assert_eq!(pass(&s, &log, &mut at).0, 1);
    }

    #[test]
    fn copytruncate_grown_past_the_old_offset_is_read_from_its_start() {
        let (s, dir) = (mesh(), tempfile::tempdir().unwrap());
        let log = dir.path().join("access.log");
        append(&log, &calls("a", 3));
        let mut at = FileOffsets::default();
        assert_eq!(pass(&s, &log, &mut at).0, 3);
        // Copied away and truncated in place (same inode), then five new
        // lines, longer than the three read: the old offset is mid-line.
        std::fs::copy(&log, dir.path().join("access.log.1")).unwrap();
        truncate(&log);
        append(&log, &calls("bb", 5));
        let (lines, said) = pass(&s, &log, &mut at);
        assert_eq!(lines, 5, "{said}");
        assert_eq!(pass(&s, &log, &mut at).0, 0);
    }

    #[test]
    fn copytruncate_reads_what_the_last_pass_left_unread_from_the_copy() {
        let (s, dir) = (mesh(), tempfile::tempdir().unwrap());
        let log = dir.path().join("access.log");
        append(&log, &calls("a", 3));
        let mut at = FileOffsets::default();
        assert_eq!(pass(&s, &log, &mut at).0, 3);
        // Two lines no pass read, then copied away and truncated in place,
        // then four new lines.
        append(&log, &calls("b", 2));
        std::fs::copy(&log, dir.path().join("access.log.1")).unwrap();
        truncate(&log);
        append(&log, &calls("c", 4));
        let (lines, said) = pass(&s, &log, &mut at);
        assert_eq!(lines, 6, "the copy's 2 unread and the file's 4: {said}");
        assert_eq!(pass(&s, &log, &mut at).0, 0);
        // An unrelated file beside it is never taken for the copy.
        let mut at = FileOffsets::default();
        let other = dir.path().join("other.log");
        append(&other, &calls("z", 9));
        let mine = dir.path().join("mine.log");
        append(&mine, &calls("m", 1));
        assert_eq!(pass(&s, &mine, &mut at).0, 1);
        truncate(&mine);
        append(&mine, &calls("n", 1));
        assert_eq!(pass(&s, &mine, &mut at).0, 1);
    }

    #[test]
    fn rename_rotation_reads_the_old_files_unread_tail_then_the_new_file() {
        let (s, dir) = (mesh(), tempfile::tempdir().unwrap());
        let log = dir.path().join("access.log");
        append(&log, &calls("a", 3));
        let mut at = FileOffsets::default();
        assert_eq!(pass(&s, &log, &mut at).0, 3);
        // Two more lines, then renamed before the next pass; a new file.
        append(&log, &calls("b", 2));
        std::fs::rename(&log, dir.path().join("access.log.1")).unwrap();
        append(&log, &calls("c", 4));
        let (lines, said) = pass(&s, &log, &mut at);
        assert_eq!(lines, 6, "the old file's 2 and the new file's 4: {said}");
        assert_eq!(said, "");
        assert_eq!(pass(&s, &log, &mut at).0, 0);
        // The rotated file is no longer followed.
        append(&dir.path().join("access.log.1"), &calls("d", 1));
        assert_eq!(pass(&s, &log, &mut at).0, 0);
    }

    #[test]
    fn a_directory_follows_both_files_of_a_rename_without_reading_twice() {
        let (s, dir) = (mesh(), tempfile::tempdir().unwrap());
        let log = dir.path().join("access.log");
        append(&log, &calls("a", 3));
        let mut at = FileOffsets::default();
        let d = dir.path();
        assert_eq!(pass(&s, d, &mut at).0, 3);
        append(&log, &calls("b", 2));
        std::fs::rename(&log, dir.path().join("access.log.1")).unwrap();
        append(&log, &calls("c", 4));
        assert_eq!(pass(&s, d, &mut at).0, 6);
        assert_eq!(pass(&s, d, &mut at).0, 0);
    }

    #[test]
    fn a_named_file_gone_without_a_trace_is_said_once_a_directorys_is_not() {
        let (s, dir) = (mesh(), tempfile::tempdir().unwrap());
        let log = dir.path().join("access.log");
        let old = dir.path().join("access.log.5");
        append(&log, &calls("a", 1));
        append(&old, &calls("b", 1));
        let mut at = FileOffsets::default();
        let d = dir.path();
        assert_eq!(pass(&s, d, &mut at).0, 2);
        // Rotation deletes the oldest file of the directory: nothing said.
        std::fs::remove_file(&old).unwrap();
        assert_eq!(pass(&s, d, &mut at), (0, String::new()));
        // The file named itself, gone: said once.
        let mut at = FileOffsets::default();
        assert_eq!(pass(&s, &log, &mut at).0, 1);
        // Replaced by a new file (made first, so that it cannot reuse the
        // old one's inode), the old one deleted.
        let new = dir.path().join("access.log.new");
        append(&new, &calls("c", 1));
        std::fs::rename(&new, &log).unwrap();
        let (lines, said) = pass(&s, &log, &mut at);
        assert_eq!(lines, 1);
        assert!(said.contains("access.log was rotated or removed"), "{said}");
        assert_eq!(pass(&s, &log, &mut at).1, "");
    }

    #[test]
    fn malformed_lines_are_since_the_last_pass_only_when_there_was_one() {
        let (s, dir) = (mesh(), tempfile::tempdir().unwrap());
        let log = dir.path().join("access.log");
        append(&log, "not an access-log line\n");
        let mut at = FileOffsets::default();
        let (_, said) = pass(&s, &log, &mut at);
        let first: Vec<&str> = said.lines().collect();
        assert!(
            first[0].ends_with(": 1 malformed access-log line"),
            "{said}"
        );
        // Each with its file:line and text, as one-off commands show them,
        // numbered from the file's start across passes.
        let at_line = |n: u32| format!("{}:{n}: malformed access-log line (", log.display());
        assert!(first[1].contains(&at_line(1)), "{said}");
        assert!(first[1].ends_with("): not an access-log line"), "{said}");
        append(&log, &calls("a", 2));
        append(&log, "nor this\n");
        let (_, said) = pass(&s, &log, &mut at);
        let second: Vec<&str> = said.lines().collect();
        assert!(
            second[0].ends_with("1 malformed access-log line since the last pass"),
            "{said}"
        );
        assert!(second[1].contains(&at_line(4)), "{said}");
        assert!(second[1].ends_with("): nor this"), "{said}");
    }
}
