//! Exec probes (upstream `pkg/probe/exec`). TO BE WRITTEN.
