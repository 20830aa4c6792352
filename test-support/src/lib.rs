//! Test servers and fakes shared by the integration tests under `tests/`, compiled once as a
//! workspace crate instead of into every test binary. A test names it as `support`
//! (`use probelet_test_support as support;`). Every server binds 127.0.0.1 only.
// Test support may panic: a panic here fails the test that called it.
#![allow(clippy::unwrap_used, clippy::expect_used)]
pub mod agent;
pub mod apiserver;
pub mod grpc_server;
pub mod h2_server;
pub mod health;
pub mod http_server;
pub mod kubelet;
pub mod log;
pub mod pods;
pub mod scripted;
pub mod syncer;
pub mod tls;
