//! Status sync to the API server: the syncer actor ([`syncer`]: the queue, the request budget,
//! the timers), each pod's sync state (`pod_sync`), one write (`job`), the pure rules
//! ([`rules`]), the kubelet's status patch ([`patch`]), the request budget ([`rate`]) and the API
//! server's copy of a pod as JSON ([`api_pod`]).

pub mod api_pod;
pub(crate) mod job;
pub mod patch;
pub(crate) mod pod_sync;
pub mod rate;
pub mod rules;
pub mod syncer;

/// The syncer's failure back-off, for the other writers of pod status (the readiness-gate
/// host's condition write).
pub use pod_sync::{Retry, next_failure};
