//! The soak's certificates: its own CA, and a serving certificate swapped
//! in as a Secret volume swaps one.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

pub struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
    ca_pem: String,
}

pub fn new_ca() -> Result<Pki> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name
        .push(DnType::CommonName, "meshscope-soak-ca");
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(p, KeyPair::generate()?)?;
    let ca_pem = ca.pem();
    Ok(Pki { ca, ca_pem })
}

/// Writes generation `n` (serial n+1) and swaps it in as a Secret volume
/// does: a new directory, then one rename of the `..data` symlink.
pub fn rotate(pki: &Pki, dir: &Path, n: usize) -> Result<Vec<u8>> {
    let mut p = CertificateParams::new(vec!["127.0.0.1".to_string()])?;
    p.distinguished_name.push(DnType::CommonName, "127.0.0.1");
    p.serial_number = Some(SerialNumber::from((n as u64 + 1).to_be_bytes().to_vec()));
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &pki.ca)?;
    let gen = format!("..gen-{n}");
    std::fs::create_dir_all(dir.join(&gen))?;
    std::fs::write(dir.join(&gen).join("tls.crt"), cert.pem())?;
    std::fs::write(dir.join(&gen).join("tls.key"), key.serialize_pem())?;
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&gen, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    for f in ["tls.crt", "tls.key"] {
        let link = dir.join(f);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{f}"), &link)?;
        }
    }
    Ok(cert.der().to_vec())
}

/// A client configuration trusting the soak's CA only.
pub fn client_config(pki: &Pki) -> Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    use rustls_pki_types::pem::PemObject;
    for c in CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
        roots.add(c?)?;
    }
    let client =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok(client)
}
