//! End to end: what the standalone agent's console shows by default and with `-v`. The status
//! transition lines are on standard output, once each and without colour when it is not a
//! terminal; the per-event log lines (`Created container`, `Started container`) only with `-v`.

// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: quiet
spec:
  containers:
  - name: app
    command: [sleep, '300']
    readinessProbe:
      exec:
        command: ['true']
      periodSeconds: 1
";

/// Runs the agent until its pod is Ready, stops it with SIGTERM, and returns (stdout, stderr).
async fn run_agent(extra: &[&str]) -> (Vec<String>, String) {
    let dir = std::env::temp_dir().join(format!("probelet-console-{}-{}", std::process::id(), extra.len()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("quiet.yaml"), POD).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_probelet"))
        .args(["run", "--manifests"])
        .arg(&dir)
        .args(["--listen", "127.0.0.1:0", "--node-name", "console"])
        .args(extra)
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            let done = line.ends_with("default/quiet: Ready=True");
            seen.push(line);
            if done {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(ready, Ok(true), "the pod becomes Ready; output so far: {seen:#?}");
    let pid = child.id().unwrap().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().await.unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");
    while let Ok(Some(line)) = lines.next_line().await {
        seen.push(line);
    }
    let _ = std::fs::remove_dir_all(PathBuf::from(&dir));
    (seen, errors.await.unwrap())
}

#[tokio::test]
async fn the_default_console_tells_each_transition_once_without_event_lines() {
    let (stdout, stderr) = run_agent(&[]).await;
    let ready: Vec<&String> = stdout.iter().filter(|l| l.ends_with("default/quiet: Ready=True")).collect();
    assert_eq!(ready.len(), 1, "{stdout:#?}");
    assert!(stdout.iter().any(|l| l.ends_with("default/quiet: container app started")), "{stdout:#?}");
    assert!(
        !stdout.iter().any(|l| l.contains('\x1b')),
        "no colour when stdout is not a terminal: {stdout:#?}"
    );
    assert!(!stderr.contains('\x1b'), "no colour when stderr is not a terminal: {stderr}");
    for event in ["Created container", "Started container"] {
        assert!(!stderr.contains(event), "{event} is a debug line: {stderr}");
    }
}

#[tokio::test]
async fn verbose_adds_the_event_lines() {
    let (_, stderr) = run_agent(&["-v"]).await;
    for event in ["Created container: app", "Started container app"] {
        assert!(stderr.contains(event), "{event} with -v: {stderr}");
    }
}
