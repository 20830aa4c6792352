//! probelet's engine: the kubelet's prober manager and status manager as actix actors.
//!
//! * [`prober`] — probe executors (exec, HTTP GET, TCP, gRPC), the probe dispatcher and the
//!   vocabulary shared by everything that probes.
//! * [`status`] — the status manager's pure logic (condition generators, …).
//! * [`contracts`] — the traits a host implements: running commands in containers, recording
//!   events.
//! * [`local_runner`] — a [`contracts::CommandRunner`] that runs commands as local processes.

pub mod container;
pub mod contracts;
pub mod local_runner;
pub mod prober;
pub mod status;

pub use k8s_openapi;
