//! `--suppress CODE[=KIND/NS/NAME]`: which findings `audit` silences.

use anyhow::{anyhow, bail, Result};
use meshscope_shared::audit::{Code, Finding};
use meshscope_shared::snapshot::WorkloadKind;

/// A finding code as `--code` and `--suppress` take it.
pub(super) fn known_code(code: &str, flag: &str) -> Result<Code> {
    Code::parse(code.trim()).ok_or_else(|| {
        anyhow!("{flag}: unknown code {code:?}; `kubectl meshscope codes` lists them")
    })
}

/// `CODE` or `CODE=KIND/NS/NAME`, with `*` globbing the object (as
/// `istioctl analyze --suppress "IST0102=Namespace frod"`).
#[derive(Debug, PartialEq, Eq)]
pub struct Suppression {
    code: Code,
    /// `kind/ns/name`, the kind lower-case and singular.
    object: Option<String>,
}

impl Suppression {
    pub fn parse(s: &str) -> Result<Self> {
        let (code, object) = match s.split_once('=') {
            Some((c, o)) => (c, Some(o.trim())),
            None => (s, None),
        };
        let code = known_code(code, "--suppress")?;
        let object = match object {
            None | Some("*") => None,
            Some(o) => {
                let parts: Vec<&str> = o.split('/').collect();
                let [kind, ns, name] = parts[..] else {
                    bail!("--suppress {s:?}: expected CODE=KIND/NAMESPACE/NAME (e.g. {code}=Deployment/shop/worker, * globs)");
                };
                if kind.is_empty() || ns.is_empty() || name.is_empty() {
                    bail!("--suppress {s:?}: KIND, NAMESPACE and NAME must not be empty (use * for any)");
                }
                Some(format!("{}/{ns}/{name}", kind_key(kind)))
            }
        };
        Ok(Self { code, object })
    }

    pub fn matches(&self, f: &Finding) -> bool {
        self.code == f.code
            && self.object.as_deref().is_none_or(|pattern| {
                glob(
                    pattern,
                    &format!("{}/{}/{}", kind_key(&f.kind), f.namespace, f.name),
                )
            })
    }
}

/// A kind as `--suppress` compares it: lower-case, singular, no group
/// (`deploy`, `Deployment` and `deployment.apps` are the same).
fn kind_key(kind: &str) -> String {
    if kind.contains('*') {
        return kind.to_ascii_lowercase();
    }
    let bare = kind.split('.').next().unwrap_or(kind);
    if let Some(k) = WorkloadKind::parse(bare).filter(|k| !matches!(k, WorkloadKind::Other(_))) {
        return k.as_str().to_ascii_lowercase();
    }
    match bare.to_ascii_lowercase().as_str() {
        "se" | "serviceentry" | "serviceentries" => "serviceentry".into(),
        "sidecar" | "sidecars" => "sidecar".into(),
        other => other.to_string(),
    }
}

/// `*` matches any run of characters (slashes too), as istioctl's glob.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || !text.ends_with(last) || text.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use meshscope_shared::audit::Severity;

    /// A warning finding, for the tests of suppressions and of audit's table.
    pub(crate) fn finding(code: Code, kind: &str, ns: &str, name: &str, message: &str) -> Finding {
        Finding {
            code,
            severity: Severity::Warning,
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            message: message.into(),
            exempt: None,
        }
    }

    #[test]
    fn suppressions_match_code_and_globbed_object() {
        let worker = finding(Code::UnscopedWorkload, "Deployment", "shop", "worker", "");
        let se = finding(
            Code::DnsServiceEntryMeshWide,
            "ServiceEntry",
            "shop",
            "payments",
            "",
        );
        let all = Suppression::parse("ms0001").unwrap();
        assert!(all.matches(&worker) && !all.matches(&se));
        for s in [
            "MS0001=Deployment/shop/worker",
            "MS0001=deploy/shop/work*",
            "MS0001=deployment.apps/*/worker",
            "MS0001=*/shop/*",
            "MS0001=*",
        ] {
            assert!(Suppression::parse(s).unwrap().matches(&worker), "{s}");
        }
        for s in [
            "MS0001=Deployment/shop/web",
            "MS0001=StatefulSet/shop/worker",
            "MS0001=Deployment/other/*",
            "MS0002=Deployment/shop/worker",
        ] {
            assert!(!Suppression::parse(s).unwrap().matches(&worker), "{s}");
        }
        assert!(Suppression::parse("MS0002=se/shop/pay*")
            .unwrap()
            .matches(&se));
    }

    #[test]
    fn suppressions_reject_unknown_codes_and_malformed_objects() {
        let e = Suppression::parse("MS9999=Deployment/shop/x")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--suppress: unknown code \"MS9999\"; `kubectl meshscope codes` lists them"
        );
        let e = Suppression::parse("MS0001=Deployment/worker")
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected CODE=KIND/NAMESPACE/NAME"), "{e}");
    }

    #[test]
    fn globs_match_like_istioctl() {
        assert!(glob("a*c", "abc") && glob("a*c", "ac") && glob("*", ""));
        assert!(glob("a*b*c", "a/x/b/y/c") && !glob("a*b*c", "a/x/c"));
        assert!(!glob("ab*ba", "aba"), "prefix and suffix must not overlap");
    }
}
