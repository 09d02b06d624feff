//! meshscope-xds-sim: connect to istiod as one or more simulated sidecars and
//! print, per proxy, the xDS resources received once the config is stable.

use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use meshscope_e2e::xds::{ProxySpec, Sim, SimOptions, DEFAULT_ISTIO_VERSION};
use serde_json::Value;

const USAGE: &str = "\
meshscope-xds-sim: connect to istiod as simulated sidecars (one ADS stream
each: CDS and LDS wildcard, then EDS and RDS for what they reference), wait
until no push has arrived for a while, and print what each proxy received
as one JSON document on stdout:

  {\"proxies\":[{\"proxy\":\"ns/name\",\"types\":{\"cds\":{\"count\":N,\"bytes\":N,
    \"resources\":{\"name\":bytes,...}},\"eds\":...,\"lds\":...,\"rds\":...},
    \"total_bytes\":N}]}

Bytes are the encoded sizes of the resources (their google.protobuf.Any
values). Pod name, IP (status.podIP), labels, service account and node come
from `kubectl get pod`; the workload name is the `app` label or the pod name.

USAGE:
  meshscope-xds-sim [OPTIONS] --pod NS/NAME [--pod NS/NAME ...]
  meshscope-xds-sim [OPTIONS] --all-pods -n NS

OPTIONS:
  --istiod ADDR          istiod's plaintext gRPC address (--grpcAddr)
                         [default: 127.0.0.1:15010]
  --pod NS/NAME          a pod to simulate (repeatable)
  --all-pods             simulate every pod with an IP in the namespace -n
  -n, --namespace NS     the namespace for --all-pods
  --kubeconfig PATH      kubeconfig for kubectl [default: $KUBECONFIG]
  --quiet-ms N           stable = no push for N ms [default: 1000]
  --timeout-s N          give up after N s [default: 60]
  --istio-version V      ISTIO_VERSION sent; must be istiod's own version
                         [default: 1.31-dev]
  --concurrency N        proxies starting at once [default: 64]
  --connect-rate N       open at most N streams per second (istiod admits
                         PILOT_MAX_REQUESTS_PER_SECOND, 25 on 2 cores; the
                         rest are refused and retried) [default: no limit]
  --stay                 after printing, stay connected and ACK every push
                         until stopped (Ctrl-C, SIGTERM), so that istiod
                         counts the proxies as connected: what
                         `kubectl meshscope verify` and `apply --wait` check
  -h, --help             print this help

Errors go to stderr as one line, with exit code 2.
";

struct Args {
    istiod: String,
    pods: Vec<(String, String)>,
    all_pods: bool,
    namespace: Option<String>,
    kubeconfig: Option<String>,
    quiet_ms: u64,
    timeout_s: u64,
    istio_version: String,
    concurrency: usize,
    connect_rate: f64,
    stay: bool,
}

enum Parsed {
    Run(Args),
    Help,
}

fn parse_args(argv: Vec<String>) -> Result<Parsed> {
    let mut a = Args {
        istiod: "127.0.0.1:15010".into(),
        pods: Vec::new(),
        all_pods: false,
        namespace: None,
        kubeconfig: std::env::var("KUBECONFIG").ok().filter(|s| !s.is_empty()),
        quiet_ms: 1000,
        timeout_s: 60,
        istio_version: DEFAULT_ISTIO_VERSION.into(),
        concurrency: 64,
        connect_rate: 0.0,
        stay: false,
    };
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String> {
            match inline.clone().or_else(|| it.next()) {
                Some(v) => Ok(v),
                None => bail!("{name} needs a value (see --help)"),
            }
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--istiod" => a.istiod = value("--istiod")?,
            "--pod" => {
                let v = value("--pod")?;
                match v.split_once('/') {
                    Some((ns, name)) if !ns.is_empty() && !name.is_empty() => {
                        a.pods.push((ns.into(), name.into()))
                    }
                    _ => bail!("--pod takes NS/NAME, not {v:?}"),
                }
            }
            "--all-pods" => a.all_pods = true,
            "--stay" => a.stay = true,
            "-n" | "--namespace" => a.namespace = Some(value("--namespace")?),
            "--kubeconfig" => a.kubeconfig = Some(value("--kubeconfig")?),
            "--quiet-ms" => a.quiet_ms = number(&value("--quiet-ms")?, "--quiet-ms")?,
            "--timeout-s" => a.timeout_s = number(&value("--timeout-s")?, "--timeout-s")?,
            "--istio-version" => a.istio_version = value("--istio-version")?,
            "--concurrency" => {
                a.concurrency = number(&value("--concurrency")?, "--concurrency")? as usize
            }
            "--connect-rate" => {
                let v = value("--connect-rate")?;
                a.connect_rate = v
                    .parse()
                    .ok()
                    .filter(|r: &f64| r.is_finite() && *r >= 0.0)
                    .with_context(|| format!("--connect-rate takes a number, not {v:?}"))?;
            }
            _ => bail!("unknown argument {arg:?} (see --help)"),
        }
    }
    if a.all_pods && a.namespace.is_none() {
        bail!("--all-pods needs -n NS");
    }
    if !a.all_pods && a.pods.is_empty() {
        bail!("nothing to simulate: give --pod NS/NAME or --all-pods -n NS (see --help)");
    }
    if a.all_pods && !a.pods.is_empty() {
        bail!("give either --pod or --all-pods, not both");
    }
    Ok(Parsed::Run(a))
}

fn number(s: &str, flag: &str) -> Result<u64> {
    s.parse()
        .with_context(|| format!("{flag} takes a number, not {s:?}"))
}

fn kubectl(kubeconfig: &Option<String>, args: &[&str]) -> Result<Value> {
    let mut cmd = Command::new("kubectl");
    if let Some(k) = kubeconfig {
        cmd.arg("--kubeconfig").arg(k);
    }
    cmd.args(args);
    let out = cmd
        .output()
        .context("cannot run kubectl (is it on PATH?)")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        bail!("kubectl {} failed: {}", args.join(" "), first.trim());
    }
    serde_json::from_slice(&out.stdout).context("kubectl printed invalid JSON")
}

/// A ProxySpec from a Pod object; `None` (with the reason) if it has no IP.
fn spec_of(pod: &Value, istio_version: &str) -> Result<ProxySpec, String> {
    let md = &pod["metadata"];
    let ns = md["namespace"].as_str().unwrap_or("default");
    let name = md["name"].as_str().unwrap_or("");
    let ip = pod["status"]["podIP"].as_str().unwrap_or("");
    if ip.is_empty() {
        return Err(format!("pod {ns}/{name} has no status.podIP"));
    }
    let mut spec = ProxySpec::new(ns, name, ip);
    if let Some(labels) = md["labels"].as_object() {
        for (k, v) in labels {
            spec.labels
                .insert(k.clone(), v.as_str().unwrap_or("").to_string());
        }
    }
    if let Some(sa) = pod["spec"]["serviceAccountName"].as_str() {
        spec.service_account = sa.to_string();
    }
    if let Some(app) = spec.labels.get("app") {
        spec.workload_name = app.clone();
    }
    if let Some(node) = pod["spec"]["nodeName"].as_str() {
        spec.node_name = node.to_string();
    }
    spec.istio_version = istio_version.to_string();
    // A gateway or waypoint pod (its istio-proxy runs `proxy router` or
    // `proxy waypoint`) connects as that type, as pilot-agent does.
    spec.gateway = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["name"] == "istio-proxy" && c["args"][0] == "proxy")
        .find_map(|c| {
            c["args"][1]
                .as_str()
                .and_then(|t| meshscope_shared::inject::Gateway::of_args(&["proxy", t]))
        });
    Ok(spec)
}

fn run(a: Args) -> Result<Value> {
    let mut specs = Vec::new();
    if a.all_pods {
        let ns = a.namespace.as_deref().expect("checked");
        let list = kubectl(&a.kubeconfig, &["get", "pods", "-n", ns, "-o", "json"])?;
        for pod in list["items"].as_array().into_iter().flatten() {
            match spec_of(pod, &a.istio_version) {
                Ok(s) => specs.push(s),
                Err(why) => eprintln!("meshscope-xds-sim: skipping: {why}"),
            }
        }
        if specs.is_empty() {
            bail!("no pod with an IP in namespace {ns}");
        }
    } else {
        for (ns, name) in &a.pods {
            let pod = kubectl(&a.kubeconfig, &["get", "pod", "-n", ns, name, "-o", "json"])?;
            specs.push(spec_of(&pod, &a.istio_version).map_err(anyhow::Error::msg)?);
        }
    }
    let sim = Sim::connect_with(
        &a.istiod,
        specs,
        SimOptions {
            concurrency: a.concurrency.max(1),
            connect_rate: a.connect_rate,
            ..SimOptions::default()
        },
    )?;
    sim.wait_stable(
        Duration::from_millis(a.quiet_ms),
        Duration::from_secs(a.timeout_s),
    )?;
    let proxies: Vec<Value> = sim.snapshots().iter().map(|c| c.to_json()).collect();
    let doc = serde_json::json!({ "proxies": proxies });
    if a.stay {
        // Printed now; the streams go on ACKing until the process is
        // stopped.
        print_doc(&doc);
        eprintln!("meshscope-xds-sim: staying connected; stop with Ctrl-C");
        loop {
            std::thread::park();
        }
    }
    sim.close();
    Ok(doc)
}

fn print_doc(doc: &Value) {
    use std::io::Write as _;
    println!(
        "{}",
        serde_json::to_string_pretty(doc).expect("JSON serializes")
    );
    let _ = std::io::stdout().flush();
}

fn main() -> ExitCode {
    let result = parse_args(std::env::args().skip(1).collect()).and_then(|p| match p {
        Parsed::Help => {
            print!("{USAGE}");
            Ok(None)
        }
        Parsed::Run(a) => run(a).map(Some),
    });
    match result {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(doc)) => {
            print_doc(&doc);
            ExitCode::SUCCESS
        }
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
    }
}
