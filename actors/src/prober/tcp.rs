//! TCP socket probes (upstream `pkg/probe/tcp`). TO BE WRITTEN.
