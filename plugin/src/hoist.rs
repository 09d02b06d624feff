//! kubectl's global flags before the command: `kubectl meshscope -n NS
//! audit` read as `kubectl meshscope audit -n NS`, by the binary and by
//! completion alike.

use crate::args::Cli;

/// kubectl's global flags that take a value: `-n` and the connection
/// flags, which kubectl users type before the command as often as after.
const HOISTED_WITH_VALUE: &[&str] = &[
    "namespace",
    "context",
    "kubeconfig",
    "cluster",
    "user",
    "server",
    "token",
    "certificate-authority",
    "as",
    "as-group",
    "as-uid",
    "request-timeout",
    "chunk-size",
];

/// The short forms of [`HOISTED_WITH_VALUE`].
const HOISTED_SHORT: &[char] = &['n', 's'];

/// kubectl's global switches.
const HOISTED_SWITCHES: &[&str] = &["insecure-skip-tls-verify"];

/// The command line with kubectl's global flags that come before the
/// command (`kubectl meshscope -n bookinfo audit`) moved after it
/// (`audit -n bookinfo`), where each command takes them. Anything else
/// before the command (a flag meshscope does not hoist, `--help`) stops
/// the move, and clap reads the line as it was typed.
pub fn hoist(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    match args
        .iter()
        .map(|a| a.to_str().map(String::from))
        .collect::<Option<Vec<String>>>()
    {
        Some(words) => hoist_words(&words).into_iter().map(Into::into).collect(),
        None => args,
    }
}

/// [`hoist`] of UTF-8 words; `words[0]` is the binary's name.
pub fn hoist_words(words: &[String]) -> Vec<String> {
    match leading_flags(&command_tree(), words) {
        Some((flags_end, path_end)) => [
            &words[..1],
            &words[flags_end..path_end],
            &words[1..flags_end],
            &words[path_end..],
        ]
        .concat(),
        None => words.to_vec(),
    }
}

fn command_tree() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Where the hoistable flags after the binary name end, and where the
/// (sub)command names after them end; `None` when there is nothing to
/// move.
fn leading_flags(root: &clap::Command, words: &[String]) -> Option<(usize, usize)> {
    let mut i = 1;
    while i < words.len() {
        let w = &words[i];
        let takes_next = if let Some(long) = w.strip_prefix("--") {
            let (name, inline) = (long.split('=').next().unwrap_or(long), long.contains('='));
            if HOISTED_SWITCHES.contains(&name) {
                false
            } else if HOISTED_WITH_VALUE.contains(&name) {
                !inline
            } else {
                return None;
            }
        } else if let Some(short) = w.strip_prefix('-').and_then(|s| s.chars().next()) {
            if !HOISTED_SHORT.contains(&short) {
                return None;
            }
            w.len() == 2
        } else {
            break;
        };
        i += if takes_next { 2 } else { 1 };
    }
    let flags_end = i.min(words.len());
    if flags_end == 1 {
        return None;
    }
    // The command, and the nested commands after it (`webhook manifests`).
    let mut cmd = root;
    let mut j = flags_end;
    while let Some(sub) = words.get(j).and_then(|w| cmd.find_subcommand(w)) {
        cmd = sub;
        j += 1;
    }
    (j > flags_end).then_some((flags_end, j))
}
