//! The HTTPS probe's TLS client: upstream's `tls.Config{InsecureSkipVerify: true}` with the
//! ring provider (the one process-wide provider kube also uses), offering ALPN `h2, http/1.1`
//! as the kubelet's transport does once apimachinery's `SetTransportDefaults` has enabled
//! HTTP/2 on it (docs/http-probe.md, "HTTP/2 over TLS").

use std::fmt;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// Upstream's `tls.Config{InsecureSkipVerify: true}`: any certificate is accepted, but the
/// handshake signatures are still checked against it (as Go does). Public for the tests'
/// clients of the agent's self-signed listener, which need the same trust.
pub fn insecure_tls_config() -> Result<Arc<ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(SkipServerVerification(provider)))
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The ALPN protocols an HTTPS probe offers, in Go's order: what `SetTransportDefaults` puts in
/// the probe transport's `NextProtos` (its TLS config names none of its own).
pub(crate) const PROBE_ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// The HTTPS probe's configuration: [`insecure_tls_config`], offering ALPN `h2, http/1.1` when
/// `http2` is on, and no protocol at all when off (the kubelet with `DISABLE_HTTP2` set).
pub(crate) fn probe_tls_config(http2: bool) -> Result<Arc<ClientConfig>, String> {
    let config = insecure_tls_config()?;
    if !http2 {
        return Ok(config);
    }
    let mut config = Arc::unwrap_or_clone(config);
    config.alpn_protocols = PROBE_ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

struct SkipServerVerification(Arc<CryptoProvider>);

impl fmt::Debug for SkipServerVerification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SkipServerVerification")
    }
}

impl ServerCertVerifier for SkipServerVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
