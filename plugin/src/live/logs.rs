//! Pod logs: the istio-proxy log of each pod, read concurrently, into the
//! observations the scope engine compares with.

use std::collections::{HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use meshscope_shared::accesslog::mentions_catch_all;
use meshscope_shared::inject::PROXY_CONTAINER;
use meshscope_shared::inputs::Pod as ObservedPod;
use meshscope_shared::observe::{Applied, LogIngest, Observations};
use meshscope_shared::snapshot::{PodId, PodInfo};
use meshscope_shared::MeshSnapshot;

use super::client::{Live, PARALLELISM};
use super::failure::ApiFailure;

/// How much of each pod's istio-proxy log to read.
#[derive(Debug)]
pub enum LogWindow<'c> {
    /// The last `since`: one-off commands.
    Last(Duration),
    /// The lines after the ones read before (watch mode), with their
    /// kubelet timestamps; a pod first seen reads from the previous pass's
    /// start, or the last `since` on the first pass, skipping the lines a
    /// managed Sidecar already accounts for ([`Applied`]) when given.
    After(&'c mut LogCursor, Duration, Option<&'c Applied>),
}

/// What reading the pods' logs gave.
pub struct PodLogs {
    pub obs: Observations,
    /// `ns/pod` and why, for logs that could not be read.
    pub failed: Vec<(String, String)>,
    /// `ns/pod` of logs read without a single line (sorted).
    pub empty: Vec<String>,
}

/// Where each pod's log was read to, between passes of `apply --watch`.
#[derive(Debug, Default, Clone)]
pub struct LogCursor {
    /// `ns/pod` -> the kubelet timestamp of the last line read.
    last: HashMap<String, Timestamp>,
    /// When the previous pass's reads started.
    started: Option<Timestamp>,
    /// `ns/pod` -> this pass's first line that left through
    /// PassthroughCluster or BlackHoleCluster (the first sign of a
    /// dependency outside the scope).
    pub first_outside: HashMap<String, Timestamp>,
}

impl LogCursor {
    /// Whether nothing was read from it yet.
    pub fn is_new(&self) -> bool {
        self.started.is_none()
    }
}

/// What reading one pod's log from a cursor learned.
#[derive(Default)]
struct LogRead {
    last: Option<Timestamp>,
    first_outside: Option<Timestamp>,
}

impl Live {
    /// Reads the istio-proxy log of each pod (and the previous container's
    /// after a restart), with bounded concurrency. Pods whose logs cannot
    /// be read are returned, not fatal.
    pub async fn pod_logs(
        &self,
        snap: &MeshSnapshot,
        pods: &[PodId],
        window: LogWindow<'_>,
        live_pods: &[ObservedPod],
        err: &mut dyn Write,
    ) -> PodLogs {
        let now = Timestamp::now();
        let (since, mut cursor, applied) = match window {
            LogWindow::Last(d) => (d, None, None),
            LogWindow::After(c, d, applied) => (d, Some(c), applied),
        };
        let from = |key: &str| -> Option<Timestamp> {
            let c = cursor.as_ref()?;
            c.last.get(key).copied().or(c.started)
        };
        // After the first pass a restarted container's previous log is old.
        let first_pass = cursor.as_ref().is_none_or(|c| c.started.is_none());
        let tty = std::io::stderr().is_terminal();
        let total = pods.len();
        let mut done = 0usize;
        let mut failed = Vec::new();
        let mut empty = Vec::new();
        let mut obs = Observations::default();
        let restarted = restarted(live_pods);
        let jobs: Vec<(PodId, bool, Option<Timestamp>)> = pods
            .iter()
            .flat_map(|p| {
                let pod = &snap.pods[*p];
                let prev =
                    first_pass && restarted.contains(&(pod.namespace.as_str(), pod.name.as_str()));
                let after = from(&format!("{}/{}", pod.namespace, pod.name));
                std::iter::once((*p, false, after)).chain(prev.then_some((*p, true, None)))
            })
            .collect();
        let timestamps = cursor.is_some();
        let mut stream = futures::stream::iter(jobs)
            .map(|(p, previous, after)| async move {
                let ingest = LogIngest::new(snap, "pod-logs").for_pod(p).applied(applied);
                let (res, o, read) = self
                    .proxy_log(ingest, &snap.pods[p], previous, since, after, timestamps)
                    .await;
                (p, previous, res, o, read)
            })
            .buffer_unordered(PARALLELISM);
        let mut reads: Vec<(PodId, LogRead)> = Vec::new();
        while let Some((p, previous, res, o, read)) = stream.next().await {
            if !previous {
                reads.push((p, read));
            }
            done += 1;
            if tty {
                let _ = write!(err, "\rreading istio-proxy logs: {done}/{}", total);
            }
            match res {
                Ok(()) => {
                    if !previous && o.stats.lines == 0 {
                        let pod = &snap.pods[p];
                        empty.push(format!("{}/{}", pod.namespace, pod.name));
                    }
                    obs.merge(o)
                }
                Err(e) if previous => {
                    // A previous container that is gone is not a failure.
                    let _ = e;
                }
                Err(e) => {
                    let pod = &snap.pods[p];
                    failed.push((format!("{}/{}", pod.namespace, pod.name), e));
                }
            }
        }
        if tty {
            let _ = writeln!(err);
        }
        if let Some(c) = cursor.as_mut() {
            c.started = Some(now);
            c.first_outside.clear();
            for (p, read) in reads {
                let pod = &snap.pods[p];
                let key = format!("{}/{}", pod.namespace, pod.name);
                if let Some(t) = read.first_outside {
                    c.first_outside.insert(key.clone(), t);
                }
                if let Some(t) = read.last {
                    c.last.insert(key, t);
                }
            }
        }
        empty.sort();
        PodLogs { obs, failed, empty }
    }

    /// The observations of `pod`'s istio-proxy log, read into `ingest` (its previous
    /// container's when `previous`) of the last `since` or, with `after`,
    /// of the lines after that time; whether it could be read to the end;
    /// and, with `timestamps`, the time of the last line read.
    async fn proxy_log(
        &self,
        mut ingest: LogIngest<'_>,
        pod: &PodInfo,
        previous: bool,
        since: Duration,
        after: Option<Timestamp>,
        timestamps: bool,
    ) -> (Result<(), String>, Observations, LogRead) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        // sinceTime has whole seconds: ask from the second the last line
        // was in, and drop the lines up to it.
        let lp = LogParams {
            container: Some(PROXY_CONTAINER.into()),
            since_seconds: after.is_none().then(|| since.as_secs().max(1) as i64),
            since_time: after.and_then(|t| Timestamp::from_second(t.as_second()).ok()),
            timestamps,
            previous,
            ..Default::default()
        };
        let mut read = LogRead::default();
        let res: Result<(), String> = async {
            let reader = api.log_stream(&pod.name, &lp).await.map_err(|e| {
                ApiFailure::from_kube(e, "get", "pods/log", Some(&pod.namespace), &self.server)
                    .to_string()
            })?;
            let mut lines = reader.lines();
            while let Some(line) = lines.try_next().await.map_err(|e| e.to_string())? {
                if !timestamps {
                    ingest.line(&line);
                    continue;
                }
                let (t, text) = split_timestamp(&line);
                if let (Some(t), Some(a)) = (t, after) {
                    if t <= a {
                        continue;
                    }
                }
                if let Some(t) = t {
                    read.last = Some(t);
                    if read.first_outside.is_none() && mentions_catch_all(text) {
                        read.first_outside = Some(t);
                    }
                }
                ingest.line(text);
            }
            Ok(())
        }
        .await;
        (res, ingest.finish(), read)
    }
}

/// The pods whose istio-proxy restarted, as `(namespace, name)`: their
/// previous log is read too.
fn restarted(live_pods: &[ObservedPod]) -> HashSet<(&str, &str)> {
    live_pods
        .iter()
        .filter(|p| {
            p.status.as_ref().is_some_and(|s| {
                s.container_statuses
                    .iter()
                    .any(|c| c.name == PROXY_CONTAINER && c.restart_count > 0)
            })
        })
        .filter_map(|p| {
            Some((
                p.metadata.namespace.as_deref()?,
                p.metadata.name.as_deref()?,
            ))
        })
        .collect()
}

/// A `timestamps=true` log line: the kubelet's RFC 3339 time, then the
/// line as the container wrote it.
fn split_timestamp(line: &str) -> (Option<Timestamp>, &str) {
    match line.split_once(' ') {
        Some((t, rest)) => match t.parse::<Timestamp>() {
            Ok(t) => (Some(t), rest),
            Err(_) => (None, line),
        },
        None => (None, line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_timestamps_are_split_off() {
        let (t, rest) = split_timestamp(
            "2026-12-02T03:04:05.123456789Z [2026-12-02T03:04:05.120Z] \"GET / HTTP/1.1\"",
        );
        assert_eq!(t.unwrap().to_string(), "2026-12-02T03:04:05.123456789Z");
        assert!(rest.starts_with("[2026-12-02T03:04:05.120Z]"));
        let (t, rest) = split_timestamp("{\"json\": 1}");
        assert!(t.is_none());
        assert_eq!(rest, "{\"json\": 1}");
        assert!(mentions_catch_all("... PassthroughCluster 10.0.0.1:80"));
        assert!(!mentions_catch_all(
            "... outbound|80||a.b.svc.cluster.local"
        ));
    }
}
