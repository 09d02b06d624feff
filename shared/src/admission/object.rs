//! The admitted object as the rules read it ([`ObjectView`]), borrowed
//! from the request body, and its `meshscope.io/exempt` annotation.

use std::borrow::Cow;
use std::fmt;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::inject::is_proxy;
use crate::labels::Labels;
use crate::snapshot::WorkloadKind;

pub use crate::exempt::{Exemption, EXEMPT_ANNOTATION};

/// The parts of an admitted object that the rules read, borrowed from the
/// request body. Every other field (most of a workload: containers' images,
/// env, probes, volumes...) is skipped without being decoded. The object
/// comes from the API server, which has already decoded and validated it
/// against its schema.
///
/// One view fits every kind the rules cover: a Pod's own labels and spec,
/// a controller's `spec.template`, a CronJob's
/// `spec.jobTemplate.spec.template`. ServiceEntries and Sidecars are
/// decoded in full by their rules.
#[derive(Debug)]
pub struct ObjectView<'a> {
    pub metadata: MetaView<'a>,
    spec: SpecView<'a>,
}

// One per request, on the stack: boxing the large variant would only add
// an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum SpecView<'a> {
    /// A workload's, read with the object.
    Workload(Option<WorkloadSpecView<'a>>),
    /// Any other object's, or a workload's whose one-pass read failed:
    /// decoded by kind when a rule gets to it, which then reports why it
    /// cannot be read.
    Json(Option<&'a RawValue>),
}

#[derive(Deserialize)]
struct WorkloadObjectView<'a> {
    #[serde(borrow, default)]
    metadata: MetaView<'a>,
    #[serde(borrow, default)]
    spec: Option<WorkloadSpecView<'a>>,
}

#[derive(Deserialize)]
struct JsonObjectView<'a> {
    #[serde(borrow, default)]
    metadata: MetaView<'a>,
    #[serde(borrow, default)]
    spec: Option<&'a RawValue>,
}

/// The `spec` of any workload kind: a Pod's containers and host network,
/// a controller's `template`, a CronJob's `jobTemplate`. Each kind has
/// only its own of these fields.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WorkloadSpecView<'a> {
    #[serde(borrow, default)]
    containers: Option<Vec<NamedView<'a>>>,
    #[serde(borrow, default)]
    init_containers: Option<Vec<NamedView<'a>>>,
    #[serde(default)]
    host_network: Option<bool>,
    #[serde(borrow, default)]
    template: Option<TemplateView<'a>>,
    #[serde(borrow, default)]
    job_template: Option<JobTemplateView<'a>>,
}

/// `metadata`, as far as the rules read it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetaView<'a> {
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub generate_name: Option<Cow<'a, str>>,
    /// Set (not null) on an object being deleted.
    #[serde(default)]
    deletion_timestamp: Option<IgnoredAny>,
    #[serde(borrow, default)]
    owner_references: Option<Vec<OwnerView<'a>>>,
    /// Kept as JSON: the exemption reads one key of the annotations, and
    /// only a bare Pod needs its labels and annotations decoded (they are
    /// its pod template's).
    #[serde(borrow, default)]
    labels: Option<&'a RawValue>,
    #[serde(borrow, default)]
    annotations: Option<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
struct OwnerView<'a> {
    #[serde(default)]
    controller: Option<bool>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
}

/// The value of [`EXEMPT_ANNOTATION`] in an annotations map, if any; the
/// other annotations are skipped.
struct ExemptAnnotation(Option<Value>);

impl<'de> Deserialize<'de> for ExemptAnnotation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Find;
        impl<'de> Visitor<'de> for Find {
            type Value = ExemptAnnotation;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of annotations")
            }
            fn visit_unit<E>(self) -> Result<ExemptAnnotation, E> {
                Ok(ExemptAnnotation(None))
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<ExemptAnnotation, A::Error> {
                let mut found = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == EXEMPT_ANNOTATION {
                        found = Some(map.next_value::<Value>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(ExemptAnnotation(found))
            }
        }
        d.deserialize_any(Find)
    }
}

/// What injection reads of a pod template.
pub(super) struct PodTemplate {
    pub(super) labels: Labels,
    pub(super) annotations: Labels,
    pub(super) has_proxy: bool,
    /// The gateway type the proxy container's arguments name.
    pub(super) proxy_gateway: Option<crate::inject::Gateway>,
    pub(super) host_network: bool,
}

/// A pod template: `spec.template` of a controller, the Pod itself for a
/// bare Pod.
#[derive(Debug, Default, Deserialize)]
struct TemplateView<'a> {
    #[serde(default)]
    metadata: Option<TemplateMetaView>,
    #[serde(borrow, default)]
    spec: Option<PodSpecView<'a>>,
}

#[derive(Debug, Default, Deserialize)]
struct TemplateMetaView {
    #[serde(default)]
    labels: Option<Labels>,
    #[serde(default)]
    annotations: Option<Labels>,
}

/// What injection looks at in a pod spec.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpecView<'a> {
    #[serde(borrow, default)]
    containers: Option<Vec<NamedView<'a>>>,
    #[serde(borrow, default)]
    init_containers: Option<Vec<NamedView<'a>>>,
    #[serde(default)]
    host_network: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NamedView<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    /// `Always` on an init container that is a native sidecar.
    #[serde(borrow, default)]
    restart_policy: Option<Cow<'a, str>>,
    /// Read for the proxy container's type (`proxy router`).
    #[serde(default)]
    args: Option<Vec<String>>,
}

/// `spec` of a Deployment, StatefulSet, DaemonSet, ReplicaSet or Job.
#[derive(Debug, Deserialize)]
struct ControllerSpecView<'a> {
    #[serde(borrow, default)]
    template: Option<TemplateView<'a>>,
}

/// `spec` of a CronJob: `jobTemplate.spec.template`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CronJobSpecView<'a> {
    #[serde(borrow, default)]
    job_template: Option<JobTemplateView<'a>>,
}

#[derive(Debug, Deserialize)]
struct JobTemplateView<'a> {
    #[serde(borrow, default)]
    spec: Option<ControllerSpecView<'a>>,
}

impl<'a> ObjectView<'a> {
    /// Reads the view from the object's JSON; for a workload (`workload`
    /// true) with its pod template, in the same pass.
    pub fn read(object: &'a RawValue, workload: bool) -> Result<Self, serde_json::Error> {
        if workload {
            // Fails only on a field that is not what its schema says; the
            // second read below then leaves the spec for the rule to report.
            if let Ok(v) = serde_json::from_str::<WorkloadObjectView<'a>>(object.get()) {
                return Ok(ObjectView {
                    metadata: v.metadata,
                    spec: SpecView::Workload(v.spec),
                });
            }
        }
        let v: JsonObjectView<'a> = serde_json::from_str(object.get())?;
        Ok(ObjectView {
            metadata: v.metadata,
            spec: SpecView::Json(v.spec),
        })
    }

    /// Whether the object is being deleted.
    pub fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// `meshscope.io/exempt` on the object.
    pub fn exemption(&self) -> Exemption {
        let found = self
            .metadata
            .annotations
            .and_then(|a| serde_json::from_str::<ExemptAnnotation>(a.get()).ok())
            .and_then(|e| e.0);
        match found {
            None => Exemption::None,
            Some(v) => match v.as_str() {
                Some(r) => Exemption::of_value(Some(r)),
                None => Exemption::NoReason,
            },
        }
    }

    /// The kind of the controller that owns the object, if one does.
    pub(super) fn controller(&self) -> Option<Option<&str>> {
        let owners = self.metadata.owner_references.as_deref()?;
        let r = owners.iter().find(|r| r.controller == Some(true))?;
        Some(r.kind.as_deref())
    }

    /// The pod template of a workload object (for a Pod, the pod itself)
    /// as injection reads it, or `None` when it has none.
    pub(super) fn pod_template(
        self,
        kind: &WorkloadKind,
    ) -> Result<Option<PodTemplate>, serde_json::Error> {
        let Some(template) = self.template_view(kind)? else {
            return Ok(None);
        };
        let meta = template.metadata.unwrap_or_default();
        let spec = template.spec.unwrap_or_default();
        let proxy = |init: bool| {
            move |c: &NamedView<'_>| {
                let name = c.name.as_deref().unwrap_or_default();
                is_proxy(name, init, c.restart_policy.as_deref())
            }
        };
        let found = (spec.containers.iter().flatten().find(|c| proxy(false)(c))).or_else(|| {
            spec.init_containers
                .iter()
                .flatten()
                .find(|c| proxy(true)(c))
        });
        let proxy_gateway = found
            .and_then(|c| c.args.as_deref())
            .and_then(crate::inject::Gateway::of_args);
        Ok(Some(PodTemplate {
            labels: meta.labels.unwrap_or_default(),
            annotations: meta.annotations.unwrap_or_default(),
            has_proxy: found.is_some(),
            proxy_gateway,
            host_network: spec.host_network.unwrap_or(false),
        }))
    }

    /// The view of that template.
    fn template_view(
        self,
        kind: &WorkloadKind,
    ) -> Result<Option<TemplateView<'a>>, serde_json::Error> {
        let spec = match self.spec {
            SpecView::Workload(spec) => spec,
            SpecView::Json(None) => None,
            SpecView::Json(Some(raw)) => match kind {
                WorkloadKind::Pod => serde_json::from_str::<Option<PodSpecView<'a>>>(raw.get())?
                    .map(PodSpecView::into_workload_spec),
                WorkloadKind::CronJob => {
                    serde_json::from_str::<Option<CronJobSpecView<'a>>>(raw.get())?
                        .map(CronJobSpecView::into_workload_spec)
                }
                _ => serde_json::from_str::<Option<ControllerSpecView<'a>>>(raw.get())?
                    .map(ControllerSpecView::into_workload_spec),
            },
        };
        match kind {
            WorkloadKind::Pod => {
                let labels = decode_labels(self.metadata.labels)?;
                let annotations = decode_labels(self.metadata.annotations)?;
                Ok(Some(TemplateView {
                    metadata: Some(TemplateMetaView {
                        labels,
                        annotations,
                    }),
                    spec: spec.map(|s| PodSpecView {
                        containers: s.containers,
                        init_containers: s.init_containers,
                        host_network: s.host_network,
                    }),
                }))
            }
            WorkloadKind::CronJob => Ok(spec
                .and_then(|s| s.job_template)
                .and_then(|j| j.spec)
                .and_then(|s| s.template)),
            _ => Ok(spec.and_then(|s| s.template)),
        }
    }
}

fn decode_labels(raw: Option<&RawValue>) -> Result<Option<Labels>, serde_json::Error> {
    match raw {
        Some(raw) => serde_json::from_str(raw.get()),
        None => Ok(None),
    }
}

impl<'a> PodSpecView<'a> {
    fn into_workload_spec(self) -> WorkloadSpecView<'a> {
        WorkloadSpecView {
            containers: self.containers,
            init_containers: self.init_containers,
            host_network: self.host_network,
            template: None,
            job_template: None,
        }
    }
}

impl<'a> ControllerSpecView<'a> {
    fn into_workload_spec(self) -> WorkloadSpecView<'a> {
        WorkloadSpecView {
            containers: None,
            init_containers: None,
            host_network: None,
            template: self.template,
            job_template: None,
        }
    }
}

impl<'a> CronJobSpecView<'a> {
    fn into_workload_spec(self) -> WorkloadSpecView<'a> {
        WorkloadSpecView {
            containers: None,
            init_containers: None,
            host_network: None,
            template: None,
            job_template: self.job_template,
        }
    }
}
