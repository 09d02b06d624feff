//! Release artifacts as users meet them: `scripts/release`'s archives,
//! SHA256SUMS and SBOMs, and its krew manifest, installed by the real krew
//! (built by `tests/tools/build`) from archives served over HTTP on
//! loopback, as a release page serves them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use meshscope_test_support::ledger::{self, Component};
use meshscope_test_support::net::free_port;

use crate::cluster::repo_root;

/// The krew build: `krew`, `validate-krew-manifest`, and a directory
/// holding `kubectl-krew` for kubectl to find as its `krew` plugin.
pub struct Krew {
    pub bin: PathBuf,
    shim: tempfile::TempDir,
}

impl Krew {
    /// Builds krew with `tests/tools/build` (cached by version), or fails
    /// the test saying why.
    pub fn build() -> Krew {
        let bin = crate::tools::bin_dir();
        let shim = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(bin.join("krew"), shim.path().join("kubectl-krew")).unwrap();
        Krew { bin, shim }
    }

    /// A command run with krew as kubectl's plugin, `krew_root` as
    /// KREW_ROOT and its `bin` first on PATH, as krew's install tells
    /// users to set it.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>, krew_root: &Path) -> Command {
        let path = std::env::join_paths(
            [krew_root.join("bin"), self.shim.path().to_path_buf()]
                .into_iter()
                .chain(std::env::split_paths(
                    &std::env::var_os("PATH").unwrap_or_default(),
                )),
        )
        .unwrap();
        let mut c = Command::new(program);
        c.env("PATH", path)
            .env("KREW_ROOT", krew_root)
            .stdin(Stdio::null());
        ledger::record(Component::Krew);
        c
    }
}

/// A release directory, as `scripts/release` writes it.
pub struct Release {
    pub dir: PathBuf,
    pub tag: String,
}

impl Release {
    /// `scripts/release VERSION --target TRIPLE --binaries DIR`: the
    /// workspace's own build of the binaries, packaged as a release of
    /// `triple` whose archives are downloaded from `base_url`.
    pub fn package(out: &Path, triple: &str, binaries: &Path, base_url: &str) -> Release {
        let version = env!("CARGO_PKG_VERSION");
        let o = Command::new(repo_root().join("scripts/release"))
            .arg(version)
            .args(["--target", triple, "--out"])
            .arg(out)
            .arg("--binaries")
            .arg(binaries)
            .args(["--base-url", base_url])
            .stderr(Stdio::inherit())
            .output()
            .expect("scripts/release runs");
        assert!(o.status.success(), "scripts/release failed (above)");
        Release {
            dir: out.to_path_buf(),
            tag: format!("v{version}"),
        }
    }

    /// The release `scripts/release` wrote into `dir`.
    pub fn open(dir: &Path) -> Release {
        let manifest = std::fs::read_to_string(dir.join("meshscope.yaml"))
            .unwrap_or_else(|e| panic!("{}: no krew manifest: {e}", dir.display()));
        let version = manifest
            .lines()
            .find_map(|l| l.trim().strip_prefix("version: "))
            .expect("the manifest names its version");
        Release {
            dir: dir.to_path_buf(),
            tag: version.to_string(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The plugin's archive for `triple`.
    pub fn plugin_archive(&self, triple: &str) -> PathBuf {
        self.path(&format!("kubectl-meshscope-{}-{triple}.tar.gz", self.tag))
    }

    pub fn webhook_archive(&self, triple: &str) -> PathBuf {
        self.path(&format!("meshscope-webhook-{}-{triple}.tar.gz", self.tag))
    }

    /// `sha256sum -c SHA256SUMS` in the release directory, as users check
    /// a download; the names it lists.
    pub fn check_sums(&self) -> Vec<String> {
        let o = run(Command::new("sha256sum")
            .args(["--strict", "-c", "SHA256SUMS"])
            .current_dir(&self.dir));
        assert!(o.status.success(), "sha256sum -c: {}", text(&o.stdout));
        text(&o.stdout)
            .lines()
            .map(|l| l.strip_suffix(": OK").unwrap_or(l).to_string())
            .collect()
    }

    /// The krew manifest with its archives served from `base_url` instead
    /// (the sha256 values stay): a published release checked before its
    /// archives are at their address.
    pub fn manifest_served_from(&self, base_url: &str, to: &Path) -> PathBuf {
        let m = std::fs::read_to_string(self.path("meshscope.yaml")).unwrap();
        let out: String = m
            .lines()
            .map(|l| match l.split_once("uri: ") {
                Some((indent, uri)) => {
                    let file = uri.rsplit('/').next().unwrap();
                    format!("{indent}uri: {base_url}/{file}\n")
                }
                None => format!("{l}\n"),
            })
            .collect();
        let p = to.join("meshscope.yaml");
        std::fs::write(&p, out).unwrap();
        p
    }

    /// The shell command of the manifest's caveats that starts with
    /// `start` (`ln -sf `: link the completer; `rm -f `: unlink it).
    pub fn caveat_command(&self, start: &str) -> String {
        let m = std::fs::read_to_string(self.path("meshscope.yaml")).unwrap();
        m.lines()
            .map(str::trim)
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("the caveats give a command starting {start:?}"))
            .to_string()
    }
}

/// A krew index holding `manifest`, as krew-index holds a plugin's: a git
/// repository with `plugins/meshscope.yaml`, for `KREW_DEFAULT_INDEX_URI`.
pub fn local_index(manifest: &Path, at: &Path) -> String {
    std::fs::create_dir_all(at.join("plugins")).unwrap();
    std::fs::copy(manifest, at.join("plugins/meshscope.yaml")).unwrap();
    let git = |args: &[&str]| {
        let o = run(Command::new("git").args(args).current_dir(at));
        assert!(o.status.success(), "git {args:?}: {}", text(&o.stderr));
    };
    git(&["init", "-q"]);
    git(&["add", "plugins"]);
    git(&[
        "-c",
        "user.name=meshscope",
        "-c",
        "user.email=meshscope@localhost",
        "commit",
        "-qm",
        "index",
    ]);
    format!("file://{}", at.display())
}

/// The files of a tar.gz, in archive order.
pub fn archive_files(archive: &Path) -> Vec<String> {
    let o = run(Command::new("tar").arg("-tzf").arg(archive));
    assert!(o.status.success(), "tar -tzf {}", archive.display());
    text(&o.stdout).lines().map(str::to_string).collect()
}

/// A static HTTP server over `dir` on loopback (Python's http.server), as
/// a release page serves its assets; stopped when dropped.
pub struct FileServer {
    child: Child,
    pub base_url: String,
}

impl FileServer {
    pub fn start(dir: &Path) -> FileServer {
        let port = free_port();
        let child = Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
            .arg(dir)
            .arg(port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 -m http.server starts");
        wait_listening(port, "the file server");
        FileServer {
            child,
            base_url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (20 s at most) until `what`, just started, accepts connections on
/// 127.0.0.1:`port`.
pub fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} never listened on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn run(c: &mut Command) -> Output {
    c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"))
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
