//! Talking to a running `probelet` binary: its HTTP address from the start line it prints, and
//! plain `GET`s on its listener (exact status code and body, an optional bearer token).

use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncReadExt, AsyncWriteExt};

/// The `host:port` of the start line (`… http://ADDR/pods, /metrics`), read from the agent's
/// standard output within 60 s.
pub async fn banner_addr(lines: &mut tokio::io::Lines<impl AsyncBufRead + Unpin>) -> String {
    let banner = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let line = lines.next_line().await.unwrap().expect("agent exited before its banner");
            if line.contains("http://") {
                return line;
            }
        }
    })
    .await
    .unwrap();
    let start = banner.find("http://").unwrap() + "http://".len();
    banner[start..start + banner[start..].find('/').unwrap()].to_owned()
}

/// `GET path` on a new connection, with `Authorization: Bearer <token>` when given: the status
/// code and the body.
pub async fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut response))
        .await
        .unwrap()
        .unwrap();
    let code = response[9..12].parse().unwrap();
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (code, body)
}

/// Writes a kubeconfig for an API server at `url` (no credentials) to a temporary file named
/// after `name` and this process, and returns its path.
pub fn kubeconfig_for(url: &str, name: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("probelet-kubeconfig-{name}-{}", std::process::id()));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster: {{server: \"{url}\"}}\nusers:\n- name: fake\n  user: {{}}\ncontexts:\n- name: fake\n  context: {{cluster: fake, user: fake}}\ncurrent-context: fake\n"
        ),
    )
    .unwrap();
    path
}
