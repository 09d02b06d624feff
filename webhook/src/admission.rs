//! HTTP ⇄ AdmissionReview. The only place that turns a
//! `meshscope_shared::admission::Decision` into an `AdmissionResponse`.
//!
//! A body that is not an `admission.k8s.io/v1` AdmissionReview with a
//! request (bad JSON, wrong version, too large) gets HTTP 400 with a JSON
//! error; the API server then applies the configuration's failurePolicy
//! (`Ignore`). Everything readable gets HTTP 200 with a review that echoes
//! the request's uid.

use std::sync::Arc;
use std::time::Instant;

use axum::body::{to_bytes, Body};
use axum::extract::State as Extract;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::DynamicObject;
use meshscope_shared::admission::{self as policy, Decision, Endpoint, Outcome, Request};
use serde_json::{json, Value};
use thiserror::Error;
use tracing::{debug, info, warn};

use crate::metrics::RequestLabels;
use crate::state::{Freshness, State};

/// The largest body read. The API server caps objects at 3 MiB (etcd's
/// limit is 1.5 MiB); an AdmissionReview of an UPDATE carries two.
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

pub const ADMISSION_API_VERSION: &str = "admission.k8s.io/v1";

#[derive(Debug, Error)]
pub enum BadRequest {
    #[error("cannot read the request body (larger than {MAX_BODY_BYTES} bytes?): {0}")]
    Body(String),
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

pub async fn validate(Extract(state): Extract<Arc<State>>, body: Body) -> Response {
    admit(state, Endpoint::Validate, body).await
}

pub async fn mutate(Extract(state): Extract<Arc<State>>, body: Body) -> Response {
    admit(state, Endpoint::Mutate, body).await
}

async fn admit(state: Arc<State>, endpoint: Endpoint, body: Body) -> Response {
    let started = Instant::now();
    let (req, object) = match read_request(body).await {
        Ok(r) => r,
        Err(error) => {
            state.metrics.bad_request();
            warn!(%error, endpoint = endpoint.as_str(), "bad admission request");
            return error.into_response();
        }
    };
    let (decision, checked) = decide(&state, endpoint, &req, object.as_ref()).await;
    log(endpoint, &req, &decision);
    if decision.exempt.is_some() {
        state
            .metrics
            .exemption(&req.kind.kind, req.namespace.as_deref().unwrap_or_default());
    }
    let response = respond(&req, &decision);
    state.metrics.request(
        RequestLabels {
            endpoint: endpoint.as_str(),
            kind: req.kind.kind.clone(),
            operation: operation(&req.operation).as_str().to_string(),
            decision: if checked {
                decision.outcome().as_str()
            } else {
                UNCHECKED
            },
        },
        started.elapsed(),
    );
    Json(response.into_review()).into_response()
}

/// The request, and its object as the JSON the rules read.
///
/// The body is parsed once into a JSON tree. The object (most of the body)
/// is taken out as it is and the old object dropped (no rule reads it);
/// only the small rest is typed. Typing the object as a `DynamicObject`
/// (buffered by its flattened field) and re-encoding it into JSON for the
/// rules cost more than the decision itself.
async fn read_request(
    body: Body,
) -> Result<(AdmissionRequest<DynamicObject>, Option<Value>), BadRequest> {
    let bytes = to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| BadRequest::Body(e.to_string()))?;
    let mut review: Value = serde_json::from_slice(&bytes)?;
    let mut take = |pointer: &str| {
        review
            .pointer_mut(pointer)
            .map(Value::take)
            .filter(|v| !v.is_null())
    };
    let object = take("/request/object");
    let old_object = take("/request/oldObject");
    for o in [&object, &old_object].into_iter().flatten() {
        if !o.is_object() {
            return Err(BadRequest::Json(serde::de::Error::custom(
                "request.object and request.oldObject must be JSON objects",
            )));
        }
    }
    drop(old_object);
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(review)?;
    if review.types.api_version != ADMISSION_API_VERSION || review.types.kind != "AdmissionReview" {
        return Err(BadRequest::Version {
            api_version: review.types.api_version,
            kind: review.types.kind,
        });
    }
    let req = review.try_into().map_err(|_| BadRequest::NoRequest)?;
    Ok((req, object))
}

fn operation(op: &Operation) -> policy::Operation {
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

/// The decision, and whether the rules were applied (`false` when the
/// caches could not be trusted and the request was let through).
async fn decide(
    state: &State,
    endpoint: Endpoint,
    req: &AdmissionRequest<DynamicObject>,
    object: Option<&Value>,
) -> (Decision, bool) {
    let ns = req.namespace.as_deref().unwrap_or_default();
    let mut request = Request {
        endpoint,
        operation: operation(&req.operation),
        group: &req.kind.group,
        kind: &req.kind.kind,
        namespace: ns,
        name: &req.name,
        object,
        namespace_fallback: None,
    };
    if !policy::in_scope(&request, &state.config) {
        return (Decision::allow(), true);
    }
    match state.freshness() {
        Freshness::Fresh => {}
        Freshness::NotSynced => {
            let warning = "meshscope-webhook has not synced its caches yet; allowed without checks";
            return (Decision::allow_with_warning(warning), false);
        }
        Freshness::Stale(watch) => {
            let warning = format!(
                "meshscope-webhook's {watch} cache is stale (API server unreachable?); allowed without checks"
            );
            return (Decision::allow_with_warning(&warning), false);
        }
    }
    let snap = state.snapshot();
    let fallback = if !ns.is_empty() && snap.namespace(ns).is_none() {
        state.lookup_namespace(ns).await
    } else {
        None
    };
    request.namespace_fallback = fallback.as_ref();
    (policy::review(&request, &snap, &state.config), true)
}

fn log(endpoint: Endpoint, req: &AdmissionRequest<DynamicObject>, d: &Decision) {
    let ns = req.namespace.as_deref().unwrap_or_default();
    let kind = &req.kind.kind;
    let name = &req.name;
    let op = operation(&req.operation).as_str();
    let codes = d.codes().join(",");
    let endpoint = endpoint.as_str();
    let uid = &req.uid;
    let dry_run = req.dry_run;
    match d.outcome() {
        Outcome::Denied => info!(%uid, endpoint, %kind, %ns, %name, op, dry_run, %codes, "denied"),
        Outcome::Patched => {
            info!(%uid, endpoint, %kind, %ns, %name, op, dry_run, %codes, "patched")
        }
        Outcome::Exempt => info!(
            %uid, endpoint, %kind, %ns, %name, op, dry_run,
            reason = d.exempt.as_deref().unwrap_or_default(),
            "exempt"
        ),
        Outcome::Warned => {
            info!(%uid, endpoint, %kind, %ns, %name, op, dry_run, %codes, warnings = d.warnings.len(), "allowed with warnings")
        }
        Outcome::Allowed => debug!(%uid, endpoint, %kind, %ns, %name, op, dry_run, "allowed"),
    }
}

/// The response for a decision: `from(&req)` echoes uid and version, then
/// deny, patch and warnings are added.
pub fn respond(req: &AdmissionRequest<DynamicObject>, d: &Decision) -> AdmissionResponse {
    let mut res = AdmissionResponse::from(req);
    if !d.allowed {
        res = res.deny(d.message.as_deref().unwrap_or("denied by meshscope"));
        res.result.code = 403;
        res.result.reason = "Forbidden".into();
    } else if let Some(patch) = &d.patch {
        match res.clone().with_patch(patch.clone()) {
            Ok(patched) => res = patched,
            Err(error) => {
                warn!(%error, uid = %req.uid, "cannot encode the patch; allowed unpatched")
            }
        }
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
    res
}
