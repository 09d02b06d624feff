//! Listing: every list page by page (`--chunk-size` objects a page), each
//! page bounded by `--request-timeout`; a list whose continue token
//! expires mid-way (410 Gone) is listed again from the start, once. Typed
//! lists, dynamic ones (Istio kinds, as JSON objects), and names only
//! (metadata lists, for completion).

use std::fmt;
use std::future::Future;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, ObjectList};
use serde::de::DeserializeOwned;

use super::client::{resource_name, Live};
use super::failure::{where_, ApiFailure, FailureKind};

/// Which objects a list returns: kubectl's `--selector` (`-l`) and
/// `--field-selector`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Select<'a> {
    pub labels: Option<&'a str>,
    pub fields: Option<&'a str>,
}

impl<'a> Select<'a> {
    /// Every object.
    pub const ALL: Select<'static> = Select {
        labels: None,
        fields: None,
    };

    /// The objects with the label selector `labels` (`app=istiod`).
    pub fn labels(labels: &'a str) -> Self {
        Select {
            labels: Some(labels),
            fields: None,
        }
    }

    /// Those of them with the field selector `fields` too.
    pub fn fields(self, fields: &'a str) -> Self {
        Select {
            fields: Some(fields),
            ..self
        }
    }

    /// The parameters of one page.
    fn page(self, limit: u32, token: Option<&str>) -> ListParams {
        let mut lp = ListParams::default().limit(limit);
        if let Some(l) = self.labels {
            lp = lp.labels(l);
        }
        if let Some(f) = self.fields {
            lp = lp.fields(f);
        }
        if let Some(t) = token {
            lp = lp.continue_token(t);
        }
        lp
    }
}

/// The kind `K` as the API names it, for failures and dynamic lists.
pub fn resource_of<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

impl Live {
    /// The API of a namespaced kind in `ns` (every namespace when `None`).
    pub(super) fn api<K>(&self, ns: Option<&str>) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>,
    {
        match ns {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    /// The API of a kind known at run time, in `ns` (every namespace, or a
    /// cluster-scoped kind, when `None`).
    pub(super) fn dynamic_api(&self, ar: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
        match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, ar),
            None => Api::all_with(self.client.clone(), ar),
        }
    }

    /// Lists `ar` in `ns` through `fetch` (one call per page), page by
    /// page, each page within the timeout (as kubectl bounds each request:
    /// 20,000 pods are 40 pages, and a loaded API server may take longer
    /// than one timeout for all of them while answering each in time).
    ///
    /// A continue token the API server has compacted away (410 Gone on a
    /// later page) restarts the list from the start, once, and leaves a
    /// note: the pages read so far are of an older state and are dropped,
    /// never mixed with newer ones. A second expiry is an error.
    pub(super) async fn pages<T, F, Fut>(
        &self,
        ar: &ApiResource,
        ns: Option<&str>,
        select: Select<'_>,
        fetch: F,
    ) -> Result<Vec<T>, ApiFailure>
    where
        T: Clone,
        F: Fn(ListParams) -> Fut,
        Fut: Future<Output = kube::Result<ObjectList<T>>>,
    {
        let name = resource_name(ar);
        let all = async {
            let mut out = Vec::new();
            let mut token: Option<String> = None;
            let mut restarted = false;
            loop {
                let lp = select.page(self.page_size, token.as_deref());
                let fetched = self
                    .bounded("list", &name, ns, async { Ok(fetch(lp).await) })
                    .await?;
                let page = match fetched {
                    Ok(page) => page,
                    Err(kube::Error::Api(s)) if s.code == 410 && token.is_some() => {
                        if restarted {
                            return Err(self.expired_twice(ar, ns, &s.message, out.len()));
                        }
                        restarted = true;
                        self.notes.lock().unwrap_or_else(|e| e.into_inner()).push(format!(
                            "the list of {} {} expired after {} (410 Gone: the API server compacted the state the pages were read from); listed again from the start",
                            resource_name(ar),
                            where_(ns),
                            crate::output::plural(out.len(), "item", "items"),
                        ));
                        out.clear();
                        token = None;
                        continue;
                    }
                    Err(e) => return Err(self.limited(self.fail(e, "list", ar, ns))),
                };
                out.extend(page.items);
                match page.metadata.continue_ {
                    Some(t) if !t.is_empty() => token = Some(t),
                    _ => break,
                }
            }
            Ok(out)
        };
        all.await
    }

    /// A list that expired mid-way a second time, after `read` objects.
    fn expired_twice(
        &self,
        ar: &ApiResource,
        ns: Option<&str>,
        message: &str,
        read: usize,
    ) -> ApiFailure {
        ApiFailure {
            verb: "list",
            resource: resource_name(ar),
            namespace: ns.map(str::to_string),
            server: self.server.clone(),
            kind: FailureKind::Other(format!(
                "the list expired mid-way twice (410 Gone: {message}); the API server compacts faster than {} pages of {} can be read: retry with a larger --chunk-size",
                read.div_ceil(self.page_size as usize).max(1),
                self.page_size
            )),
        }
    }

    /// The objects of a namespaced kind in `ns` (all namespaces when
    /// `None`) that `select` picks, decoded straight into their typed form.
    pub async fn list<K>(&self, ns: Option<&str>, select: Select<'_>) -> Result<Vec<K>, ApiFailure>
    where
        K: kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + fmt::Debug,
    {
        let api = &self.api::<K>(ns);
        let fetch = move |lp: ListParams| async move { api.list(&lp).await };
        self.pages(&resource_of::<K>(), ns, select, fetch).await
    }

    /// [`Live::list`] in every namespace; for a caller RBAC lets list only
    /// the context's namespace, that namespace's, and its name.
    pub async fn list_everywhere_or_home<K>(
        &self,
        select: Select<'_>,
    ) -> Result<(Vec<K>, Option<String>), ApiFailure>
    where
        K: kube::Resource<DynamicType = (), Scope = NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + fmt::Debug,
    {
        match self.list(None, select).await {
            Err(f) if matches!(f.kind, FailureKind::Forbidden(_)) => {
                let home = self.default_namespace.clone();
                Ok((self.list(Some(&home), select).await?, Some(home)))
            }
            other => other.map(|all| (all, None)),
        }
    }

    /// The objects of `ar` (an Istio kind, say) in `ns` that `select`
    /// picks, as dynamic objects.
    pub async fn list_dynamic(
        &self,
        ar: &ApiResource,
        ns: Option<&str>,
        select: Select<'_>,
    ) -> Result<Vec<DynamicObject>, ApiFailure> {
        let api = &self.dynamic_api(ar, ns);
        let fetch = move |lp: ListParams| async move { api.list(&lp).await };
        self.pages(ar, ns, select, fetch).await
    }

    /// Every Namespace object.
    pub async fn namespaces(&self) -> Result<Vec<Namespace>, ApiFailure> {
        let api = &Api::<Namespace>::all(self.client.clone());
        let fetch = move |lp: ListParams| async move { api.list(&lp).await };
        self.pages(&resource_of::<Namespace>(), None, Select::ALL, fetch)
            .await
    }

    /// The names of the objects of `ar` in `ns` (or of a cluster-scoped
    /// kind when `None`), from metadata-only lists.
    pub async fn names(
        &self,
        ar: &ApiResource,
        ns: Option<&str>,
    ) -> Result<Vec<String>, ApiFailure> {
        let api = &self.dynamic_api(ar, ns);
        let fetch = move |lp: ListParams| async move { api.list_metadata(&lp).await };
        let items = self.pages(ar, ns, Select::ALL, fetch).await?;
        Ok(items.into_iter().filter_map(|o| o.metadata.name).collect())
    }

    /// Whether the API server answers and the credentials may list
    /// namespaces: one call (one namespace), with the usual one-line
    /// errors.
    pub async fn probe(&self) -> Result<(), ApiFailure> {
        let api = Api::<Namespace>::all(self.client.clone());
        let ar = resource_of::<Namespace>();
        self.bounded("list", "namespaces", None, async {
            match api.list(&ListParams::default().limit(1)).await {
                Ok(_) => Ok(()),
                Err(e) => Err(self.fail(e, "list", &ar, None)),
            }
        })
        .await
    }
}
