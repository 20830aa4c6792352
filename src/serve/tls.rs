//! The listener's TLS: the serving certificate and key, as the kubelet serves its authenticated
//! port (upstream `pkg/kubelet/server` and `cmd/kubelet/app`'s `InitializeTLS`).
//!
//! * `--tls-cert-file` and `--tls-private-key-file` (the kubelet's flags): a PEM certificate
//!   chain (leaf first) and its PEM private key (PKCS#8, PKCS#1 or SEC1). The files are read
//!   again when they change, checked at most once every [`RELOAD_CHECK`] at a handshake, so a
//!   rotated certificate is served without a restart (the kubelet's dynamic serving
//!   certificate does the same); a new pair that cannot be used is logged and the old one kept.
//! * Neither flag, and the private endpoints guarded by webhook authorization: a self-signed
//!   certificate for the node's name, made at start, as the kubelet makes one when it is given
//!   none. A bearer token then never crosses the network in the clear. Clients that scrape
//!   kubelets already skip verifying such a certificate (Prometheus' `insecureSkipVerify`).
//! * Otherwise plain HTTP (standalone on loopback; `always-allow`).
//!
//! The handshake must finish within the header timeout, like a request head (docs/security.md).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

/// How often the certificate files are looked at for a change, at most.
pub const RELOAD_CHECK: Duration = Duration::from_secs(60);

/// Why the listener cannot serve TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {}: {error}", path.display())]
    Read { flag: &'static str, path: PathBuf, error: std::io::Error },
    #[error("{flag} {}: {what}", path.display())]
    Pem { flag: &'static str, path: PathBuf, what: String },
    #[error("--tls-cert-file {} and --tls-private-key-file {}: {what}", cert.display(), key.display())]
    Pair { cert: PathBuf, key: PathBuf, what: String },
    #[error("a self-signed serving certificate for {name}: {what}")]
    SelfSigned { name: String, what: String },
    #[error("TLS configuration: {0}")]
    Config(rustls::Error),
}

/// The certificate and key files a listener serves, and what was last read from them.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// An acceptor serving the pair in `files`, read now; reloaded when the files change.
pub fn from_files(files: CertFiles) -> Result<TlsAcceptor, TlsError> {
    let provider = provider();
    let key = load_pair(&files, &provider)?;
    let stamp = stamp(&files);
    let resolver = Reloading {
        files,
        provider: provider.clone(),
        state: Mutex::new(Loaded { key, stamp, checked: Instant::now(), missing: false }),
    };
    acceptor(provider, Arc::new(resolver))
}

/// An acceptor serving a self-signed certificate for `node_name` (and `localhost`), made now.
pub fn self_signed(node_name: &str) -> Result<TlsAcceptor, TlsError> {
    let provider = provider();
    let certified = self_signed_key(node_name, &provider)?;
    acceptor(provider, Arc::new(Fixed(Arc::new(certified))))
}

fn self_signed_key(node_name: &str, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let failed = |what: String| TlsError::SelfSigned { name: node_name.to_owned(), what };
    let mut names = vec!["localhost".to_owned()];
    if !node_name.is_empty() && node_name != "localhost" {
        names.insert(0, node_name.to_owned());
    }
    let generated = rcgen::generate_simple_self_signed(names).map_err(|e| failed(e.to_string()))?;
    let chain = vec![generated.cert.der().clone()];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(generated.signing_key.serialize_der()));
    CertifiedKey::from_der(chain, key, provider).map_err(|e| failed(e.to_string()))
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn acceptor(
    provider: Arc<CryptoProvider>,
    resolver: Arc<dyn ResolvesServerCert>,
) -> Result<TlsAcceptor, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The most of a certificate or key file read: a chain of PEM certificates is a few KiB.
const MAX_PEM_FILE: u64 = 1024 * 1024;

/// A certificate or key file's bytes. The files are read again while the agent serves, at a
/// connection's handshake on the listener's only thread: a FIFO put in the key's place blocked
/// that thread, and every connection with it, until something wrote to it (a hostile test's
/// finding). So the file is opened without blocking, and only a regular file of at most
/// [`MAX_PEM_FILE`] is read.
fn read_pem_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    if !opened.metadata()?.is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut bytes = Vec::new();
    opened.take(MAX_PEM_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_PEM_FILE {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "larger than 1 MiB"));
    }
    Ok(bytes)
}

/// Reads and checks the pair: the chain, the key, and that the key is the leaf's.
fn load_pair(files: &CertFiles, provider: &CryptoProvider) -> Result<Arc<CertifiedKey>, TlsError> {
    let read = |flag: &'static str, path: &Path| {
        read_pem_file(path).map_err(|error| TlsError::Read { flag, path: path.to_owned(), error })
    };
    let pem =
        |flag: &'static str, path: &Path, what: String| TlsError::Pem { flag, path: path.to_owned(), what };
    let cert_pem = read("--tls-cert-file", &files.cert)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem("--tls-cert-file", &files.cert, pem_text(&e)))?;
    if chain.is_empty() {
        return Err(pem("--tls-cert-file", &files.cert, "no CERTIFICATE block in it".into()));
    }
    let key_pem = read("--tls-private-key-file", &files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        let what = match e {
            rustls::pki_types::pem::Error::NoItemsFound if contains(&key_pem, b"ENCRYPTED PRIVATE KEY") => {
                "an encrypted private key: the agent needs it unencrypted".to_owned()
            }
            rustls::pki_types::pem::Error::NoItemsFound => "no PRIVATE KEY block in it".to_owned(),
            other => pem_text(&other),
        };
        pem("--tls-private-key-file", &files.key, what)
    })?;
    let certified = CertifiedKey::from_der(chain, key, provider).map_err(|error| TlsError::Pair {
        cert: files.cert.clone(),
        key: files.key.clone(),
        what: pair_text(&error),
    })?;
    Ok(Arc::new(certified))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A PEM error in words (the library's own text prints the bytes of a marker as numbers).
fn pem_text(error: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match error {
        Error::MissingSectionEnd { .. } => {
            "invalid PEM: a block without its END line (a cut file?)".to_owned()
        }
        Error::IllegalSectionStart { .. } => "invalid PEM: a BEGIN line that is not well formed".to_owned(),
        Error::Base64Decode(what) => format!("invalid PEM: not base64 inside a block ({what})"),
        Error::NoItemsFound => "no PEM block in it".to_owned(),
        other => format!("invalid PEM: {other}"),
    }
}

/// Why the certificate and the key do not make a pair, in words.
fn pair_text(error: &rustls::Error) -> String {
    match error {
        rustls::Error::InconsistentKeys(_) => {
            "the private key is not the certificate's (the leaf, which must come first in the chain)".to_owned()
        }
        rustls::Error::General(_) => {
            "the private key's kind is not supported (ECDSA P-256 or P-384, RSA of 2048 bits or more, Ed25519)"
                .to_owned()
        }
        other => other.to_string(),
    }
}

/// What tells a changed file: its modification time and length (both files').
type Stamp = Option<[(SystemTime, u64); 2]>;

fn stamp(files: &CertFiles) -> Stamp {
    let one = |path: &Path| std::fs::metadata(path).ok().and_then(|m| Some((m.modified().ok()?, m.len())));
    Some([one(&files.cert)?, one(&files.key)?])
}

/// The pair from files, looked at again at most once every [`RELOAD_CHECK`].
#[derive(Debug)]
struct Reloading {
    files: CertFiles,
    provider: Arc<CryptoProvider>,
    state: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    /// The files' stamp when `key` was read from them.
    stamp: Stamp,
    checked: Instant,
    /// The files could not be looked at, last time: said once.
    missing: bool,
}

impl Reloading {
    fn current(&self, now: Instant) -> Arc<CertifiedKey> {
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        if now.duration_since(state.checked) >= RELOAD_CHECK {
            state.checked = now;
            let stamp = stamp(&self.files);
            if stamp.is_none() {
                if !state.missing {
                    state.missing = true;
                    tracing::warn!(cert = %self.files.cert.display(), key = %self.files.key.display(), "The serving certificate's files cannot be read; serving the one loaded until they can");
                }
            } else if stamp != state.stamp {
                state.missing = false;
                match load_pair(&self.files, &self.provider) {
                    Ok(key) => {
                        tracing::info!(cert = %self.files.cert.display(), "Loaded a new serving certificate");
                        state.key = key;
                        // Taken only once loaded: a pair that cannot be read now (its mode,
                        // no descriptor to spare) is tried again at the next look, though the
                        // files do not change.
                        state.stamp = stamp;
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "Cannot use the changed serving certificate; keeping the one loaded")
                    }
                }
            }
        }
        state.key.clone()
    }
}

impl ResolvesServerCert for Reloading {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current(Instant::now()))
    }
}

/// One pair for the listener's life.
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> Vec<u8> {
        let pair = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        std::fs::write(dir.join("tls.crt"), pair.cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), pair.signing_key.serialize_pem()).unwrap();
        pair.cert.der().to_vec()
    }

    fn leaf(key: &CertifiedKey) -> Vec<u8> {
        key.cert[0].as_ref().to_vec()
    }

    /// A rotated pair is served once the files are looked at again (at most once a minute); a
    /// changed pair that cannot be used leaves the last good one in service.
    #[test]
    fn a_changed_pair_is_served_after_the_next_look_and_a_broken_one_is_not() {
        let dir = std::env::temp_dir().join(format!("probelet-tls-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files = CertFiles { cert: dir.join("tls.crt"), key: dir.join("tls.key") };
        let first = write_pair(&dir, "a.test");
        let provider = provider();
        let start = Instant::now();
        let resolver = Reloading {
            files: files.clone(),
            provider: provider.clone(),
            state: Mutex::new(Loaded {
                key: load_pair(&files, &provider).unwrap(),
                stamp: stamp(&files),
                checked: start,
                missing: false,
            }),
        };
        assert_eq!(leaf(&resolver.current(start)), first);

        let second = write_pair(&dir, "second.example.test");
        assert_eq!(leaf(&resolver.current(start + Duration::from_secs(30))), first, "not looked at yet");
        assert_eq!(leaf(&resolver.current(start + RELOAD_CHECK)), second, "rotated");

        std::fs::write(&files.key, "not a key\n").unwrap();
        assert_eq!(leaf(&resolver.current(start + RELOAD_CHECK * 2)), second, "the broken pair is not taken");
        let third = write_pair(&dir, "third.test");
        assert_eq!(leaf(&resolver.current(start + RELOAD_CHECK * 3)), third, "a mended pair is");

        // A pair that fails to load (here a key cut the same length) is tried again at the
        // next look, though its files then look the same (same length, same time): as a key
        // whose mode is mended, or a read that lacked a descriptor.
        let fourth = write_pair(&dir, "fourth.test");
        let good_key = std::fs::read(&files.key).unwrap();
        let mut broken = good_key.clone();
        let body = broken.iter().position(|&b| b == b'\n').unwrap() + 40;
        broken[body] = if broken[body] == b'A' { b'B' } else { b'A' };
        let when = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let stamp_files = |key: &[u8]| {
            std::fs::write(&files.key, key).unwrap();
            for path in [&files.cert, &files.key] {
                std::fs::File::options().write(true).open(path).unwrap().set_modified(when).unwrap();
            }
        };
        stamp_files(&broken);
        assert_eq!(leaf(&resolver.current(start + RELOAD_CHECK * 4)), third, "the broken key is not taken");
        stamp_files(&good_key);
        assert_eq!(leaf(&resolver.current(start + RELOAD_CHECK * 5)), fourth, "tried again, and taken");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A FIFO in the key's place (or any file that is not a regular file) is refused at once,
    /// not waited on: the reload runs on the listener's only thread.
    #[test]
    fn a_key_that_is_a_fifo_is_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("probelet-tls-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write_pair(&dir, "a.test");
        let files = CertFiles { cert: dir.join("tls.crt"), key: dir.join("tls.key") };
        std::fs::remove_file(&files.key).unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, &files.key, rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR)
            .unwrap();
        let Err(err) = load_pair(&files, &provider()) else { panic!("a FIFO key taken") };
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let folder = CertFiles { cert: dir.clone(), key: files.key.clone() };
        let Err(err) = load_pair(&folder, &provider()) else { panic!("a folder taken for a certificate") };
        assert!(err.to_string().contains("--tls-cert-file"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_self_signed_certificate_names_the_node_and_localhost() {
        let key = self_signed_key("node-a.example", &provider()).unwrap();
        let der = leaf(&key);
        let names = |name: &[u8]| der.windows(name.len()).any(|w| w == name);
        // A subjectAltName dNSName is the name's bytes as they are.
        assert!(names(b"node-a.example") && names(b"localhost"));
        assert_eq!(self_signed("node-a").unwrap().config().alpn_protocols, [b"http/1.1".to_vec()]);
    }
}
