//! A TLS client for tests that trusts whatever certificate a server shows: the agent's
//! self-signed one, as scrapers of kubelets do (`insecureSkipVerify`). Never for anything but
//! a test's own loopback server.

use tokio_rustls::TlsConnector;

/// A connector that completes a handshake with any certificate, still checking that the server
/// holds its key: the HTTPS probe's own configuration (upstream's `InsecureSkipVerify`).
pub fn trusting_client() -> TlsConnector {
    TlsConnector::from(probelet::prober::http::insecure_tls_config().expect("a TLS client configuration"))
}
