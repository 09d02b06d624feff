//! Release images as a cluster meets them: pushed to a registry (the CNCF
//! Distribution registry, Debian's `docker-registry`, on loopback), pulled
//! back per architecture with skopeo, their configuration read, and their
//! filesystem unpacked so that the entrypoint can be run from it (running
//! a container needs cgroups this machine does not give).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use meshscope_test_support::net::free_port;
use serde_json::Value;

use crate::release::{run, text, wait_listening};

/// A registry on 127.0.0.1, storing into a scratch directory; stopped
/// when dropped.
pub struct Registry {
    child: Child,
    pub host: String,
    _dir: tempfile::TempDir,
}

impl Registry {
    pub fn start() -> Registry {
        let bin = Path::new("/usr/bin/docker-registry");
        assert!(
            bin.exists(),
            "{} is missing: install Debian's docker-registry (tests/release/check does)",
            bin.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry starts");
        wait_listening(port, "the registry");
        Registry {
            child,
            host: format!("127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    /// `docker://HOST/name:tag`.
    pub fn reference(&self, name_tag: &str) -> String {
        format!("docker://{}/{name_tag}", self.host)
    }

    /// Pushes every image of the OCI archive's index to `name_tag`.
    pub fn push(&self, archive: &Path, name_tag: &str) {
        skopeo(&[
            "copy",
            "--all",
            "--preserve-digests",
            "--quiet",
            "--dest-tls-verify=false",
            &format!("oci-archive:{}", archive.display()),
            &self.reference(name_tag),
        ]);
    }

    /// The image index at `name_tag`, as the registry serves it.
    pub fn index(&self, name_tag: &str) -> Value {
        json(&skopeo(&[
            "inspect",
            "--raw",
            "--tls-verify=false",
            &self.reference(name_tag),
        ]))
    }

    /// The digest the registry serves `name_tag` under, as a client
    /// resolving the tag reads it (`Docker-Content-Digest`).
    pub fn digest(&self, name_tag: &str) -> String {
        let (name, tag) = name_tag.rsplit_once(':').expect("name:tag");
        let url = format!("http://{}/v2/{name}/manifests/{tag}", self.host);
        let r = ureq::head(&url)
            .header("Accept", "application/vnd.oci.image.index.v1+json")
            .call()
            .unwrap_or_else(|e| panic!("HEAD {url}: {e}"));
        r.headers()
            .get("Docker-Content-Digest")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("HEAD {url}: no Docker-Content-Digest"))
            .to_string()
    }

    /// The configuration of the `arch` image of `name_tag`.
    pub fn config(&self, name_tag: &str, arch: &str) -> Value {
        json(&skopeo(&[
            "inspect",
            "--config",
            "--tls-verify=false",
            "--override-os=linux",
            &format!("--override-arch={arch}"),
            &self.reference(name_tag),
        ]))
    }

    /// Pulls the `arch` image of `name_tag` and unpacks its layers into
    /// `rootfs`, as a container runtime would.
    pub fn unpack(&self, name_tag: &str, arch: &str, rootfs: &Path) {
        let pulled = rootfs.with_extension("pulled");
        skopeo(&[
            "copy",
            "--quiet",
            "--src-tls-verify=false",
            "--override-os=linux",
            &format!("--override-arch={arch}"),
            &self.reference(name_tag),
            &format!("dir:{}", pulled.display()),
        ]);
        let manifest = json(&std::fs::read_to_string(pulled.join("manifest.json")).unwrap());
        std::fs::create_dir_all(rootfs).unwrap();
        for layer in manifest["layers"].as_array().expect("layers") {
            let digest = layer["digest"].as_str().unwrap();
            let blob = pulled.join(digest.trim_start_matches("sha256:"));
            let o = run(Command::new("tar")
                .arg("-xf")
                .arg(&blob)
                .arg("-C")
                .arg(rootfs));
            assert!(o.status.success(), "unpack {digest}: {}", text(&o.stderr));
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every file under `root`, relative, sorted (directories left out).
pub fn files_under(root: &Path) -> Vec<String> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p: PathBuf = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                walk(&p, root, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

fn skopeo(args: &[&str]) -> String {
    let o = run(Command::new("skopeo").args(args));
    assert!(o.status.success(), "skopeo {args:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}
