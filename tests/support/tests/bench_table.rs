//! `tests/bench/table`, where every benchmark of `tests/bench/run` ends: a
//! missed target must make the run exit non-zero (issue #32), so each
//! benchmark's targets can fail. Runs the script itself with rows that
//! meet, miss, or measure nothing.

use std::io::Write as _;
use std::process::{Command, Stdio};

use meshscope_test_support::outside::repo_root;

/// Runs `tests/bench/table` on `rows`: (exit code, stdout, stderr).
fn table(rows: &str) -> (i32, String, String) {
    let mut child = Command::new(repo_root().join("tests/bench/table"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tests/bench/table runs");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(rows.as_bytes())
        .expect("rows written");
    let o = child.wait_with_output().expect("tests/bench/table ends");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const MET: &str = "ROW|ingest|text 100 MB|end-to-end recommend|0.9 s|12 s|13x faster|>= 10x|yes\n";
const NO_TARGET: &str = "ROW|ingest|no log|fixed cost|0.2 s|-|-|-|n.a.\n";
const MISSED: &str =
    "ROW|ingest|json 1000 MB|end-to-end recommend|9.1 s|61 s|6.7x faster|>= 10x|no\n";

#[test]
fn rows_that_meet_their_targets_print_a_table_and_exit_0() {
    let (code, out, err) = table(&format!("noise\n{MET}{NO_TARGET}"));
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("| benchmark | input |"), "{out}");
    assert!(
        out.contains("| ingest | text 100 MB | end-to-end recommend | 0.9 s |"),
        "{out}"
    );
    assert!(!out.contains("noise"), "{out}");
}

#[test]
fn a_missed_target_exits_1_and_is_named() {
    let (code, out, err) = table(&format!("{MET}{MISSED}{NO_TARGET}"));
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("| 9.1 s | 61 s | 6.7x faster | >= 10x | no |"),
        "{out}"
    );
    assert!(
        err.contains("MISSED: ingest, json 1000 MB, end-to-end recommend: 9.1 s (target >= 10x)"),
        "{err}"
    );
    assert!(err.contains("1 of 3 rows missed"), "{err}");
}

#[test]
fn no_row_or_an_unknown_met_value_is_an_error_not_a_pass() {
    let (code, _, err) = table("");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("measured nothing"), "{err}");
    let (code, _, err) = table("ROW|a|b|c|d|e|f|g|maybe\n");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("'maybe'"), "{err}");
}
