//! The agent's HTTP endpoints: `/metrics` (Prometheus text), `/healthz`, `/readyz` (ready once
//! the pod source has synced), `/pods` (a `v1.PodList` with current statuses, like the
//! kubelet's read-only `/pods`), `/pods/{namespace}/{name}/probes` (each probe's last
//! results) and `/events` (recent events).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::core::v1::Pod;
use probelet_actors::Pipeline;
use probelet_actors::contracts::PodRegistry;
use probelet_actors::metrics::PrometheusRegistry;
use serde_json::json;

use crate::host::events::EventLog;
use crate::host::history::ProbeHistory;

/// What the endpoints read.
#[derive(Clone)]
pub struct ServeState {
    pub registry: Arc<PrometheusRegistry>,
    pub pipeline: Pipeline,
    pub pods: PodRegistry,
    pub history: ProbeHistory,
    pub events: EventLog,
    /// The pod source has delivered its first full set.
    pub ready: Arc<AtomicBool>,
}

/// The router, for embedding or tests.
pub fn router(state: ServeState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/pods", get(pods))
        .route("/pods/{namespace}/{name}/probes", get(probes))
        .route("/events", get(events))
        .with_state(state)
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ServeState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state)).with_graceful_shutdown(shutdown).await
}

async fn metrics(State(state): State<ServeState>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.registry.render())
        .into_response()
}

async fn readyz(State(state): State<ServeState>) -> Response {
    if state.ready.load(Ordering::SeqCst) {
        "ok".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "pod source not synced yet").into_response()
    }
}

/// The pods with the status manager's current status in place of their own.
async fn with_statuses(state: &ServeState) -> Vec<Pod> {
    let mut pods = state.pods.pods();
    pods.sort_by_key(|p| (p.metadata.namespace.clone(), p.metadata.name.clone()));
    let mut out = Vec::with_capacity(pods.len());
    for pod in pods {
        let mut pod = (*pod).clone();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if let Ok(Some(status)) = state.pipeline.pod_status(&uid).await {
            pod.status = Some((*status).clone());
        }
        out.push(pod);
    }
    out
}

async fn pods(State(state): State<ServeState>) -> Response {
    let items = with_statuses(&state).await;
    axum::Json(json!({ "kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items }))
        .into_response()
}

async fn probes(
    State(state): State<ServeState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let found = state.pods.pods().into_iter().find(|p| {
        p.metadata.namespace.as_deref().unwrap_or("default") == namespace
            && p.metadata.name.as_deref() == Some(&name)
    });
    let Some(pod) = found else {
        return (StatusCode::NOT_FOUND, format!("pod {namespace}/{name} not found")).into_response();
    };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    axum::Json(json!({
        "namespace": namespace,
        "name": name,
        "uid": uid,
        "probes": state.history.pod(&uid),
    }))
    .into_response()
}

async fn events(State(state): State<ServeState>) -> Response {
    axum::Json(json!({ "items": state.events.recent() })).into_response()
}
