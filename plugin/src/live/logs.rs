//! Pod logs: the istio-proxy log of each pod, read concurrently, into the
//! observations the scope engine compares with.

use std::collections::HashSet;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use meshscope_shared::inject::PROXY_CONTAINER;
use meshscope_shared::inputs::Pod as ObservedPod;
use meshscope_shared::observe::{LogIngest, Observations};
use meshscope_shared::snapshot::PodId;
use meshscope_shared::MeshSnapshot;

use super::client::{Live, PARALLELISM};
use super::failure::ApiFailure;

impl Live {
    /// Reads the istio-proxy log of each pod (and the previous container's
    /// after a restart), with bounded concurrency. Pods whose logs cannot
    /// be read are returned, not fatal.
    pub async fn pod_logs(
        &self,
        snap: &MeshSnapshot,
        pods: &[PodId],
        since: Duration,
        live_pods: &[ObservedPod],
        err: &mut dyn Write,
    ) -> (Observations, Vec<(String, String)>) {
        let tty = std::io::stderr().is_terminal();
        let total = pods.len();
        let mut done = 0usize;
        let mut failed = Vec::new();
        let mut obs = Observations::default();
        let restarted = restarted(live_pods);
        let jobs: Vec<(PodId, bool)> = pods
            .iter()
            .flat_map(|p| {
                let pod = &snap.pods[*p];
                let prev = restarted.contains(&(pod.namespace.as_str(), pod.name.as_str()));
                std::iter::once((*p, false)).chain(prev.then_some((*p, true)))
            })
            .collect();
        let mut stream = futures::stream::iter(jobs)
            .map(|(p, previous)| async move {
                let (res, o) = self.proxy_log(snap, p, previous, since).await;
                (p, previous, res, o)
            })
            .buffer_unordered(PARALLELISM);
        while let Some((p, previous, res, o)) = stream.next().await {
            done += 1;
            if tty {
                let _ = write!(err, "\rreading istio-proxy logs: {done}/{}", total);
            }
            match res {
                Ok(()) => obs.merge(o),
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
        (obs, failed)
    }

    /// The observations of pod `p`'s istio-proxy log (its previous
    /// container's when `previous`) of the last `since`, and whether it
    /// could be read to the end.
    async fn proxy_log(
        &self,
        snap: &MeshSnapshot,
        p: PodId,
        previous: bool,
        since: Duration,
    ) -> (Result<(), String>, Observations) {
        let pod = &snap.pods[p];
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let lp = LogParams {
            container: Some(PROXY_CONTAINER.into()),
            since_seconds: Some(since.as_secs().max(1) as i64),
            previous,
            ..Default::default()
        };
        let mut ingest = LogIngest::new(snap, "pod-logs").for_pod(p);
        let res: Result<(), String> = async {
            let reader = api.log_stream(&pod.name, &lp).await.map_err(|e| {
                ApiFailure::from_kube(e, "get", "pods/log", Some(&pod.namespace), &self.server)
                    .to_string()
            })?;
            let mut lines = reader.lines();
            while let Some(line) = lines.try_next().await.map_err(|e| e.to_string())? {
                ingest.line(&line);
            }
            Ok(())
        }
        .await;
        (res, ingest.finish())
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
