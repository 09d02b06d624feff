//! Label maps and selector matching, which pod labels a generated Sidecar
//! may select on, and names and label values that Kubernetes accepts.
//!
//! A generated selector must stay true for the workload's whole life: it
//! must keep selecting the workload's pods across releases, reruns and
//! restarts. Labels whose values change per release, per run or per pod
//! cannot promise that, so they are never used ([`UNSTABLE_LABELS`]).

use std::collections::BTreeMap;

/// An object's labels (or annotations), or a selector's `matchLabels`.
pub type Labels = BTreeMap<String, String>;

/// The string map under `labels` in a JSON object (a subset's, a
/// ServiceEntry endpoint's); non-string values are skipped, none is empty.
pub fn labels_field(v: &serde_json::Value) -> Labels {
    v.get("labels")
        .and_then(|l| l.as_object())
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Does a workload selector select these labels? (Plain subset test; an
/// empty selector selects everything.)
pub fn selector_matches(selector: &Labels, labels: &Labels) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Labels from `(key, value)` pairs, for tests.
#[cfg(test)]
pub(crate) fn from_pairs(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// How often an unstable label's value changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Changes {
    /// Per pod: no two pods of the workload share the value.
    PerPod,
    /// Per run of a Job (and so per CronJob schedule).
    PerRun,
    /// Per template revision: every rollout brings a new value.
    PerRevision,
    /// Per release of the application or its chart.
    PerRelease,
}

impl Changes {
    pub fn as_str(self) -> &'static str {
        match self {
            Changes::PerPod => "per pod",
            Changes::PerRun => "per run",
            Changes::PerRevision => "per revision",
            Changes::PerRelease => "per release",
        }
    }
}

/// A label key a generated selector never uses.
#[derive(Clone, Copy, Debug)]
pub struct UnstableLabel {
    pub key: &'static str,
    pub changes: Changes,
    /// Who sets it.
    pub set_by: &'static str,
}

/// The label keys whose values change per release, per run or per pod.
/// A generated selector never holds them, not even when a controller's own
/// `matchLabels` does. Besides these keys, any key whose name (the part
/// after the last `/`) ends in one of [`UNSTABLE_SUFFIXES`] is unstable.
pub const UNSTABLE_LABELS: &[UnstableLabel] = &[
    UnstableLabel {
        key: "pod-template-hash",
        changes: Changes::PerRevision,
        set_by: "the Deployment controller, per ReplicaSet",
    },
    UnstableLabel {
        key: "controller-revision-hash",
        changes: Changes::PerRevision,
        set_by: "the StatefulSet and DaemonSet controllers",
    },
    UnstableLabel {
        key: "pod-template-generation",
        changes: Changes::PerRevision,
        set_by: "the DaemonSet controller",
    },
    UnstableLabel {
        key: "statefulset.kubernetes.io/pod-name",
        changes: Changes::PerPod,
        set_by: "the StatefulSet controller",
    },
    UnstableLabel {
        key: "apps.kubernetes.io/pod-index",
        changes: Changes::PerPod,
        set_by: "the StatefulSet controller",
    },
    UnstableLabel {
        key: "batch.kubernetes.io/job-completion-index",
        changes: Changes::PerPod,
        set_by: "the Job controller (indexed Jobs)",
    },
    UnstableLabel {
        key: "batch.kubernetes.io/controller-uid",
        changes: Changes::PerRun,
        set_by: "the Job controller",
    },
    UnstableLabel {
        key: "batch.kubernetes.io/job-name",
        changes: Changes::PerRun,
        set_by: "the Job controller (a CronJob's Jobs are named per run)",
    },
    UnstableLabel {
        key: "controller-uid",
        changes: Changes::PerRun,
        set_by: "the Job controller (legacy key)",
    },
    UnstableLabel {
        key: "job-name",
        changes: Changes::PerRun,
        set_by: "the Job controller (legacy key)",
    },
    UnstableLabel {
        key: "app.kubernetes.io/version",
        changes: Changes::PerRelease,
        set_by: "charts and manifests, from the application version",
    },
    UnstableLabel {
        key: "helm.sh/chart",
        changes: Changes::PerRelease,
        set_by: "Helm charts, as <chart>-<chart version>",
    },
    UnstableLabel {
        key: "chart",
        changes: Changes::PerRelease,
        set_by: "older Helm charts, as <chart>-<chart version>",
    },
    UnstableLabel {
        key: "service.istio.io/canonical-revision",
        changes: Changes::PerRelease,
        set_by: "manifests, for Istio telemetry",
    },
    UnstableLabel {
        key: "istio.io/rev",
        changes: Changes::PerRelease,
        set_by: "Istio revision-based (canary) upgrades",
    },
];

/// Key-name endings that mark a label as unstable whatever its prefix:
/// `rollouts-pod-template-hash`, `…/config-hash`, `…-uid`, `…-revision`.
pub const UNSTABLE_SUFFIXES: &[&str] = &["-hash", "-uid", "-revision"];

/// Label keys that change per release unless they are fixed for the
/// workload's life: held by its immutable `spec.selector.matchLabels`, or
/// on a bare pod or a Job (whose template is immutable). Istio's `version`
/// convention (one Deployment per version, `version` in its selector)
/// keeps them, but on a Deployment's template alone they may change with
/// the next rollout.
pub const RELEASE_LABELS: &[&str] = &["version"];

/// Why a label key may not be used, or `None` when it may.
pub fn unstable(key: &str) -> Option<Changes> {
    if let Some(u) = UNSTABLE_LABELS.iter().find(|u| u.key == key) {
        return Some(u.changes);
    }
    let name = key.rsplit('/').next().unwrap_or(key);
    if UNSTABLE_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        return Some(if name.ends_with("-uid") {
            Changes::PerRun
        } else {
            Changes::PerRevision
        });
    }
    None
}

/// May a generated selector use this key? `fixed` says whether the value
/// is fixed for the workload's life (its controller's `matchLabels`, or a
/// bare pod's or Job's labels).
pub fn usable(key: &str, fixed: bool) -> bool {
    unstable(key).is_none() && (fixed || !RELEASE_LABELS.contains(&key))
}

/// The longest label value Kubernetes accepts.
pub const MAX_LABEL_VALUE: usize = 63;
/// The longest object name (a DNS-1123 subdomain).
pub const MAX_NAME: usize = 253;

/// A stable hash of a name (64-bit FNV-1a), as 10 hex digits. It is
/// written into objects, so it must never change between releases.
pub fn name_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:010x}", h >> 24)
}

/// Is `v` a valid label value (at most 63 characters of `[A-Za-z0-9_.-]`,
/// starting and ending with an alphanumeric, or empty)?
pub fn is_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    v.len() <= MAX_LABEL_VALUE
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_none_or(u8::is_ascii_alphanumeric)
        && b.last().is_none_or(u8::is_ascii_alphanumeric)
}

/// `v` as a label value: itself when valid, else its valid characters cut
/// to fit with `-<hash of v>` appended, so that two long names sharing a
/// prefix get different values.
pub fn label_value(v: &str) -> String {
    if is_label_value(v) {
        return v.to_string();
    }
    let hash = name_hash(v);
    let room = MAX_LABEL_VALUE - hash.len() - 1;
    let kept: String = v
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(room)
        .collect();
    let kept = kept.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if kept.is_empty() {
        hash
    } else {
        format!("{kept}-{hash}")
    }
}

/// Is `name` a valid DNS-1123 subdomain (the rule for most object names)?
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= MAX_NAME
        && !name.is_empty()
        && name.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// `prefix` made into the start of a DNS-1123 subdomain of at most `room`
/// characters: lowercased, other characters as `-`, cut, and without a
/// trailing `-` or `.`.
pub fn subdomain_prefix(prefix: &str, room: usize) -> String {
    let mut s: String = prefix
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.') => c,
            _ => '-',
        })
        .take(room)
        .collect();
    // No empty or dash-edged dot-separated parts.
    while s.contains("..") || s.contains(".-") || s.contains("-.") {
        s = s.replace("..", ".").replace(".-", "-").replace("-.", "-");
    }
    s.trim_matches(['-', '.']).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listed_and_suffixed_keys_are_unstable_and_others_are_not() {
        for key in [
            "pod-template-hash",
            "controller-revision-hash",
            "statefulset.kubernetes.io/pod-name",
            "apps.kubernetes.io/pod-index",
            "batch.kubernetes.io/controller-uid",
            "batch.kubernetes.io/job-name",
            "controller-uid",
            "job-name",
            "app.kubernetes.io/version",
            "helm.sh/chart",
            "rollouts-pod-template-hash",
            "example.com/config-hash",
        ] {
            assert!(unstable(key).is_some(), "{key}");
            assert!(!usable(key, true), "{key}");
        }
        for key in [
            "app",
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "tier",
        ] {
            assert_eq!(unstable(key), None, "{key}");
            assert!(usable(key, false), "{key}");
        }
        // `version` only from an immutable selector.
        assert!(usable("version", true));
        assert!(!usable("version", false));
    }

    #[test]
    fn long_label_values_are_cut_with_a_stable_hash() {
        assert_eq!(label_value("reviews-v2"), "reviews-v2");
        let long = "a".repeat(70) + "-one";
        let other = "a".repeat(70) + "-two";
        let (a, b) = (label_value(&long), label_value(&other));
        assert!(a.len() <= MAX_LABEL_VALUE && is_label_value(&a), "{a}");
        assert_ne!(a, b);
        assert_eq!(a, label_value(&long), "deterministic");
        // The hash is part of objects already written: it never changes.
        assert_eq!(name_hash("reviews-v2"), "d1a7cd32e2");
        // A cut that ends on a dash keeps ending on an alphanumeric.
        let dashy = format!("{}-{}", "b".repeat(51), "c".repeat(30));
        assert!(is_label_value(&label_value(&dashy)));
    }

    #[test]
    fn subdomains_are_checked_part_by_part() {
        assert!(is_dns_subdomain("reviews-v2-deployment-meshscope"));
        assert!(is_dns_subdomain("a.b-c"));
        for bad in ["", "A", "a..b", "-a", "a-", "a.-b", &"a".repeat(254)] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
        assert_eq!(subdomain_prefix("My_App.-x", 100), "my-app-x");
        assert_eq!(subdomain_prefix("abc.def", 4), "abc");
    }
}
