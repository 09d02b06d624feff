//! Reading the workspace's own Rust sources for the shape check
//! (`tests/support/tests/shape.rs`): code lines, functions and their
//! lengths, and each crate's module graph from its `use crate::…`,
//! `use super::…` and `use self::…` imports. A small lexer, not a parser:
//! it strips comments, strings and character literals, which is all the
//! counting and the brace matching need.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A line that is neither blank nor only a comment (`//`, `///`, `//!`)
/// counts; a `#[cfg(test)] mod tests` inside a file counts too.
pub fn code_lines(text: &str) -> usize {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//"))
        .count()
}

/// `text` with comments removed and the contents of string and character
/// literals blanked (their quotes kept), line for line.
pub fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    // Keeps line breaks inside what is dropped, so lines stay aligned.
    let blank = |out: &mut String, from: &[char]| {
        for ch in from {
            if *ch == '\n' {
                out.push('\n');
            }
        }
    };
    while i < c.len() {
        let next = c.get(i + 1).copied();
        match c[i] {
            '/' if next == Some('/') => {
                while i < c.len() && c[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                let start = i;
                let mut depth = 0;
                while i < c.len() {
                    if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                blank(&mut out, &c[start..i.min(c.len())]);
            }
            'r' | 'b' if is_raw_string(&c, i) => {
                let start = i;
                while c[i] != 'r' {
                    i += 1;
                }
                i += 1;
                let mut hashes = 0;
                while c[i] == '#' {
                    hashes += 1;
                    i += 1;
                }
                i += 1; // the opening quote
                loop {
                    if i >= c.len() {
                        break;
                    }
                    if c[i] == '"' && (0..hashes).all(|h| c.get(i + 1 + h) == Some(&'#')) {
                        i += 1 + hashes;
                        break;
                    }
                    i += 1;
                }
                out.push_str("\"\"");
                blank(&mut out, &c[start..i.min(c.len())]);
            }
            '"' => {
                let start = i;
                i += 1;
                while i < c.len() && c[i] != '"' {
                    if c[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push_str("\"\"");
                blank(&mut out, &c[start..i.min(c.len())]);
            }
            '\'' => {
                // A character literal ('x', '\n', '\u{1F600}') or a lifetime.
                if next == Some('\\') {
                    i += 2;
                    while i < c.len() && c[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                    out.push_str("' '");
                } else if c.get(i + 2) == Some(&'\'') {
                    i += 3;
                    out.push_str("' '");
                } else {
                    out.push('\'');
                    i += 1;
                }
            }
            ch => {
                out.push(ch);
                i += 1;
            }
        }
    }
    out
}

/// `r"`, `r#"`, `br"`, `br#"` at `i`, not inside an identifier.
fn is_raw_string(c: &[char], i: usize) -> bool {
    if i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_') {
        return false;
    }
    let mut j = i;
    if c[j] == 'b' {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return false;
    }
    j += 1;
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    c.get(j) == Some(&'"')
}

/// A function of a file: its name, first line (1-based) and length in
/// lines, from `fn` to its closing brace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    pub line: usize,
    pub lines: usize,
}

/// Every function with a body in `text` (nested ones too).
pub fn functions(text: &str) -> Vec<Function> {
    let code = strip(text);
    let c: Vec<char> = code.chars().collect();
    let line_at = |pos: usize| c[..pos].iter().filter(|&&ch| ch == '\n').count() + 1;
    let mut found = Vec::new();
    let mut i = 0;
    while i + 2 < c.len() {
        let starts_word = i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        if starts_word && c[i] == 'f' && c[i + 1] == 'n' && c[i + 2].is_whitespace() {
            let mut j = i + 2;
            while j < c.len() && c[j].is_whitespace() {
                j += 1;
            }
            let name: String = c[j..]
                .iter()
                .take_while(|ch| ch.is_alphanumeric() || **ch == '_')
                .collect();
            if !name.is_empty() {
                // The body opens at the first `{` outside the signature's
                // parentheses and angle brackets; a `;` first means none.
                let mut k = j + name.len();
                let mut parens = 0i32;
                while k < c.len() {
                    match c[k] {
                        '(' | '[' => parens += 1,
                        ')' | ']' => parens -= 1,
                        '{' if parens == 0 => break,
                        ';' if parens == 0 => break,
                        _ => {}
                    }
                    k += 1;
                }
                if k < c.len() && c[k] == '{' {
                    let mut depth = 0;
                    let mut end = k;
                    while end < c.len() {
                        match c[end] {
                            '{' => depth += 1,
                            '}' => {
                                depth -= 1;
                                if depth == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        end += 1;
                    }
                    let (first, last) = (line_at(i), line_at(end.min(c.len() - 1)));
                    found.push(Function {
                        name,
                        line: first,
                        lines: last - first + 1,
                    });
                }
            }
            i = j;
        } else {
            i += 1;
        }
    }
    found
}

/// One module of a crate: its path from the crate root (empty for the
/// root) and the file that holds it.
#[derive(Debug, Clone)]
pub struct Module {
    pub path: Vec<String>,
    pub file: PathBuf,
}

/// The modules of the crate rooted at `root` (`src/lib.rs`, `src/main.rs`,
/// `src/bin/x.rs` or `src/bin/x/main.rs`), following `mod name;`
/// declarations to their files.
/// Inline `mod name { … }` blocks belong to their file's module.
pub fn modules(root: &Path) -> Vec<Module> {
    let mut out = Vec::new();
    let mut todo = vec![(Vec::<String>::new(), root.to_path_buf(), true)];
    while let Some((path, file, owns_dir)) = todo.pop() {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let dir = if owns_dir {
            file.parent().unwrap().to_path_buf()
        } else {
            file.with_extension("")
        };
        for line in strip(&text).lines() {
            if let Some(name) = mod_declaration(line) {
                let (flat, nested) = (
                    dir.join(format!("{name}.rs")),
                    dir.join(&name).join("mod.rs"),
                );
                let mut child = path.clone();
                child.push(name);
                if flat.is_file() {
                    todo.push((child, flat, false));
                } else if nested.is_file() {
                    todo.push((child, nested, true));
                }
            }
        }
        out.push(Module { path, file });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// `name` of a `mod name;` line (with any visibility), not an inline block.
fn mod_declaration(line: &str) -> Option<String> {
    let l = line.trim();
    let l = l
        .strip_prefix("pub(crate) ")
        .or_else(|| l.strip_prefix("pub(super) "))
        .or_else(|| l.strip_prefix("pub "))
        .unwrap_or(l);
    let rest = l.strip_prefix("mod ")?;
    let name = rest.strip_suffix(';')?.trim();
    name.chars()
        .all(|c| c.is_alphanumeric() || c == '_')
        .then(|| name.to_string())
}

/// An import of one module by another: where it is written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Import {
    pub from: String,
    pub to: String,
    pub file: PathBuf,
    pub line: usize,
}

/// Every private `use` of one module of the crate by another (`crate::`,
/// `super::`, `self::`, or a child module's name), and every `crate::…`,
/// `super::…` path written in code outside a `use`, each resolved to the
/// module that defines what it names: a name a module re-exports
/// (`pub use`, `pub(crate) use`) counts as an import of the module it
/// comes from, and the re-export itself is an import of that module by
/// the one that re-exports it (so a module that re-exports a child's name
/// while the child uses the module is a cycle).
pub fn imports(modules: &[Module]) -> Vec<Import> {
    let known: BTreeSet<Vec<String>> = modules.iter().map(|m| m.path.clone()).collect();
    let mut uses = Vec::new();
    let mut reexports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    for m in modules {
        let text = std::fs::read_to_string(&m.file).unwrap();
        for (line, public, tree) in use_trees(&strip(&text)) {
            for (segments, alias) in expand(&tree) {
                let Some(abs) = absolute(&m.path, &segments, &known) else {
                    continue;
                };
                // A re-export is resolved through, not a dependency of
                // the module that re-exports: `pub use a::B` in the root
                // lets others write `crate::B` for `a::B`.
                // It is still an edge of the module that re-exports: its
                // public face depends on the module it names.
                if public {
                    if let Some(alias) = alias {
                        reexports.insert((m.path.clone(), alias), abs.clone());
                    }
                }
                uses.push((m, line, abs));
            }
        }
    }
    let mut out = BTreeSet::new();
    for (m, line, abs) in uses {
        let to = defining_module(&abs, &known, &reexports);
        if to != m.path {
            out.insert(Import {
                from: display(&m.path),
                to: display(&to),
                file: m.file.clone(),
                line,
            });
        }
    }
    out.into_iter().collect()
}

/// `crate` for the root, else `a::b`.
pub fn display(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

/// Each `use` item of stripped code: its line, whether it is `pub`, and
/// its tree text (`crate::a::{b, c::D}`). `depth` tracks inline `mod x {`
/// blocks so that `super` inside them is resolved from the right place.
fn use_trees(code: &str) -> Vec<(usize, bool, UseTree)> {
    let mut out = Vec::new();
    let mut inline: Vec<usize> = Vec::new(); // brace depth each inline mod opened at
    let mut depth = 0usize;
    let chars: Vec<char> = code.chars().collect();
    let mut line = 1;
    let mut i = 0;
    let at_word = |i: usize, w: &str| {
        let starts = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        let wc: Vec<char> = w.chars().collect();
        starts
            && chars.len() > i + wc.len()
            && chars[i..i + wc.len()] == wc[..]
            && chars[i + wc.len()].is_whitespace()
    };
    while i < chars.len() {
        let ch = chars[i];
        if ch == '\n' {
            line += 1;
        }
        if ch == '{' {
            depth += 1;
        } else if ch == '}' {
            depth = depth.saturating_sub(1);
            while inline.last().is_some_and(|&d| d > depth) {
                inline.pop();
            }
        } else if at_word(i, "mod") {
            // `mod name {`: an inline module.
            let rest: String = chars[i + 3..].iter().take(80).collect();
            let rest = rest.trim_start();
            let name_len = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .count();
            if rest[name_len..].trim_start().starts_with('{') {
                inline.push(depth + 1);
            }
        } else if let Some(path) = qualified_path(&chars, i) {
            // `crate::a::f()`, `super::B` written outside a `use`: as much
            // a dependency as an import.
            let len = path.len();
            out.push((
                line,
                false,
                UseTree {
                    text: path,
                    inline_depth: inline.len(),
                },
            ));
            i += len;
            continue;
        } else if at_word(i, "use") {
            let before: String = chars[i.saturating_sub(12)..i].iter().collect();
            let public = before.trim_end().ends_with("pub")
                || before.trim_end().ends_with(')') && before.contains("pub(");
            let end = chars[i..].iter().position(|&c| c == ';').map(|p| i + p);
            if let Some(end) = end {
                let text: String = chars[i + 3..end].iter().collect();
                out.push((
                    line,
                    public,
                    UseTree {
                        text: normalise(&text),
                        inline_depth: inline.len(),
                    },
                ));
                line += text.matches('\n').count();
                i = end;
            }
        }
        i += 1;
    }
    out
}

/// A use tree on one line, single-spaced, with no space around `::`,
/// braces and commas (`crate::{a, b as c}` is `crate::{a,b as c}`).
fn normalise(text: &str) -> String {
    let mut t = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for (from, to) in [
        (":: ", "::"),
        (" ::", "::"),
        ("{ ", "{"),
        (" {", "{"),
        (" }", "}"),
        ("} ", "}"),
        (", ", ","),
        (" ,", ","),
    ] {
        while t.contains(from) {
            t = t.replace(from, to);
        }
    }
    t
}

/// The path at `i` when one starts there with `crate::`, `super::` or
/// `self::` (not `$crate::`, not the tail of another path): its
/// identifiers and `::`s.
fn qualified_path(chars: &[char], i: usize) -> Option<String> {
    if i > 0 && (chars[i - 1].is_alphanumeric() || matches!(chars[i - 1], '_' | '$' | ':')) {
        return None;
    }
    let rest: String = chars[i..chars.len().min(i + 8)].iter().collect();
    if !["crate::", "super::", "self::"]
        .iter()
        .any(|p| rest.starts_with(p))
    {
        return None;
    }
    let mut end = i;
    loop {
        while end < chars.len() && (chars[end].is_alphanumeric() || chars[end] == '_') {
            end += 1;
        }
        let more = chars.get(end) == Some(&':')
            && chars.get(end + 1) == Some(&':')
            && chars
                .get(end + 2)
                .is_some_and(|c| c.is_alphabetic() || *c == '_');
        if !more {
            break;
        }
        end += 2;
    }
    Some(chars[i..end].iter().collect())
}

struct UseTree {
    text: String,
    /// How many inline modules deep the `use` is written.
    inline_depth: usize,
}

/// The paths a use tree names, each with the name it binds (`None` for a
/// glob): `a::{b, c::{D as E}}` is `a::b` (b) and `a::c::D` (E).
fn expand(tree: &UseTree) -> Vec<(Vec<String>, Option<String>)> {
    let mut out = Vec::new();
    expand_into(&tree.text, &mut Vec::new(), &mut out);
    // Inside inline modules, the first `super`s climb back to the file's
    // module (`self`); only the rest leave it.
    for (segments, _) in &mut out {
        let supers = segments.iter().take_while(|s| *s == "super").count();
        if supers > 0 {
            let within = supers.min(tree.inline_depth);
            segments.drain(..within);
            if within == supers {
                segments.insert(0, "self".to_string());
            }
        }
    }
    out
}

fn expand_into(text: &str, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    let text = text.trim().trim_start_matches("::");
    if let Some(open) = text.find('{') {
        let head = &text[..open];
        let body = &text[open + 1..text.rfind('}').unwrap_or(text.len())];
        let base = prefix.len();
        prefix.extend(head.split("::").filter(|s| !s.is_empty()).map(String::from));
        for part in split_top(body) {
            expand_into(part, prefix, out);
        }
        prefix.truncate(base);
        return;
    }
    let (path, alias) = match text.split_once(" as ") {
        Some((p, a)) => (p.trim(), Some(a.trim().to_string())),
        None => (text, None),
    };
    let mut segs = prefix.clone();
    segs.extend(path.split("::").filter(|s| !s.is_empty()).map(String::from));
    if segs.last().is_some_and(|s| s == "self") {
        segs.pop();
    }
    let bound = match segs.last() {
        Some(s) if s == "*" => None,
        Some(s) => alias.or_else(|| Some(s.clone())),
        None => None,
    };
    if !segs.is_empty() {
        out.push((segs, bound));
    }
}

/// `a, b::{c, d}, e` split at the commas outside braces.
fn split_top(body: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in body.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// The path from the crate root of `segments` written in module `here`, or
/// `None` when it leaves the crate (another crate, std).
fn absolute(
    here: &[String],
    segments: &[String],
    known: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let mut base: Vec<String> = here.to_vec();
    let mut rest = segments;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        Some(first) => {
            // A child module's name (2018 paths), else another crate.
            let mut child = here.to_vec();
            child.push(first.to_string());
            if !known.contains(&child) {
                return None;
            }
        }
        None => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module that defines the item `path` names: the longest module
/// prefix, following re-exports of the next name.
fn defining_module(
    path: &[String],
    known: &BTreeSet<Vec<String>>,
    reexports: &BTreeMap<(Vec<String>, String), Vec<String>>,
) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut path = path.to_vec();
    loop {
        let mut n = path.len();
        while n > 0 && !known.contains(&path[..n].to_vec()) {
            n -= 1;
        }
        let module = path[..n].to_vec();
        let Some(name) = path.get(n) else {
            return module;
        };
        match reexports.get(&(module.clone(), name.clone())) {
            Some(target) if seen.insert(target.clone()) => {
                let mut next = target.clone();
                next.extend(path[n + 1..].iter().cloned());
                path = next;
            }
            _ => return module,
        }
    }
}

/// The import cycles among `imports`: each strongly connected set of two
/// or more modules (sorted), with every import between its members.
pub fn cycles(imports: &[Import]) -> Vec<(Vec<String>, Vec<Import>)> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for i in imports {
        graph.entry(&i.from).or_default().insert(&i.to);
        graph.entry(&i.to).or_default();
    }
    // Two modules are in one set when each reaches the other.
    let reach = |from: &str| {
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(at) = todo.pop() {
            for &next in &graph[at] {
                if seen.insert(next) {
                    todo.push(next);
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&str, BTreeSet<&str>> = graph.keys().map(|&m| (m, reach(m))).collect();
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    let mut found = Vec::new();
    for (&m, from_m) in &reached {
        if placed.contains(m) || !from_m.contains(m) {
            continue;
        }
        let members: BTreeSet<&str> = from_m
            .iter()
            .copied()
            .filter(|&o| reached[o].contains(m))
            .collect();
        placed.extend(members.iter().copied());
        let within: Vec<Import> = imports
            .iter()
            .filter(|i| members.contains(i.from.as_str()) && members.contains(i.to.as_str()))
            .cloned()
            .collect();
        found.push((members.into_iter().map(String::from).collect(), within));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_lines_skip_blanks_and_comment_lines_only() {
        assert_eq!(code_lines("a\n\n  // x\n/// y\n//! z\nb // c\n"), 2);
    }

    #[test]
    fn strip_blanks_strings_chars_and_comments_and_keeps_lifetimes() {
        let s =
            strip("let a = \"}{\"; // }\nlet b = '}'; fn f<'a>(x: &'a str) /* { */ {}\nr#\"{\"#");
        assert_eq!(
            s,
            "let a = \"\"; \nlet b = ' '; fn f<'a>(x: &'a str)  {}\n\"\""
        );
    }

    #[test]
    fn functions_span_from_fn_to_the_closing_brace() {
        let f = functions(
            "fn a() {\n    if x { y }\n}\n\nfn b(x: [u8; 2]) -> u8 { x[0] }\ntrait T { fn c(); }\n",
        );
        assert_eq!(
            f,
            vec![
                Function {
                    name: "a".into(),
                    line: 1,
                    lines: 3
                },
                Function {
                    name: "b".into(),
                    line: 5,
                    lines: 1
                },
            ]
        );
    }

    #[test]
    fn use_trees_expand_and_resolve_relative_paths() {
        let t = UseTree {
            text: "crate::{a::{self,B},c::*}".into(),
            inline_depth: 0,
        };
        let e: Vec<Vec<String>> = expand(&t).into_iter().map(|(p, _)| p).collect();
        assert_eq!(
            e,
            vec![
                vec!["crate", "a"],
                vec!["crate", "a", "B"],
                vec!["crate", "c", "*"]
            ]
        );
        let known: BTreeSet<Vec<String>> = [
            vec![],
            vec!["a".to_string()],
            vec!["a".to_string(), "b".to_string()],
        ]
        .into();
        let here = vec!["a".to_string(), "b".to_string()];
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            absolute(&here, &s(&["super", "X"]), &known),
            Some(s(&["a", "X"]))
        );
        assert_eq!(absolute(&here, &s(&["serde", "X"]), &known), None);
        assert_eq!(
            absolute(&s(&["a"]), &s(&["b", "Y"]), &known),
            Some(s(&["a", "b", "Y"]))
        );
    }

    #[test]
    fn a_cycle_is_found_with_its_members_and_imports() {
        let i = |from: &str, to: &str| Import {
            from: from.into(),
            to: to.into(),
            file: PathBuf::from(format!("{from}.rs")),
            line: 1,
        };
        let c = cycles(&[
            i("a", "b"),
            i("b", "c"),
            i("c", "a"),
            i("c", "d"),
            i("d", "e"),
        ]);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].0, ["a", "b", "c"]);
        assert_eq!(c[0].1, [i("a", "b"), i("b", "c"), i("c", "a")]);
    }
}
