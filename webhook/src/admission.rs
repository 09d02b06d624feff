//! HTTP ⇄ AdmissionReview. The only place that turns a
//! `meshscope_shared::admission::Decision` into an `AdmissionResponse`.
//!
//! A body that is not an `admission.k8s.io/v1` AdmissionReview with a
//! request (bad JSON, wrong version, too large) gets HTTP 400 with a JSON
//! error, and one whose body does not arrive within the body read timeout
//! HTTP 408; the API server then applies the configuration's failurePolicy
//! (`Ignore`). Everything readable gets HTTP 200 with a review that echoes
//! the request's uid.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{to_bytes, Body};
use axum::extract::State as Extract;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use kube::core::admission::Operation;
use meshscope_shared::admission::{self as policy, Decision, Endpoint, Outcome, Request};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;
use thiserror::Error;
use tracing::{debug, info, warn};

use crate::metrics::{RequestLabels, Timeout};
use crate::state::{Freshness, State};

/// The largest body read by default (`--max-body-bytes`). The API server
/// caps objects at 3 MiB (etcd's limit is 1.5 MiB); an AdmissionReview of
/// an UPDATE carries two.
pub const MAX_BODY_BYTES: usize = crate::limits::DEFAULT_MAX_BODY_BYTES;

pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";
pub const ADMISSION_REVIEW_KIND: &str = "AdmissionReview";

#[derive(Debug, Error)]
pub enum BadRequest {
    #[error("cannot read the request body (larger than the limit?): {0}")]
    Body(String),
    #[error("the body is {length} bytes, more than the limit of {limit}")]
    TooLarge { length: u64, limit: usize },
    #[error("the body is not an AdmissionReview: {0}")]
    Json(#[from] serde_json::Error),
    #[error("expected an {ADMISSION_API_VERSION} AdmissionReview, got apiVersion {api_version:?} kind {kind:?}")]
    Version { api_version: String, kind: String },
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

impl IntoResponse for BadRequest {
    fn into_response(self) -> Response {
        let body = json!({"error": self.to_string()});
        (StatusCode::BAD_REQUEST, Json(body)).into_response()
    }
}

pub async fn validate(
    Extract(state): Extract<Arc<State>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    admit(state, Endpoint::Validate, &headers, body).await
}

pub async fn mutate(
    Extract(state): Extract<Arc<State>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    admit(state, Endpoint::Mutate, &headers, body).await
}

async fn admit(state: Arc<State>, endpoint: Endpoint, headers: &HeaderMap, body: Body) -> Response {
    let started = Instant::now();
    let limit = state.limits.max_body_bytes;
    // A declared length over the limit is refused before anything is read.
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(length) = declared.filter(|l| *l > limit as u64) {
        return bad_request(&state, endpoint, BadRequest::TooLarge { length, limit });
    }
    let read = tokio::time::timeout(state.limits.body_read_timeout, to_bytes(body, limit));
    let bytes = match read.await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return bad_request(&state, endpoint, BadRequest::Body(e.to_string())),
        Err(_) => return body_timeout(&state, endpoint),
    };
    let req = match read_request(&bytes) {
        Ok(r) => r,
        Err(error) => return bad_request(&state, endpoint, error),
    };
    let (decision, checked) = decide(&state, endpoint, &req).await;
    log(endpoint, &req, &decision);
    if decision.exempt.is_some() {
        state
            .metrics
            .exemption(req.kind.kind.as_ref(), req.namespace());
    }
    let response = respond(&req.uid, &decision);
    state.metrics.request(
        RequestLabels {
            endpoint: endpoint.as_str(),
            kind: &req.kind.kind,
            operation: operation(&req.operation).as_str(),
            decision: if checked {
                decision.outcome().as_str()
            } else {
                UNCHECKED
            },
        },
        started.elapsed(),
    );
    response
}

/// HTTP 408: the body did not arrive in time. The connection is closed
/// after the answer (HTTP/1.1 cannot skip an unread body).
fn body_timeout(state: &State, endpoint: Endpoint) -> Response {
    state.metrics.timed_out(Timeout::Body);
    let limit = state.limits.body_read_timeout;
    warn!(
        endpoint = endpoint.as_str(),
        timeout_ms = limit.as_millis() as u64,
        "request body not received in time"
    );
    let body = json!({"error": format!("the request body did not arrive within {limit:?}")});
    (StatusCode::REQUEST_TIMEOUT, Json(body)).into_response()
}

fn bad_request(state: &State, endpoint: Endpoint, error: BadRequest) -> Response {
    state.metrics.bad_request();
    warn!(%error, endpoint = endpoint.as_str(), "bad admission request");
    error.into_response()
}

// === the request ===

/// An `admission.k8s.io/v1` AdmissionReview, as far as the webhook reads
/// it: strings are borrowed from the body, the object is kept as its JSON
/// for the rules (which read only what they need of it), and the old
/// object, userInfo and options are checked for presence or shape and
/// skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review<'a> {
    #[serde(borrow)]
    api_version: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    request: Option<ReviewRequest<'a>>,
}

/// `request` of an AdmissionReview.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewRequest<'a> {
    #[serde(borrow)]
    pub uid: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: GroupVersionKind<'a>,
    /// Required, not read.
    #[allow(dead_code)]
    resource: IgnoredAny,
    #[serde(borrow, default)]
    pub name: Cow<'a, str>,
    #[serde(borrow, default)]
    pub namespace: Option<Cow<'a, str>>,
    pub operation: Operation,
    /// Required, not read.
    #[allow(dead_code)]
    user_info: IgnoredAny,
    #[serde(borrow, default)]
    pub object: Option<&'a RawValue>,
    #[serde(borrow, default)]
    old_object: Option<&'a RawValue>,
    #[serde(default)]
    pub dry_run: bool,
}

impl ReviewRequest<'_> {
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }
}

#[derive(Debug, Deserialize)]
pub struct GroupVersionKind<'a> {
    #[serde(borrow)]
    pub group: Cow<'a, str>,
    #[allow(dead_code)]
    #[serde(borrow)]
    version: Cow<'a, str>,
    #[serde(borrow)]
    pub kind: Cow<'a, str>,
}

/// The request of an AdmissionReview body, parsed in one pass without
/// building a JSON tree.
pub fn read_request(bytes: &[u8]) -> Result<ReviewRequest<'_>, BadRequest> {
    let review: Review<'_> = serde_json::from_slice(bytes)?;
    if review.api_version != ADMISSION_API_VERSION || review.kind != ADMISSION_REVIEW_KIND {
        return Err(BadRequest::Version {
            api_version: review.api_version.into_owned(),
            kind: review.kind.into_owned(),
        });
    }
    let req = review.request.ok_or(BadRequest::NoRequest)?;
    for o in [req.object, req.old_object].into_iter().flatten() {
        if !o.get().starts_with('{') {
            return Err(BadRequest::Json(serde::de::Error::custom(
                "request.object and request.oldObject must be JSON objects",
            )));
        }
    }
    Ok(req)
}

/// The request's operation as the shared rules name it (the same call
/// path as [`validate`] and [`mutate`]; public for the fuzz targets).
pub fn operation(op: &Operation) -> policy::Operation {
    match op {
        Operation::Create => policy::Operation::Create,
        Operation::Update => policy::Operation::Update,
        Operation::Delete => policy::Operation::Delete,
        Operation::Connect => policy::Operation::Connect,
    }
}

/// The decision label of requests allowed because the caches could not
/// be trusted.
const UNCHECKED: &str = "unchecked";

/// The decision, and whether the rules were applied (`false` before the
/// caches have listed once: the request is let through).
///
/// Stale caches (a watch failing for `--stale-after-seconds`) still
/// decide: what they last held is the best knowledge there is, and the API
/// server that sends the request is usually the one the watch lost. The
/// answer then carries a warning saying so.
async fn decide(state: &State, endpoint: Endpoint, req: &ReviewRequest<'_>) -> (Decision, bool) {
    let ns = req.namespace();
    let mut request = Request {
        endpoint,
        operation: operation(&req.operation),
        group: &req.kind.group,
        kind: &req.kind.kind,
        namespace: ns,
        name: &req.name,
        object: req.object,
        namespace_fallback: None,
    };
    if !policy::in_scope(&request, &state.config) {
        return (Decision::allow(), true);
    }
    let stale = match state.freshness() {
        Freshness::Fresh => None,
        Freshness::NotSynced => {
            let warning = "meshscope-webhook has not synced its caches yet; allowed without checks";
            return (Decision::allow_with_warning(warning), false);
        }
        Freshness::Stale(watch) => Some(watch),
        // Nothing in the caches describes the cluster, and a fix that
        // writes the resource would fail: allowed, and said why.
        Freshness::NotServed(watch) => {
            let warning = format!(
                "meshscope-webhook allowed this unchecked: the API server does not serve {}",
                crate::state::served_name(watch)
            );
            return (Decision::allow_with_warning(&warning), false);
        }
    };
    let snap = state.snapshot();
    let fallback = if !ns.is_empty() && snap.namespace(ns).is_none() {
        state.lookup_namespace(ns).await
    } else {
        None
    };
    request.namespace_fallback = fallback.as_ref();
    let mut d = policy::review(&request, &snap, &state.config);
    if let Some(watch) = stale {
        d.warnings.push(format!(
            "meshscope-webhook decided from caches that its {watch} watch has not refreshed lately (API server unreachable?)"
        ));
    }
    (d, true)
}

fn log(endpoint: Endpoint, req: &ReviewRequest<'_>, d: &Decision) {
    let ns = req.namespace();
    let kind = &req.kind.kind;
    let name = &req.name;
    let op = operation(&req.operation).as_str();
    let endpoint = endpoint.as_str();
    let uid = &req.uid;
    let dry_run = req.dry_run;
    match d.outcome() {
        Outcome::Denied => {
            let codes = d.codes().join(",");
            info!(%uid, endpoint, %kind, %ns, %name, op, dry_run, %codes, "denied")
        }
        Outcome::Patched => {
            let codes = d.codes().join(",");
            info!(%uid, endpoint, %kind, %ns, %name, op, dry_run, %codes, "patched")
        }
        Outcome::Exempt => info!(
            %uid, endpoint, %kind, %ns, %name, op, dry_run,
            reason = d.exempt.as_deref().unwrap_or_default(),
            "exempt"
        ),
        Outcome::Warned => {
            let codes = d.codes().join(",");
            info!(%uid, endpoint, %kind, %ns, %name, op, dry_run, %codes, warnings = d.warnings.len(), "allowed with warnings")
        }
        Outcome::Allowed => debug!(%uid, endpoint, %kind, %ns, %name, op, dry_run, "allowed"),
    }
}

// === the response ===

/// The AdmissionReview answering request `uid` with a decision, serialized
/// straight from the decision: the same JSON as kube's
/// `AdmissionResponse::from(&req)` followed by `deny`, `with_patch` and
/// the warnings and audit annotations (a test holds them equal).
pub fn respond(uid: &str, d: &Decision) -> Response {
    let patch = if d.allowed {
        d.patch.as_ref().and_then(|p| match serde_json::to_vec(p) {
            Ok(bytes) => Some(bytes),
            Err(error) => {
                warn!(%error, %uid, "cannot encode the patch; allowed unpatched");
                None
            }
        })
    } else {
        None
    };
    let codes = d.codes();
    let out = ReviewOut {
        api_version: ADMISSION_API_VERSION,
        kind: ADMISSION_REVIEW_KIND,
        response: ResponseOut {
            uid,
            allowed: d.allowed,
            status: if d.allowed {
                StatusOut::default()
            } else {
                StatusOut {
                    code: Some(403),
                    message: Some(d.message.as_deref().unwrap_or("denied by meshscope")),
                    reason: Some("Forbidden"),
                }
            },
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            audit_annotations: AuditAnnotations {
                codes: (!codes.is_empty()).then(|| Codes(&codes)),
                policy: d.policy.map(|p| p.as_str()),
                exempt: d.exempt.as_deref(),
            },
            warnings: (!d.warnings.is_empty()).then_some(d.warnings.as_slice()),
        },
    };
    match serde_json::to_vec(&out) {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        // Only a failing Serialize impl could get here; ours cannot fail.
        Err(error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": error.to_string()})),
        )
            .into_response(),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    uid: &'a str,
    allowed: bool,
    status: StatusOut<'a>,
    /// The JSON patch's bytes, as kube encodes them (an array of numbers).
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<Vec<u8>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "AuditAnnotations::is_empty")]
    audit_annotations: AuditAnnotations<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a [String]>,
}

/// `status`: empty when allowed.
#[derive(Default, Serialize)]
struct StatusOut<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
}

#[derive(Serialize)]
struct AuditAnnotations<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    codes: Option<Codes<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exempt: Option<&'a str>,
}

impl AuditAnnotations<'_> {
    fn is_empty(&self) -> bool {
        self.codes.is_none() && self.policy.is_none() && self.exempt.is_none()
    }
}

/// Finding codes as one comma-separated string.
struct Codes<'a>(&'a [&'static str]);

impl Serialize for Codes<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{}", self.0.join(",")))
    }
}

#[cfg(test)]
mod tests {
    use axum::body::to_bytes;
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{AddOperation, Patch, PatchOperation};
    use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
    use kube::core::DynamicObject;
    use meshscope_shared::admission::Policy;
    use meshscope_shared::audit::{Code, Finding, Severity};
    use serde_json::Value;

    use super::*;

    const REVIEW: &str = r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                    "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
                    "name": "web", "namespace": "shop", "operation": "CREATE", "userInfo": {},
                    "object": {"metadata": {"name": "web"}}, "oldObject": null}}"#;

    /// What kube's response types make of a decision: the reference.
    fn kube_response(d: &Decision) -> Value {
        let review: AdmissionReview<DynamicObject> = serde_json::from_str(REVIEW).unwrap();
        let req: AdmissionRequest<DynamicObject> = review.try_into().unwrap();
        let mut res = AdmissionResponse::from(&req);
        if !d.allowed {
            res = res.deny(d.message.as_deref().unwrap_or("denied by meshscope"));
            res.result.code = 403;
            res.result.reason = "Forbidden".into();
        } else if let Some(patch) = &d.patch {
            res = res.with_patch(patch.clone()).unwrap();
        }
        if !d.warnings.is_empty() {
            res.warnings = Some(d.warnings.clone());
        }
        let codes = d.codes();
        if !codes.is_empty() {
            res.audit_annotations
                .insert("codes".into(), codes.join(","));
        }
        if let Some(policy) = d.policy {
            res.audit_annotations
                .insert("policy".into(), policy.to_string());
        }
        if let Some(reason) = &d.exempt {
            res.audit_annotations
                .insert("exempt".into(), reason.clone());
        }
        serde_json::to_value(res.into_review()).unwrap()
    }

    async fn ours(d: &Decision) -> Value {
        let req = read_request(REVIEW.as_bytes()).unwrap();
        let res = respond(&req.uid, d);
        assert_eq!(res.headers()[header::CONTENT_TYPE], "application/json");
        serde_json::from_slice(&to_bytes(res.into_body(), usize::MAX).await.unwrap()).unwrap()
    }

    fn finding(code: Code) -> Finding {
        Finding {
            code,
            severity: Severity::Warning,
            kind: "Deployment".into(),
            namespace: "shop".into(),
            name: "web".into(),
            message: format!("{code} message"),
            exempt: None,
        }
    }

    #[tokio::test]
    async fn responses_are_the_json_kube_would_write() {
        let mut warned = Decision::allow_with_warning("MS0001: short");
        warned.policy = Some(Policy::Warn);
        warned.findings = vec![
            finding(Code::UnscopedWorkload),
            finding(Code::SidecarWithoutEgress),
        ];
        let mut denied = warned.clone();
        denied.allowed = false;
        denied.message = Some("MS0001: no scope".into());
        let mut denied_without_message = denied.clone();
        denied_without_message.message = None;
        let mut patched = warned.clone();
        patched.patch = Some(Patch(vec![PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["spec", "exportTo"]),
            value: serde_json::json!(["."]),
        })]));
        let mut exempt = Decision::allow();
        exempt.policy = Some(Policy::Enforce);
        exempt.exempt = Some("batch \"job\"".into());
        for d in [
            Decision::allow(),
            warned,
            denied,
            denied_without_message,
            patched,
            exempt,
        ] {
            assert_eq!(ours(&d).await, kube_response(&d), "{d:?}");
        }
    }

    #[test]
    fn the_request_is_read_without_its_old_object_and_user_info() {
        let req = read_request(REVIEW.as_bytes()).unwrap();
        assert_eq!(
            (&*req.uid, &*req.kind.kind, req.namespace(), &*req.name),
            ("u-1", "Deployment", "shop", "web")
        );
        assert_eq!(
            req.object.unwrap().get(),
            r#"{"metadata": {"name": "web"}}"#
        );
        // kube requires userInfo and resource; so do we.
        for field in ["userInfo", "resource"] {
            let mut v: Value = serde_json::from_str(REVIEW).unwrap();
            v["request"].as_object_mut().unwrap().remove(field);
            let body = v.to_string();
            assert!(read_request(body.as_bytes()).is_err(), "{field}");
            assert!(
                serde_json::from_str::<AdmissionReview<DynamicObject>>(&body).is_err(),
                "{field}"
            );
        }
        let not_an_object = REVIEW.replace(r#""oldObject": null"#, r#""oldObject": []"#);
        assert!(read_request(not_an_object.as_bytes()).is_err());
    }
}
