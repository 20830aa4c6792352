//! probelet: the kubelet's probing and pod-status machinery as an actix actor system.
//!
//! This crate is the facade a host embeds and the agent binary; the engine lives in
//! [`probelet_actors`] and is re-exported here module by module, so a host needs this one crate.
//! [`Engine::builder`] starts all of it in one call. [`host`] is the reference host of the
//! standalone agent, [`demo`] the scriptable probe target its examples use.
//!
//! A host in a few lines: register the pod, hand the engine the runtime's view of it, and the
//! readiness probe makes it Ready. (With [`EngineBuilder::api`] the status is also written to the
//! API server; `examples/embed_host.rs` is a whole host of that kind.)
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use probelet::Engine;
//! use probelet::contracts::PodRegistry;
//! use probelet::k8s_openapi::api::core::v1::{
//!     Container, ContainerState, ContainerStateRunning, ContainerStatus, ExecAction, Pod, PodSpec,
//!     PodStatus, Probe,
//! };
//! use probelet::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! actix::System::new().block_on(async {
//!     let pods = PodRegistry::new();
//!     let engine = Engine::builder(Arc::new(pods.clone())).start();
//!
//!     let pod = Arc::new(Pod {
//!         metadata: ObjectMeta {
//!             name: Some("web".into()),
//!             namespace: Some("default".into()),
//!             uid: Some("uid-web".into()),
//!             ..Default::default()
//!         },
//!         spec: Some(PodSpec {
//!             containers: vec![Container {
//!                 name: "app".into(),
//!                 readiness_probe: Some(Probe {
//!                     exec: Some(ExecAction { command: Some(vec!["true".into()]) }),
//!                     period_seconds: Some(1),
//!                     ..Default::default()
//!                 }),
//!                 ..Default::default()
//!             }],
//!             ..Default::default()
//!         }),
//!         status: None,
//!     });
//!     pods.upsert(pod.clone());
//!
//!     // What the host's runtime knows: the container runs.
//!     let running = PodStatus {
//!         phase: Some("Running".into()),
//!         container_statuses: Some(vec![ContainerStatus {
//!             name: "app".into(),
//!             container_id: Some("local://app-1".into()),
//!             state: Some(ContainerState {
//!                 running: Some(ContainerStateRunning::default()),
//!                 ..Default::default()
//!             }),
//!             ..Default::default()
//!         }]),
//!         ..Default::default()
//!     };
//!     let status = engine.sync_pod(pod.clone(), running).await?;
//!     let ready = |status: &PodStatus| {
//!         status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
//!     };
//!     // Not probed yet: not ready, as the kubelet reports it.
//!     assert!(!ready(&status));
//!
//!     // The first probe runs within one period (the start-up jitter); its success makes the
//!     // pod Ready. The pod's view shows every status the engine stores.
//!     let mut view = engine.pipeline().views.subscribe("uid-web");
//!     let is_ready = |s: &Option<Arc<PodStatus>>| s.as_deref().is_some_and(|s| ready(s));
//!     tokio::time::timeout(Duration::from_secs(10), view.wait_for(is_ready)).await??;
//!     Ok(())
//! })
//! # }
//! ```
//!
//! What the engine takes from its host as given, as the kubelet takes it from the API server
//! and its runtime:
//!
//! * every pod has a `metadata.uid`, and its containers have distinct names, as the API
//!   server makes sure ([`Engine::sync_pod`] refuses a pod without either);
//! * a container ID names one container on the node: probe results are kept by container ID
//!   alone, as the kubelet keeps them, so two pods whose statuses show the same ID share them;
//! * the pod is in the host's [`contracts::PodLookup`] while it runs: probe results reach the
//!   stored status through it, and a pod it does not know waits for the next `sync_pod`;
//! * a `CommandRunner` honours each probe's timeout (one that has not answered 2 minutes
//!   later is given up on, as the kubelet's CRI client gives up);
//! * the engine lives as long as the host wants probing: dropping it (its last
//!   [`Pipeline`] copy) stops every probe.

// The embedding API (the engine's re-exports and `engine`) documents every public item; the
// agent's own modules below are public for its binary and its tests, not for hosts.
#![warn(missing_docs)]

pub use probelet_actors::{
    Feature, FeatureGateError, FeatureGates, Pipeline, PipelineConfig, PipelineError, clock, container,
    contracts, features, k8s_openapi, local_runner, metrics, pipeline, prober, process, results, shim,
    status, sync, vocabulary,
};

#[allow(missing_docs)]
pub mod agent;
#[allow(missing_docs)]
pub mod auth;
#[allow(missing_docs)]
pub mod cli;
#[allow(missing_docs)]
pub mod cluster;
#[allow(missing_docs)]
pub mod demo;
pub mod engine;
#[allow(missing_docs)]
pub mod host;
#[allow(missing_docs)]
pub mod lint;
pub mod logging;
#[allow(missing_docs)]
pub mod serve;

pub use engine::{Engine, EngineBuilder, SyncPodError};
