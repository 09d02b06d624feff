//! What `--help` says a command prints, to hold the output to it: the
//! forms `-o name` is documented to print, read from the clap definition
//! the binary's help is made of.

use clap::CommandFactory;
use kubectl_meshscope::args::Cli;

/// The forms the `-o` help of `subcommand` gives for `name`: each
/// `WORD/NAME` (`pod/NAME`, `kind.group/NAME`) and each `e.g. EXAMPLE` in
/// the parentheses after `name`. Panics when there are none.
pub fn name_forms(subcommand: &str) -> Vec<String> {
    let cli = Cli::command();
    let sub = cli
        .find_subcommand(subcommand)
        .unwrap_or_else(|| panic!("no subcommand {subcommand}"));
    let output = sub
        .get_arguments()
        .find(|a| a.get_long() == Some("output"))
        .unwrap_or_else(|| panic!("{subcommand} has no --output"));
    let help = output.get_help().map(|h| h.to_string()).unwrap_or_default();
    let (_, after) = help
        .split_once("name (")
        .unwrap_or_else(|| panic!("{subcommand} -o: no \"name (...)\" in {help:?}"));
    let described = after.split(')').next().unwrap_or_default();
    let words: Vec<&str> = described
        .split([' ', ','])
        .filter(|w| !w.is_empty())
        .collect();
    let mut forms: Vec<String> = words
        .iter()
        .filter(|w| w.ends_with("/NAME"))
        .map(|w| w.to_string())
        .collect();
    for pair in words.windows(2) {
        if pair[0] == "e.g." {
            forms.push(pair[1].to_string());
        }
    }
    assert!(
        !forms.is_empty(),
        "{subcommand} -o name names no form: {help:?}"
    );
    forms
}

/// Whether `line` is printed in one of `forms`: `kind.group/NAME` is any
/// lowercase `kind.group/` (or core `kind/`) prefix, `WORD/NAME` the
/// prefix `WORD/`, and an example stands for lines of its shape (letters
/// as they are, digits as any digit, a name after a `/` as any name).
pub fn is_of_form(line: &str, forms: &[String]) -> bool {
    forms.iter().any(|form| match form.strip_suffix("/NAME") {
        Some("kind.group") => line.split_once('/').is_some_and(|(kind, name)| {
            !name.is_empty()
                && !kind.is_empty()
                && kind.chars().all(|c| c.is_ascii_lowercase() || c == '.')
        }),
        Some(word) => line
            .strip_prefix(word)
            .and_then(|r| r.strip_prefix('/'))
            .is_some_and(|name| !name.is_empty()),
        None => shape(line) == shape(form),
    })
}

/// Digits as `9`; what follows a `/` as `NAME`.
fn shape(s: &str) -> String {
    let (head, tail) = match s.split_once('/') {
        Some((h, _)) => (h, "/NAME"),
        None => (s, ""),
    };
    let head: String = head
        .chars()
        .map(|c| if c.is_ascii_digit() { '9' } else { c })
        .collect();
    format!("{head}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_match_what_they_say() {
        let forms = vec!["pod/NAME".to_string()];
        assert!(is_of_form("pod/web-1", &forms));
        assert!(!is_of_form("deployment.apps/web", &forms));
        let forms = vec!["kind.group/NAME".to_string()];
        assert!(is_of_form("deployment.apps/web", &forms));
        assert!(is_of_form("pod/web", &forms));
        assert!(!is_of_form("Deployment/web", &forms));
        assert!(!is_of_form("MS0001", &forms));
        let forms = vec!["MS0001".to_string()];
        assert!(is_of_form("MS0012", &forms));
        assert!(!is_of_form("pod/x", &forms));
    }
}
