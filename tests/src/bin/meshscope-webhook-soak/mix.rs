//! What each request of the mix is and the decision it should get, and
//! how an answer is judged against it.

use std::collections::BTreeMap;

use meshscope_e2e::cluster::repo_root;
use serde_json::{json, Value};

use crate::settings::{NS_ENFORCE, NS_FLIP, NS_WARN};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    DeployEnforce,
    DeployWarn,
    DeployScoped,
    DeployExempt,
    DeployFlip,
    SeEnforce,
    SeExported,
    SeWarn,
    Sidecar,
    Delete,
    Malformed,
}

/// One cycle of the mix: Deployments dominate, as in a cluster.
pub const MIX: [Kind; 20] = [
    Kind::DeployEnforce,
    Kind::DeployWarn,
    Kind::DeployScoped,
    Kind::DeployFlip,
    Kind::SeEnforce,
    Kind::DeployEnforce,
    Kind::DeployWarn,
    Kind::DeployScoped,
    Kind::DeployFlip,
    Kind::Delete,
    Kind::DeployEnforce,
    Kind::DeployExempt,
    Kind::SeExported,
    Kind::DeployFlip,
    Kind::SeWarn,
    Kind::DeployWarn,
    Kind::Sidecar,
    Kind::DeployFlip,
    Kind::DeployScoped,
    Kind::Malformed,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    Deny(&'static str),
    Warn(&'static str),
    Clean,
    Allowed,
    BadRequest,
}

fn fixture(name: &str, ns: &str) -> Value {
    let path = repo_root().join("tests/fixtures/admission").join(name);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v["request"]["namespace"] = json!(ns);
    for key in ["object", "oldObject"] {
        if v["request"][key].is_object() {
            v["request"][key]["metadata"]["namespace"] = json!(ns);
        }
    }
    v
}

/// Bodies with a `{uid}` placeholder each, by kind.
pub fn bodies() -> BTreeMap<Kind, String> {
    let mut scoped = fixture("deployment-create.json", NS_ENFORCE);
    scoped["request"]["name"] = json!("scoped");
    scoped["request"]["object"]["metadata"]["name"] = json!("scoped");
    scoped["request"]["object"]["spec"]["template"]["metadata"]["labels"]["app"] = json!("scoped");
    let all = [
        (
            Kind::DeployEnforce,
            fixture("deployment-create.json", NS_ENFORCE),
        ),
        (Kind::DeployWarn, fixture("deployment-create.json", NS_WARN)),
        (Kind::DeployScoped, scoped),
        (
            Kind::DeployExempt,
            fixture("deployment-create-exempt.json", NS_ENFORCE),
        ),
        (Kind::DeployFlip, fixture("deployment-create.json", NS_FLIP)),
        (
            Kind::SeEnforce,
            fixture("serviceentry-dns-create.json", NS_ENFORCE),
        ),
        (
            Kind::SeExported,
            fixture("serviceentry-dns-exported-create.json", NS_ENFORCE),
        ),
        (
            Kind::SeWarn,
            fixture("serviceentry-dns-create.json", NS_WARN),
        ),
        (Kind::Sidecar, fixture("sidecar-clean-update.json", NS_WARN)),
        (Kind::Delete, fixture("deployment-delete.json", NS_ENFORCE)),
    ];
    let mut out: BTreeMap<Kind, String> = all
        .into_iter()
        .map(|(k, mut v)| {
            v["request"]["uid"] = json!("{uid}");
            (k, v.to_string())
        })
        .collect();
    let truncated = std::fs::read_to_string(
        repo_root().join("tests/fixtures/admission/malformed-truncated.json"),
    )
    .unwrap();
    out.insert(Kind::Malformed, truncated);
    out
}

pub fn expect(kind: Kind, flip_enforce: bool) -> Expect {
    match kind {
        Kind::DeployEnforce => Expect::Deny("MS0001"),
        Kind::DeployWarn => Expect::Warn("MS0001"),
        Kind::DeployScoped | Kind::DeployExempt | Kind::SeExported | Kind::Delete => Expect::Clean,
        Kind::DeployFlip if flip_enforce => Expect::Deny("MS0001"),
        Kind::DeployFlip => Expect::Warn("MS0001"),
        Kind::SeEnforce => Expect::Deny("MS0002"),
        Kind::SeWarn => Expect::Warn("MS0002"),
        Kind::Sidecar => Expect::Allowed,
        Kind::Malformed => Expect::BadRequest,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Right,
    /// Right, and decided from caches the webhook said were stale.
    RightFromStale,
    /// Allowed without checks (the caches had not synced).
    Unchecked,
    Wrong,
}

/// Whether the answer matches `want`; `alt` is also right (around a flip).
pub fn judge(status: u16, body: &[u8], uid: &str, want: Expect, alt: Option<Expect>) -> Verdict {
    if want == Expect::BadRequest {
        return if status == 400 {
            Verdict::Right
        } else {
            Verdict::Wrong
        };
    }
    if status != 200 {
        return Verdict::Wrong;
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Verdict::Wrong;
    };
    let r = &v["response"];
    if r["uid"] != uid {
        return Verdict::Wrong;
    }
    let allowed = r["allowed"].as_bool().unwrap_or(false);
    let mut warnings: Vec<&str> = r["warnings"]
        .as_array()
        .map(|w| w.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // The stale-cache warning says how the decision was made, not what it
    // is: judged without it, counted apart.
    let before = warnings.len();
    warnings.retain(|w| !w.starts_with("meshscope-webhook decided from caches"));
    let from_stale = warnings.len() < before;
    let message = r["status"]["message"].as_str().unwrap_or_default();
    if allowed
        && warnings
            .iter()
            .any(|w| w.contains("allowed without checks"))
    {
        return Verdict::Unchecked;
    }
    let fits = |e: Expect| match e {
        Expect::Deny(code) => !allowed && message.starts_with(code),
        Expect::Warn(code) => allowed && warnings.iter().any(|w| w.starts_with(code)),
        Expect::Clean => allowed && warnings.is_empty(),
        Expect::Allowed => allowed,
        Expect::BadRequest => false,
    };
    if fits(want) || alt.is_some_and(fits) {
        if from_stale {
            Verdict::RightFromStale
        } else {
            Verdict::Right
        }
    } else {
        Verdict::Wrong
    }
}
