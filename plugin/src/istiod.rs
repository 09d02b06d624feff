//! Reaching istiod's debug endpoints, the way istioctl does: the pods
//! labelled `app=istiod` (and `istio.io/rev=REV` for a revision) in the
//! Istio namespace, on the port of their `prometheus.io/port` annotation
//! (15014 without it), through a port-forward.
//!
//! A port-forward and not the API server's pod proxy: istiod serves its
//! debug endpoints without authentication only to requests from
//! localhost, and a port-forward arrives from localhost inside the pod. The
//! pod proxy arrives from the API server's address without the user's
//! token (the API server strips it), and istiod answers 401.
//!
//! `--istiod-url` bypasses discovery for clusters where port-forwards are
//! not allowed (run `kubectl port-forward` yourself), and for tests.

pub mod checks;
pub mod table;

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::live::{Live, Select};

/// istiod's monitoring port, where istioctl reaches the debug endpoints.
pub const DEBUG_PORT: u16 = 15014;

/// Where one istiod replica answers.
#[derive(Clone, Debug)]
pub enum Endpoint {
    /// `host:port` of a plain-HTTP debug listener.
    Direct(String),
    /// A pod, through a port-forward.
    Pod {
        namespace: String,
        name: String,
        port: u16,
    },
}

/// One istiod replica and a kept-alive HTTP/1.1 connection to it.
pub struct Istiod {
    /// The pod name, or the URL for `--istiod-url`.
    pub name: String,
    endpoint: Endpoint,
    /// The connection a port-forward goes through.
    live: Option<Live>,
    conn: Option<SendRequest<Empty<Bytes>>>,
    /// Keeps the port-forward's WebSocket alive while `conn` uses it.
    forward: Option<kube::api::Portforwarder>,
    timeout: Duration,
}

/// How `verify` and `apply --wait` find istiod.
pub struct Discovery<'a> {
    pub urls: &'a [String],
    pub namespace: &'a str,
    pub revision: Option<&'a str>,
    pub timeout: Duration,
}

impl Discovery<'_> {
    /// The label selector istioctl uses for istiod pods.
    pub fn selector(&self) -> String {
        match self.revision {
            Some(r) if !r.is_empty() => format!("app=istiod,istio.io/rev={r}"),
            _ => "app=istiod".to_string(),
        }
    }

    pub async fn find(&self, live: &Live) -> Result<Vec<Istiod>> {
        if !self.urls.is_empty() {
            return self
                .urls
                .iter()
                .map(|u| {
                    Ok(Istiod {
                        name: u.clone(),
                        endpoint: Endpoint::Direct(parse_url(u)?),
                        live: None,
                        conn: None,
                        forward: None,
                        timeout: self.timeout,
                    })
                })
                .collect();
        }
        let selector = self.selector();
        let running = Select::labels(&selector).fields("status.phase=Running");
        let pods = live.list::<Pod>(Some(self.namespace), running).await?;
        if pods.is_empty() {
            bail!(
                "no running istiod pods ({}) in namespace {}; pass --istio-namespace or --revision, or --istiod-url to reach istiod another way",
                self.selector(),
                self.namespace
            );
        }
        Ok(pods
            .into_iter()
            .map(|p| {
                let port = p
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("prometheus.io/port"))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(DEBUG_PORT);
                let name = p.metadata.name.unwrap_or_default();
                Istiod {
                    name: name.clone(),
                    endpoint: Endpoint::Pod {
                        namespace: self.namespace.to_string(),
                        name,
                        port,
                    },
                    live: Some(live.clone()),
                    conn: None,
                    forward: None,
                    timeout: self.timeout,
                }
            })
            .collect())
    }
}

/// `http://host:port[/]` → `host:port`.
fn parse_url(u: &str) -> Result<String> {
    let rest = u.strip_prefix("http://").ok_or_else(|| {
        anyhow!("--istiod-url {u:?}: expected http://HOST:PORT (istiod's debug port, 15014, serves plain HTTP)")
    })?;
    let hostport = rest.trim_end_matches('/');
    if hostport.is_empty() || hostport.contains('/') {
        bail!("--istiod-url {u:?}: expected http://HOST:PORT, without a path");
    }
    Ok(
        if hostport
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            hostport.to_string()
        } else {
            format!("{hostport}:{DEBUG_PORT}")
        },
    )
}

async fn handshake<S>(io: S) -> Result<SendRequest<Empty<Bytes>>>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

impl Istiod {
    /// istiod at `url` (`http://HOST:PORT`), as `--istiod-url` gives it.
    #[cfg(test)]
    pub fn direct(url: &str, timeout: Duration) -> Result<Istiod> {
        Ok(Istiod {
            name: url.to_string(),
            endpoint: Endpoint::Direct(parse_url(url)?),
            live: None,
            conn: None,
            forward: None,
            timeout,
        })
    }

    async fn connect(&mut self) -> Result<()> {
        match &self.endpoint {
            Endpoint::Direct(addr) => {
                let tcp = tokio::time::timeout(self.timeout, tokio::net::TcpStream::connect(addr))
                    .await
                    .map_err(|_| anyhow!("connecting to {addr} timed out"))?
                    .with_context(|| format!("cannot connect to {addr}"))?;
                tcp.set_nodelay(true).ok();
                self.conn = Some(handshake(tcp).await?);
            }
            Endpoint::Pod {
                namespace,
                name,
                port,
            } => {
                let live = self.live.as_ref().expect("pods come with a connection");
                let mut pf = live
                    .port_forward(namespace, name, *port, self.timeout)
                    .await?;
                let stream = pf
                    .take_stream(*port)
                    .ok_or_else(|| anyhow!("port-forward to {namespace}/{name} gave no stream"))?;
                self.conn = Some(handshake(stream).await?);
                self.forward = Some(pf);
            }
        }
        Ok(())
    }

    /// GETs a debug path. `Ok((status, body))` for any HTTP answer; a
    /// broken connection is reopened once.
    pub async fn get(&mut self, path: &str) -> Result<(u16, Vec<u8>)> {
        let mut last = None;
        for _ in 0..2 {
            if self.conn.as_ref().is_none_or(|c| c.is_closed()) {
                self.forward = None;
                if let Err(e) = self.connect().await {
                    last = Some(e);
                    continue;
                }
            }
            let send = self.conn.as_mut().expect("connected");
            let req = hyper::Request::get(path)
                .header("host", "localhost")
                .body(Empty::<Bytes>::new())?;
            let attempt = async {
                send.ready().await?;
                let resp = send.send_request(req).await?;
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await?.to_bytes().to_vec();
                anyhow::Ok((status, body))
            };
            match tokio::time::timeout(self.timeout, attempt).await {
                Ok(Ok(r)) => return Ok(r),
                Ok(Err(e)) => {
                    self.conn = None;
                    last = Some(e);
                }
                Err(_) => {
                    self.conn = None;
                    last = Some(anyhow!("no answer within {:?}", self.timeout));
                }
            }
        }
        let hint = match &self.endpoint {
            Endpoint::Direct(_) => format!(
                " (--istiod-url names istiod's debug port, {DEBUG_PORT}: is it reachable from here? Without a route, `kubectl -n istio-system port-forward deploy/istiod {DEBUG_PORT}` and --istiod-url http://localhost:{DEBUG_PORT}, or drop --istiod-url to port-forward to istiod's pods)"
            ),
            Endpoint::Pod { .. } => String::new(),
        };
        Err(last
            .unwrap_or_else(|| anyhow!("no connection"))
            .context(format!(
                "cannot reach istiod {} for {path}{hint}",
                self.name
            )))
    }

    /// GETs a debug path that must answer 200.
    pub async fn get_ok(&mut self, path: &str) -> Result<Vec<u8>> {
        let (status, body) = self.get(path).await?;
        if status != 200 {
            let text = String::from_utf8_lossy(&body);
            bail!(
                "istiod {} answered {status} for {path}: {}{}",
                self.name,
                text.trim(),
                if status == 401 {
                    " (istiod serves debug endpoints without a token only to localhost: use a port-forward)"
                } else {
                    ""
                }
            );
        }
        Ok(body)
    }

    pub fn close(&mut self) {
        self.conn = None;
        if let Some(pf) = self.forward.take() {
            pf.abort();
        }
    }
}

impl Drop for Istiod {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_selectors() {
        assert_eq!(
            parse_url("http://127.0.0.1:8080").unwrap(),
            "127.0.0.1:8080"
        );
        assert_eq!(parse_url("http://localhost/").unwrap(), "localhost:15014");
        assert!(parse_url("https://istiod:15014").is_err());
        assert!(parse_url("http://istiod:15014/debug").is_err());
        let d = |rev| Discovery {
            urls: &[],
            namespace: "istio-system",
            revision: rev,
            timeout: Duration::from_secs(1),
        };
        assert_eq!(d(None).selector(), "app=istiod");
        assert_eq!(d(Some("")).selector(), "app=istiod");
        assert_eq!(d(Some("1-31")).selector(), "app=istiod,istio.io/rev=1-31");
    }
}
