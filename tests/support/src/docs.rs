//! The user documentation, as the tests that hold it to the product read
//! it: README.md and every `docs/*.md`. A command moved from one file to
//! another is still found, and still run.

use std::path::PathBuf;

use crate::outside::repo_root;

/// One documentation file: its path from the repository's root, and its
/// text.
pub struct Doc {
    pub path: String,
    pub text: String,
}

/// README.md, then every `docs/*.md` in name order.
pub fn user_docs() -> Vec<Doc> {
    let root = repo_root();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is there")
        .map(|e| e.expect("docs/ reads").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    paths.sort();
    paths.insert(0, root.join("README.md"));
    paths
        .into_iter()
        .map(|p| Doc {
            text: std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
            path: p
                .strip_prefix(&root)
                .expect("under the root")
                .display()
                .to_string(),
        })
        .collect()
}

/// The commands of the ```sh blocks of every user doc, in order, with
/// continuation lines joined and trailing comments dropped.
pub fn sh_commands() -> Vec<String> {
    user_docs()
        .iter()
        .flat_map(|d| commands_of(&d.text))
        .collect()
}

fn commands_of(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_sh = line.trim() == "```sh" && !in_sh;
            continue;
        }
        if !in_sh {
            continue;
        }
        let line = strip_comment(line);
        if let Some(head) = line.trim_end().strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(line.trim_end());
        let cmd = std::mem::take(&mut pending).trim().to_string();
        if !cmd.is_empty() {
            out.push(cmd);
        }
    }
    out
}

/// `cmd   # comment` → `cmd` (a `#` inside quotes stays).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, ch) in line.char_indices() {
        match (ch, quote) {
            ('\'' | '"', None) => quote = Some(ch),
            (q, Some(open)) if q == open => quote = None,
            ('#', None) if i == 0 || line[..i].ends_with(' ') => return &line[..i],
            _ => {}
        }
    }
    line
}

/// The section of the user docs headed `title` (any level, outside code
/// blocks): from its heading to the next heading of the same or a higher
/// level. Exactly one doc must have it.
pub fn section(title: &str) -> String {
    let mut found = Vec::new();
    for d in user_docs() {
        let lines: Vec<&str> = d.text.lines().collect();
        let headings = headings(&lines);
        for (k, &(at, level, text)) in headings.iter().enumerate() {
            if text != title {
                continue;
            }
            let end = headings[k + 1..]
                .iter()
                .find(|&&(_, l, _)| l <= level)
                .map_or(lines.len(), |&(i, _, _)| i);
            found.push((d.path.clone(), lines[at..end].join("\n")));
        }
    }
    match found.len() {
        1 => found.pop().unwrap().1,
        n => panic!(
            "{n} sections headed {title:?} in README.md and docs/*.md: {:?}",
            found.iter().map(|(p, _)| p).collect::<Vec<_>>()
        ),
    }
}

/// Each heading outside code blocks: its line, level and text.
fn headings<'a>(lines: &[&'a str]) -> Vec<(usize, usize, &'a str)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let level = l.len() - l.trim_start_matches('#').len();
        if !fenced && level > 0 && l[level..].starts_with(' ') {
            out.push((i, level, l[level..].trim()));
        }
    }
    out
}

/// The first ```sh block of `section`, as printed.
pub fn first_sh_block(section: &str) -> String {
    let start = section.find("```sh\n").expect("a sh block in the section") + "```sh\n".len();
    let len = section[start..].find("```").expect("the block ends");
    section[start..start + len].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_join_continuations_and_drop_comments() {
        let text = "x\n```sh\na \\\n  b   # c\n# only a comment\nd '#e'\n```\n```text\nf\n```\n";
        // The continuation's indent stays: bash reads it as one space.
        assert_eq!(commands_of(text), ["a    b", "d '#e'"]);
    }

    #[test]
    fn a_section_ends_at_the_next_heading_of_its_level_or_higher() {
        let lines = [
            "# A",
            "## B",
            "```sh",
            "# not a heading",
            "```",
            "### C",
            "## D",
        ];
        let h = headings(&lines);
        assert_eq!(h, [(0, 1, "A"), (1, 2, "B"), (5, 3, "C"), (6, 2, "D")]);
    }

    #[test]
    fn the_user_docs_start_with_the_readme() {
        let docs = user_docs();
        assert_eq!(docs[0].path, "README.md");
        assert!(docs.iter().any(|d| d.path == "docs/usage.md"));
    }
}
