//! Writing a set of namespaces as an exportTo list.

use std::collections::BTreeSet;

/// The exportTo that exports an object of namespace `own` to `needed`:
/// `.` for the own namespace (always there, first), then the other
/// namespaces sorted. Never `*` (an object everyone needs keeps its
/// exportTo), never `~`, never `.` next to the own name, never empty (an
/// empty list means the mesh default).
pub fn export_list(own: &str, needed: &BTreeSet<String>) -> Vec<String> {
    let mut out = vec![".".to_string()];
    out.extend(needed.iter().filter(|n| *n != own).cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_namespace_is_a_dot_and_comes_first() {
        let needed: BTreeSet<String> = ["b", "a", "own"].map(String::from).into();
        assert_eq!(export_list("own", &needed), [".", "a", "b"]);
        assert_eq!(export_list("own", &BTreeSet::new()), ["."]);
    }
}
