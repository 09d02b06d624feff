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
            let (o, c, broke) = ingest_stream(&snap, reader, threads, chunk).unwrap();
            assert!(broke.is_none());
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
    let (_, chunks, _) = ingest_stream(&snap, reader, 2, 50).unwrap();
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

fn read(snap: &MeshSnapshot, path: &Path, strict: bool) -> (Result<Observations>, String) {
    let mut err = Vec::new();
    let r = read_access_logs(snap, &[path.to_path_buf()], strict, &mut err);
    (r, String::from_utf8(err).unwrap())
}

#[test]
fn a_truncated_gz_keeps_what_was_read_and_says_where_it_broke() {
    let (snap, _) = bookinfo();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/bookinfo");
    let log = std::fs::read(root.join("access.log")).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &log).unwrap();
    let gz = gz.finish().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole.log.gz");
    std::fs::write(&whole, &gz).unwrap();
    let cut = dir.path().join("cut.log.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).unwrap();

    let (all, warnings) = read(&snap, &whole, true);
    let all = all.unwrap();
    assert_eq!(warnings, "");
    let (part, warnings) = read(&snap, &cut, false);
    let part = part.unwrap();
    assert!(part.stats.access_lines > 0);
    assert!(part.stats.access_lines < all.stats.access_lines);
    let want = format!(
        "warning: {}: compressed data ends or breaks at byte {} (",
        cut.display(),
        gz.len() / 2
    );
    assert!(warnings.starts_with(&want), "{warnings}");
    assert!(
        warnings.contains(&format!(
            "the {} lines read before it are kept",
            part.stats.lines
        )),
        "{warnings}"
    );
    let (strict, _) = read(&snap, &cut, true);
    let e = format!("{:#}", strict.unwrap_err());
    assert!(
        e.starts_with(&want[9..]) && e.ends_with("; remove --strict to go on with them"),
        "{e}"
    );
}

#[test]
fn a_compressed_key_is_skipped_unquoted_and_strict_refuses_it() {
    let (snap, _) = bookinfo();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("backup.key.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let key = b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIKEY\n-----END PRIVATE KEY-----\n";
    std::io::Write::write_all(&mut gz, key).unwrap();
    std::fs::write(&path, gz.finish().unwrap()).unwrap();
    let (r, warnings) = read(&snap, &path, false);
    assert_eq!(r.unwrap().stats.lines, 0, "a skipped file is not counted");
    assert_eq!(
        warnings,
        format!(
            "warning: {}: not an access log: looks like a PEM private key; skipped\n",
            path.display()
        )
    );
    let (r, _) = read(&snap, &path, true);
    let e = format!("{:#}", r.unwrap_err());
    assert_eq!(
        e,
        format!(
            "{}: not an access log: looks like a PEM private key; remove --strict to go on without it",
            path.display()
        )
    );
}

#[test]
fn a_source_without_access_log_lines_warns_with_the_likely_cause() {
    let (snap, _) = bookinfo();
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[u8], &str); 4] = [
        ("empty.log", b"", "no access-log lines in 0 lines (the file is empty)"),
        (
            "app.log",
            b"Started server on port 8080\nGET /health 200\n",
            "no access-log lines in 2 lines (not istio-proxy's log: an application's own log? With kubectl logs, name the container: -c istio-proxy)",
        ),
        (
            "junk.log",
            b"\x00\x01\xff\xfe\x7f\n\x1b[31m\x02\n",
            "no access-log lines in 2 lines (binary data, not a text log)",
        ),
        (
            "proxy.log",
            b"2026-11-28T09:00:00.000000Z\tinfo\txdsproxy\tconnected\n",
            "no access-log lines in 1 line (only istio-proxy's own output: access logging may be off (meshConfig.accessLogFile: /dev/stdout), or the proxy served nothing)",
        ),
    ];
    for (name, body, why) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        let (r, warnings) = read(&snap, &path, false);
        assert_eq!(r.unwrap().stats.access_lines, 0);
        let want = format!("warning: {}: {why}\n", path.display());
        assert!(warnings.ends_with(&want), "{name}: {warnings}");
        assert!(
            !warnings.contains('\u{1b}'),
            "junk is escaped: {warnings:?}"
        );
        if name == "proxy.log" || name == "empty.log" {
            let (r, _) = read(&snap, &path, true);
            let e = format!("{:#}", r.unwrap_err());
            assert_eq!(
                e,
                format!(
                    "{}: {why}; remove --strict to go on without it",
                    path.display()
                )
            );
        }
    }
}
