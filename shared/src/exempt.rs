//! `meshscope.io/exempt`: the annotation that takes a workload, a
//! ServiceEntry or a Sidecar out of meshscope's checks, with a reason.
//! The webhook admits such an object without checks
//! ([`crate::admission::review`]); `audit` reports its findings as exempt
//! ([`crate::audit::audit`]). Both read the annotation here.

use crate::labels::Labels;

/// Object annotation that exempts a workload, ServiceEntry or Sidecar; the
/// value is the reason and must not be empty.
pub const EXEMPT_ANNOTATION: &str = "meshscope.io/exempt";

/// `meshscope.io/exempt` on an object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Exemption {
    #[default]
    None,
    /// The annotation with its reason.
    Exempt(String),
    /// The annotation with an empty reason (or, in a request body, a value
    /// that is not a string): not an exemption.
    NoReason,
}

impl Exemption {
    /// What an annotation value says (`None`: no annotation). The reason
    /// is the value without surrounding blanks; a blank one exempts nothing.
    pub fn of_value(value: Option<&str>) -> Exemption {
        match value.map(str::trim) {
            None => Exemption::None,
            Some("") => Exemption::NoReason,
            Some(r) => Exemption::Exempt(r.to_string()),
        }
    }

    /// The exemption in an object's annotations.
    pub fn of(annotations: &Labels) -> Exemption {
        Self::of_value(annotations.get(EXEMPT_ANNOTATION).map(String::as_str))
    }

    /// The reason, when the object is exempt.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Exemption::Exempt(r) => Some(r),
            _ => None,
        }
    }
}

/// The warning for an annotation without a reason, which exempts nothing:
/// the webhook's and `audit`'s.
pub fn no_reason_warning(kind: &str, ns: &str, name: &str) -> String {
    format!("{EXEMPT_ANNOTATION} on {kind} {ns}/{name} has no reason, so it is ignored")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_exempts_and_a_blank_one_does_not() {
        let of = |v: &str| Exemption::of(&Labels::from([(EXEMPT_ANNOTATION.into(), v.into())]));
        assert_eq!(
            of("  shared egress gateway "),
            Exemption::Exempt("shared egress gateway".into())
        );
        assert_eq!(of(" "), Exemption::NoReason);
        assert_eq!(Exemption::of(&Labels::new()), Exemption::None);
        assert_eq!(of("x").reason(), Some("x"));
        assert_eq!(of("").reason(), None);
    }
}
