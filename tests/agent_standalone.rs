//! End to end: the real `probelet` binary in standalone mode on a temporary manifests folder.
//! Waits on the agent's own output lines (bounded), never on fixed sleeps.

// The real binary runs on real time: its tests read the real clocks too.
#![allow(clippy::disallowed_methods)]
// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet_test_support as support;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// A free port on 127.0.0.1 (bound, then released for the agent's container to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The agents' standard error, in their manifests folder.
const STDERR: &str = ".agent.stderr";

struct Agent {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
    http: Option<String>,
    dir: PathBuf,
}

impl Agent {
    async fn start(dir: &Path) -> Agent {
        Agent::start_under(dir, &[]).await
    }

    /// The agent run through `wrapper` (e.g. `prlimit --nofile=256:256 --`), which must exec it.
    async fn start_under(dir: &Path, wrapper: &[&str]) -> Agent {
        Agent::start_full(dir, wrapper, &[]).await
    }

    /// [`Agent::start_under`] with `extra` arguments for `probelet run`.
    async fn start_full(dir: &Path, wrapper: &[&str], extra: &[&str]) -> Agent {
        let agent = env!("CARGO_BIN_EXE_probelet");
        let (program, wrapper_args) = match wrapper.split_first() {
            Some((program, args)) => (*program, [args, &[agent]].concat()),
            None => (agent, Vec::new()),
        };
        let mut child = Command::new(program)
            .args(wrapper_args)
            .args(["run", "--manifests"])
            .arg(dir)
            .args(["--listen", "127.0.0.1:0", "--node-name", "e2e"])
            .args(extra)
            .stdout(Stdio::piped())
            // Kept beside the manifests (a dot file, which the scan skips) for a failure's message.
            .stderr(std::fs::File::options().create(true).append(true).open(dir.join(STDERR)).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut agent = Agent { child, lines, seen: Vec::new(), http: None, dir: dir.to_owned() };
        let banner = agent.wait_for(|l| l.contains("http://")).await;
        let start = banner.find("http://").unwrap();
        let rest = &banner[start..];
        agent.http = Some(rest[..rest.find("/pods").unwrap()].to_owned());
        agent
    }

    /// Waits (at most 60 s) for an output line matching `pred`; returns it.
    async fn wait_for(&mut self, pred: impl Fn(&str) -> bool) -> String {
        let index = self.wait_for_after(0, pred).await;
        self.seen[index].clone()
    }

    /// Waits (at most 60 s) for an output line matching `pred` at or after `start` in
    /// [`Self::seen`]; returns its index there.
    async fn wait_for_after(&mut self, start: usize, pred: impl Fn(&str) -> bool) -> usize {
        if let Some(offset) = self.seen.iter().skip(start).position(|l| pred(l)) {
            return start + offset;
        }
        let found = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line.clone());
                if self.seen.len() > start && pred(&line) {
                    return Some(self.seen.len() - 1);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(index)) => index,
            _ => panic!(
                "no matching line within 60 s; output so far:\n{}\nstandard error:\n{}",
                self.seen.join("\n"),
                std::fs::read_to_string(self.dir.join(STDERR)).unwrap_or_default()
            ),
        }
    }

    async fn get(&self, path: &str) -> String {
        let url = format!("{}{path}", self.http.as_deref().unwrap());
        let addr = url.trim_start_matches("http://");
        let (host, path) = addr.split_at(addr.find('/').unwrap());
        let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    async fn stop(mut self) {
        support::agent::stop(&mut self.child, Duration::from_secs(30)).await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Agent {
    /// A test that failed drops a running agent: SIGTERM it and give it a bounded while to stop
    /// its containers (the SIGKILL of `kill_on_drop` would leave them running). Drop cannot
    /// await, so this polls.
    fn drop(&mut self) {
        support::agent::stop_on_drop(&mut self.child);
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("probelet-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, file: &str, contents: &str) {
    let mut f = std::fs::File::create(dir.join(file)).unwrap();
    f.write_all(contents.as_bytes()).unwrap();
}

fn web_pod(name: &str, port: u16, extra_args: &str, liveness: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    command: ["probelet", "demo-target", "--http", "127.0.0.1:{port}"{extra_args}]
    readinessProbe:
      httpGet: {{path: /healthz, port: {port}}}
      periodSeconds: 1
{liveness}"#
    )
}

/// The name of jemalloc's background thread.
const ALLOCATOR_THREAD: &str = "jemalloc_bg_thd";

/// The names of the threads of process `pid`.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect()
}

/// An explicit `background_thread:false` in jemalloc's run-time options runs the agent without
/// the allocator's thread, which `run` starts otherwise (docs/memory.md, "The allocator").
#[actix::test]
async fn an_explicit_allocator_setting_is_left_as_it_says() {
    if !cfg!(feature = "jemalloc") {
        return;
    }
    let dir = temp_dir("malloc-conf");
    write(&dir, "web.yaml", &web_pod("web", free_port(), "", ""));
    let mut agent = Agent::start_under(&dir, &["env", "_RJEM_MALLOC_CONF=background_thread:false"]).await;
    agent.wait_for(|l| l.contains("default/web: Ready=True")).await;
    let threads = thread_names(agent.child.id().unwrap());
    assert!(!threads.iter().any(|name| name == ALLOCATOR_THREAD), "{threads:?}");
    agent.stop().await;
}

#[actix::test]
async fn pod_goes_ready_and_failing_liveness_restarts_it() {
    let dir = temp_dir("ready");
    write(&dir, "web.yaml", &web_pod("web", free_port(), "", ""));
    let flaky_port = free_port();
    write(
        &dir,
        "flaky.yaml",
        &web_pod(
            "flaky",
            flaky_port,
            r#", "--fail-after", "2s""#,
            &format!(
                "    livenessProbe:\n      httpGet: {{path: /livez, port: {flaky_port}}}\n      periodSeconds: 1\n      failureThreshold: 1\n      terminationGracePeriodSeconds: 1\n"
            ),
        ),
    );
    write(
        &dir,
        "broken.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: broken}\nspec:\n  containers: []\n",
    );
    let mut agent = Agent::start(&dir).await;

    agent.wait_for(|l| l.contains("broken.yaml") && l.contains("manifest skipped")).await;
    agent.wait_for(|l| l.contains("default/web: Ready=True")).await;
    if cfg!(feature = "jemalloc") {
        // `run` starts the allocator's background thread; the build's defaults no longer do,
        // so that the container shim runs without one (container_shim.rs).
        let threads = thread_names(agent.child.id().unwrap());
        assert!(threads.iter().any(|name| name == ALLOCATOR_THREAD), "{threads:?}");
    }
    agent
        .wait_for(|l| l.contains("default/flaky: Container app failed liveness probe, will be restarted"))
        .await;
    agent.wait_for(|l| l.contains("default/flaky: container app restarted (restart count 1)")).await;
    let events = agent.get("/events").await;
    assert!(events.contains("\"reason\":\"Killing\""), "{events}");
    assert!(events.contains("Container app failed liveness probe, will be restarted"), "{events}");
    let probes = agent.get("/pods/default/web/probes").await;
    assert!(
        probes.contains("\"probe_type\":\"Readiness\"") && probes.contains("\"result\":\"Success\""),
        "{probes}"
    );
    let pods = agent.get("/pods").await;
    assert!(pods.contains("\"kind\":\"PodList\""), "{pods}");
    assert!(!pods.contains("\"name\":\"broken\""), "the bad pod is skipped");

    // The folder is watched: a new file adds its pod.
    write(&dir, "late.yaml", &web_pod("late", free_port(), "", ""));
    agent.wait_for(|l| l.contains("default/late: added from")).await;
    agent.wait_for(|l| l.contains("default/late: Ready=True")).await;
    // A removed file stops its pod.
    std::fs::remove_file(dir.join("late.yaml")).unwrap();
    agent.wait_for(|l| l.contains("default/late: stopped")).await;
    agent.stop().await;
}

/// A misspelled field (`readinesProbe`) is ignored, as the kubelet ignores it: the pod runs, and
/// without a readiness probe it is Ready at once, which is why the agent says so, once while
/// the field lasts, naming the file and the field as the API server names it.
#[actix::test]
async fn a_misspelled_field_is_told_once_and_the_pod_runs_without_it() {
    let dir = temp_dir("unknown-field");
    write(&dir, "web.yaml", &web_pod("web", free_port(), "", "").replace("readinessProbe", "readinesProbe"));
    let mut agent = Agent::start(&dir).await;
    let told = |l: &str| {
        l.contains("manifest field ignored, as the kubelet ignores it: ")
            && l.ends_with("/web.yaml: unknown field \"spec.containers[0].readinesProbe\"")
    };
    agent.wait_for(told).await;
    agent.wait_for(|l| l.contains("default/web: Ready=True")).await;
    // Scans go on (a new file's pod is added by a later one): the field is not told again.
    write(&dir, "late.yaml", &web_pod("late", free_port(), "", ""));
    agent.wait_for(|l| l.contains("default/late: added from")).await;
    assert_eq!(agent.seen.iter().filter(|l| told(l)).count(), 1, "{:?}", agent.seen);
    agent.stop().await;
}

/// A file of several documents whose second is refused runs its first: the line says that
/// document alone is skipped (`manifest skipped: <file>: document 2: …` read as the whole
/// file skipped, with its first pod running). The refused pod's misspelled field is not said
/// ignored: it said both, of a pod that does not run.
#[actix::test]
async fn a_refused_document_is_said_skipped_alone_and_the_file_runs_the_others() {
    let dir = temp_dir("document-skipped");
    let refused = "apiVersion: v1\nkind: Pod\nmetadata: {name: refused}\nspec:\n  activeDeadlineSeconds: -1\n  \
                   containers: [{name: app, command: [sleep, \"1\"], readinesProbe: {}}]\n";
    write(&dir, "pods.yaml", &format!("{}---\n{refused}", web_pod("web", free_port(), "", "")));
    let mut agent = Agent::start(&dir).await;
    let skipped = agent
        .wait_for(|l| {
            l.contains("/pods.yaml: document 2: Pod \"refused\" is invalid: spec.activeDeadlineSeconds")
        })
        .await;
    assert!(skipped.contains("manifest document skipped (not the whole file): "), "{skipped}");
    assert!(!skipped.contains("manifest skipped: "), "{skipped}");
    agent.wait_for(|l| l.contains("default/web: Ready=True")).await;
    // A later scan (it adds a pod): the refused pod's unknown field was never said.
    write(&dir, "late.yaml", &web_pod("late", free_port(), "", ""));
    agent.wait_for(|l| l.contains("default/late: added from")).await;
    assert!(!agent.seen.iter().any(|l| l.contains("manifest field ignored")), "{:?}", agent.seen);
    agent.stop().await;
}

/// A manifest with a 900 KB key (an explicit one, `? key`: an implicit key is at most 1,024
/// characters, in a `.json` manifest too, which is read as YAML): the line that says it ignored
/// quotes the key's first characters and `…`, as the API server shortens a long value it
/// quotes; it was a 900 KB line.
#[actix::test]
async fn a_long_key_is_cut_in_its_console_line() {
    let dir = temp_dir("long-key");
    let key = "k".repeat(900 * 1024);
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: long}}\n? {key}\n: 1\nspec:\n  containers:\n  - name: app\n    \
         command: [sleep, '1000']\n"
    );
    write(&dir, "long.yaml", &pod);
    let mut agent = Agent::start(&dir).await;
    let told = agent.wait_for(|l| l.contains("manifest field ignored")).await;
    assert!(
        told.ends_with(&format!("/long.yaml: unknown field \"{}…\"", &key[..255])),
        "{}",
        &told[..300.min(told.len())]
    );
    assert!(told.len() < 1024, "a line of {} bytes", told.len());
    agent.stop().await;
}

/// A broken manifest is told once while its contents last, however many scans pass; saved
/// again still broken, with the same error (a comment added), it is told again, as the kubelet
/// logs it at each read of a changed file. It was told once only, and an operator who saved it
/// still broken heard nothing and could take the edit for a fix.
#[actix::test]
async fn a_skipped_manifest_saved_still_broken_is_told_again() {
    let dir = temp_dir("skipped-told-again");
    let broken = "apiVersion: v1\nkind: Pod\nmetadata: {name: broken}\nspec:\n  activeDeadlineSeconds: soon\n  containers: [{name: app, command: [sleep, \"1\"]}]\n";
    write(&dir, "broken.yaml", broken);
    let mut agent = Agent::start(&dir).await;
    let told = |l: &str| {
        l.contains("manifest skipped: ")
            && l.ends_with(
                "/broken.yaml: invalid Pod: spec.activeDeadlineSeconds: invalid type: string \"soon\", expected i64 at line 5, column 26",
            )
    };
    agent.wait_for(told).await;
    // Two more scans at least (each adds one pod): not told again.
    for name in ["one", "two"] {
        write(&dir, &format!("{name}.yaml"), &sleeper_pod(name, &dir.join(format!(".{name}.pids"))));
        agent.wait_for(|l| l.contains(&format!("default/{name}: added from"))).await;
    }
    assert_eq!(agent.seen.iter().filter(|l| told(l)).count(), 1, "{:?}", agent.seen);
    // Saved with a comment added at its end, atomically (a scan never catches it empty).
    write(&dir, ".broken.yaml.tmp", &format!("{broken}# edited\n"));
    std::fs::rename(dir.join(".broken.yaml.tmp"), dir.join("broken.yaml")).unwrap();
    let again = agent.wait_for_after(agent.seen.len(), told).await;
    assert_eq!(agent.seen[..=again].iter().filter(|l| told(l)).count(), 2, "{:?}", agent.seen);
    agent.stop().await;
}

/// With `--feature-gates=ContainerLifecycleProber=true` the probes follow each container:
/// readiness still makes a pod Ready, and a container restarted for its failed liveness probe is
/// probed again (its new instance fails again and is restarted a second time). A startup probe
/// gates readiness until it succeeds.
#[actix::test]
async fn container_lifecycle_prober_probes_started_and_restarted_containers() {
    let dir = temp_dir("lifecycle");
    write(&dir, "web.yaml", &web_pod("web", free_port(), "", ""));
    let slow_port = free_port();
    write(
        &dir,
        "slow.yaml",
        &web_pod(
            "slow",
            slow_port,
            r#", "--start-after", "2s""#,
            &format!(
                "    startupProbe:\n      httpGet: {{path: /healthz, port: {slow_port}}}\n      periodSeconds: 1\n      failureThreshold: 30\n"
            ),
        ),
    );
    let flaky_port = free_port();
    write(
        &dir,
        "flaky.yaml",
        &web_pod(
            "flaky",
            flaky_port,
            r#", "--fail-after", "2s""#,
            &format!(
                "    livenessProbe:\n      httpGet: {{path: /livez, port: {flaky_port}}}\n      periodSeconds: 1\n      failureThreshold: 1\n      terminationGracePeriodSeconds: 1\n"
            ),
        ),
    );
    let mut agent = Agent::start_full(&dir, &[], &["--feature-gates=ContainerLifecycleProber=true"]).await;
    agent.wait_for(|l| l.contains("default/web: Ready=True")).await;
    agent.wait_for(|l| l.contains("default/slow: Ready=True")).await;
    agent.wait_for(|l| l.contains("default/flaky: container app restarted (restart count 1)")).await;
    agent.wait_for(|l| l.contains("default/flaky: container app restarted (restart count 2)")).await;
    let probes = agent.get("/pods/default/slow/probes").await;
    assert!(probes.contains("\"probe_type\":\"Startup\""), "{probes}");
    agent.stop().await;
}

/// `--feature-gates RestartAllContainersOnContainerExits=true`: a container that exits with a
/// code its `RestartAllContainers` rule names restarts the whole pod in place. The pod says so
/// (`AllContainersRestarting` True, then False once every container is removed), its ready
/// container is killed and goes not ready, the init container runs again, every container
/// starts afresh (one restart each) and readiness passes again. The old instance of the ready
/// container is gone before the new one starts, and none is left behind.
#[actix::test]
async fn a_restart_all_containers_rule_restarts_the_pod_in_place() {
    let dir = temp_dir("restart-all");
    let side = temp_dir("restart-all-files");
    let port = free_port();
    let bin = env!("CARGO_BIN_EXE_probelet");
    // `$$` is the API's escape of `$` in a command (`$$$$` is the shell's `$$`).
    let side_path = side.display();
    write(
        &dir,
        "ra.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: ra
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: init
    command: ["sh", "-c", "echo run >> {side_path}/init-runs; if [ -e {side_path}/triggered ]; then until [ -e {side_path}/init-go ]; do sleep 0.05; done; fi"]
  containers:
  - name: app
    command: ["sh", "-c", "for p in $$(cat {side_path}/app-pids 2>/dev/null); do kill -0 $p 2>/dev/null && echo $p >> {side_path}/overlap; done; echo $$$$ >> {side_path}/app-pids; exec {bin} demo-target --http 127.0.0.1:{port}"]
    readinessProbe:
      httpGet: {{path: /healthz, port: {port}}}
      periodSeconds: 1
  - name: trigger
    restartPolicy: Never
    restartPolicyRules:
    - action: RestartAllContainers
      exitCodes: {{operator: In, values: [42]}}
    command: ["sh", "-c", "if [ -e {side_path}/triggered ]; then exec sleep 1000; fi; until [ -e {side_path}/go ]; do sleep 0.1; done; touch {side_path}/triggered; exit 42"]
"#
        ),
    );
    let mut agent =
        Agent::start_full(&dir, &[], &["--feature-gates", "RestartAllContainersOnContainerExits=true"]).await;
    let ready = agent.wait_for_after(0, |l| l.contains("default/ra: Ready=True")).await;
    write(&side, "go", "");
    let restarting = agent
        .wait_for_after(ready, |l| {
            l.contains(
                "default/ra: AllContainersRestarting=True (RestartAllContainersStarted: container exited with restart policy rule)",
            )
        })
        .await;
    agent.wait_for_after(restarting, |l| l.contains("default/ra: Ready=False")).await;
    for container in ["init", "app", "trigger"] {
        agent
            .wait_for_after(restarting, |l| {
                l.contains(&format!("default/ra: container {container} restarted (restart count 1)"))
            })
            .await;
    }
    let cleaned =
        agent.wait_for_after(restarting, |l| l.contains("default/ra: AllContainersRestarting=False")).await;
    // The init container runs again (held until `init-go`): the pod, initialized before, stays
    // `Initialized` meanwhile, as upstream keeps the condition under the gate.
    let response = agent.get("/pods").await;
    let body = &response[response.find("{\"").expect("a JSON body")..];
    let pods: serde_json::Value =
        serde_json::Deserializer::from_str(body).into_iter().next().expect("a pod list").unwrap();
    let initialized = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["metadata"]["name"] == "ra")
        .and_then(|p| {
            p["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == "Initialized").cloned()
        })
        .expect("an Initialized condition");
    assert_eq!(initialized["status"], "True", "{initialized}");
    write(&side, "init-go", "");
    let again = agent.wait_for_after(cleaned, |l| l.contains("default/ra: container app running")).await;
    agent.wait_for_after(again, |l| l.contains("default/ra: Ready=True")).await;
    assert!(
        !agent.seen[restarting..].iter().any(|l| l.contains("phase Failed") || l.contains("phase Succeeded")),
        "the pod never ends on the way:\n{}",
        agent.seen[restarting..].join("\n")
    );
    assert_eq!(
        std::fs::read_to_string(side.join("init-runs")).unwrap(),
        "run\nrun\n",
        "the init container ran again"
    );
    let pids: Vec<u32> = std::fs::read_to_string(side.join("app-pids"))
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "app started twice: {pids:?}");
    assert!(!Path::new(&format!("/proc/{}", pids[0])).exists(), "the first app is gone");
    assert!(Path::new(&format!("/proc/{}", pids[1])).exists(), "the second app runs");
    assert!(!side.join("overlap").exists(), "the first app was still running when the second started");
    agent.stop().await;
    assert!(!Path::new(&format!("/proc/{}", pids[1])).exists(), "nothing is left behind");
    let _ = std::fs::remove_dir_all(&side);
}

#[test]
fn a_bad_feature_gate_is_refused_with_the_kubelets_words() {
    let cases = [
        ("Foo=true", "unrecognized feature gate: Foo"),
        (
            "ContainerLifecycleProber=maybe",
            "invalid value of ContainerLifecycleProber=maybe, err: strconv.ParseBool: parsing \"maybe\": invalid syntax",
        ),
        (
            "InPlacePodVerticalScaling=false",
            "cannot set feature gate InPlacePodVerticalScaling to false, feature is locked to true",
        ),
    ];
    for (value, message) in cases {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_probelet"))
            .args(["run", "--manifests", "/nonexistent", "--feature-gates", value])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{value}: a usage error");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(message), "{value}: {stderr}");
    }
}

/// A command line no agent can run exits 2, as clap's own usage errors do, with the error and
/// the usage and nothing more, even under `RUST_BACKTRACE=1`; an agent that cannot start exits
/// 1 with one line. Before, `run` without a mode exited 1, and both printed a backtrace.
#[test]
fn usage_errors_exit_2_and_failures_exit_1_with_no_backtrace() {
    let run = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_probelet"))
            .arg("run")
            .args(args)
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let usage = [
        (&[][..], "error: nothing to run: give --manifests DIR"),
        (
            &["--manifests", "/nonexistent", "--authorization-mode", "webhook"],
            "error: --authorization-mode webhook needs cluster mode",
        ),
        (
            &["--manifests", "/nonexistent", "--listen", "127.0.0.1:9", "--healthz-listen", "127.0.0.1:9"],
            "error: --healthz-listen 127.0.0.1:9 is the address of --listen",
        ),
        (&["--manifests", "/nonexistent", "--no-such-flag"], "error: unexpected argument '--no-such-flag'"),
    ];
    for (args, error) in usage {
        let (code, stderr) = run(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with(error), "{args:?}: {stderr}");
        assert!(stderr.contains("Usage: probelet run"), "{args:?}: {stderr}");
        assert!(!stderr.contains("acktrace"), "{args:?}: {stderr}");
    }
    let (code, stderr) = run(&["--manifests", "/nonexistent"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr, "Error: manifests folder /nonexistent: no such folder\n");
}

fn sidecar_pod(name: &str, policy: &str, proxy_port: u16, app_args: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: {policy}
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: proxy
    restartPolicy: Always
    command: ["probelet", "demo-target", "--http", "127.0.0.1:{proxy_port}", "--start-after", "2s"]
    startupProbe:
      httpGet: {{path: /healthz, port: {proxy_port}}}
      periodSeconds: 1
      failureThreshold: 30
  containers:
  - name: app
    command: ["probelet", "demo-target"{app_args}]
"#
    )
}

#[actix::test]
async fn a_sidecar_pod_runs_its_app_once_the_sidecar_started_and_completes() {
    let dir = temp_dir("sidecar");
    write(&dir, "side.yaml", &sidecar_pod("side", "Always", free_port(), ""));
    write(
        &dir,
        "job.yaml",
        &sidecar_pod("job", "Never", free_port(), r#", "--exit-after", "1s", "--exit-code", "0""#),
    );
    let mut agent = Agent::start(&dir).await;

    let position = |agent: &Agent, text: &str| agent.seen.iter().position(|l| l.ends_with(text));
    agent.wait_for(|l| l.ends_with("default/side: container app running")).await;
    let app = position(&agent, "default/side: container app running").unwrap();
    let started = position(&agent, "default/side: container proxy started");
    let output = agent.seen.join("\n");
    assert!(started.is_some_and(|s| s < app), "app ran only after proxy had started:\n{output}");
    agent.wait_for(|l| l.ends_with("default/side: phase Running")).await;

    // The job's app completes; its sidecar is stopped and the pod succeeds.
    agent.wait_for(|l| l.ends_with("default/job: container app terminated (Completed, exit code 0)")).await;
    agent.wait_for(|l| l.contains("default/job: container proxy terminated")).await;
    agent.wait_for(|l| l.ends_with("default/job: phase Succeeded")).await;
    let pods = agent.get("/pods").await;
    assert!(pods.contains("\"phase\":\"Succeeded\""), "{pods}");
    agent.stop().await;
}

/// `ContainerRestartRules` (on by default, as in v1.35), end to end: in a `Never` pod a
/// container whose own policy is `Always` is restarted after a clean exit, the pod stays
/// Running (not Succeeded) and its restarted instance is probed and turns ready again, with no
/// status update refused on the way; in an `Always` pod a container whose own policy is
/// `OnFailure` completes after a clean exit, and so does its pod.
#[actix::test]
async fn a_containers_own_restart_policy_restarts_it_in_a_never_pod() {
    let dir = temp_dir("own-policy");
    let port = free_port();
    write(
        &dir,
        "own.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: own
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    restartPolicy: Always
    command: ["probelet", "demo-target", "--http", "127.0.0.1:{port}", "--exit-after", "2s", "--exit-code", "0"]
    readinessProbe:
      httpGet: {{path: /healthz, port: {port}}}
      periodSeconds: 1
"#
        ),
    );
    write(
        &dir,
        "job.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: job}\nspec:\n  restartPolicy: Always\n  containers:\n  - name: once\n    restartPolicy: OnFailure\n    command: [\"true\"]\n",
    );
    let mut agent = Agent::start(&dir).await;
    let ready = agent.wait_for_after(0, |l| l.contains("default/own: Ready=True")).await;
    // The exit and the restart may be seen in one status pass (the restart comes within
    // milliseconds), so the two lines come in either order; both follow the first Ready=True.
    let exited = agent.wait_for_after(ready, |l| l.contains("default/own: Ready=False")).await;
    let restarted = agent
        .wait_for_after(ready, |l| l.contains("default/own: container app restarted (restart count 1)"))
        .await;
    // The restarted instance is probed and turns ready again.
    agent.wait_for_after(exited.max(restarted), |l| l.contains("default/own: Ready=True")).await;
    agent.wait_for(|l| l.ends_with("default/job: phase Succeeded")).await;
    let output = agent.seen.join("\n");
    assert!(!output.contains("default/own: phase Succeeded") && !output.contains("phase Failed"), "{output}");
    assert!(!output.contains("Status update on pod aborted"), "{output}");
    assert!(!output.contains("default/job: container once restarted"), "{output}");
    let pods = agent.get("/pods").await;
    assert!(pods.contains("\"phase\":\"Running\""), "own is still running: {pods}");
    agent.stop().await;
}

/// A container a liveness probe kills, answering SIGTERM with exit 0 under `OnFailure`: it is
/// restarted, and the pod is never called Failed on the way (under `ContainerRestartRules` a
/// phase read from that exit code alone would be, and its probes would stop for good); the new
/// instance is probed and killed again.
#[actix::test]
async fn a_probe_kill_answered_with_exit_zero_under_on_failure_keeps_the_pod_running() {
    let dir = temp_dir("kill-exit-0");
    write(
        &dir,
        "t.yaml",
        r#"apiVersion: v1
kind: Pod
metadata: {name: t}
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    command: ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"]
    livenessProbe: {exec: {command: ["false"]}, periodSeconds: 1, failureThreshold: 2}
    readinessProbe: {exec: {command: ["false"]}, periodSeconds: 1}
"#,
    );
    let mut agent = Agent::start(&dir).await;
    let restarted =
        agent.wait_for_after(0, |l| l.contains("default/t: container app restarted (restart count 1)")).await;
    agent
        .wait_for_after(restarted, |l| {
            l.contains("default/t: Container app failed liveness probe, will be restarted")
        })
        .await;
    let output = agent.seen.join("\n");
    assert!(!output.contains("phase Failed") && !output.contains("phase Succeeded"), "{output}");
    assert!(!output.contains("Ready=True"), "its readiness probe always fails: {output}");
    agent.stop().await;
}

/// A pod whose stop takes its whole grace period: `stubborn` ignores SIGTERM (and so do the
/// `sleep`s it starts) and is SIGKILLed when the grace runs out.
fn slow_to_stop_pod(name: &str, port: u16) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: app
    command: ["probelet", "demo-target", "--http", "127.0.0.1:{port}"]
    readinessProbe:
      httpGet: {{path: /healthz, port: {port}}}
      periodSeconds: 1
  - name: stubborn
    command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]
"#
    )
}

/// Moving a manifest out and back in (the usual restart of a static pod) brings back the same
/// UID while the old pod is still stopping: the old pod stops first, then the pod starts afresh.
#[actix::test]
async fn a_pod_added_back_while_stopping_restarts_once_stopped() {
    let dir = temp_dir("readd");
    let manifest = slow_to_stop_pod("again", free_port());
    write(&dir, "again.yaml", &manifest);
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/again: Ready=True")).await;

    std::fs::remove_file(dir.join("again.yaml")).unwrap();
    let stopping = agent
        .wait_for_after(0, |l| l.ends_with("default/again: removed (file deleted), stopping its containers"))
        .await;
    // Back well within the 5 s grace: the next rescan (every 2 s) sees it while the old pod stops.
    write(&dir, "again.yaml", &manifest);
    let stopped = agent.wait_for_after(stopping, |l| l.ends_with("default/again: stopped")).await;
    let added = agent.wait_for_after(stopping, |l| l.contains("default/again: added from")).await;
    let output = agent.seen.join("\n");
    assert!(stopped < added, "stopped before added again:\n{output}");

    let running = agent.wait_for_after(added, |l| l.ends_with("default/again: container app running")).await;
    agent.wait_for_after(added, |l| l.ends_with("default/again: container stubborn running")).await;
    let ready = agent.wait_for_after(running, |l| l.ends_with("default/again: Ready=True")).await;
    let output = agent.seen.join("\n");
    assert!(
        !agent.seen[added..=ready].iter().any(|l| l.contains("default/again: stopped")),
        "the restarted pod is not stopped:\n{output}"
    );
    let pods = agent.get("/pods").await;
    assert!(pods.contains("\"name\":\"again\""), "{pods}");
    agent.stop().await;
}

/// A manifest edited into a new pod (a new UID under the same name) starts only once the old
/// pod has stopped, as the kubelet starts a static pod: the two copies never run together.
#[actix::test]
async fn a_changed_manifest_starts_its_new_pod_once_the_old_one_stopped() {
    let dir = temp_dir("changed");
    let pidfile = dir.join("stubborn.pids");
    let old = stubborn_pod("changed", 3, &pidfile);
    write(&dir, "changed.yaml", &old);
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/changed: container stubborn running")).await;
    let first = wait_for_pids(&pidfile, 1).await[0];

    let new = old.replace("  name: changed\n", "  name: changed\n  labels: {version: \"2\"}\n");
    assert_ne!(new, old);
    write(&dir, ".changed.tmp", &new);
    std::fs::rename(dir.join(".changed.tmp"), dir.join("changed.yaml")).unwrap();
    let stopping = agent
        .wait_for_after(0, |l| {
            l.ends_with("default/changed: removed (file changed), stopping its containers")
        })
        .await;
    let stopped = agent.wait_for_after(stopping, |l| l.ends_with("default/changed: stopped")).await;
    let added = agent.wait_for_after(stopping, |l| l.contains("default/changed: added from")).await;
    assert!(stopped < added, "the old pod stopped before the new one was added:\n{}", agent.seen.join("\n"));
    let second = wait_for_pids(&pidfile, 2).await[1];
    assert!(process_gone(first), "the old copy is gone once the new one runs");
    assert!(!process_gone(second));
    agent.stop().await;
    assert_gone(&[second]).await;
}

/// A manifest dropped beside a running one with the same namespace/name, first in file-name
/// order, does not stop the running pod: it is refused once, naming both files and
/// `metadata.name`, and starts only once the running pod's file is gone
/// (docs/reliability.md, "A new manifest never displaces a running pod"). Before, the running
/// pod was stopped and the newcomer started in its place.
#[actix::test]
async fn a_new_manifest_does_not_displace_the_running_pod_of_its_name() {
    let dir = temp_dir("displace");
    let (running_pids, newcomer_pids) = (dir.join(".b.pids"), dir.join(".a.pids"));
    write(&dir, "b.yaml", &sleeper_pod("web", &running_pids));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/web: container sleeper running")).await;
    let running = wait_for_pids(&running_pids, 1).await[0];

    write(&dir, ".a.tmp", &sleeper_pod("web", &newcomer_pids));
    std::fs::rename(dir.join(".a.tmp"), dir.join("a.yaml")).unwrap();
    let refused = agent
        .wait_for(|l| {
            l.contains("manifest skipped: ") && l.contains("a.yaml: metadata.name: Duplicate value: \"web\"")
        })
        .await;
    assert!(refused.contains("b.yaml; this one is not started while it does"), "{refused}");
    // A later scan's pod is told after all the refusing scan told: nothing of web's in between.
    write(&dir, "marker.yaml", &sleeper_pod("marker", &dir.join(".marker.pids")));
    let marker = agent.wait_for_after(0, |l| l.contains("default/marker: added from")).await;
    let web_changes: Vec<&String> = agent.seen[..marker]
        .iter()
        .filter(|l| l.contains("default/web: removed") || l.contains("default/web: added"))
        .collect();
    assert_eq!(web_changes.len(), 1, "only b.yaml's pod was added: {web_changes:?}");
    assert!(!process_gone(running), "the running pod's container still runs");
    assert!(pids_in(&newcomer_pids).is_empty(), "the newcomer never ran");

    // The running pod's file removed: the newcomer starts, once the running pod has stopped.
    std::fs::remove_file(dir.join("b.yaml")).unwrap();
    let stopped = agent.wait_for_after(marker, |l| l.ends_with("default/web: stopped")).await;
    agent.wait_for_after(stopped, |l| l.contains("default/web: added from") && l.ends_with("a.yaml")).await;
    let newcomer = wait_for_pids(&newcomer_pids, 1).await[0];
    assert!(process_gone(running));
    assert_eq!(
        agent.seen.iter().filter(|l| l.contains("Duplicate value")).count(),
        1,
        "told once: {:?}",
        agent.seen
    );
    agent.stop().await;
    assert_gone(&[newcomer]).await;
}

/// A hostile test's finding: a running manifest rewritten in place slowly (truncated, then its
/// own contents written 30 bytes at a time, 0.6 s apart, as `cp` of a large file or `dd` in
/// small blocks writes) was caught failing at two scans in a row, and the second one stopped
/// its pod (`removed (file does not load)`), which started again once the file was whole. The
/// pod now runs on while the file changes from scan to scan, and each scan that holds it says
/// `manifest held:` (it said `manifest skipped:`, the opposite of what followed).
#[actix::test]
async fn a_running_manifest_written_slowly_in_place_keeps_its_container() {
    let dir = temp_dir("slow-write");
    let pids = dir.join(".web.pids");
    let manifest = sleeper_pod("web", &pids);
    write(&dir, "web.yaml", &manifest);
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/web: container sleeper running")).await;
    let running = wait_for_pids(&pids, 1).await[0];

    let mut file = std::fs::File::create(dir.join("web.yaml")).unwrap();
    for chunk in manifest.as_bytes().chunks(30) {
        tokio::time::sleep(Duration::from_millis(600)).await;
        file.write_all(chunk).unwrap();
    }
    drop(file);
    // A later scan's pod is told after all the earlier scans told.
    write(&dir, "marker.yaml", &sleeper_pod("marker", &dir.join(".marker.pids")));
    let marker = agent.wait_for(|l| l.contains("default/marker: added from")).await;
    let marker = agent.seen.iter().position(|l| *l == marker).unwrap();
    let told = &agent.seen[..marker];
    assert!(told.iter().any(|l| l.contains("manifest held: ") && l.contains("web.yaml")), "{told:?}");
    assert!(!told.iter().any(|l| l.contains("manifest skipped")), "{told:?}");
    assert!(!told.iter().any(|l| l.contains("default/web: removed")), "{told:?}");
    assert!(!process_gone(running), "the container still runs");
    assert_eq!(pids_in(&pids), vec![running], "started once");
    agent.stop().await;
    assert_gone(&[running]).await;
}

/// A running manifest that cannot be read is held, as the kubelet keeps its pod until its next
/// full read of the folder (20 s): readable again within the hold, its container runs on
/// untouched; unreadable for longer, its pod stops (`removed (file unreadable)`) and the refused
/// newcomer of its name starts. Before, the pod ran on for good from a file nobody could read.
/// A `chmod 000` makes it unreadable; root reads any file, so as root a link to the reader's
/// own memory (which opens and fails to read, `EIO`) is put in its place instead.
#[actix::test]
async fn a_running_manifest_that_cannot_be_read_is_held_then_its_pod_stops() {
    let dir = temp_dir("unreadable-held");
    let (pids, newcomer_pids) = (dir.join(".web.pids"), dir.join(".a.pids"));
    let manifest = sleeper_pod("web", &pids);
    write(&dir, "web.yaml", &manifest);
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/web: container sleeper running")).await;
    let running = wait_for_pids(&pids, 1).await[0];
    write(&dir, ".a.tmp", &sleeper_pod("web", &newcomer_pids));
    std::fs::rename(dir.join(".a.tmp"), dir.join("a.yaml")).unwrap();
    agent.wait_for(|l| l.contains("a.yaml: metadata.name: Duplicate value: \"web\"")).await;

    let file = dir.join("web.yaml");
    let root = rustix::process::geteuid().is_root();
    if root {
        eprintln!("running as root, which chmod 000 does not stop: a link to /proc/self/mem (EIO) instead");
    }
    // Each change is atomic (a rename over the file): a missing manifest stops its pod at once.
    let unreadable = || {
        use std::os::unix::fs::PermissionsExt as _;
        if root {
            std::os::unix::fs::symlink("/proc/self/mem", dir.join(".web.link")).unwrap();
            std::fs::rename(dir.join(".web.link"), &file).unwrap();
        } else {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o000)).unwrap();
        }
    };
    let readable = || {
        use std::os::unix::fs::PermissionsExt as _;
        if root {
            write(&dir, ".web.tmp", &manifest);
            std::fs::rename(dir.join(".web.tmp"), &file).unwrap();
        } else {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
    };
    let held = |l: &str| l.contains("manifest held: ") && l.contains("web.yaml: the file cannot be read;");

    // Unreadable for a moment.
    unreadable();
    let caught = agent.wait_for_after(0, held).await;
    readable();
    // A later scan's pod is told after all the earlier scans told.
    write(&dir, "marker.yaml", &sleeper_pod("marker", &dir.join(".marker.pids")));
    let marker = agent.wait_for_after(caught, |l| l.contains("default/marker: added from")).await;
    let told = &agent.seen[..marker];
    assert!(!told.iter().any(|l| l.contains("default/web: removed")), "{told:?}");
    assert!(!told.iter().any(|l| l.contains("manifest skipped") && l.contains("/web.yaml: ")), "{told:?}");
    assert!(!process_gone(running), "the container still runs");
    assert_eq!(pids_in(&pids), vec![running], "started once");

    // Unreadable for good: held for 10 scans (20 s), then the pod stops and the newcomer starts.
    let since = tokio::time::Instant::now();
    unreadable();
    let caught = agent.wait_for_after(marker, held).await;
    let removed = agent
        .wait_for_after(caught, |l| {
            l.ends_with("default/web: removed (file unreadable), stopping its containers")
        })
        .await;
    assert!(since.elapsed() >= Duration::from_secs(15), "held {:?} only", since.elapsed());
    let added = agent.wait_for_after(removed, |l| l.contains("default/web: added from")).await;
    assert!(agent.seen[added].ends_with("a.yaml"), "{}", agent.seen[added]);
    assert_gone(&[running]).await;
    assert_eq!(wait_for_pids(&newcomer_pids, 1).await.len(), 1, "the newcomer runs");
    readable();
    agent.stop().await;
}

/// A hostile test's finding: the agent's restart handed a running pod's name to the file that
/// was refused. `b.yaml` runs `web`, `a.yaml` (a stray copy, first in file-name order) is
/// refused; the agent is SIGKILLed (a crash, an upgrade, a reboot) and started again on the
/// same folder. Its first scan was made as if nothing had run, so `a.yaml` won. The state
/// directory's records say which pod UID ran, and that pod, unchanged, gets its name back.
#[actix::test]
async fn after_a_crash_the_running_pod_keeps_its_name_against_a_refused_newcomer() {
    let dir = temp_dir("displace-crash");
    let (running_pids, newcomer_pids) = (dir.join(".b.pids"), dir.join(".a.pids"));
    write(&dir, "b.yaml", &sleeper_pod("web", &running_pids));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/web: container sleeper running")).await;
    let first = wait_for_pids(&running_pids, 1).await[0];
    write(&dir, ".a.tmp", &sleeper_pod("web", &newcomer_pids));
    std::fs::rename(dir.join(".a.tmp"), dir.join("a.yaml")).unwrap();
    agent.wait_for(|l| l.contains("a.yaml: metadata.name: Duplicate value: \"web\"")).await;

    signal_agent(&agent, "-KILL");
    agent.child.wait().await.unwrap();
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.contains("killed 1 container process group(s) a previous agent left running")).await;
    let added = agent.wait_for(|l| l.contains("default/web: added from")).await;
    agent.wait_for(|l| l.ends_with("default/web: container sleeper running")).await;
    assert_gone(&[first]).await;
    assert!(added.ends_with("b.yaml"), "the pod that ran before the crash runs again: {added}");
    assert!(pids_in(&newcomer_pids).is_empty(), "the refused newcomer never runs");
    assert_eq!(wait_for_pids(&running_pids, 2).await.len(), 2);
    agent.stop().await;
}

/// An agent restarted while the running manifest is caught empty (written in place, as the
/// crash came) holds it as the crashed agent did: the refused newcomer stays refused, and the
/// manifest, once written, runs its pod under its name. The new agent's first scan had no grace
/// for it and gave the name to the newcomer (a hostile test).
#[actix::test]
async fn an_agent_restarted_while_the_running_manifest_is_caught_empty_keeps_its_name() {
    let dir = temp_dir("held-restart");
    let (running_pids, newcomer_pids) = (dir.join(".b.pids"), dir.join(".a.pids"));
    let manifest = sleeper_pod("web", &running_pids);
    write(&dir, "b.yaml", &manifest);
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/web: container sleeper running")).await;
    write(&dir, ".a.tmp", &sleeper_pod("web", &newcomer_pids));
    std::fs::rename(dir.join(".a.tmp"), dir.join("a.yaml")).unwrap();
    agent.wait_for(|l| l.contains("a.yaml: metadata.name: Duplicate value: \"web\"")).await;
    write(&dir, "b.yaml", "");
    agent.wait_for(|l| l.contains("manifest held:") && l.contains("b.yaml")).await;

    signal_agent(&agent, "-KILL");
    agent.child.wait().await.unwrap();
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.contains("manifest held:") && l.contains("b.yaml")).await;
    write(&dir, "b.yaml", &manifest);
    let added = agent.wait_for(|l| l.contains("default/web: added from")).await;
    assert!(
        added.ends_with("b.yaml"),
        "the file that ran the name keeps it: {added}\n{}",
        agent.seen.join("\n")
    );
    assert!(
        agent.seen.iter().any(|l| l.contains("a.yaml") && l.contains("before this agent started")),
        "{}",
        agent.seen.join("\n")
    );
    agent.wait_for(|l| l.ends_with("default/web: container sleeper running")).await;
    assert!(pids_in(&newcomer_pids).is_empty(), "the refused newcomer never runs");
    agent.stop().await;
}

/// A second restart while the hold of the first lasts: `a.yaml` runs `web` (and `c.yaml`
/// `other`); the agent is SIGKILLed as `a.yaml` is being written in place, the next agent holds
/// it and refuses `b.yaml`, a newcomer of `web`, and is SIGKILLed in turn. The third agent
/// still holds `a.yaml` and refuses `b.yaml`; once whole, `a.yaml` runs `web`. The second
/// agent's record of the running pods named only what it ran (`other`, started again): the
/// third agent had nothing to hold `a.yaml` by, and `b.yaml` took the name (a known gap).
#[actix::test]
async fn a_manifest_held_at_start_keeps_its_name_across_a_second_restart() {
    let dir = temp_dir("held-second-restart");
    let (running_pids, newcomer_pids) = (dir.join(".a.pids"), dir.join(".b.pids"));
    let manifest = sleeper_pod("web", &running_pids);
    write(&dir, "a.yaml", &manifest);
    write(&dir, "c.yaml", &sleeper_pod("other", &dir.join(".c.pids")));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/web: container sleeper running")).await;
    agent.wait_for(|l| l.ends_with("default/other: container sleeper running")).await;
    signal_agent(&agent, "-KILL");
    agent.child.wait().await.unwrap();

    // Written in place, slowly: half written, a little further at each write (each one a rename,
    // so that no scan catches it otherwise), for as long as the test needs.
    let writing = Arc::new(AtomicBool::new(true));
    let writer = tokio::spawn({
        let (dir, writing) = (dir.clone(), writing.clone());
        async move {
            let mut n = 0;
            while writing.load(Ordering::SeqCst) {
                n += 1;
                let half = format!(
                    "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers: [\n# {n}\n"
                );
                write(&dir, ".a.tmp", &half);
                std::fs::rename(dir.join(".a.tmp"), dir.join("a.yaml")).unwrap();
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    });
    let held = |l: &str| l.contains("manifest held:") && l.contains("a.yaml");
    let refused = |l: &str| l.contains("b.yaml") && l.contains("before this agent started");
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(held).await;
    write(&dir, ".b.tmp", &sleeper_pod("web", &newcomer_pids));
    std::fs::rename(dir.join(".b.tmp"), dir.join("b.yaml")).unwrap();
    agent.wait_for(refused).await;
    agent.wait_for(|l| l.ends_with("default/other: container sleeper running")).await;
    signal_agent(&agent, "-KILL");
    agent.child.wait().await.unwrap();

    let mut agent = Agent::start(&dir).await;
    // Either line ends the wait: without the reservation, `b.yaml` takes the name.
    let told = agent.wait_for(|l| refused(l) || l.contains("default/web: added from")).await;
    assert!(refused(&told), "the newcomer waits for the held file: {told}\n{}", agent.seen.join("\n"));
    writing.store(false, Ordering::SeqCst);
    writer.await.unwrap();
    write(&dir, ".a.tmp", &manifest);
    std::fs::rename(dir.join(".a.tmp"), dir.join("a.yaml")).unwrap();
    let added = agent.wait_for(|l| l.contains("default/web: added from")).await;
    assert!(added.ends_with("a.yaml"), "the file that ran the name keeps it: {added}");
    agent.wait_for(|l| l.ends_with("default/web: container sleeper running")).await;
    assert!(pids_in(&newcomer_pids).is_empty(), "the refused newcomer never runs");
    agent.stop().await;
}

/// A graceful restart (an upgrade under systemd: SIGTERM, then a new agent) stops every
/// container first, and each stopped container's record is removed: the records alone left the
/// next agent nothing to go by, and the refused newcomer first in file-name order took the name
/// (found by review). The state directory names the running pods in a file of its own.
#[actix::test]
async fn after_a_graceful_restart_the_running_pod_keeps_its_name_against_a_refused_newcomer() {
    let dir = temp_dir("displace-graceful");
    let (running_pids, newcomer_pids) = (dir.join(".b.pids"), dir.join(".a.pids"));
    write(&dir, "b.yaml", &sleeper_pod("web", &running_pids));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/web: container sleeper running")).await;
    wait_for_pids(&running_pids, 1).await;
    write(&dir, ".a.tmp", &sleeper_pod("web", &newcomer_pids));
    std::fs::rename(dir.join(".a.tmp"), dir.join("a.yaml")).unwrap();
    agent.wait_for(|l| l.contains("a.yaml: metadata.name: Duplicate value: \"web\"")).await;

    signal_agent(&agent, "-TERM");
    assert!(agent.child.wait().await.unwrap().success());
    let mut agent = Agent::start(&dir).await;
    let added = agent.wait_for(|l| l.contains("default/web: added from")).await;
    assert!(added.ends_with("b.yaml"), "the pod that ran before the restart runs again: {added}");

    // Edited while no agent ran (a new pod, a new UID): its file still keeps the name; file
    // order gave it to the newcomer before.
    signal_agent(&agent, "-TERM");
    assert!(agent.child.wait().await.unwrap().success());
    let edited = sleeper_pod("web", &running_pids)
        .replace("  name: web\n", "  name: web\n  labels: {edited: \"yes\"}\n");
    write(&dir, "b.yaml", &edited);
    let mut agent = Agent::start(&dir).await;
    let added = agent.wait_for(|l| l.contains("default/web: added from")).await;
    assert!(added.ends_with("b.yaml"), "the file that ran the name keeps it, edited: {added}");
    agent.stop().await;
}

/// One agent per manifests folder: a second one is refused, even with a state directory of its
/// own, and even after the folder (and the first agent's state directory in it) was deleted and
/// made again; two would run every container twice.
#[actix::test]
async fn a_second_agent_on_the_same_folder_is_refused() {
    let dir = temp_dir("claimed");
    let pidfile = dir.join("one.pids");
    let manifest = sleeper_pod("one", &pidfile);
    write(&dir, "one.yaml", &manifest);
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/one: container sleeper running")).await;
    let elsewhere = temp_dir("claimed-state");
    let refused = second_agent(&dir, &elsewhere).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("served by another running agent"), "{stderr}");

    // The folder deleted and made again, with its manifest: still the first agent's.
    std::fs::remove_dir_all(&dir).unwrap();
    let stopped = agent.wait_for_after(0, |l| l.ends_with("default/one: stopped")).await;
    std::fs::create_dir_all(&dir).unwrap();
    write(&dir, "one.yaml", &manifest);
    agent.wait_for_after(stopped, |l| l.contains("default/one: added from")).await;
    let refused = second_agent(&dir, &elsewhere).await;
    assert!(!refused.status.success(), "{}", String::from_utf8_lossy(&refused.stderr));
    assert_eq!(
        std::fs::read_dir(&elsewhere).map(|d| d.count()).unwrap_or(0),
        0,
        "the refused agent wrote no state"
    );
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&elsewhere);
}

/// A state directory that records the containers of an agent still running (its lock lost, as
/// when the folder was deleted under that agent and made again) is refused by a second agent:
/// it kills none of them. (A second agent took it for a crashed agent's and killed a live
/// container.)
#[actix::test]
async fn records_of_a_running_agents_containers_are_not_leftovers() {
    let dir = temp_dir("live-records");
    let pidfile = dir.join("one.pids");
    write(&dir, "one.yaml", &sleeper_pod("one", &pidfile));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/one: container sleeper running")).await;
    let sleeper = wait_for_pids(&pidfile, 1).await[0];

    // The running agent's records, where a second agent on another folder looks.
    let other = temp_dir("live-records-other");
    let state = temp_dir("live-records-state");
    std::fs::create_dir_all(state.join("containers")).unwrap();
    for entry in std::fs::read_dir(dir.join(".probelet-state/containers")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), state.join("containers").join(entry.file_name())).unwrap();
    }
    let refused = second_agent(&other, &state).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("records containers of the running agent"), "{stderr}");
    assert!(!process_gone(sleeper), "the running agent's container was left alone");

    agent.stop().await;
    for dir in [&other, &state] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// An agent started with almost no file descriptor to spare (a soft limit of 9) raises its
/// limit before it claims its folder: the claim is made, and a second agent is refused. (It
/// went without the claim, warned, and a second agent ran every container again.)
#[actix::test]
async fn an_agent_short_of_descriptors_still_claims_its_folder() {
    let dir = temp_dir("claim-nofile");
    write(&dir, "one.yaml", &sleeper_pod("one", &dir.join("one.pids")));
    let script = format!(
        "ulimit -Sn 9 && exec {} run --manifests {} --listen 127.0.0.1:0",
        env!("CARGO_BIN_EXE_probelet"),
        dir.display()
    );
    let mut first = support::agent::start_under_shell(&script).await.0;
    let elsewhere = temp_dir("claim-nofile-state");
    let refused = second_agent(&dir, &elsewhere).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("served by another running agent"), "{stderr}");
    support::agent::stop(&mut first, Duration::from_secs(30)).await;
    let _ = std::fs::remove_dir_all(&elsewhere);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A manifests folder reached through a symlink is resolved once. Swapped to another folder while
/// the agent runs (a `current` link flipped by a deploy), the link is not followed: the agent
/// keeps serving the folder it claimed and keeps its container records in, and says so. A
/// second agent on the link serves the new folder, so no container runs under two agents.
#[actix::test]
async fn a_manifests_symlink_swapped_while_the_agent_runs_is_not_followed() {
    let base = temp_dir("swapped");
    let (one, two, link) = (base.join("one"), base.join("two"), base.join("current"));
    for dir in [&one, &two] {
        std::fs::create_dir_all(dir).unwrap();
    }
    write(&one, "one.yaml", &sleeper_pod("one", &base.join("one.pids")));
    write(&two, "two.yaml", &sleeper_pod("two", &base.join("two.pids")));
    std::os::unix::fs::symlink(&one, &link).unwrap();
    let mut agent = Agent::start(&link).await;
    agent.wait_for(|l| l.ends_with("default/one: container sleeper running")).await;

    std::os::unix::fs::symlink(&two, base.join("next")).unwrap();
    std::fs::rename(base.join("next"), &link).unwrap();
    agent.wait_for(|l| l.contains("now leads to") && l.contains("keeps serving")).await;
    let mut second = Agent::start(&link).await;
    second.wait_for(|l| l.ends_with("default/two: container sleeper running")).await;
    assert!(!agent.seen.iter().any(|l| l.contains("default/two")), "{:?}", agent.seen);
    assert!(!second.seen.iter().any(|l| l.contains("default/one")), "{:?}", second.seen);
    assert_eq!(pids_in(&base.join("one.pids")).len(), 1, "pod one started once");
    second.stop().await;
    agent.stop().await;
    assert!(one.join(".probelet-state").is_dir() && two.join(".probelet-state").is_dir());
    let _ = std::fs::remove_dir_all(&base);
}

/// Every manifest that cannot be read is named, once while it lasts; of many failing the same
/// way in one scan (a node out of file descriptors fails them all), the first few are named
/// and the rest counted.
#[actix::test]
async fn each_unreadable_manifest_is_named_and_a_flood_of_them_is_counted() {
    let dir = temp_dir("unreadable");
    write(&dir, "one.yaml", &sleeper_pod("one", &dir.join(".one.pids")));
    // A link to the reader's own memory opens and fails to read (EIO), as a file does on a
    // node out of descriptors (EMFILE). A symlink loop did here once; it now counts as removed.
    let looped = |name: &str| std::os::unix::fs::symlink("/proc/self/mem", dir.join(name)).unwrap();
    // Five at start, so that the first scan meets them all.
    for name in ["loop-a.yaml", "loop-b.yaml", "loop-c.yaml", "loop-d.yaml", "loop-e.yaml"] {
        looped(name);
    }
    let mut agent = Agent::start(&dir).await;
    let counted = agent.wait_for_after(0, |l| l.contains("… and 2 more manifests cannot be read")).await;
    let named = agent.seen[..counted].iter().filter(|l| l.contains("manifests cannot be read,")).count();
    assert_eq!(named, 3, "{:?}", agent.seen);
    agent.wait_for(|l| l.ends_with("default/one: container sleeper running")).await;
    // One more, later: named, although files failing the same way were reported before.
    looped("loop-f.yaml");
    agent.wait_for(|l| l.contains("manifests cannot be read") && l.contains("loop-f.yaml")).await;
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Of many manifests skipped in one scan (a thousand copies of one pod dropped in the folder),
/// the first 20 are named and the rest counted, with where to see them all: each was printed
/// before, a thousand lines at once.
#[actix::test]
async fn a_flood_of_skipped_manifests_is_counted() {
    let dir = temp_dir("skipped-flood");
    write(&dir, "a-web.yaml", &sleeper_pod("web", &dir.join(".web.pids")));
    // At start, so that the first scan meets them all.
    for n in 0..30 {
        write(&dir, &format!("b-{n:02}.yaml"), &sleeper_pod("web", &dir.join(format!(".{n}.pids"))));
    }
    let mut agent = Agent::start(&dir).await;
    let counted =
        agent.wait_for_after(0, |l| l.contains("… and 10 more manifests skipped: `probelet lint ")).await;
    let named = agent.seen[..counted].iter().filter(|l| l.contains("Duplicate value: \"web\"")).count();
    assert_eq!(named, 20, "{:?}", agent.seen);
    agent.wait_for(|l| l.ends_with("default/web: container sleeper running")).await;
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same folder under another path (a bind mount) is the same folder: a second agent on the
/// other path is refused, as on the same path. Mounting needs `CAP_SYS_ADMIN`; where the test
/// cannot mount it says so and checks nothing.
#[actix::test]
async fn a_second_agent_on_the_same_folder_through_a_bind_mount_is_refused() {
    let dir = temp_dir("bound");
    write(&dir, "one.yaml", &sleeper_pod("one", &dir.join("one.pids")));
    let other = temp_dir("bound-other");
    let Some(_mount) = BindMount::new(&dir, &other) else {
        eprintln!("cannot bind-mount here (needs CAP_SYS_ADMIN): not checked");
        return;
    };
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/one: container sleeper running")).await;
    let state = temp_dir("bound-state");
    let refused = second_agent(&other, &state).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(stderr.contains("served by another running agent"), "{stderr}");
    assert_eq!(pids_in(&dir.join("one.pids")).len(), 1, "one copy of the container");
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&state);
}

/// Another agent on `manifests` with its own state directory `state`, once it has exited: at
/// once when refused; one that starts instead is killed after 10 s and fails the test.
async fn second_agent(manifests: &Path, state: &Path) -> std::process::Output {
    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_probelet"))
        .args(["run", "--manifests"])
        .arg(manifests)
        .args(["--listen", "127.0.0.1:0", "--state-dir"])
        .arg(state)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .expect("the second agent exits at once")
        .unwrap()
}

/// A bind mount of one folder on another, unmounted when dropped.
struct BindMount(PathBuf);

impl BindMount {
    fn new(source: &Path, target: &Path) -> Option<Self> {
        let mounted = std::process::Command::new("mount")
            .arg("--bind")
            .args([source, target])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then(|| BindMount(target.to_owned()))
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Anyone can take an abstract socket's name first: a name held by a socket that does not
/// answer (no agent listens on it) is warned about and the agent starts anyway.
#[actix::test]
async fn a_squatted_folder_claim_does_not_keep_the_agent_from_starting() {
    let dir = temp_dir("squatted");
    write(&dir, "one.yaml", &sleeper_pod("one", &dir.join("one.pids")));
    let canonical = std::fs::canonicalize(&dir).unwrap();
    let namespace = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    let name = probelet::agent::folder_claim_name(&canonical, &namespace);
    let squatter =
        rustix::net::socket(rustix::net::AddressFamily::UNIX, rustix::net::SocketType::STREAM, None).unwrap();
    let addr = rustix::net::SocketAddrUnix::new_abstract_name(name.as_bytes()).unwrap();
    rustix::net::bind(&squatter, &addr).unwrap();
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/one: container sleeper running")).await;
    agent.stop().await;
    drop(squatter);
}

/// Sends `signal` (`-TERM`, `-KILL`) to the agent.
fn signal_agent(agent: &Agent, signal: &str) {
    let id = agent.child.id().unwrap();
    let _ = std::process::Command::new("kill").args([signal, &id.to_string()]).status();
}

/// Whether process `pid` is gone (reaped, or a zombie that nothing runs in any more).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Polls (at most 10 s) until every pid is gone.
async fn assert_gone(pids: &[u32]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !pids.iter().all(|&pid| process_gone(pid)) {
        assert!(tokio::time::Instant::now() < deadline, "still running: {pids:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A container that ignores SIGTERM and writes its PID to `pidfile` (a new line per start;
/// `$$$$` is the shell's `$$` once the kubelet's `$(VAR)` expansion has unescaped it).
fn stubborn_pod(name: &str, grace: u32, pidfile: &Path) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: {grace}
  containers:
  - name: stubborn
    command: ["sh", "-c", "trap '' TERM; echo $$$$ >> {pidfile}; while true; do sleep 1; done"]
"#,
        pidfile = pidfile.display()
    )
}

fn pids_in(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// The first SIGTERM gives the stubborn container its 120 s grace period; a second one ends
/// the agent at once, its container SIGKILLed.
#[actix::test]
async fn a_second_sigterm_ends_the_agent_promptly() {
    let dir = temp_dir("second-term");
    let pidfile = dir.join("stubborn.pids");
    write(&dir, "stubborn.yaml", &stubborn_pod("stubborn", 120, &pidfile));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/stubborn: container stubborn running")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while pids_in(&pidfile).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the container wrote no pid");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    signal_agent(&agent, "-TERM");
    agent.wait_for(|l| l.contains("shutting down")).await;
    // Signals within 100 ms of the first are the same request (`timeout` sends two at once).
    tokio::time::sleep(Duration::from_millis(400)).await;
    signal_agent(&agent, "-TERM");
    let status = tokio::time::timeout(Duration::from_secs(5), agent.child.wait())
        .await
        .expect("the agent exits within 5 s of the second SIGTERM")
        .unwrap();
    assert!(!status.success(), "a forced shutdown is not a clean exit: {status:?}");
    agent.wait_for(|l| l.contains("shutdown forced, 1 container process group(s) killed")).await;
    assert_gone(&pids_in(&pidfile)).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `timeout(1)`, as the README's commands are often run, signals the agent and then its own
/// process group, the agent in it: two SIGTERMs microseconds apart. Signals within 100 ms are
/// one request to stop: the containers are stopped in order and the agent exits 0. Before, when
/// the watcher read the first before the second landed, the second forced the stop (`shutdown
/// forced, 1 container process group(s) killed`, exit 1).
#[actix::test]
async fn timeouts_two_sigterms_at_once_are_one_graceful_stop() {
    let dir = temp_dir("timeout-term");
    let pids = dir.join("stubborn.pids");
    // A container that ignores SIGTERM: the graceful stop lasts its 2 s grace period, so a
    // second request would come in time to force it.
    write(&dir, "stubborn.yaml", &stubborn_pod("stubborn", 2, &pids));
    let mut agent = Agent::start_under(&dir, &["timeout", "--preserve-status", "-s", "TERM", "600"]).await;
    agent.wait_for(|l| l.ends_with("default/stubborn: container stubborn running")).await;
    let pid = wait_for_pids(&pids, 1).await[0];

    // `timeout` passes a SIGTERM it is sent on as it does at its deadline: to the agent, then
    // to its group (and ignores any later one). The two often land before the watcher reads
    // the first, and are one anyway; one sent to the agent 20 ms later surely comes after.
    let timeout = agent.child.id().unwrap();
    let children = std::fs::read_to_string(format!("/proc/{timeout}/task/{timeout}/children")).unwrap();
    let probelet = children.split_whitespace().next().expect("timeout runs the agent").to_owned();
    signal_agent(&agent, "-TERM");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let _ = std::process::Command::new("kill").args(["-TERM", &probelet]).status();
    let status = tokio::time::timeout(Duration::from_secs(10), agent.child.wait())
        .await
        .expect("the agent stops within its pod's grace period")
        .unwrap();
    agent.wait_for(|l| l.contains("shutting down")).await;
    // The agent has exited: its output ends.
    while let Ok(Some(line)) = tokio::time::timeout(Duration::from_secs(5), agent.lines.recv()).await {
        assert!(!line.contains("shutdown forced"), "one request, stopped in order: {line}");
    }
    assert_eq!(status.code(), Some(0), "a graceful stop: {status:?}");
    assert_gone(&[pid]).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A container that writes its PID to `pidfile` (a new line per start), then sleeps.
fn sleeper_pod(name: &str, pidfile: &Path) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: sleeper
    command: ["sh", "-c", "echo $$$$ >> {pidfile}; exec sleep 1000"]
"#,
        pidfile = pidfile.display()
    )
}

/// Polls (at most 10 s) until `path` lists `count` PIDs; returns them.
async fn wait_for_pids(path: &Path, count: usize) -> Vec<u32> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let pids = pids_in(path);
        if pids.len() >= count {
            return pids;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} lists {pids:?}, not {count} PIDs",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGKILL the agent: its containers outlive it, and the next agent on the same folder kills
/// them before starting its own, so each container runs exactly once; a final SIGTERM leaves
/// nothing behind.
#[actix::test]
async fn after_a_crash_the_next_agent_never_runs_a_second_copy() {
    let dir = temp_dir("crash");
    let (one, two) = (dir.join("one.pids"), dir.join("two.pids"));
    write(&dir, "one.yaml", &sleeper_pod("one", &one));
    write(&dir, "two.yaml", &sleeper_pod("two", &two));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/one: container sleeper running")).await;
    agent.wait_for(|l| l.ends_with("default/two: container sleeper running")).await;
    let first = [wait_for_pids(&one, 1).await[0], wait_for_pids(&two, 1).await[0]];

    signal_agent(&agent, "-KILL");
    agent.child.wait().await.unwrap();
    assert!(first.iter().all(|&pid| !process_gone(pid)), "the crash left the containers running");

    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.contains("killed 2 container process group(s) a previous agent left running")).await;
    agent.wait_for(|l| l.ends_with("default/one: container sleeper running")).await;
    agent.wait_for(|l| l.ends_with("default/two: container sleeper running")).await;
    let second = [wait_for_pids(&one, 2).await[1], wait_for_pids(&two, 2).await[1]];
    assert_gone(&first).await;
    assert!(second.iter().all(|&pid| !process_gone(pid)), "the new copies run");
    assert_eq!((pids_in(&one).len(), pids_in(&two).len()), (2, 2), "each container started once per agent");

    let dir = agent.dir.clone();
    let id = agent.child.id().unwrap();
    let _ = std::process::Command::new("kill").args(["-TERM", &id.to_string()]).status();
    let status = tokio::time::timeout(Duration::from_secs(30), agent.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "exit 0 on SIGTERM: {status:?}");
    assert_gone(&second).await;
    let records = std::fs::read_dir(dir.join(".probelet-state/containers")).unwrap().count();
    assert_eq!(records, 0, "a clean stop leaves no records");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Polls (at most `wait`) until `done` holds; whether it did.
async fn eventually(wait: Duration, done: impl Fn() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    while !done() {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// The agent's standard error so far.
fn agent_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join(STDERR)).unwrap_or_default()
}

/// The agent's own disk fails a container's record (here `containers/` is made a file, which
/// no permission lets even root write into; a full disk fails the same write with `ENOSPC`):
/// nothing runs unrecorded, and the start is the agent's failure, not the container's. The
/// container waits with `CreateContainerConfigError` and the record's path, counts no restart,
/// and is tried again, so a `restartPolicy: Never` pod still gets its one run once the disk
/// is repaired. (It was a start error, exit code 128: the pod failed for good.)
#[actix::test]
async fn a_record_that_cannot_be_written_holds_the_start_until_it_can_be() {
    let dir = temp_dir("record-fails");
    let pidfile = dir.join("n.pids");
    let mut agent = Agent::start(&dir).await;
    let containers = dir.join(".probelet-state/containers");
    // The agent makes `containers/` again within a second of its removal: retried if it won.
    let mut replaced = false;
    for _ in 0..5 {
        let _ = std::fs::remove_dir(&containers);
        if std::fs::write(&containers, "not a folder").is_ok() {
            replaced = true;
            break;
        }
    }
    assert!(replaced, "containers/ could not be replaced by a file");
    let never = sleeper_pod("never", &pidfile).replace("spec:\n", "spec:\n  restartPolicy: Never\n");
    write(&dir, "n.yaml", &never);
    agent
        .wait_for(|l| l.ends_with("default/never: container sleeper waiting (CreateContainerConfigError)"))
        .await;
    let pods = agent.get("/pods").await;
    let message = format!("cannot record the container in the state directory: {}: ", containers.display());
    assert!(pods.contains(&message), "the status names the records' folder: {pods}");
    assert!(pods.contains("\"restartCount\":0"), "no restart counted: {pods}");
    assert!(pids_in(&pidfile).is_empty(), "nothing ran unrecorded");
    assert!(
        agent_log(&dir).lines().any(|l| l.contains("WARN") && l.contains(&message)),
        "the operator is told at WARN:\n{}",
        agent_log(&dir)
    );

    std::fs::remove_file(&containers).unwrap();
    agent.wait_for(|l| l.ends_with("default/never: container sleeper running")).await;
    let pids = wait_for_pids(&pidfile, 1).await;
    assert_eq!(std::fs::read_dir(&containers).unwrap().count(), 1, "the container is recorded");
    let pods = agent.get("/pods").await;
    assert!(pods.contains("\"restartCount\":0"), "its one run: {pods}");
    agent.stop().await;
    assert_gone(&pids).await;
}

/// The list of running pods the next agent reads (`pods` in the state directory) that could
/// not be written (here its temporary file's name is taken by a folder; a full disk fails it
/// the same way) is said at WARN and written once it can be, not only at the next change of
/// the folder's pods. (It was logged at debug and stayed stale: after a crash the next agent
/// gave the name of a pod it did not list to a refused newcomer by file order.)
#[actix::test]
async fn the_running_pods_list_that_could_not_be_written_is_written_once_it_can_be() {
    let dir = temp_dir("pods-list-fails");
    let (one, two) = (dir.join("one.pids"), dir.join("two.pids"));
    write(&dir, "one.yaml", &sleeper_pod("one", &one));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/one: container sleeper running")).await;
    let state = dir.join(".probelet-state");
    let list = || std::fs::read_to_string(state.join("pods")).unwrap_or_default();
    assert!(list().contains("\tone\t"), "{}", list());
    std::fs::create_dir(state.join(".pods.tmp")).unwrap();
    write(&dir, "two.yaml", &sleeper_pod("two", &two));
    agent.wait_for(|l| l.ends_with("default/two: container sleeper running")).await;
    assert!(!list().contains("\ttwo\t"), "the write cannot have succeeded: {}", list());
    let warned = |log: &str| {
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("Cannot name the running pods for the next agent"))
    };
    assert!(eventually(Duration::from_secs(5), || warned(&agent_log(&dir))).await, "{}", agent_log(&dir));

    std::fs::remove_dir(state.join(".pods.tmp")).unwrap();
    assert!(
        eventually(Duration::from_secs(10), || list().contains("\ttwo\t")).await,
        "the list names the pod once it can be written: {}",
        list()
    );
    let pids = [wait_for_pids(&one, 1).await[0], wait_for_pids(&two, 1).await[0]];
    agent.stop().await;
    assert_gone(&pids).await;
}

/// The state directory deleted and another, held by another agent (here the test holds its
/// lock), put in its place while the agent runs: the agent writes its running pods' list
/// there no more (the other agent, or the next one after it, decides by its own list which pod
/// keeps a name), says so at WARN once while it lasts, naming the list and the other agent, and
/// writes it once the directory is its own again (the other agent let it go). Before, the
/// other agent's list was overwritten at the next change of the folder's pods.
#[actix::test]
async fn the_running_pods_list_is_not_written_into_a_state_directory_another_agent_holds() {
    let dir = temp_dir("pods-list-held");
    let (one, two) = (dir.join("one.pids"), dir.join("two.pids"));
    write(&dir, "one.yaml", &sleeper_pod("one", &one));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/one: container sleeper running")).await;
    let state = dir.join(".probelet-state");
    let list = || std::fs::read_to_string(state.join("pods")).unwrap_or_default();
    assert!(list().contains("\tone\t"), "{}", list());

    // Another agent's directory, its lock held, swapped in (the agent makes a deleted one
    // again within a second: tried again if it won).
    let other = temp_dir("pods-list-held-other");
    std::fs::create_dir(other.join("containers")).unwrap();
    let lock = std::fs::File::create(other.join("lock")).unwrap();
    lock.try_lock().unwrap();
    let theirs = "uid-other\tdefault\tother\t/elsewhere/other.yaml\n";
    std::fs::write(other.join("pods"), theirs).unwrap();
    let mut swapped = false;
    for _ in 0..5 {
        let _ = std::fs::remove_dir_all(&state);
        if std::fs::rename(&other, &state).is_ok() {
            swapped = true;
            break;
        }
    }
    assert!(swapped, "the state directory could not be replaced");
    let lost =
        |log: &str| log.lines().any(|l| l.contains("ERROR") && l.contains("another agent holds it now"));
    assert!(eventually(Duration::from_secs(5), || lost(&agent_log(&dir))).await, "{}", agent_log(&dir));
    write(&dir, "two.yaml", &sleeper_pod("two", &two));
    agent
        .wait_for(|l| l.ends_with("default/two: container sleeper waiting (CreateContainerConfigError)"))
        .await;
    let held = |l: &&str| {
        l.contains("WARN")
            && l.contains("Cannot name the running pods for the next agent")
            && l.contains(&state.join("pods").display().to_string())
            && l.contains("held by another agent")
    };
    assert!(
        eventually(Duration::from_secs(5), || agent_log(&dir).lines().any(|l| held(&l))).await,
        "{}",
        agent_log(&dir)
    );
    // Two more scans (every 2 s) try again: the list stays the other agent's, said once.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(list(), theirs, "the other agent's list was overwritten");
    assert_eq!(agent_log(&dir).lines().filter(|l| held(l)).count(), 1, "{}", agent_log(&dir));

    drop(lock);
    assert!(
        eventually(Duration::from_secs(10), || list().contains("\tone\t") && list().contains("\ttwo\t"))
            .await,
        "the list is written once the directory is the agent's again: {}",
        list()
    );
    assert!(
        eventually(Duration::from_secs(5), || agent_log(&dir)
            .contains("Named the running pods for the next agent again"))
        .await
    );
    // Recorded there again, the start refused meanwhile is tried again (every 10 s) and runs.
    agent.wait_for(|l| l.ends_with("default/two: container sleeper running")).await;
    let pids = [wait_for_pids(&one, 1).await[0], wait_for_pids(&two, 1).await[0]];
    agent.stop().await;
    assert_gone(&pids).await;
}

/// Waits (10 s at most) until an agent has claimed the manifests folder `dir`: its abstract
/// socket shows in `/proc/net/unix`.
async fn wait_for_folder_claim(dir: &std::path::Path) {
    let canonical = std::fs::canonicalize(dir).unwrap();
    let namespace = std::fs::read_link("/proc/self/ns/mnt").unwrap();
    let claim = format!("@{}", probelet::agent::folder_claim_name(&canonical, &namespace));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string("/proc/net/unix").unwrap().lines().any(|l| l.ends_with(&claim)) {
        assert!(tokio::time::Instant::now() < deadline, "the next agent never claimed the folder");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A SIGTERM that comes while the next agent is still busy with what the dead one left (here:
/// waiting for the state directory's lock, which the test holds) is kept until that is done,
/// and then stops the agent in order: exit 0, the dead agent's containers killed, nothing left
/// running. Before, the signal's default action ended the agent at once and the dead agent's
/// containers ran on (1,107 of 1,500 in a helper's test).
#[actix::test]
async fn a_sigterm_during_the_sweep_of_a_dead_agents_containers_stops_the_agent_in_order() {
    let dir = temp_dir("term-in-sweep");
    let pids = dir.join("sweep.pids");
    write(&dir, "sweep.yaml", &sleeper_pod("sweep", &pids));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/sweep: container sleeper running")).await;
    let first = wait_for_pids(&pids, 1).await[0];
    signal_agent(&agent, "-KILL");
    agent.child.wait().await.unwrap();

    let lock = std::fs::File::options().write(true).open(dir.join(".probelet-state/lock")).unwrap();
    lock.try_lock().unwrap();
    let mut next = Command::new(env!("CARGO_BIN_EXE_probelet"))
        .args(["run", "--manifests"])
        .arg(&dir)
        .args(["--listen", "127.0.0.1:0", "--node-name", "e2e"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The folder's claim is taken after the signals are listened for: once it shows, the
    // agent is waiting for the lock.
    wait_for_folder_claim(&dir).await;
    let id = next.id().unwrap().to_string();
    let _ = std::process::Command::new("kill").args(["-TERM", &id]).status();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(lock);

    let status = tokio::time::timeout(Duration::from_secs(30), next.wait()).await.unwrap().unwrap();
    assert!(status.success(), "exit 0 after the sweep: {status:?}");
    assert_gone(&[first]).await;
    assert_gone(&pids_in(&pids)).await;
    let records = std::fs::read_dir(dir.join(".probelet-state/containers")).unwrap().count();
    assert_eq!(records, 0, "nothing recorded as running");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two SIGTERMs while the next agent is still starting (here: waiting for the state directory's
/// lock, which the test holds) force the stop as two do once it runs: the sweep of what the dead
/// agent left is finished (its container killed), then the agent exits 1 at once, starting
/// nothing. Before, signals that came before the watch were told once, and the second one was
/// lost: the agent started its pods and stopped them in order, exit 0.
#[actix::test]
async fn a_second_sigterm_during_start_up_forces_the_stop_once_the_sweep_is_over() {
    let dir = temp_dir("second-term-at-start");
    let pids = dir.join("sweep.pids");
    write(&dir, "sweep.yaml", &sleeper_pod("sweep", &pids));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/sweep: container sleeper running")).await;
    let first = wait_for_pids(&pids, 1).await[0];
    signal_agent(&agent, "-KILL");
    agent.child.wait().await.unwrap();

    let lock = std::fs::File::options().write(true).open(dir.join(".probelet-state/lock")).unwrap();
    lock.try_lock().unwrap();
    let next = Command::new(env!("CARGO_BIN_EXE_probelet"))
        .args(["run", "--manifests"])
        .arg(&dir)
        .args(["--listen", "127.0.0.1:0", "--node-name", "e2e"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // The folder's claim is taken after the signals are listened for: once it shows, the
    // agent is waiting for the lock (2 s at most).
    wait_for_folder_claim(&dir).await;
    let id = next.id().unwrap().to_string();
    // Further apart than the 100 ms within which signals are one request.
    for _ in 0..2 {
        let _ = std::process::Command::new("kill").args(["-TERM", &id]).status();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(lock);

    let output =
        tokio::time::timeout(Duration::from_secs(10), next.wait_with_output()).await.unwrap().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(1), "a forced stop: {stdout}\n{stderr}");
    assert!(
        stdout.contains("probelet: shutdown forced, 0 container process group(s) killed"),
        "{stdout}\n{stderr}"
    );
    assert!(!stdout.contains("default/sweep: added from"), "nothing started: {stdout}");
    assert!(!stderr.contains("Error:"), "not refused for the lock: {stderr}");
    assert_gone(&[first]).await;
    assert_eq!(pids_in(&pids), vec![first], "the pod never started again");
    let records = std::fs::read_dir(dir.join(".probelet-state/containers")).unwrap().count();
    assert_eq!(records, 0, "nothing recorded as running");
    let _ = std::fs::remove_dir_all(&dir);
}

/// After a crash, a container's record is damaged from outside (its text overwritten): its name
/// is still the group's ID, and the process of that ID is a recorded container's shim of this
/// program that no running agent owns (the container emptied its environment: no mark shows
/// it). The next agent kills it as the container's, and the
/// container runs once. Before, the damaged record was left alone as a stranger's file and the
/// old copy ran beside the new one.
#[actix::test]
async fn a_damaged_record_still_names_the_shim_the_crash_left() {
    let dir = temp_dir("crash-damaged");
    let pids = dir.join("damaged.pids");
    // No container mark either (`env -i`): only the running shim names the container.
    let pod = sleeper_pod("damaged", &pids).replace(r#"["sh", "-c","#, r#"["env", "-i", "sh", "-c","#);
    assert!(pod.contains("env"), "{pod}");
    write(&dir, "damaged.yaml", &pod);
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/damaged: container sleeper running")).await;
    let first = wait_for_pids(&pids, 1).await[0];
    let shim = parent_of(first).filter(|&p| is_shim(p)).expect("the shim");

    signal_agent(&agent, "-KILL");
    agent.child.wait().await.unwrap();
    let record = dir.join(".probelet-state/containers").join(shim.to_string());
    assert!(record.is_file(), "the shim's record: {}", record.display());
    std::fs::write(&record, "\0\0not a record at all\n").unwrap();

    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.contains("killed 1 container process group(s) a previous agent left running")).await;
    agent.wait_for(|l| l.ends_with("default/damaged: container sleeper running")).await;
    assert_gone(&[first, shim]).await;
    let second = wait_for_pids(&pids, 2).await[1];
    assert_eq!(pids_in(&pids).len(), 2, "the container started once per agent");

    signal_agent(&agent, "-TERM");
    let status = tokio::time::timeout(Duration::from_secs(30), agent.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "exit 0 on SIGTERM: {status:?}");
    assert_gone(&[second]).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The agent and its container's shim are both SIGKILLed (by hand, or by the OOM killer). That
/// leaves the container's main process in a group whose leader has ended, and a daemon it
/// started in a session of its own (`setsid`), which no group kill reaches. The next agent
/// kills both: the group as the container's, the daemon by the container's mark. Before, the
/// daemon ran on for good.
#[actix::test]
async fn after_the_agent_and_its_shims_are_killed_the_next_agent_kills_what_left_the_group() {
    let dir = temp_dir("crash-escape");
    let pids = dir.join("escape.pids");
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: escape
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: daemon
    command: ["sh", "-c", "setsid sh -c 'echo $$$$ >> {pids}; exec sleep 1000' </dev/null >/dev/null 2>&1 & echo $$$$ >> {pids}; exec sleep 1000"]
"#,
        pids = pids.display()
    );
    write(&dir, "escape.yaml", &manifest);
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/escape: container daemon running")).await;
    let first = wait_for_pids(&pids, 2).await;
    let shim =
        first.iter().filter_map(|&pid| parent_of(pid)).find(|&parent| is_shim(parent)).expect("the shim");

    signal_agent(&agent, "-KILL");
    let _ = std::process::Command::new("kill").args(["-KILL", &shim.to_string()]).status();
    agent.child.wait().await.unwrap();
    assert_gone(&[shim]).await;
    assert!(first.iter().all(|&pid| !process_gone(pid)), "the container outlived its shim: {first:?}");

    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.contains("killed 1 container process group(s) a previous agent left running")).await;
    agent.wait_for(|l| l.ends_with("default/escape: container daemon running")).await;
    assert_gone(&first).await;
    let second = wait_for_pids(&pids, 4).await[2..].to_vec();

    signal_agent(&agent, "-TERM");
    let status = tokio::time::timeout(Duration::from_secs(30), agent.child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "exit 0 on SIGTERM: {status:?}");
    assert_gone(&second).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The parent PID of process `pid`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Whether process `pid` is a container shim.
fn is_shim(pid: u32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    cmdline.split(|b| *b == 0).any(|arg| arg == b"container-shim")
}

/// The terminal that ran the agent closes: the agent runs in a pseudo-terminal (`script`), which
/// is then closed. The kernel sends the agent SIGHUP, and every later write to the terminal fails
/// (`EIO`). It stops as on SIGTERM: its container stopped, no record left. Before, SIGHUP's
/// default action ended it at once; and once SIGHUP was handled, the first line it printed on
/// the closed terminal panicked, which ended it just the same, its containers left running.
#[actix::test]
async fn a_closed_terminal_stops_the_agent_and_its_containers() {
    let dir = temp_dir("hangup");
    let pids = dir.join("hup.pids");
    write(&dir, "hup.yaml", &sleeper_pod("hup", &pids));
    let command = format!(
        "exec {} run --manifests {} --listen 127.0.0.1:0 --node-name e2e 2>>{}",
        env!("CARGO_BIN_EXE_probelet"),
        dir.display(),
        dir.join(STDERR).display()
    );
    // Its input stays open (a closed one could end `script` first) and is never written.
    let mut terminal = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("script (util-linux) runs");
    let container = wait_for_pids(&pids, 1).await[0];
    let agent = agent_pid_serving(&dir).expect("the agent runs");

    let _ = terminal.start_kill();
    let _ = terminal.wait().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !process_gone(agent) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the agent still runs 30 s after its terminal closed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_gone(&[container]).await;
    let records = std::fs::read_dir(dir.join(".probelet-state/containers")).unwrap().count();
    let stderr = std::fs::read_to_string(dir.join(STDERR)).unwrap_or_default();
    assert_eq!(records, 0, "a clean stop leaves no records; the agent said:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The PID of the agent serving `dir`, found by its command line.
fn agent_pid_serving(dir: &Path) -> Option<u32> {
    let wanted = dir.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let exe = std::fs::read_link(entry.path().join("exe")).ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        let serves = cmdline.split(|b| *b == 0).any(|arg| arg == wanted);
        (serves && exe.file_name()? == "probelet").then_some(pid)
    })
}

/// An exec probe running when the agent is SIGKILLed does not outlive it: its shim is tied to
/// the agent and ends the probe and what it started. (Containers do outlive a crash: the next
/// agent kills them from their records; probes have no records.)
#[actix::test]
async fn an_exec_probe_in_flight_dies_with_a_killed_agent() {
    let dir = temp_dir("probe-crash");
    let (pods, probes) = (dir.join("pods.pids"), dir.join("probes.pids"));
    let manifest = format!(
        r#"{pod}    readinessProbe:
      exec:
        command: ["sh", "-c", "echo $$$$ >> {probes}; exec sleep 7381"]
      periodSeconds: 2
      timeoutSeconds: 50
"#,
        pod = sleeper_pod("slowprobe", &pods),
        probes = probes.display()
    );
    write(&dir, "slowprobe.yaml", &manifest);
    let agent = Agent::start(&dir).await;
    let probe = wait_for_pids(&probes, 1).await[0];
    let container = wait_for_pids(&pods, 1).await[0];
    signal_agent(&agent, "-KILL");
    let mut agent = agent;
    agent.child.wait().await.unwrap();
    assert_gone(&[probe]).await;
    assert!(!process_gone(container), "the container outlives the crash, as designed");

    // The next agent kills the container from its record; a SIGTERM then leaves nothing.
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.contains("killed 1 container process group(s) a previous agent left running")).await;
    assert_gone(&[container]).await;
    agent.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A grace period as long as the API allows (`int64` seconds) stops its pod like any other,
/// and leaves the other pods alone: it once overflowed the stop's deadline and took the
/// runtime down with every container.
#[actix::test]
async fn the_largest_grace_period_stops_its_pod_and_nothing_else() {
    let dir = temp_dir("huge-grace");
    let (huge, other) = (dir.join("huge.pids"), dir.join("other.pids"));
    let huge_pod = sleeper_pod("huge", &huge)
        .replace("terminationGracePeriodSeconds: 2", "terminationGracePeriodSeconds: 9223372036854775807");
    write(&dir, "huge.yaml", &huge_pod);
    write(&dir, "other.yaml", &sleeper_pod("other", &other));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/huge: container sleeper running")).await;
    agent.wait_for(|l| l.ends_with("default/other: container sleeper running")).await;
    let (huge_pid, other_pid) = (wait_for_pids(&huge, 1).await[0], wait_for_pids(&other, 1).await[0]);

    std::fs::remove_file(dir.join("huge.yaml")).unwrap();
    agent.wait_for(|l| l.ends_with("default/huge: stopped")).await;
    assert_gone(&[huge_pid]).await;
    assert!(!process_gone(other_pid), "the other pod's container still runs");
    let pods = agent.get("/pods").await;
    assert!(pods.contains("\"name\":\"other\"") && !pods.contains("\"name\":\"huge\""), "{pods}");
    agent.stop().await;
    assert_gone(&[other_pid]).await;
}

/// A pod of `count` containers that only sleep.
fn crowd_pod(name: &str, count: usize) -> String {
    let mut manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n"
    );
    for i in 0..count {
        manifest.push_str(&format!("  - name: c{i}\n    command: [\"sleep\", \"1000\"]\n"));
    }
    manifest
}

/// Under 256 descriptors, a pod of 200 containers gets only its share of the budget, with a
/// Warning that says why; the other pod still starts and becomes Ready, and /healthz answers.
#[actix::test]
async fn a_pod_with_too_many_containers_cannot_starve_the_others() {
    let dir = temp_dir("fd-budget");
    write(&dir, "crowd.yaml", &crowd_pod("crowd", 200));
    write(&dir, "web.yaml", &web_pod("web", free_port(), "", ""));
    let mut agent = Agent::start_under(&dir, &["prlimit", "--nofile=256:256", "--"]).await;
    agent.wait_for(|l| l.contains("default/web: Ready=True")).await;
    let health = agent.get("/healthz").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let events = agent.get("/events").await;
    assert!(events.contains("\"reason\":\"OutOfFileDescriptors\""), "{events}");
    assert!(events.contains("not started: the pod already runs"), "{events}");
    let pods = agent.get("/pods").await;
    let running = pods.matches("\"running\":{").count();
    // The budget: (256 - open at start - 64 kept back) / 4 per container, half for one pod.
    assert!((2..=30).contains(&running), "{running} containers run");
    assert!(!pods.contains("Too many open files"), "nothing ran out of descriptors");
    agent.stop().await;
}

/// What the flooding container writes before it says it is done: read flat out, a debug build
/// of the agent took that much `yes` in about 2.5 s (a release build in 0.8 s; a 2-core
/// machine); at the bounded read rate (1 MiB/s, docs/reliability.md) it takes more than 45 s.
const FLOOD_BYTES: u64 = 50_000_000;

/// A container that writes `yes` without pause (through `head`, so that it can say when it is
/// done) does not stop the agent: another pod becomes Ready, its probe's failure 6 s after its
/// start is seen, `/healthz`, `/pods` and the probe history answer, and the flood's lines beyond
/// the log budget are counted in the log. Its output is read at the bounded rate: the flood is
/// not over by the end of the test (read flat out, it is over in seconds).
#[actix::test]
async fn a_container_writing_without_pause_does_not_stop_the_agent_from_serving_and_probing() {
    let dir = temp_dir("flood");
    write(
        &dir,
        "flood.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: flood}}\nspec:\n  terminationGracePeriodSeconds: 1\n  \
             containers:\n  - name: \"yes\"\n    command: [\"sh\", \"-c\", \"yes | head -c {FLOOD_BYTES}; \
             echo the-flood-is-over >&2; exec sleep 1000\"]\n"
        ),
    );
    write(&dir, "web.yaml", &web_pod("web", free_port(), r#", "--fail-after", "6s""#, ""));
    let mut agent = Agent::start(&dir).await;
    let ready = agent.wait_for_after(0, |l| l.contains("default/web: Ready=True")).await;

    let log = || std::fs::read_to_string(dir.join(STDERR)).unwrap_or_default();
    let counted = |log: &str| {
        log.lines()
            .any(|l| l.contains("lines not logged") && l.contains("flood_default") && l.contains("lines="))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !counted(&log()) {
        assert!(tokio::time::Instant::now() < deadline, "no count of lines not logged:\n{}", log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    agent.wait_for_after(ready, |l| l.contains("default/web: Ready=False")).await;
    let health = agent.get("/healthz").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let pods = agent.get("/pods").await;
    assert!(pods.contains("\"name\":\"flood\"") && pods.contains("\"name\":\"web\""), "{pods}");
    let probes = agent.get("/pods/default/web/probes").await;
    assert!(probes.contains("\"result\":\"Failure\""), "{probes}");

    let log = log();
    assert!(log.contains(": y pod=\"flood_default("), "the flood's lines within the budget are logged");
    assert!(
        !log.contains(": the-flood-is-over pod="),
        "{FLOOD_BYTES} bytes read within the test: the container's output was not read at a bounded rate"
    );
    let head = ["head", "-c", &FLOOD_BYTES.to_string()].map(String::from);
    let head: Vec<&str> = head.iter().map(String::as_str).collect();
    assert_eq!(processes(&head).len(), 1, "the flood still runs");
    agent.stop().await;
    assert!(processes(&head).is_empty(), "the flood stopped with the agent");
}

/// Pod `name`: one sleeping container whose readiness probe runs `probe` (an exec command, as
/// its JSON list items) every second, with a 3 s timeout.
fn probed_pod(name: &str, probe: &[&str]) -> String {
    let command = probe.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ");
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    command: ["sleep", "1000"]
    readinessProbe:
      exec:
        command: [{command}]
      periodSeconds: 1
      timeoutSeconds: 3
"#
    )
}

/// With `--feature-gates=MutableContainerProbes=true` a manifest whose readiness probe alone
/// changed (a failing exec rewritten to a passing one) updates the running pod in place: it
/// becomes Ready with the same container (restart count 0, never stopped), and a
/// `ContainerProbeChanged` event says what changed.
#[actix::test]
async fn mutable_container_probes_updates_a_manifests_probe_without_a_restart() {
    let dir = temp_dir("mutable");
    write(&dir, "mutable.yaml", &probed_pod("mutable", &["false"]));
    let mut agent = Agent::start_full(&dir, &[], &["--feature-gates=MutableContainerProbes=true"]).await;
    let running = agent.wait_for_after(0, |l| l.ends_with("default/mutable: container app running")).await;
    let before = agent.get("/pods").await;
    assert!(before.contains("\"ready\":false"), "the failing probe keeps it unready: {before}");

    // Written beside it and renamed over it, so a scan never sees half a file.
    write(&dir, ".mutable.yaml.tmp", &probed_pod("mutable", &["true"]));
    std::fs::rename(dir.join(".mutable.yaml.tmp"), dir.join("mutable.yaml")).unwrap();
    let updated =
        agent.wait_for_after(running, |l| l.ends_with("default/mutable: probes updated in place")).await;
    let ready = agent.wait_for_after(updated, |l| l.ends_with("default/mutable: Ready=True")).await;
    let output = agent.seen[running..=ready].join("\n");
    for word in ["stopped", "removed", "added from", "restarted"] {
        assert!(!output.contains(&format!("default/mutable: {word}")), "not restarted ({word}):\n{output}");
    }
    let after = agent.get("/pods").await;
    assert!(after.contains("\"restartCount\":0"), "{after}");
    assert!(after.contains("\"ready\":true"), "{after}");
    let id =
        |s: &str| s.split("\"containerID\":\"").nth(1).and_then(|r| r.split('"').next()).map(str::to_owned);
    assert_eq!(id(&before), id(&after), "the same container instance");
    let events = agent.get("/events").await;
    assert!(events.contains("\"reason\":\"ContainerProbeChanged\""), "{events}");
    assert!(events.contains("Readiness probe of container app updated: handler"), "{events}");
    agent.stop().await;
}

/// `--max-probes-in-flight 1` with four pods whose readiness probes take 0.9 s of their 3 s
/// timeout, every second: one slot cannot run 3.6 s of probes a second, so probes wait for it
/// (the last of the first four about 2.7 s, 3.6 s with its run), and a probe that waited is
/// timed from its slot, so every pod still becomes Ready (none fails by its timeout), the wait
/// is counted, and `/probes` says how long each waited.
#[actix::test]
async fn probes_past_the_in_flight_limit_wait_for_a_slot_and_still_pass() {
    let dir = temp_dir("slots");
    for i in 0..4 {
        write(&dir, &format!("slow{i}.yaml"), &probed_pod(&format!("slow{i}"), &["sleep", "0.9"]));
    }
    let mut agent = Agent::start_full(&dir, &[], &["--max-probes-in-flight", "1"]).await;
    for i in 0..4 {
        agent.wait_for(|l| l.contains(&format!("default/slow{i}: Ready=True"))).await;
    }
    let metrics = agent.get("/metrics").await;
    let delayed = metrics
        .lines()
        .find(|l| l.starts_with("probelet_probes_delayed_total "))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(delayed >= 1.0, "probes waited for the one slot: {metrics}");
    let (mut waited, mut last) = (false, String::new());
    for i in 0..4 {
        let probes = agent.get(&format!("/pods/default/slow{i}/probes")).await;
        assert!(!probes.contains("\"result\":\"Failure\""), "no probe failed by its timeout: {probes}");
        let body = &probes[probes.find("\r\n\r\n").unwrap() + 4..];
        let runs: serde_json::Value = serde_json::from_str(body).unwrap();
        let longest = runs["probes"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|probe| probe["results"].as_array().cloned().unwrap_or_default())
            .filter_map(|run| run["waited_seconds"].as_f64())
            .fold(0.0, f64::max);
        waited |= longest > 0.0;
        last = probes;
    }
    assert!(waited, "some probe's record shows its wait: {last}");
    agent.stop().await;
}

// === the container shim: what leaves a container's process group ===

/// The running (not zombie) processes whose argv is exactly `argv`.
fn processes(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .filter(|&pid| !process_gone(pid))
        .collect()
}

/// Polls (at most 10 s) until exactly `count` processes run `argv`; returns them.
async fn wait_for_processes(argv: &[&str], count: usize) -> Vec<u32> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let found = processes(argv);
        if found.len() == count {
            return found;
        }
        assert!(tokio::time::Instant::now() < deadline, "{argv:?}: {found:?}, not {count}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A container whose command starts `sleep <escaping>` in a session of its own (out of its
/// process group) and then sleeps itself.
fn escaping_pod(name: &str, escaping: u32, main: u32) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    command: ["sh", "-c", "setsid sleep {escaping} & sleep {main}"]
"#
    )
}

/// A process that left its container's process group (`setsid`) is stopped with the container
/// when the agent stops cleanly; before the shim it was left running with parent PID 1.
#[actix::test]
async fn a_process_that_left_its_containers_group_stops_with_the_agent() {
    let dir = temp_dir("setsid-stop");
    write(&dir, "escape.yaml", &escaping_pod("escape", 7314, 7315));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/escape: container app running")).await;
    let escaped = wait_for_processes(&["sleep", "7314"], 1).await;
    agent.stop().await;
    assert_gone(&escaped).await;
    assert!(processes(&["sleep", "7315"]).is_empty(), "the main process is gone too");
}

/// After a SIGKILL of the agent, the next agent on the same folder kills what the crashed one's
/// container started outside its group too.
#[actix::test]
async fn after_a_crash_the_next_agent_kills_what_left_the_group_too() {
    let dir = temp_dir("setsid-crash");
    write(&dir, "escape.yaml", &escaping_pod("escape", 7316, 7317));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/escape: container app running")).await;
    let escaped = wait_for_processes(&["sleep", "7316"], 1).await;
    let main = wait_for_processes(&["sleep", "7317"], 1).await;
    signal_agent(&agent, "-KILL");
    agent.child.wait().await.unwrap();
    assert!(!process_gone(escaped[0]) && !process_gone(main[0]), "the crash left the container running");

    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.contains("killed 1 container process group(s) a previous agent left running")).await;
    assert_gone(&escaped).await;
    assert_gone(&main).await;
    agent.wait_for(|l| l.ends_with("default/escape: container app running")).await;
    // Exactly the new copy.
    let again = wait_for_processes(&["sleep", "7316"], 1).await;
    assert_ne!(again, escaped);
    agent.stop().await;
    assert_gone(&again).await;
}

/// The same, for a process that left the group *and* dropped its environment (`env -i`), so the
/// container's mark no longer names it: only the crashed agent's orphaned shim can end it, on
/// the next agent's SIGUSR1 (a stranger's, not a descendant's), and it does before the group's
/// SIGKILL would kill the shim.
#[actix::test]
async fn after_a_crash_the_orphaned_shim_kills_what_carries_no_mark() {
    let dir = temp_dir("setsid-unmarked");
    let pod = escaping_pod("unmarked", 7318, 7319).replace("setsid sleep", "env -i setsid sleep");
    write(&dir, "unmarked.yaml", &pod);
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/unmarked: container app running")).await;
    let escaped = wait_for_processes(&["sleep", "7318"], 1).await;
    let environ = std::fs::read(format!("/proc/{}/environ", escaped[0])).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&environ).contains("PROBELET_CONTAINER_MARK"),
        "the escaped process carries no mark"
    );
    signal_agent(&agent, "-KILL");
    agent.child.wait().await.unwrap();
    assert!(!process_gone(escaped[0]), "the crash left it running");

    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.contains("killed 1 container process group(s) a previous agent left running")).await;
    assert_gone(&escaped).await;
    agent.stop().await;
}

/// SIGKILLs the processes it holds when dropped, so that a failing test leaves none running.
struct KillOnDrop(Vec<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in self.0.iter().filter(|&&pid| !process_gone(pid)) {
            let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
}

/// A container that kills its own shim (it runs as the agent's user) after starting a process
/// in a session of its own: the agent kills the container's group, and the process that left
/// the group re-parents to the agent (a child subreaper), which kills and reaps it. Before, it
/// ran on with parent PID 1, nobody's to stop. So do two copies of the agent's own binary the
/// container started as shims of its own (an executable proves nothing: only what the agent
/// spawned is its own): one running on, and one that had already ended, unreaped, whose zombie
/// re-parents to the agent and is reaped. A child the agent had before (its parent started it,
/// then `exec`ed the agent) is left alone, and so are the agent's own shims: a pod beside it
/// with an exec probe every second, each running for a second, passes every probe and keeps
/// running through the sweeps that each probe's end sets off and the periodic one.
#[actix::test]
async fn what_a_container_that_killed_its_shim_left_running_is_killed() {
    let dir = temp_dir("shim-killed");
    let (escaped_file, main_file, inherited_file) =
        (dir.join(".escaped.pid"), dir.join(".main.pid"), dir.join(".inherited.pid"));
    let (impostor_file, quitter_file) = (dir.join(".impostor.pid"), dir.join(".quitter.pid"));
    // `$$$$` is the shell's `$$` once the kubelet's `$(VAR)` expansion has unescaped it; an
    // impostor's file holds its command's PID and its own (the command's parent), a line each.
    // The quitter's parent is a `sleep` that never waits for it: the container's shim is killed
    // once the quitter is a zombie.
    let impostor = "setsid /proc/$$PPID/exe container-shim -- sh -c";
    let script = format!(
        "echo $$$$ > {main}; setsid sh -c 'echo $$$$ > {escaped}; exec sleep 7404' & \
         {impostor} 'echo $$$$ >> {impostors}; echo $$PPID >> {impostors}; exec sleep 7408' </dev/null >/dev/null 2>&1 & \
         ({impostor} 'echo $$PPID > {quitter}' </dev/null >/dev/null 2>&1 & exec sleep 7409) & \
         until [ -s {escaped} ] && [ -s {impostors} ] && [ -s {quitter} ] && \
         grep -q '^State:[[:space:]]*Z' /proc/$$(cat {quitter})/status; do sleep 0.05; done; \
         kill -KILL $$PPID; sleep 7405",
        main = main_file.display(),
        escaped = escaped_file.display(),
        impostors = impostor_file.display(),
        quitter = quitter_file.display(),
    );
    write(
        &dir,
        "killer.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: killer
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    command: ["sh", "-c", "{script}"]
"#
        ),
    );
    // A probe's shim lives a second of each: a sweep finds it running.
    write(&dir, "probed.yaml", &probed_pod("probed", &["sleep", "1"]));
    let wrapper = format!(r#"sleep 7406 & echo $! > {}; exec "$0" "$@""#, inherited_file.display());
    let mut agent = Agent::start_under(&dir, &["sh", "-c", &wrapper]).await;
    let inherited = KillOnDrop(wait_for_pids(&inherited_file, 1).await);
    let escaped = KillOnDrop(wait_for_pids(&escaped_file, 1).await);
    let impostors = KillOnDrop(wait_for_pids(&impostor_file, 2).await);
    let quitter = KillOnDrop(wait_for_pids(&quitter_file, 1).await);
    let main = KillOnDrop(wait_for_pids(&main_file, 1).await);
    agent.wait_for(|l| l.contains("default/killer: container app terminated")).await;
    // Reaped, not only killed: a zombie left under the agent would be a leak of its own.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let left = [&escaped, &impostors, &quitter].map(|pids| pids.0.clone()).concat();
    while left.iter().any(|pid| Path::new(&format!("/proc/{pid}")).exists()) {
        assert!(tokio::time::Instant::now() < deadline, "still there of {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_gone(&main.0).await;
    let told = "killed processes a container left running after its container shim was killed";
    while !std::fs::read_to_string(dir.join(STDERR)).unwrap_or_default().contains(told) {
        assert!(tokio::time::Instant::now() < deadline, "no warning: {told}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!process_gone(inherited.0[0]), "the agent's inherited child is not a container's");
    // Six probe runs: more than 5 s, so the periodic sweep ran too, besides one after each run.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let runs = loop {
        let probes = agent.get("/pods/default/probed/probes").await;
        let body: serde_json::Value =
            serde_json::from_str(&probes[probes.find("\r\n\r\n").unwrap() + 4..]).unwrap();
        let runs: Vec<String> = body["probes"][0]["results"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|run| run["result"].as_str().unwrap_or_default().to_owned())
            .collect();
        if runs.len() >= 6 {
            break runs;
        }
        assert!(tokio::time::Instant::now() < deadline, "6 probe runs within 30 s: {probes}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(runs.iter().all(|r| r == "Success"), "no probe's shim was taken for an orphan: {runs:?}");
    assert!(!agent.seen.iter().any(|l| l.contains("default/probed: container app terminated")));
    agent.stop().await;
    drop(inherited);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An exec probe whose command leaves a process in a session of its own: each is killed when
/// its probe's command exits. Probes run one after another, so at most the leftover of the probe
/// running right now is ever seen (without the shim one more piled up every second).
#[actix::test]
async fn what_an_exec_probe_left_outside_its_group_is_killed() {
    let dir = temp_dir("setsid-probe");
    let probe = "setsid -f sleep 7381 </dev/null >/dev/null 2>&1; echo ok";
    write(&dir, "probed.yaml", &probed_pod("probed", &["sh", "-c", probe]));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.contains("default/probed: Ready=True")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut most = 0;
    loop {
        most = most.max(processes(&["sleep", "7381"]).len());
        let probes = agent.get("/pods/default/probed/probes").await;
        let body = &probes[probes.find("\r\n\r\n").unwrap() + 4..];
        let runs: serde_json::Value = serde_json::from_str(body).unwrap();
        let results = runs["probes"][0]["results"].as_array().map_or(0, Vec::len);
        if results >= 5 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "5 probe runs within 30 s: {probes}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(most <= 1, "{most} leftovers at once");
    agent.stop().await;
    // A probe cancelled by the stop: its shim kills its leftover, within milliseconds.
    wait_for_processes(&["sleep", "7381"], 0).await;
}

/// A SIGKILL of the agent while it starts twenty containers, then a second agent: each
/// container runs exactly once, never two copies, and nothing is left after the second agent
/// stops. Every container is recorded before it runs (the shim's start barrier); without it a
/// container spawned but not yet recorded outlived the crash unseen.
#[actix::test]
async fn a_crash_in_the_middle_of_starts_never_leaves_an_unrecorded_container() {
    let dir = temp_dir("start-crash");
    for i in 0..20 {
        write(&dir, &format!("p{i}.yaml"), &crowd_pod(&format!("p{i}"), 1).replace("\"1000\"", "\"7330\""));
    }
    for _ in 0..3 {
        let mut crashing = Command::new(env!("CARGO_BIN_EXE_probelet"))
            .args(["run", "--manifests"])
            .arg(&dir)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // Killed as soon as the first container runs, with the others being started.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while processes(&["sleep", "7330"]).is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "no container started");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        crashing.start_kill().unwrap();
        crashing.wait().await.unwrap();

        let mut agent = Agent::start(&dir).await;
        for i in 0..20 {
            agent.wait_for(|l| l.ends_with(&format!("default/p{i}: container c0 running"))).await;
        }
        let running = wait_for_processes(&["sleep", "7330"], 20).await;
        let id = agent.child.id().unwrap();
        let _ = std::process::Command::new("kill").args(["-TERM", &id.to_string()]).status();
        let status =
            tokio::time::timeout(Duration::from_secs(30), agent.child.wait()).await.unwrap().unwrap();
        assert!(status.success(), "exit 0 on SIGTERM: {status:?}");
        assert_gone(&running).await;
        assert!(processes(&["sleep", "7330"]).is_empty(), "nothing left");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pod whose only container ignores SIGTERM (so it is stopped at the end of `grace`) and
/// has the probe `probe` (`readinessProbe:` or `startupProbe:`) running `false`, which never
/// succeeds.
fn never_ready_pod(name: &str, grace: u32, probe: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  terminationGracePeriodSeconds: {grace}
  containers:
  - name: app
    command: ["sh", "-c", "trap '' TERM; while true; do sleep 1; done"]
    {probe}
      exec: {{command: ["false"]}}
      periodSeconds: 1
      failureThreshold: 1000
"#
    )
}

/// The lines after `from` that would say the container turned started or ready.
fn turned_ready(agent: &Agent, from: usize, pod: &str) -> Vec<String> {
    agent.seen[from..]
        .iter()
        .filter(|l| {
            l.contains(&format!("default/{pod}: "))
                && (l.ends_with("Ready=True") || l.ends_with("app started") || l.ends_with("app ready"))
        })
        .cloned()
        .collect()
}

/// SIGTERM stops the pods as their removal does: readiness goes on through the grace period,
/// so a container whose readiness probe fails is never called ready while it is being killed.
#[actix::test]
async fn a_failing_readiness_probe_stays_failing_while_the_agent_stops() {
    let dir = temp_dir("shutdown-readiness");
    write(&dir, "unready.yaml", &never_ready_pod("unready", 3, "readinessProbe:"));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/unready: container app running")).await;
    agent
        .wait_for(|l| {
            l.contains("default/unready: Ready=False (ContainersNotReady: containers with unready status")
        })
        .await;
    signal_agent(&agent, "-TERM");
    let stopping = agent.wait_for_after(0, |l| l.contains("shutting down")).await;
    let status = tokio::time::timeout(Duration::from_secs(20), agent.child.wait())
        .await
        .expect("the agent exits")
        .unwrap();
    assert!(status.success(), "{status:?}");
    while let Ok(line) = agent.lines.try_recv() {
        agent.seen.push(line);
    }
    assert_eq!(turned_ready(&agent, stopping, "unready"), Vec::<String>::new(), "{}", agent.seen.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A removed pod whose startup probe never succeeded: liveness and startup stop at once, and
/// the container is still not started (so not ready, the pod not Ready) while it is killed.
#[actix::test]
async fn a_container_whose_startup_probe_never_succeeded_stays_not_started_while_it_stops() {
    let dir = temp_dir("terminating-startup");
    write(&dir, "slow.yaml", &never_ready_pod("slow", 3, "startupProbe:"));
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/slow: container app running")).await;
    std::fs::remove_file(dir.join("slow.yaml")).unwrap();
    let stopping = agent
        .wait_for_after(0, |l| l.ends_with("default/slow: removed (file deleted), stopping its containers"))
        .await;
    agent.wait_for_after(stopping, |l| l.ends_with("default/slow: stopped")).await;
    assert_eq!(turned_ready(&agent, stopping, "slow"), Vec::<String>::new(), "{}", agent.seen.join("\n"));
    agent.stop().await;
}

/// A readiness probe that never passes runs about as often as its period says: a pod is resynced
/// (and its not-ready containers' readiness probes triggered, as `UpdatePodStatus` does) every
/// minute or so, like the kubelet, not every 10 s.
#[actix::test]
async fn a_failing_readiness_probe_runs_at_its_period_not_at_every_resync() {
    let dir = temp_dir("probe-cadence");
    let runs = dir.join(".runs");
    let manifest = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: cadence
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    command: ["sleep", "1000"]
    readinessProbe:
      exec: {{command: ["sh", "-c", "echo run >> {runs}; exit 1"]}}
      periodSeconds: 30
"#,
        runs = runs.display()
    );
    write(&dir, "cadence.yaml", &manifest);
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/cadence: container app running")).await;
    let count = || std::fs::read_to_string(&runs).map(|r| r.lines().count()).unwrap_or(0);
    // The agent has just started: the first probe waits a random part of the period, and
    // manual triggers wait with it, as upstream's worker sleeps through them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(35);
    while count() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the first probe within 35 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The first failure syncs the pod (a manual trigger, a second run at once); a resync
    // every 10 s would add a run at each 10 s mark in the 25 s that follow, the next tick only
    // comes 30 s later.
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert!(count() <= 3, "{} runs of a 30 s probe in 25 s", count());
    agent.stop().await;
}

/// Lifecycle hooks are not run by the local runtime: the agent says so, once per start, rather
/// than ignoring them silently.
#[actix::test]
async fn lifecycle_hooks_are_reported_as_not_run() {
    let dir = temp_dir("hooks");
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: hooks
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    command: ["sleep", "1000"]
    lifecycle:
      postStart:
        exec: {command: ["true"]}
      preStop:
        exec: {command: ["true"]}
"#;
    write(&dir, "hooks.yaml", manifest);
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/hooks: container app running")).await;
    let stderr = std::fs::read_to_string(dir.join(STDERR)).unwrap();
    for hook in ["postStart", "preStop"] {
        assert!(
            stderr
                .lines()
                .any(|l| l.contains("lifecycle hooks are not run by the local runtime") && l.contains(hook)),
            "{hook}: {stderr}"
        );
    }
    agent.stop().await;
}

// === a pod's active deadline ===

/// `activeDeadlineSeconds: 2` on a pod whose container would sleep for an hour under
/// `restartPolicy: Always`: about 2 s after it started the pod is `Failed` with reason
/// `DeadlineExceeded`, its process is gone and stays gone (no restart), and `/pods` and
/// `/events` say why.
#[actix::test]
async fn a_pod_past_its_active_deadline_fails_and_its_container_is_gone_for_good() {
    let dir = temp_dir("deadline");
    let manifest = r#"apiVersion: v1
kind: Pod
metadata:
  name: deadline
spec:
  activeDeadlineSeconds: 2
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    command: ["sleep", "7340"]
"#;
    write(&dir, "deadline.yaml", manifest);
    let mut agent = Agent::start(&dir).await;
    agent.wait_for(|l| l.ends_with("default/deadline: phase Running")).await;
    let running = std::time::Instant::now();
    let sleeping = wait_for_processes(&["sleep", "7340"], 1).await;
    agent.wait_for(|l| l.ends_with("default/deadline: phase Failed")).await;
    // The deadline counts from the start time, at the API's one-second precision: it fires
    // at most 2 s after the pod ran, never a resync (a minute) later.
    let failed_after = running.elapsed();
    assert!(failed_after < Duration::from_secs(10), "failed {failed_after:?} after running");
    assert_gone(&sleeping).await;
    agent.wait_for(|l| l.contains("default/deadline: container app terminated")).await;

    // A restart under `Always` would come at once (the first one has no back-off): three
    // seconds of nothing is none.
    let watched = std::time::Instant::now();
    while watched.elapsed() < Duration::from_secs(3) {
        assert!(processes(&["sleep", "7340"]).is_empty(), "the container was started again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pods = agent.get("/pods").await;
    assert!(pods.contains(r#""phase":"Failed""#), "{pods}");
    assert!(pods.contains(r#""reason":"DeadlineExceeded""#), "{pods}");
    assert!(
        pods.contains(r#""message":"Pod was active on the node longer than the specified deadline""#),
        "{pods}"
    );
    assert!(pods.contains(r#""restartCount":0"#), "{pods}");
    let events = agent.get("/events").await;
    assert!(events.contains(r#""reason":"DeadlineExceeded""#), "{events}");
    let output = agent.seen.join("\n");
    assert!(!output.contains("default/deadline: container app restarted"), "{output}");
    agent.stop().await;
}

/// The agent's standard error a pipe whose reader stopped reading (a stopped `| tee`, a stuck
/// log shipper), a container whose output fills it at once: the agent keeps probing (a pod that
/// turns ready seconds later is told ready), and SIGTERM still stops it in order, exit 0, its
/// container gone. Before, the first write to the full pipe blocked the agent's main thread,
/// probes stopped, and neither that SIGTERM nor a second one ended it.
#[actix::test]
async fn a_log_reader_that_stops_reading_never_stops_the_agent() {
    let dir = temp_dir("stalled-log");
    let fifo = dir.join(".stalled-stderr");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    // Opened for reading (without blocking: no writer yet) and never read.
    let _reader = {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(&fifo)
            .unwrap()
    };
    let chatty = format!("stalled-log-{}", std::process::id());
    write(
        &dir,
        "chatty.yaml",
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: chatty
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: chatty
    command: ["yes", "{chatty}"]
"#
        ),
    );
    write(&dir, "late.yaml", &web_pod("late", free_port(), r#", "--start-after", "5s""#, ""));
    let redirect = format!("exec \"$0\" \"$@\" 2>'{}'", fifo.display());
    let mut agent = Agent::start_under(&dir, &["sh", "-c", &redirect]).await;
    wait_for_processes(&["yes", &chatty], 1).await;
    agent.wait_for(|l| l.contains("default/late: container app ready")).await;
    agent.stop().await;
    assert!(processes(&["yes", &chatty]).is_empty(), "the chatty container outlived the agent");
}
