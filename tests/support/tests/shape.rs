//! The shape of the workspace's code, held by a test (issues #17, #36): no
//! import cycle between the modules of any of our crates (a re-export
//! counts as an import), no command of the plugin importing another, no product
//! source file over 800 code lines, no function of the plugin's commands
//! over 150 lines, and the plugin's `lib.rs` under 120 code lines. It reads
//! the repository's sources and nothing else; each failure names the file,
//! the function or the cycle.

use std::path::{Path, PathBuf};

use meshscope_test_support::shape::{code_lines, cycles, display, functions, imports, modules};

/// Code lines (not blank, not only a comment) a product or harness file
/// may have.
const FILE_CODE_LINES: usize = 800;
/// Lines (from `fn` to its closing brace) a function in plugin/src/cmd,
/// or in the test harness, may have.
const CMD_FUNCTION_LINES: usize = 150;
/// Code lines plugin/src/lib.rs must stay under.
const PLUGIN_LIB_CODE_LINES: usize = 120;

/// The product crates' sources (the binaries' and the library's).
const PRODUCT: [&str; 3] = ["shared/src", "plugin/src", "webhook/src"];

/// The test harness's sources (meshscope-e2e's library and binaries, and
/// the support crate every test crate uses): held to the same sizes.
const HARNESS: [&str; 2] = ["tests/src", "tests/support/src"];

/// The tree to check: this repository, or `$MESHSCOPE_SHAPE_ROOT` (to check
/// another checkout, e.g. a merge, with the same limits).
fn repo_root() -> PathBuf {
    std::env::var_os("MESHSCOPE_SHAPE_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(meshscope_test_support::outside::repo_root)
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

fn rel(p: &Path) -> String {
    let root = repo_root().canonicalize().unwrap();
    let p = p.canonicalize().unwrap();
    p.strip_prefix(&root).unwrap_or(&p).display().to_string()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every crate root of our crates: libraries, binaries, `src/bin/*.rs`
/// and `src/bin/*/main.rs`.
fn crate_roots() -> Vec<PathBuf> {
    let root = repo_root();
    let mut roots = Vec::new();
    for src in [
        "shared/src",
        "plugin/src",
        "webhook/src",
        "tests/src",
        "tests/support/src",
    ] {
        let dir = root.join(src);
        for name in ["lib.rs", "main.rs"] {
            if dir.join(name).is_file() {
                roots.push(dir.join(name));
            }
        }
        if let Ok(bins) = std::fs::read_dir(dir.join("bin")) {
            // A binary of several files is a directory with its main.rs.
            let mut bins: Vec<PathBuf> = bins
                .map(|e| e.unwrap().path())
                .map(|p| if p.is_dir() { p.join("main.rs") } else { p })
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "rs"))
                .collect();
            bins.sort();
            roots.extend(bins);
        }
    }
    roots
}

#[test]
fn no_module_imports_itself_through_others() {
    let mut found = Vec::new();
    for root in crate_roots() {
        let mods = modules(&root);
        for (members, within) in cycles(&imports(&mods)) {
            let steps: Vec<String> = within
                .iter()
                .map(|s| {
                    format!(
                        "    {} uses {} at {}:{}",
                        s.from,
                        s.to,
                        rel(&s.file),
                        s.line
                    )
                })
                .collect();
            found.push(format!(
                "{}: {} import each other\n{}",
                rel(&root),
                members.join(", "),
                steps.join("\n")
            ));
        }
        assert!(
            mods.iter().any(|m| display(&m.path) == "crate"),
            "{}: no crate root read",
            rel(&root)
        );
    }
    assert!(
        found.is_empty(),
        "import cycles between modules (`use crate::`/`super::`):\n{}",
        found.join("\n")
    );
}

/// `cmd::apply::x` → `apply`; `None` outside `plugin/src/cmd`'s commands.
fn command_of(module: &str) -> Option<&str> {
    module.strip_prefix("cmd::")?.split("::").next()
}

/// A command is a leaf: what two commands share lives below `cmd`
/// (`sidecars`, `istiod`, `world`), so no command imports another.
#[test]
fn no_command_of_the_plugin_imports_another() {
    let root = repo_root().join("plugin/src/lib.rs");
    let crossing: Vec<String> = imports(&modules(&root))
        .into_iter()
        .filter(|i| {
            let (from, to) = (command_of(&i.from), command_of(&i.to));
            from.is_some() && to.is_some() && from != to
        })
        .map(|i| {
            format!(
                "    {} uses {} at {}:{}",
                i.from,
                i.to,
                rel(&i.file),
                i.line
            )
        })
        .collect();
    assert!(
        crossing.is_empty(),
        "modules of one command in plugin/src/cmd import another's (move what they share below cmd):\n{}",
        crossing.join("\n")
    );
}

#[test]
fn no_product_or_harness_file_is_over_800_code_lines() {
    let mut over = Vec::new();
    for dir in PRODUCT.iter().chain(&HARNESS) {
        for f in rust_files(&repo_root().join(dir)) {
            // A module's tests in their own file (`#[cfg(test)] mod
            // tests;` → `tests.rs`) are test source, not product.
            if f.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let n = code_lines(&read(&f));
            if n > FILE_CODE_LINES {
                over.push(format!("{}: {n} code lines", rel(&f)));
            }
        }
    }
    assert!(
        over.is_empty(),
        "product or harness files over {FILE_CODE_LINES} code lines (not blank, not only a comment):\n{}",
        over.join("\n")
    );
}

#[test]
fn no_function_of_the_plugins_commands_or_the_harness_is_over_150_lines() {
    let mut over = Vec::new();
    let dirs = ["plugin/src/cmd"].iter().chain(&HARNESS);
    for f in dirs.flat_map(|d| rust_files(&repo_root().join(d))) {
        for func in functions(&read(&f)) {
            if func.lines > CMD_FUNCTION_LINES {
                over.push(format!(
                    "{}:{}: fn {}: {} lines",
                    rel(&f),
                    func.line,
                    func.name,
                    func.lines
                ));
            }
        }
    }
    assert!(
        over.is_empty(),
        "functions in plugin/src/cmd or the harness over {CMD_FUNCTION_LINES} lines (fn to closing brace):\n{}",
        over.join("\n")
    );
}

#[test]
fn the_plugins_lib_rs_is_under_120_code_lines() {
    let f = repo_root().join("plugin/src/lib.rs");
    let n = code_lines(&read(&f));
    assert!(
        n < PLUGIN_LIB_CODE_LINES,
        "{}: {n} code lines, the limit is under {PLUGIN_LIB_CODE_LINES} (module declarations and `run` only)",
        rel(&f)
    );
}
