//! `meshConfig.serviceEntryVisibility` (Istio 1.31+): a mesh-wide cap on
//! how far a ServiceEntry is visible, chosen by the labels of the namespace
//! that holds it. Sidecars honour it only with `applyToSidecars: true`;
//! it only ever narrows a ServiceEntry's `exportTo`.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::Error;
use crate::host::Export;
use crate::labels::Labels;
use crate::version::IstioVersion;

/// The first release whose istiod reads the setting.
pub const SINCE_MINOR: u32 = 31;

/// How widely a ServiceEntry is visible.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Visibility {
    /// As its `exportTo` says (also what `VISIBILITY_UNSPECIFIED` means).
    #[default]
    Public,
    /// Only in its own namespace, whatever its `exportTo`.
    Namespace,
    /// Nowhere.
    None,
}

impl Visibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Public => "PUBLIC",
            Visibility::Namespace => "NAMESPACE",
            Visibility::None => "NONE",
        }
    }

    fn parse(raw: &RawVisibility, what: &str) -> Result<Self, Error> {
        Ok(match raw {
            RawVisibility::Number(0 | 3) => Visibility::Public,
            RawVisibility::Number(1) => Visibility::None,
            RawVisibility::Number(2) => Visibility::Namespace,
            RawVisibility::Name(n) => match n.as_str() {
                "" | "VISIBILITY_UNSPECIFIED" | "PUBLIC" => Visibility::Public,
                "NAMESPACE" => Visibility::Namespace,
                "NONE" => Visibility::None,
                other => {
                    return Err(Error::MeshConfig(format!(
                        "serviceEntryVisibility: {what} {other:?} is not PUBLIC, NAMESPACE or NONE"
                    )))
                }
            },
            RawVisibility::Number(n) => {
                return Err(Error::MeshConfig(format!(
                    "serviceEntryVisibility: {what} {n} is not a visibility"
                )))
            }
        })
    }

    /// `export` as this visibility caps it for a ServiceEntry in `own_ns`:
    /// `NONE` hides it; `NAMESPACE` keeps the own namespace when the list
    /// as written names it (`*`, `.` or the namespace: `listed`, where a
    /// `~` beside them hides nothing), so `["~", "."]` is visible there
    /// once capped, while `["~"]` alone stays hidden
    /// (`pilot/pkg/model/push_context.go` `serviceExportTo`, 1.31).
    pub fn cap(self, export: Export, listed: &Export, own_ns: &str) -> Export {
        match self {
            Visibility::Public => export,
            Visibility::None => Export::Hidden,
            Visibility::Namespace if listed.visible_to(own_ns) => {
                Export::Namespaces([own_ns.to_string()].into())
            }
            Visibility::Namespace => Export::Hidden,
        }
    }
}

/// One requirement of a `namespaceSelector`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: String,
    pub values: Vec<String>,
}

/// A Kubernetes label selector over namespace labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<Requirement>,
}

impl NamespaceSelector {
    /// Kubernetes semantics: every label and every expression must hold;
    /// an empty selector selects every namespace. A selector Kubernetes
    /// would not compile (an unknown operator, `In`/`NotIn` without values,
    /// `Exists`/`DoesNotExist` with values) matches nothing, as in istiod.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let v = labels.get(&r.key);
                let valued = !r.values.is_empty();
                match r.operator.as_str() {
                    "In" => valued && v.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => valued && v.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => !valued && v.is_some(),
                    "DoesNotExist" => !valued && v.is_none(),
                    _ => false,
                }
            })
    }
}

/// One policy: the visibility of ServiceEntries whose namespace matches
/// all of its rules. A rule meshscope does not know (`None`) never matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub visibility: Visibility,
    pub rules: Vec<Option<NamespaceSelector>>,
}

/// `meshConfig.serviceEntryVisibility`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceEntryVisibility {
    pub default_visibility: Visibility,
    pub apply_to_sidecars: bool,
    pub policies: Vec<Policy>,
}

impl ServiceEntryVisibility {
    /// The visibility of a ServiceEntry in a namespace with these labels:
    /// the first policy whose rules all match, else the default.
    pub fn for_namespace(&self, labels: &Labels) -> Visibility {
        self.policies
            .iter()
            .find(|p| {
                p.rules
                    .iter()
                    .all(|r| r.as_ref().is_some_and(|s| s.matches(labels)))
            })
            .map_or(self.default_visibility, |p| p.visibility)
    }

    pub(crate) fn parse(raw: RawServiceEntryVisibility) -> Result<Self, Error> {
        let mut out = ServiceEntryVisibility {
            default_visibility: match &raw.default_visibility {
                Some(v) => Visibility::parse(v, "defaultVisibility")?,
                None => Visibility::Public,
            },
            apply_to_sidecars: raw.apply_to_sidecars.unwrap_or(false),
            policies: Vec::new(),
        };
        for (i, p) in raw.policies.unwrap_or_default().into_iter().enumerate() {
            let visibility = match &p.visibility {
                Some(v) => Visibility::parse(v, &format!("policies[{i}].visibility"))?,
                None => Visibility::Public,
            };
            let mut rules = Vec::new();
            for r in p.matching_rules.unwrap_or_default() {
                rules.push(r.namespace_selector.map(RawSelector::parse));
            }
            out.policies.push(Policy { visibility, rules });
        }
        Ok(out)
    }
}

/// What the mesh's `serviceEntryVisibility` says of a ServiceEntry in a
/// namespace with these labels, when the setting is there and this Istio
/// reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub visibility: Visibility,
    /// `applyToSidecars`: whether sidecars honour it (ambient always does).
    pub sidecars: bool,
}

impl Resolved {
    /// The cap a sidecar's scope sees.
    pub fn for_sidecars(self) -> Visibility {
        if self.sidecars {
            self.visibility
        } else {
            Visibility::Public
        }
    }
}

/// `setting` is the mesh config's `serviceEntryVisibility`.
pub fn resolve(
    setting: Option<&ServiceEntryVisibility>,
    istio: IstioVersion,
    ns_labels: &Labels,
) -> Option<Resolved> {
    if !istio.at_least(SINCE_MINOR) {
        return None;
    }
    let v = setting?;
    Some(Resolved {
        visibility: v.for_namespace(ns_labels),
        sidecars: v.apply_to_sidecars,
    })
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum RawVisibility {
    Name(String),
    Number(i64),
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawServiceEntryVisibility {
    default_visibility: Option<RawVisibility>,
    apply_to_sidecars: Option<bool>,
    policies: Option<Vec<RawPolicy>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawPolicy {
    visibility: Option<RawVisibility>,
    matching_rules: Option<Vec<RawRule>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawRule {
    namespace_selector: Option<RawSelector>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawSelector {
    match_labels: Option<BTreeMap<String, String>>,
    match_expressions: Option<Vec<RawRequirement>>,
}

impl RawSelector {
    pub(crate) fn parse(self) -> NamespaceSelector {
        NamespaceSelector {
            match_labels: self.match_labels.unwrap_or_default(),
            match_expressions: self
                .match_expressions
                .unwrap_or_default()
                .into_iter()
                .map(|e| Requirement {
                    key: e.key,
                    operator: e.operator,
                    values: e.values.unwrap_or_default(),
                })
                .collect(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
struct RawRequirement {
    key: String,
    operator: String,
    values: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::from_pairs as labels;

    #[test]
    fn selectors_follow_kubernetes_semantics() {
        let sel = |ops: &[(&str, &str, &[&str])]| NamespaceSelector {
            match_labels: BTreeMap::new(),
            match_expressions: ops
                .iter()
                .map(|(k, o, v)| Requirement {
                    key: k.to_string(),
                    operator: o.to_string(),
                    values: v.iter().map(|s| s.to_string()).collect(),
                })
                .collect(),
        };
        let l = labels(&[("env", "dev")]);
        assert!(NamespaceSelector::default().matches(&l));
        assert!(sel(&[("env", "NotIn", &["prod"])]).matches(&l));
        assert!(sel(&[("team", "NotIn", &["a"])]).matches(&l));
        assert!(!sel(&[("env", "In", &["prod"])]).matches(&l));
        assert!(sel(&[("team", "DoesNotExist", &[])]).matches(&l));
        assert!(!sel(&[("env", "Bogus", &[])]).matches(&l));
        // Selectors that do not compile match nothing.
        assert!(!sel(&[("env", "NotIn", &[])]).matches(&l));
        assert!(!sel(&[("env", "Exists", &["dev"])]).matches(&l));
    }

    #[test]
    fn caps_only_narrow() {
        let own = "shop";
        let ns = |v: &[&str]| Export::Namespaces(v.iter().map(|s| s.to_string()).collect());
        let cap = |v: Visibility, e: Export| v.cap(e.clone(), &e, own);
        assert_eq!(cap(Visibility::Public, Export::Public), Export::Public);
        assert_eq!(cap(Visibility::Namespace, Export::Public), ns(&["shop"]));
        assert_eq!(
            cap(Visibility::Namespace, ns(&["shop", "web"])),
            ns(&["shop"])
        );
        assert_eq!(cap(Visibility::Namespace, ns(&["web"])), Export::Hidden);
        assert_eq!(cap(Visibility::None, Export::Public), Export::Hidden);
        assert_eq!(cap(Visibility::Public, Export::Hidden), Export::Hidden);
    }

    #[test]
    fn namespace_cap_reads_the_list_as_written() {
        let own = "shop";
        let ns = |v: &[&str]| Export::Namespaces(v.iter().map(|s| s.to_string()).collect());
        // `["~", "shop"]`: hidden on the scan path, listed for shop; capped
        // to NAMESPACE it is visible in shop on both.
        assert_eq!(
            Visibility::Namespace.cap(Export::Hidden, &ns(&["shop"]), own),
            ns(&["shop"])
        );
        // `["~"]` alone lists nothing and stays hidden.
        assert_eq!(
            Visibility::Namespace.cap(Export::Hidden, &ns(&[]), own),
            Export::Hidden
        );
        assert_eq!(
            Visibility::None.cap(Export::Hidden, &ns(&["shop"]), own),
            Export::Hidden
        );
    }
}
