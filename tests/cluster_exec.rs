//! Cluster mode's exec probes: [`ExecRunner`] against the fake API server's `pods/exec`
//! (websocket, `v5.channel.k8s.io` / `v4.channel.k8s.io`), on its own and behind the real
//! probe dispatcher.

// The real binary runs on real time: its tests read the real clocks too.
#![allow(clippy::disallowed_methods)]
// Helpers here may panic: a panic fails the test that called them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use probelet::status::probe_status::PodProbeStatus;
use probelet_test_support as support;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStatus, EnvVar, ExecAction, Pod, PodSpec,
    PodStatus, Probe,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use probelet::cluster::ExecRunner;
use probelet::container::ContainerId;
use probelet::contracts::{CommandRunner, ExecError, ExecOutput, MAX_EXEC_OUTPUT, MemoryRecorder};
use probelet::prober::Prober;
use probelet::prober::{ProbeError, ProbeKind, ProbeResult};
use probelet_actors::sync::rate::RateLimiter;
use support::apiserver::FakeApiServer;
use support::apiserver::exec::{ExecEnd, ExecReply, V4, V5};

/// Upper bound on any single test.
const TEST_BOUND: Duration = Duration::from_secs(20);
/// A timeout the exec is not meant to hit.
const LONG: Duration = Duration::from_secs(10);

async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_BOUND, test).await.expect("test exceeded its time bound")
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

fn running(name: &str, id: &str) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        image: format!("{name}:1"),
        image_id: String::new(),
        container_id: Some(id.into()),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning { started_at: Some(Time(Timestamp::now())) }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Pod `name` on node `node-a`: containers `app` (exec liveness probe
/// `sh -c 'check $(MODE)'`, MODE=strict) and `sidecar`; its status also lists `gone`, a
/// container the spec does not have.
fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("node-a".into()),
            containers: vec![
                Container {
                    name: "app".into(),
                    image: Some("app:1".into()),
                    env: Some(vec![EnvVar {
                        name: "MODE".into(),
                        value: Some("strict".into()),
                        value_from: None,
                    }]),
                    liveness_probe: Some(Probe {
                        exec: Some(ExecAction { command: Some(strings(&["sh", "-c", "check $(MODE)"])) }),
                        timeout_seconds: Some(1),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Container { name: "sidecar".into(), image: Some("sidecar:1".into()), ..Default::default() },
            ],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![
                running("app", &format!("containerd://{name}-app")),
                running("sidecar", &format!("containerd://{name}-sidecar")),
                running("gone", &format!("containerd://{name}-gone")),
            ]),
            ..Default::default()
        }),
    }
}

fn app(pod_name: &str) -> ContainerId {
    ContainerId::new("containerd", format!("{pod_name}-app"))
}

struct Setup {
    fake: FakeApiServer,
    runner: ExecRunner,
    pod: Pod,
}

/// A fake holding pod `web`, and a runner that learned it.
async fn setup() -> Setup {
    let fake = FakeApiServer::start().await;
    let pod = fake.insert_pod(pod("web"));
    let runner = ExecRunner::new(fake.client(), RateLimiter::new(1000.0, 1000));
    runner.learn(&pod);
    Setup { fake, runner, pod }
}

async fn run(
    runner: &ExecRunner,
    id: &ContainerId,
    cmd: &[&str],
    timeout: Duration,
) -> Result<ExecOutput, ExecError> {
    runner.run_in_container(id, &strings(cmd), timeout).await
}

fn runtime_error(result: Result<ExecOutput, ExecError>) -> String {
    match result {
        Err(ExecError::Runtime(message)) => message,
        other => panic!("expected a runtime error, got {other:?}"),
    }
}

#[tokio::test]
async fn exit_zero_with_stdout_then_stderr() {
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, _| ExecReply::exit(0).stdout("all good\n").stderr("a warning\n"));
        let out = run(&s.runner, &app("web"), &["check"], LONG).await.unwrap();
        assert_eq!(out, ExecOutput { output: b"all good\na warning\n".to_vec(), exit_code: 0 });

        let sessions = s.fake.exec_sessions_ended(1).await;
        assert_eq!(sessions.len(), 1);
        let session = &sessions[0];
        assert_eq!(
            (session.namespace.as_str(), session.pod.as_str(), session.container.as_str()),
            ("default", "web", "app")
        );
        // kube offers v5 first; a v1.30+ server takes it.
        assert_eq!(session.protocol, V5);
        assert!(!session.stdin && session.stdout && session.stderr);
        assert_eq!(session.end, Some(ExecEnd::Completed));

        let requests = s.fake.requests();
        assert_eq!(requests.len(), 1);
        let r = &requests[0];
        assert_eq!(r.method, http::Method::GET);
        assert_eq!(r.path, "/api/v1/namespaces/default/pods/web/exec");
        assert_eq!(r.code, Some(101));
        assert_eq!(r.param("container"), Some("app"));
        assert_eq!(r.param("stdout"), Some("true"));
        assert_eq!(r.param("stderr"), Some("true"));
        assert_eq!(r.param("stdin"), None);
        assert_eq!(r.param("tty"), None);
    })
    .await;
}

#[tokio::test]
async fn the_command_arrives_in_order_and_intact() {
    bounded(async {
        let s = setup().await;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        s.fake.on_exec(move |ns, pod, container, command| {
            record.lock().unwrap().push((
                ns.to_owned(),
                pod.to_owned(),
                container.to_owned(),
                command.to_vec(),
            ));
            ExecReply::exit(0)
        });
        let cmd = ["/bin/sh", "-c", "test \"$A\" = 'x y' && echo a&b=c %41 +1", "", "ünïcode", "--flag=1"];
        let sidecar = ContainerId::new("containerd", "web-sidecar");
        run(&s.runner, &sidecar, &cmd, LONG).await.unwrap();

        let want = strings(&cmd);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, vec![("default".to_owned(), "web".to_owned(), "sidecar".to_owned(), want.clone())]);
        let requests = s.fake.requests();
        let params: Vec<&str> =
            requests[0].query.iter().filter(|(k, _)| k == "command").map(|(_, v)| v.as_str()).collect();
        assert_eq!(params, want);
        assert_eq!(requests[0].param("container"), Some("sidecar"));
    })
    .await;
}

#[tokio::test]
async fn non_zero_exit_code_comes_from_the_status() {
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, command| {
            let code = command[1].parse().unwrap();
            ExecReply::exit(code).stdout(format!("exiting {code}"))
        });
        for code in [1, 3, 126, 137, 255] {
            let out = run(&s.runner, &app("web"), &["exit", &code.to_string()], LONG).await.unwrap();
            assert_eq!(out, ExecOutput { output: format!("exiting {code}").into_bytes(), exit_code: code });
        }
    })
    .await;
}

#[tokio::test]
async fn a_v4_only_server_works_too() {
    bounded(async {
        let s = setup().await;
        s.fake.set_exec_protocols(&[V4]);
        s.fake.on_exec(|_, _, _, _| ExecReply::exit(2).stdout("out").stderr("err"));
        let out = run(&s.runner, &app("web"), &["check"], LONG).await.unwrap();
        assert_eq!(out, ExecOutput { output: b"outerr".to_vec(), exit_code: 2 });
        assert_eq!(s.fake.exec_sessions()[0].protocol, V4);
    })
    .await;
}

#[tokio::test]
async fn output_is_capped_at_10_kib() {
    bounded(async {
        let s = setup().await;
        // Stdout alone over the cap, in several frames.
        s.fake.on_exec(|_, _, _, _| ExecReply::exit(1).stdout(vec![b'o'; 100 * 1024]));
        let out = run(&s.runner, &app("web"), &["big"], LONG).await.unwrap();
        assert_eq!(out.exit_code, 1);
        assert_eq!(out.output, vec![b'o'; MAX_EXEC_OUTPUT]);

        // Stdout first, then as much of stderr as fits.
        s.fake.on_exec(|_, _, _, _| {
            ExecReply::exit(0).stdout(vec![b'o'; 8 * 1024]).stderr(vec![b'e'; 8 * 1024])
        });
        let out = run(&s.runner, &app("web"), &["both"], LONG).await.unwrap();
        let mut want = vec![b'o'; 8 * 1024];
        want.extend(vec![b'e'; MAX_EXEC_OUTPUT - 8 * 1024]);
        assert_eq!(out, ExecOutput { output: want, exit_code: 0 });
    })
    .await;
}

#[tokio::test]
async fn much_stderr_does_not_stall_the_stream() {
    // kube buffers 1 KiB per stream: stderr must be read while stdout is still open.
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, _| ExecReply::exit(1).stderr(vec![b'e'; 64 * 1024]));
        let out = run(&s.runner, &app("web"), &["fail-loudly"], Duration::from_secs(5)).await.unwrap();
        assert_eq!(out, ExecOutput { output: vec![b'e'; MAX_EXEC_OUTPUT], exit_code: 1 });
    })
    .await;
}

#[tokio::test]
async fn a_slow_exec_times_out_and_hangs_up() {
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, _| ExecReply::exit(0).stdout("started\n").delay(Duration::from_secs(30)));
        let started = tokio::time::Instant::now();
        let result = run(&s.runner, &app("web"), &["sleep", "30"], Duration::from_millis(300)).await;
        assert_eq!(result, Err(ExecError::Timeout { output: b"started\n".to_vec() }));
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        // The runner drops the stream: the session ends before the command would have.
        let sessions = s.fake.exec_sessions_ended(1).await;
        assert_eq!(sessions[0].end, Some(ExecEnd::ClientGone));
    })
    .await;
}

#[tokio::test]
async fn an_unknown_container_id_is_a_runtime_error() {
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, _| ExecReply::exit(0));
        let unknown = ContainerId::new("containerd", "never-seen");
        let message = runtime_error(run(&s.runner, &unknown, &["check"], LONG).await);
        assert_eq!(
            message,
            "container containerd://never-seen is not in the status of any pod the agent watches"
        );
        assert!(s.fake.requests().is_empty(), "nothing may be sent for an unknown container");

        // Forgotten with its pod.
        s.runner.forget(&s.pod);
        let message = runtime_error(run(&s.runner, &app("web"), &["check"], LONG).await);
        assert_eq!(
            message,
            "container containerd://web-app is not in the status of any pod the agent watches"
        );
    })
    .await;
}

/// A pod whose status names another pod's container ID does not get its command run in that
/// container: the ID two pods claim runs nowhere, and no exec reaches the API server. Before,
/// the status seen last won, and the command ran in the other pod with the agent's
/// `pods/exec` (found by a hostile test).
#[tokio::test]
async fn an_id_another_pods_status_also_names_runs_nowhere() {
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, _| ExecReply::exit(0));
        let mut evil = pod("evil");
        evil.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].container_id =
            Some(app("web").to_string());
        let evil = s.fake.insert_pod(evil);
        s.runner.learn(&evil);
        let message = runtime_error(run(&s.runner, &app("web"), &["cat", "/secret"], LONG).await);
        assert_eq!(
            message,
            "container containerd://web-app is in the status of more than one pod (default/web, default/evil): \
             running the probe in none"
        );
        assert!(s.fake.exec_sessions().is_empty(), "no exec in either pod");

        // Once the other pod lets go, the ID is its owner's again.
        s.runner.forget(&evil);
        run(&s.runner, &app("web"), &["check"], LONG).await.unwrap();
        assert_eq!(s.fake.exec_sessions().len(), 1);
    })
    .await;
}

/// A pod deleted and made again under its name: forgetting the old one (after the new one was
/// learnt, as a watch's re-list does) keeps the new one's containers.
#[tokio::test]
async fn forgetting_an_old_pod_keeps_the_new_pod_of_its_name() {
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, _| ExecReply::exit(0));
        let mut new = s.pod.clone();
        new.metadata.uid = Some("uid-web-2".into());
        new.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].container_id =
            Some("containerd://web-app-2".into());
        s.runner.learn(&new);
        s.runner.forget(&s.pod);
        run(&s.runner, &ContainerId::new("containerd", "web-app-2"), &["check"], LONG).await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_restarted_container_replaces_the_old_id() {
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, _| ExecReply::exit(0));
        let mut restarted = s.pod.clone();
        restarted.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].container_id =
            Some("containerd://web-app-2".into());
        s.runner.learn(&restarted);
        run(&s.runner, &ContainerId::new("containerd", "web-app-2"), &["check"], LONG).await.unwrap();
        let message = runtime_error(run(&s.runner, &app("web"), &["check"], LONG).await);
        assert!(message.contains("containerd://web-app is not in the status"), "{message}");
    })
    .await;
}

#[tokio::test]
async fn an_unknown_pod_is_a_runtime_error() {
    bounded(async {
        let s = setup().await;
        // Learned from a watch event, but gone from the API server.
        s.runner.learn(&pod("ghost"));
        let message = runtime_error(run(&s.runner, &app("ghost"), &["check"], LONG).await);
        assert_eq!(message, "exec in container app of pod default/ghost failed: pods \"ghost\" not found");
        assert_eq!(s.fake.requests()[0].code, Some(404));
        assert!(s.fake.exec_sessions().is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_container_the_pod_does_not_have_is_a_runtime_error() {
    bounded(async {
        let s = setup().await;
        let gone = ContainerId::new("containerd", "web-gone");
        let message = runtime_error(run(&s.runner, &gone, &["check"], LONG).await);
        assert_eq!(
            message,
            "exec in container gone of pod default/web failed: container gone is not valid for pod web"
        );
        assert_eq!(s.fake.requests()[0].code, Some(400));
    })
    .await;
}

#[tokio::test]
async fn a_command_the_runtime_cannot_run_is_a_runtime_error() {
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, _| ExecReply {
            error: Some("exec: \"nope\": executable file not found in $PATH".into()),
            ..ExecReply::default()
        });
        let message = runtime_error(run(&s.runner, &app("web"), &["nope"], LONG).await);
        assert_eq!(
            message,
            "exec in container app of pod default/web failed: Internal error occurred: error executing command \
             in container: exec: \"nope\": executable file not found in $PATH"
        );
    })
    .await;
}

#[tokio::test]
async fn a_stream_that_breaks_before_the_status_is_a_runtime_error() {
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, _| ExecReply { hang_up: true, ..ExecReply::exit(0).stdout("partial") });
        let message = runtime_error(run(&s.runner, &app("web"), &["check"], LONG).await);
        assert!(message.starts_with("exec in container app of pod default/web failed: "), "{message}");
        assert_eq!(s.fake.exec_sessions_ended(1).await[0].end, Some(ExecEnd::HungUp));
    })
    .await;
}

// === through the probe dispatcher ===

fn prober(runner: &ExecRunner) -> (Prober, MemoryRecorder) {
    let recorder = MemoryRecorder::new();
    (Prober::new(Arc::new(runner.clone()), Arc::new(recorder.clone())), recorder)
}

async fn probe_liveness(prober: &Prober, pod: &Pod, id: &ContainerId) -> Result<ProbeResult, ProbeError> {
    let container = pod.spec.as_ref().unwrap().containers[0].clone();
    let status = PodProbeStatus::from(pod.status.as_ref().unwrap());
    prober.probe(ProbeKind::Liveness, pod, &status, &container, id).await
}

#[tokio::test]
async fn prober_success_runs_the_expanded_command() {
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, command| {
            assert_eq!(command, strings(&["sh", "-c", "check strict"]));
            ExecReply::exit(0).stdout("fine")
        });
        let (prober, recorder) = prober(&s.runner);
        assert_eq!(probe_liveness(&prober, &s.pod, &app("web")).await, Ok(ProbeResult::Success));
        assert!(recorder.rendered().is_empty());
        assert_eq!(s.fake.exec_sessions().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn prober_failure_records_the_output() {
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, _| ExecReply::exit(1).stdout("database unreachable\n"));
        let (prober, recorder) = prober(&s.runner);
        assert_eq!(probe_liveness(&prober, &s.pod, &app("web")).await, Ok(ProbeResult::Failure));
        assert_eq!(
            recorder.rendered(),
            vec!["Warning Unhealthy Liveness probe failed: database unreachable\n"]
        );
        let events = recorder.events();
        assert_eq!(events[0].object.field_path.as_deref(), Some("spec.containers{app}"));
    })
    .await;
}

#[tokio::test]
async fn prober_timeout_is_a_failure_with_the_cri_text() {
    bounded(async {
        let s = setup().await;
        s.fake.on_exec(|_, _, _, _| ExecReply::exit(0).delay(Duration::from_secs(30)));
        let (prober, recorder) = prober(&s.runner);
        assert_eq!(probe_liveness(&prober, &s.pod, &app("web")).await, Ok(ProbeResult::Failure));
        assert_eq!(
            recorder.rendered(),
            vec!["Warning Unhealthy Liveness probe failed: command \"sh -c check strict\" timed out"]
        );
    })
    .await;
}

#[tokio::test]
async fn prober_runtime_error_is_retried_then_reported() {
    bounded(async {
        let s = setup().await;
        // Seen by the agent, unknown to the API server.
        let ghost = pod("ghost");
        s.runner.learn(&ghost);

        let (prober, recorder) = prober(&s.runner);
        let result = probe_liveness(&prober, &ghost, &app("ghost")).await;
        let message = "exec in container app of pod default/ghost failed: pods \"ghost\" not found";
        assert_eq!(result, Err(ProbeError::Runtime(message.into())));
        assert_eq!(s.fake.requests().len(), 3, "upstream tries an erroring probe three times");
        assert_eq!(
            recorder.rendered(),
            vec![format!(
                "Warning Unhealthy Liveness probe errored and resulted in unknown state: {message}"
            )]
        );
    })
    .await;
}
