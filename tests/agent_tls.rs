//! End to end: the agent binary serving its endpoints over TLS with the certificate it is given
//! (`--tls-cert-file`, `--tls-private-key-file`, the kubelet's flags), and refusing to start on a
//! certificate it cannot use, naming the flag and the file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("probelet-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("manifests")).expect("a temp dir");
    dir
}

/// A self-signed pair for `name`, written as PEM files in `dir`: (cert, key, the cert's DER).
fn write_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf, Vec<u8>) {
    let pair = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
    let (cert, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    std::fs::write(&cert, pair.cert.pem()).unwrap();
    std::fs::write(&key, pair.signing_key.serialize_pem()).unwrap();
    (cert, key, pair.cert.der().to_vec())
}

#[tokio::test]
async fn the_endpoints_are_served_over_tls_with_the_given_certificate() {
    let dir = temp_dir("given");
    let (cert, key, der) = write_pair(&dir, "probelet.test");
    let manifests = dir.join("manifests");
    let args = [
        "run",
        "--manifests",
        manifests.to_str().unwrap(),
        "--tls-cert-file",
        cert.to_str().unwrap(),
        "--tls-private-key-file",
        key.to_str().unwrap(),
    ];
    let agent = support::agent::RunningAgent::start(env!("CARGO_BIN_EXE_probelet"), &args).await;
    assert!(agent.addr.starts_with("https://"), "the start line names https: {}", agent.addr);
    assert_eq!(support::agent::get(&agent.addr, "/healthz", None).await, (200, "ok".into()));
    let (code, pods) = support::agent::get(&agent.addr, "/pods", None).await;
    assert_eq!(code, 200, "standalone on loopback: open, over TLS: {pods}");

    let host = agent.addr.trim_start_matches("https://").to_owned();
    let tcp = tokio::net::TcpStream::connect(&host).await.unwrap();
    let tls = support::tls::trusting_client()
        .connect(rustls::pki_types::ServerName::try_from("probelet.test").unwrap(), tcp)
        .await
        .unwrap();
    let (_, session) = tls.get_ref();
    let served = session.peer_certificates().unwrap();
    assert_eq!(served.len(), 1);
    assert_eq!(served[0].as_ref(), der.as_slice(), "the certificate of --tls-cert-file");
    assert_eq!(session.alpn_protocol(), None, "no ALPN asked, none chosen");

    // Plain HTTP on the TLS port gets Go's answer to it, as from a kubelet's port.
    let mut plain = tokio::net::TcpStream::connect(&host).await.unwrap();
    plain.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(15), plain.read_to_end(&mut answer)).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&answer),
        "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
    );

    agent.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the agent with `tls_args` and returns its exit status and standard error.
async fn refused(dir: &Path, tls_args: &[&str]) -> (Option<i32>, String) {
    let manifests = dir.join("manifests");
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_probelet"))
        .args(["run", "--manifests", manifests.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args(tls_args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output =
        tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await.unwrap().unwrap();
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[tokio::test]
async fn a_certificate_that_cannot_be_used_stops_the_agent_naming_the_flag_and_the_file() {
    let dir = temp_dir("refused");
    let (cert, key, _) = write_pair(&dir, "one.test");
    let (_, other_key, _) = write_pair(&dir, "two.test");
    let not_pem = dir.join("not.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let missing = dir.join("missing.crt");
    let s = |p: &Path| p.to_str().unwrap().to_owned();

    let cases: [(Vec<String>, String); 4] = [
        (
            vec!["--tls-cert-file".into(), s(&missing), "--tls-private-key-file".into(), s(&key)],
            format!("--tls-cert-file {}: No such file or directory", missing.display()),
        ),
        (
            vec!["--tls-cert-file".into(), s(&not_pem), "--tls-private-key-file".into(), s(&key)],
            format!("--tls-cert-file {}: no CERTIFICATE block in it", not_pem.display()),
        ),
        (
            vec!["--tls-cert-file".into(), s(&cert), "--tls-private-key-file".into(), s(&not_pem)],
            format!("--tls-private-key-file {}: no PRIVATE KEY block in it", not_pem.display()),
        ),
        (
            vec!["--tls-cert-file".into(), s(&cert), "--tls-private-key-file".into(), s(&other_key)],
            format!(
                "--tls-cert-file {} and --tls-private-key-file {}: the private key is not the certificate's",
                cert.display(),
                other_key.display()
            ),
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stderr) = refused(&dir, &args).await;
        assert_ne!(code, Some(0), "{args:?}: {stderr}");
        assert!(stderr.contains(&want), "{args:?}: want {want:?} in {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // One flag without the other is a usage error.
    let (code, stderr) = refused(&dir, &["--tls-cert-file", &s(&cert)]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--tls-private-key-file"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
