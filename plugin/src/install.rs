//! Installing `meshscope-webhook`: what `kubectl meshscope webhook
//! manifests` prints.
//!
//! It renders the kustomize base in `deploy/base` (embedded
//! at build time, so there is one source of truth) as plain multi-document
//! YAML, with a freshly generated CA and serving certificate: a
//! `kubernetes.io/tls` Secret for the Deployment and the CA as `caBundle`
//! of the webhook configurations. `kubectl meshscope webhook manifests |
//! kubectl apply -f -` installs the webhook without cert-manager.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use meshscope_shared::admission::Policy;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use serde::Deserialize;
use serde_yaml::Value as Yaml;

/// What `webhook manifests` renders: the flags, checked (see
/// `crate::request::webhook`).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespace to install the webhook into.
    pub namespace: String,
    /// The meshscope-webhook image.
    pub image: String,
    /// Policy of namespaces without a meshscope.io/policy label.
    pub default_policy: Policy,
    /// Set `exportTo: ["."]` on DNS ServiceEntries without exportTo.
    pub mutate_serviceentry_exportto: bool,
    /// Istio's root namespace.
    pub istio_namespace: String,
    /// Days the generated CA and serving certificate are valid.
    pub validity_days: u32,
}

pub const DEFAULT_IMAGE: &str = concat!(
    "ghcr.io/meshscope/meshscope-webhook:",
    env!("CARGO_PKG_VERSION")
);
/// The names the base uses, replaced when rendering.
pub const BASE_NAMESPACE: &str = "meshscope-system";
pub const BASE_ISTIO_NAMESPACE: &str = "istio-system";
pub const SERVICE_NAME: &str = "meshscope-webhook";
pub const TLS_SECRET: &str = "meshscope-webhook-tls";

/// deploy/base, in the order of its kustomization.yaml (a test checks).
pub const BASE: &[(&str, &str)] = &[
    (
        "namespace.yaml",
        include_str!("../../deploy/base/namespace.yaml"),
    ),
    (
        "serviceaccount.yaml",
        include_str!("../../deploy/base/serviceaccount.yaml"),
    ),
    ("rbac.yaml", include_str!("../../deploy/base/rbac.yaml")),
    (
        "service.yaml",
        include_str!("../../deploy/base/service.yaml"),
    ),
    (
        "deployment.yaml",
        include_str!("../../deploy/base/deployment.yaml"),
    ),
    ("pdb.yaml", include_str!("../../deploy/base/pdb.yaml")),
    (
        "webhooks.yaml",
        include_str!("../../deploy/base/webhooks.yaml"),
    ),
];
pub const KUSTOMIZATION: &str = include_str!("../../deploy/base/kustomization.yaml");

/// A namespace name the API server accepts (an RFC 1123 label).
pub fn valid_namespace(ns: &str) -> bool {
    !ns.is_empty()
        && ns.len() <= 63
        && ns
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !ns.starts_with('-')
        && !ns.ends_with('-')
}

/// The DNS names the API server uses for the webhook Service.
pub fn service_names(namespace: &str) -> Vec<String> {
    vec![
        format!("{SERVICE_NAME}.{namespace}.svc"),
        format!("{SERVICE_NAME}.{namespace}.svc.cluster.local"),
    ]
}

// === certificates ===

/// A CA and a serving certificate it signed, in PEM.
#[derive(Clone, Debug)]
pub struct Pki {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A new CA and a serving certificate for `names` (DNS names or IP
/// addresses), both valid from an hour ago for `days` days.
pub fn generate_pki(names: &[String], days: u32) -> Result<Pki> {
    let now = SystemTime::now();
    let (y, m, d) = civil_date(now - Duration::from_secs(3600));
    let not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil_date(now + Duration::from_secs(u64::from(days) * 86_400));
    let not_after = rcgen::date_time_ymd(y, m, d);

    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "meshscope-webhook-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = not_before;
    ca_params.not_after = not_after;
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)
        .context("cannot create the CA certificate")?;

    let mut params = CertificateParams::new(names.to_vec())
        .with_context(|| format!("invalid certificate names {names:?}"))?;
    let cn = names.first().map(String::as_str).unwrap_or(SERVICE_NAME);
    params.distinguished_name.push(DnType::CommonName, cn);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = not_before;
    params.not_after = not_after;
    let key = KeyPair::generate()?;
    let cert = params
        .signed_by(&key, &ca)
        .context("cannot sign the serving certificate")?;
    Ok(Pki {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// The calendar date (UTC, year-month-day) of a time, by Howard Hinnant's
/// civil-from-days.
fn civil_date(t: SystemTime) -> (i32, u8, u8) {
    let days = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() / 86_400)
        .unwrap_or(0) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
    (year, month, day)
}

// === rendering ===

/// The base's objects, adapted to the flags, with the Secret and the
/// caBundle filled in. YAML values keep the base's field order.
pub fn render(m: &Settings, pki: &Pki) -> Result<Vec<Yaml>> {
    let mut docs = Vec::new();
    for (file, text) in BASE {
        for doc in serde_yaml::Deserializer::from_str(text) {
            let v = Yaml::deserialize(doc)
                .with_context(|| format!("deploy/base/{file} is not valid YAML"))?;
            if !v.is_null() {
                docs.push(v);
            }
        }
    }
    let ca_bundle = serde_yaml::to_value(ByteString(pki.ca_pem.clone().into_bytes()))?;
    for doc in docs.iter_mut() {
        rename_namespaces(doc, &m.namespace, &m.istio_namespace);
        match doc["kind"].as_str().unwrap_or_default() {
            "Deployment" => configure_deployment(doc, m)?,
            "ValidatingWebhookConfiguration" | "MutatingWebhookConfiguration" => {
                let hooks = doc.get_mut("webhooks").and_then(Yaml::as_sequence_mut);
                for hook in hooks.into_iter().flatten() {
                    if let Some(cc) = hook.get_mut("clientConfig").and_then(Yaml::as_mapping_mut) {
                        cc.insert("caBundle".into(), ca_bundle.clone());
                    }
                }
            }
            _ => {}
        }
    }
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(TLS_SECRET.into()),
            namespace: Some(m.namespace.clone()),
            labels: Some(
                [
                    (
                        "app.kubernetes.io/name".to_string(),
                        SERVICE_NAME.to_string(),
                    ),
                    (
                        "app.kubernetes.io/part-of".to_string(),
                        "meshscope".to_string(),
                    ),
                ]
                .into(),
            ),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            [
                ("tls.crt", &pki.cert_pem),
                ("tls.key", &pki.key_pem),
                ("ca.crt", &pki.ca_pem),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
            .collect(),
        ),
        ..Default::default()
    };
    // k8s-openapi writes apiVersion and kind first.
    let secret = serde_yaml::to_value(&secret)?;
    // Right after the Namespace, before anything that mounts it.
    let at = docs
        .iter()
        .position(|d| d["kind"].as_str() != Some("Namespace"))
        .unwrap_or(docs.len());
    docs.insert(at, secret);
    Ok(docs)
}

/// Every mention of the base's namespaces: object namespaces, the
/// Namespace itself, the binding's subject, the webhook Service reference
/// and the namespaceSelectors. Only values change; keys are label names.
fn rename_namespaces(v: &mut Yaml, namespace: &str, istio: &str) {
    match v {
        Yaml::String(s) if s == BASE_NAMESPACE => *s = namespace.to_string(),
        Yaml::String(s) if s == BASE_ISTIO_NAMESPACE => *s = istio.to_string(),
        Yaml::Sequence(a) => a
            .iter_mut()
            .for_each(|x| rename_namespaces(x, namespace, istio)),
        Yaml::Mapping(o) => o
            .iter_mut()
            .for_each(|(_, x)| rename_namespaces(x, namespace, istio)),
        _ => {}
    }
}

fn configure_deployment(doc: &mut Yaml, m: &Settings) -> Result<()> {
    let container = doc
        .get_mut("spec")
        .and_then(|s| s.get_mut("template"))
        .and_then(|t| t.get_mut("spec"))
        .and_then(|s| s.get_mut("containers"))
        .and_then(|c| c.get_mut(0))
        .and_then(Yaml::as_mapping_mut)
        .context("deploy/base/deployment.yaml has no container")?;
    container.insert("image".into(), m.image.clone().into());
    let settings = [
        ("MESHSCOPE_DEFAULT_POLICY", m.default_policy.to_string()),
        (
            "MESHSCOPE_MUTATE_SERVICEENTRY_EXPORTTO",
            m.mutate_serviceentry_exportto.to_string(),
        ),
        ("MESHSCOPE_ISTIO_NAMESPACE", m.istio_namespace.clone()),
    ];
    let env = container
        .get_mut("env")
        .and_then(Yaml::as_sequence_mut)
        .context("deploy/base/deployment.yaml: the container has no env")?;
    for (name, value) in settings {
        match env
            .iter_mut()
            .filter_map(Yaml::as_mapping_mut)
            .find(|e| e.get("name").and_then(Yaml::as_str) == Some(name))
        {
            Some(e) => {
                e.insert("value".into(), value.into());
            }
            None => {
                let mut e = serde_yaml::Mapping::new();
                e.insert("name".into(), name.into());
                e.insert("value".into(), value.into());
                env.push(Yaml::Mapping(e));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    /// The flags' defaults.
    fn defaults() -> Settings {
        Settings {
            namespace: BASE_NAMESPACE.into(),
            image: DEFAULT_IMAGE.into(),
            default_policy: Policy::Warn,
            mutate_serviceentry_exportto: false,
            istio_namespace: BASE_ISTIO_NAMESPACE.into(),
            validity_days: 365,
        }
    }

    fn rendered(m: Settings) -> (Vec<Value>, Pki) {
        let pki = generate_pki(&service_names(&m.namespace), m.validity_days).unwrap();
        let docs = render(&m, &pki).unwrap();
        let docs = docs
            .iter()
            .map(|d| serde_json::to_value(d).unwrap())
            .collect();
        (docs, pki)
    }

    fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
    }

    #[test]
    fn the_embedded_base_is_the_kustomization() {
        let k: serde_yaml::Value = serde_yaml::from_str(KUSTOMIZATION).unwrap();
        let resources: Vec<&str> = k["resources"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        let embedded: Vec<&str> = BASE.iter().map(|(n, _)| *n).collect();
        assert_eq!(resources, embedded);
    }

    #[test]
    fn the_install_has_every_base_object_plus_the_tls_secret() {
        let (docs, pki) = rendered(defaults());
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "Secret",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Service",
                "Deployment",
                "PodDisruptionBudget",
                "ValidatingWebhookConfiguration",
                "MutatingWebhookConfiguration"
            ]
        );
        let secret = find(&docs, "Secret");
        assert_eq!(secret["type"], "kubernetes.io/tls");
        assert_eq!(secret["metadata"]["name"], TLS_SECRET);
        let data: std::collections::BTreeMap<String, ByteString> =
            serde_json::from_value(secret["data"].clone()).unwrap();
        assert_eq!(data["tls.crt"].0, pki.cert_pem.as_bytes());
        assert_eq!(data["ca.crt"].0, pki.ca_pem.as_bytes());
        assert!(String::from_utf8_lossy(&data["tls.key"].0).contains("PRIVATE KEY"));
        for kind in [
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
        ] {
            for hook in find(&docs, kind)["webhooks"].as_array().unwrap() {
                let ca: ByteString =
                    serde_json::from_value(hook["clientConfig"]["caBundle"].clone()).unwrap();
                assert_eq!(ca.0, pki.ca_pem.as_bytes(), "{kind}");
            }
        }
    }

    #[test]
    fn settings_rename_the_namespace_and_set_image_and_policy() {
        let (docs, _) = rendered(Settings {
            namespace: "mesh-tools".into(),
            image: "registry.local/msw:dev".into(),
            default_policy: Policy::Enforce,
            mutate_serviceentry_exportto: true,
            istio_namespace: "mesh-root".into(),
            validity_days: 365,
        });
        let text = serde_json::to_string(&docs).unwrap();
        assert!(!text.contains("meshscope-system"), "{text}");
        assert!(!text.contains("istio-system"), "{text}");
        assert_eq!(find(&docs, "Namespace")["metadata"]["name"], "mesh-tools");
        assert_eq!(
            find(&docs, "ClusterRoleBinding")["subjects"][0]["namespace"],
            "mesh-tools"
        );
        let hook = &find(&docs, "ValidatingWebhookConfiguration")["webhooks"][0];
        assert_eq!(hook["clientConfig"]["service"]["namespace"], "mesh-tools");
        let excluded = hook["namespaceSelector"]["matchExpressions"][0]["values"]
            .as_array()
            .unwrap();
        assert!(excluded.contains(&"mesh-tools".into()) && excluded.contains(&"mesh-root".into()));
        let c = &find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], "registry.local/msw:dev");
        let env = |name: &str| {
            c["env"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == name)
                .unwrap()["value"]
                .clone()
        };
        assert_eq!(env("MESHSCOPE_DEFAULT_POLICY"), "enforce");
        assert_eq!(env("MESHSCOPE_MUTATE_SERVICEENTRY_EXPORTTO"), "true");
        assert_eq!(env("MESHSCOPE_ISTIO_NAMESPACE"), "mesh-root");
    }

    #[test]
    fn the_serving_certificate_names_the_service() {
        assert_eq!(
            service_names("mesh-tools"),
            [
                "meshscope-webhook.mesh-tools.svc",
                "meshscope-webhook.mesh-tools.svc.cluster.local"
            ]
        );
        let pki = generate_pki(&service_names("x"), 30).unwrap();
        assert!(pki.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(pki.cert_pem, pki.ca_pem);
    }

    #[test]
    fn dates_are_converted_to_the_calendar() {
        let d = |secs: u64| civil_date(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(d(0), (1970, 1, 1));
        assert_eq!(d(951_782_400), (2000, 2, 29));
        assert_eq!(d(1_767_225_600), (2026, 1, 1));
        assert_eq!(d(4_107_542_399), (2100, 2, 28));
    }

    #[test]
    fn namespace_names_are_rfc_1123_labels() {
        for ok in ["a", "mesh-tools", "x1", &"a".repeat(63)] {
            assert!(valid_namespace(ok), "{ok}");
        }
        for bad in ["", "Bad_NS", "x-", "-x", "a.b", &"a".repeat(64)] {
            assert!(!valid_namespace(bad), "{bad}");
        }
    }
}
