//! One finding: a code, the object it is about, and the message. A leaf,
//! so that every rule module (audit, exports, discovery) can build them.

use serde::Serialize;

use crate::codes::{code_doc, Severity};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub code: &'static str,
    pub severity: Severity,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub message: String,
    /// The reason of the object's `meshscope.io/exempt` annotation, when
    /// it has one ([`crate::exempt`]): reported, but never a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exempt: Option<String>,
}

pub(crate) fn finding(
    code: &'static str,
    kind: &str,
    ns: &str,
    name: &str,
    message: String,
) -> Finding {
    let doc = code_doc(code);
    // A code codes.rs does not document is a typo: caught by every test
    // that makes the finding (and by `every_code_the_engine_emits_is_documented`).
    debug_assert!(doc.is_some(), "finding code {code} is not in codes.rs");
    let severity = doc.map_or(Severity::Warning, |d| d.severity);
    Finding {
        code,
        severity,
        kind: kind.to_string(),
        namespace: ns.to_string(),
        name: name.to_string(),
        message,
        exempt: None,
    }
}

#[cfg(test)]
mod tests {
    use super::code_doc;

    /// Every `MSnnnn` written in the engine's source is a documented code:
    /// a mistyped one would otherwise become a warning without a text.
    #[test]
    fn every_code_the_engine_emits_is_documented() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut files = vec![std::path::PathBuf::from(dir)];
        let mut seen = 0;
        while let Some(p) = files.pop() {
            if p.is_dir() {
                files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            for (i, _) in text.match_indices("\"MS") {
                let code = &text[i + 1..(i + 7).min(text.len())];
                if code.len() == 6 && code[2..].bytes().all(|b| b.is_ascii_digit()) {
                    seen += 1;
                    assert!(
                        code_doc(code).is_some(),
                        "{code} in {} is not in codes.rs",
                        p.display()
                    );
                }
            }
        }
        assert!(seen > 20, "only {seen} codes found");
    }
}
