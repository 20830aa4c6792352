//! HTTP GET probes (upstream `pkg/probe/http`). TO BE WRITTEN.
