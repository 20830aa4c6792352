//! probelet's engine: the kubelet's prober manager and status manager as actix actors, with the
//! probe workers as tasks beside them.
//!
//! * [`prober`] — the probe executors (exec, HTTP GET, TCP, gRPC), the dispatcher, the probe
//!   worker (a task) and the prober manager (supervisor).
//! * [`results`] — the results cache actor.
//! * [`status`] — the status manager actor and its pure logic (condition generators, …).
//! * [`pipeline`] — starts the whole engine for a host and offers its API as methods.
//! * [`sync`] — the status syncer: writes pod status to the API server.
//! * [`features`] — the kubelet feature gates the engine follows.
//! * [`contracts`] — the traits a host implements: running commands in containers, recording
//!   events, looking pods up.
//! * [`local_runner`] — a [`contracts::CommandRunner`] that runs commands as local processes.
//! * [`process`] — signalling local process groups (the runner and the standalone runtime).
//! * [`shim`] — the container shim, the small parent of each local command that stops
//!   everything the command started; [`spawned`] — the record of the children this process
//!   spawned itself, told apart from orphans that re-parent to it.
//! * [`restart`] — whether a container that exited runs again (restart policies and rules).
//! * [`metrics`] — metric names and the Prometheus registry.
//! * [`clock`] — the one wall clock.
//! * [`container`] — container IDs as the runtime reports them.
//! * [`gofmt`] — Go's `%q` quoting, for texts that must read as the kubelet's; [`format`](mod@format) —
//!   pods and other values in the forms the kubelet's log lines give them.
//! * [`capacity`] — giving a per-pod table's memory back once most of its pods are gone.
//! * [`fnv`] — FNV-1a, for stable values from bytes (back-off jitter, IDs, UIDs).
//! * [`vocabulary`] — the probe vocabulary every part speaks (kinds, outcomes, results, keys).

#![warn(missing_docs)]

pub mod capacity;
pub mod clock;
pub mod container;
pub mod contracts;
pub mod features;
pub mod fnv;
pub mod format;
pub mod gofmt;
pub mod local_runner;
pub mod metrics;
pub mod pipeline;
pub mod prober;
pub mod process;
pub mod restart;
pub mod results;
pub mod shim;
pub mod spawned;
pub mod status;
pub mod sync;
#[cfg(test)]
mod test_log;
#[cfg(any(test, feature = "test-util"))]
#[doc(hidden)]
pub mod test_util;
pub mod vocabulary;

pub use features::{Feature, FeatureGateError, FeatureGates};
pub use k8s_openapi;
pub use pipeline::{Pipeline, PipelineConfig, PipelineError, WrapProber};
