//! The reference host for standalone mode: pod manifests from a folder, a local process
//! runtime, and the kubelet-like sync loop that drives the engine.

pub mod console;
pub mod deadline;
pub mod events;
pub mod history;
pub mod kubelet;
pub mod manifests;
pub mod phase;
pub mod runtime;
pub mod transitions;
