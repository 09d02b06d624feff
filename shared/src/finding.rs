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
    let severity = code_doc(code).map_or(Severity::Warning, |d| d.severity);
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
