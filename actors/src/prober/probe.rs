//! The probe dispatcher. TO BE WRITTEN.

/// Upstream `maxProbeRetries`.
pub const MAX_PROBE_RETRIES: usize = 3;

pub struct Prober;
