//! Generated traffic for `meshscope-bench-watch`: the reference scenario's
//! sleeps calling httpbins, written as the mesh would expose it, to one of
//! two sources:
//! - pod logs: one client-side access-log line per request, appended to
//!   the caller's istio-proxy log in the stand-in kubelet (which serves it
//!   with kubelet timestamps);
//! - Prometheus: Istio's `istio_requests_total` counters, source- and
//!   destination-reported, served on `/metrics` for a real Prometheus to
//!   scrape.
//!
//! A request to a host the caller's proxy has no cluster for leaves
//! through `PassthroughCluster` (the mesh's ALLOW_ANY), as Envoy would
//! send it: the caller decides per request from its simulated sidecar's
//! current CDS.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use crate::kubelet::StandInKubelet;
use crate::{outbound_text_line, Scenario};

/// Where requests are written.
#[derive(Clone)]
pub enum Sink {
    PodLogs(Arc<StandInKubelet>),
    Counters(Arc<Counters>),
}

/// Counter values by their label set, rendered in Prometheus' text format.
#[derive(Default)]
pub struct Counters {
    values: Mutex<BTreeMap<String, u64>>,
}

impl Counters {
    pub fn add(&self, labels: String, n: u64) {
        *self
            .values
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(labels)
            .or_default() += n;
    }

    pub fn render(&self) -> String {
        let values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::with_capacity(values.len() * 400 + 64);
        out.push_str("# TYPE istio_requests_total counter\n");
        for (labels, v) in values.iter() {
            out.push_str(&format!("istio_requests_total{{{labels}}} {v}\n"));
        }
        out
    }

    pub fn series(&self) -> usize {
        self.values.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Serves `/metrics` (any path, in fact) on 127.0.0.1; returns the
    /// address. The server runs until the process ends.
    pub fn serve(self: &Arc<Self>) -> Result<SocketAddr> {
        let listener = TcpListener::bind("127.0.0.1:0").context("bind the exporter")?;
        let addr = listener.local_addr()?;
        let me = Arc::clone(self);
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let me = Arc::clone(&me);
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(&conn);
                    loop {
                        let mut line = String::new();
                        match reader.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let body = me.render();
                    let mut w = &conn;
                    let _ = write!(
                        w,
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = w.flush();
                });
            }
        });
        Ok(addr)
    }
}

/// Writes requests of the scenario's sleeps to a [`Sink`].
pub struct Traffic {
    pub scenario: Scenario,
    pub sink: Sink,
    /// httpbin index -> its Service's ClusterIP (what a passthrough
    /// request is addressed to).
    pub cluster_ips: BTreeMap<usize, String>,
    /// sleep index -> its pod's name.
    pub sleep_pods: BTreeMap<usize, String>,
    lines: AtomicU64,
}

impl Traffic {
    pub fn new(
        scenario: Scenario,
        sink: Sink,
        cluster_ips: BTreeMap<usize, String>,
        sleep_pods: BTreeMap<usize, String>,
    ) -> Traffic {
        Traffic {
            scenario,
            sink,
            cluster_ips,
            sleep_pods,
            lines: AtomicU64::new(0),
        }
    }

    /// One request of `sleep-i` to `httpbin-j`: through its cluster, or
    /// through PassthroughCluster when the caller's proxy has none.
    pub fn request(&self, i: usize, j: usize, passthrough: bool) {
        let s = &self.scenario;
        let ns = &s.namespace;
        let host = s.httpbin_host(j);
        match &self.sink {
            Sink::PodLogs(kubelet) => {
                let n = self.lines.fetch_add(1, Ordering::Relaxed);
                let src = s.sleep_ip(i).to_string();
                let line = if passthrough {
                    let vip = self.cluster_ips.get(&j).map_or("10.96.0.1", String::as_str);
                    outbound_text_line(n, &src, &host, 8000, &format!("{vip}:8000"))
                        .replace(&format!("outbound|8000||{host}"), "PassthroughCluster")
                } else {
                    outbound_text_line(n, &src, &host, 8000, &format!("{}:80", s.httpbin_ip(j, 0)))
                };
                let pod = self.sleep_pods.get(&i).map_or("", String::as_str);
                kubelet.append(&format!("{ns}/{pod}/istio-proxy"), line.trim_end());
            }
            Sink::Counters(c) => {
                let src =
                    format!("source_workload=\"sleep-{i}\",source_workload_namespace=\"{ns}\"");
                let dst = format!(
                    "destination_service=\"{host}\",destination_service_name=\"httpbin-{j}\",destination_service_namespace=\"{ns}\",destination_workload=\"httpbin-{j}\",destination_workload_namespace=\"{ns}\""
                );
                if passthrough {
                    // The client knows no Service; the server, reached
                    // without mTLS, knows no peer.
                    c.add(format!("reporter=\"source\",{src},destination_service=\"{host}:8000\",destination_service_name=\"PassthroughCluster\",destination_service_namespace=\"unknown\",destination_workload=\"unknown\",destination_workload_namespace=\"unknown\",response_code=\"200\""), 1);
                    c.add(format!("reporter=\"destination\",source_workload=\"unknown\",source_workload_namespace=\"unknown\",{dst},response_code=\"200\""), 1);
                } else {
                    for reporter in ["source", "destination"] {
                        c.add(
                            format!("reporter=\"{reporter}\",{src},{dst},response_code=\"200\""),
                            1,
                        );
                    }
                }
            }
        }
    }
}
