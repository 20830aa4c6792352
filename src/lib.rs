//! probelet: the kubelet's probing and pod-status machinery as an actix actor system.
//!
//! This crate is the facade a host embeds and the agent binary; the engine lives in
//! [`probelet_actors`] and is re-exported here module by module. [`host`] is the reference
//! host of the standalone agent, [`demo`] the scriptable probe target its examples use.

pub use probelet_actors::{
    Pipeline, PipelineConfig, PipelineError, clock, container, contracts, local_runner, metrics, pipeline,
    prober, process, results, status,
};

pub mod agent;
pub mod auth;
pub mod cli;
pub mod cluster;
pub mod demo;
pub mod host;
pub mod lint;
pub mod serve;
