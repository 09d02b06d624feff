//! One finding: a code, the object it is about, and the message. A leaf,
//! so that every rule module (audit, exports, discovery) can build them.

use serde::Serialize;

use crate::codes::{Code, Severity};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub code: Code,
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

/// A finding of `code`, with the severity that code is documented with.
pub(crate) fn finding(code: Code, kind: &str, ns: &str, name: &str, message: String) -> Finding {
    Finding {
        code,
        severity: code.doc().severity,
        kind: kind.to_string(),
        namespace: ns.to_string(),
        name: name.to_string(),
        message,
        exempt: None,
    }
}
