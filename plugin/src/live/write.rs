//! Sidecars, one by one: reading one, server-side applying one (or its
//! dry run), deleting one, and listing those with a label, for `apply`,
//! `diff` and `apply --prune`; and any object, read and server-side
//! applied, for `apply --exports`. Each call is bounded like every other.

use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::Value;

use super::client::{istio, resource_name, Live};
use super::failure::ApiFailure;
use super::list::Select;

/// What a server-side apply did.
#[derive(Debug)]
pub enum Patched {
    /// The object as the server now has it (or would, for a dry run).
    Object(Box<DynamicObject>),
    /// Another field manager owns fields the patch sets (409 Conflict),
    /// with the server's message: nothing was written.
    Conflict(String),
}

impl Live {
    /// The Sidecar `ns/name`, if there is one.
    pub async fn sidecar(&self, ns: &str, name: &str) -> Result<Option<DynamicObject>, ApiFailure> {
        self.get_object(&istio("Sidecar", "sidecars"), ns, name)
            .await
    }

    /// Server-side applies `body` as the Sidecar `ns/name`, with `params`
    /// (field manager, dry run, force).
    pub async fn apply_sidecar(
        &self,
        ns: &str,
        name: &str,
        body: &Value,
        params: &PatchParams,
    ) -> Result<Patched, ApiFailure> {
        self.apply_object(&istio("Sidecar", "sidecars"), ns, name, body, params)
            .await
    }

    /// The object `ns/name` of kind `ar`, if there is one.
    pub async fn get_object(
        &self,
        ar: &ApiResource,
        ns: &str,
        name: &str,
    ) -> Result<Option<DynamicObject>, ApiFailure> {
        let api = self.dynamic_api(ar, Some(ns));
        self.bounded("get", &resource_name(ar), Some(ns), async {
            api.get_opt(name)
                .await
                .map_err(|e| self.fail(e, "get", ar, Some(ns)))
        })
        .await
    }

    /// Server-side applies `body` as the object `ns/name` of kind `ar`,
    /// with `params` (field manager, dry run, force). A 409 is a conflict
    /// with another field manager (or a stale `resourceVersion`).
    pub async fn apply_object(
        &self,
        ar: &ApiResource,
        ns: &str,
        name: &str,
        body: &Value,
        params: &PatchParams,
    ) -> Result<Patched, ApiFailure> {
        let api = self.dynamic_api(ar, Some(ns));
        self.bounded("patch", &resource_name(ar), Some(ns), async {
            match api.patch(name, params, &Patch::Apply(body)).await {
                Ok(o) => Ok(Patched::Object(Box::new(o))),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Patched::Conflict(s.message)),
                Err(e) => Err(self.fail(e, "patch", ar, Some(ns))),
            }
        })
        .await
    }

    /// Deletes the Sidecar `ns/name`, with `params` (dry run).
    pub async fn delete_sidecar(
        &self,
        ns: &str,
        name: &str,
        params: &DeleteParams,
    ) -> Result<(), ApiFailure> {
        let ar = istio("Sidecar", "sidecars");
        let api = self.dynamic_api(&ar, Some(ns));
        self.bounded("delete", &resource_name(&ar), Some(ns), async {
            match api.delete(name, params).await {
                Ok(_) => Ok(()),
                Err(e) => Err(self.fail(e, "delete", &ar, Some(ns))),
            }
        })
        .await
    }

    /// The Sidecars in `ns` (all namespaces when `None`) with the label
    /// selector `labels`.
    pub async fn sidecars(
        &self,
        ns: Option<&str>,
        labels: &str,
    ) -> Result<Vec<DynamicObject>, ApiFailure> {
        self.list_dynamic(&istio("Sidecar", "sidecars"), ns, Select::labels(labels))
            .await
    }
}
