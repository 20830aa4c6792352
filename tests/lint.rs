//! `probelet lint` end to end: the real binary on folders of manifests, its exit codes (0 with
//! warnings only, 1 on an error finding, 2 on a file it cannot read or parse), its JSON document
//! and its text, and the repository's own examples (which must lint without errors).
// Helpers may panic: a panic there fails the test that called it.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

/// A folder of its own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("probelet-lint-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let file = self.0.join(name);
        if let Some(parent) = file.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(&file, contents).unwrap();
        file
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

fn lint(args: &[&str], paths: &[&Path]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_probelet"))
        .arg("lint")
        .args(args)
        .args(paths)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    Run {
        code: output.status.code().unwrap(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// A Deployment whose liveness probe checks what its readiness probe checks (a warning), with a
/// Service beside it in the same file.
const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: example/web:1
          ports:
            - {name: http, containerPort: 8080}
          startupProbe:
            httpGet: {path: /healthz, port: http}
            failureThreshold: 30
          readinessProbe:
            httpGet: {path: /healthz, port: http}
          livenessProbe:
            httpGet: {path: /healthz, port: 8080}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
"#;

/// A Pod in JSON with a readiness probe only.
const POD: &str = r#"{
  "apiVersion": "v1",
  "kind": "Pod",
  "metadata": {"name": "api"},
  "spec": {"containers": [{
    "name": "api",
    "image": "example/api:1",
    "readinessProbe": {"tcpSocket": {"port": 9000}, "initialDelaySeconds": 5, "periodSeconds": 5}
  }]}
}"#;

/// A Job whose liveness probe has a negative period: the API server rejects it.
const INVALID: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: report}
spec:
  template:
    spec:
      restartPolicy: OnFailure
      containers:
        - name: report
          image: example/report:1
          livenessProbe:
            exec: {command: [cat, /tmp/alive]}
            periodSeconds: -5
"#;

/// A Pod whose period is not a number: the file does not decode.
const UNPARSEABLE: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: broken}
spec:
  containers:
    - name: app
      image: x
      readinessProbe:
        tcpSocket: {port: 80}
        periodSeconds: ten
"#;

/// `probelet lint --format json` on `dir`, which must exit with `code`; its report.
fn lint_json(dir: &Path, code: i32) -> Value {
    let run = lint(&["--format", "json"], &[dir]);
    assert_eq!(run.code, code, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    run.json()
}

/// The API server's text for annotations beyond 256 KiB.
const TOO_LONG: &str = "Too long: may not be more than 262144 bytes";

fn findings<'a>(json: &'a Value, rule: &str) -> Vec<&'a Value> {
    json["findings"].as_array().unwrap().iter().filter(|f| f["rule"] == rule).collect()
}

/// Each finding as its object's name, its field and its message.
fn named<'a>(findings: &[&'a Value]) -> Vec<(&'a str, &'a str, &'a str)> {
    findings
        .iter()
        .map(|f| {
            let text = |key: &str| f[key].as_str().expect("a string field");
            (text("name"), text("field"), text("message"))
        })
        .collect()
}

/// Findings about a whole object: errors, of no container and no probe.
fn assert_object_errors(findings: &[&Value]) {
    for finding in findings {
        assert_eq!(finding["severity"], "error", "{finding}");
        assert_eq!((&finding["container"], &finding["probe"]), (&Value::Null, &Value::Null), "{finding}");
    }
}

#[test]
fn warnings_only_exit_0_and_the_json_says_what_the_kubelet_does() {
    let dir = TempDir::new("clean");
    dir.write("web/deployment.yaml", DEPLOYMENT);
    dir.write("api.json", POD);
    dir.write(".hidden.yaml", UNPARSEABLE);
    dir.write("notes.txt", UNPARSEABLE);

    let json = lint_json(dir.path(), 0);
    assert_eq!(json["summary"]["files"], 2, "hidden files and other extensions are not read");
    assert_eq!(json["summary"]["objects"], 2);
    assert_eq!(json["summary"]["skipped"], 1, "the Service");
    assert_eq!(json["summary"]["errors"], 0);
    assert_eq!(json["summary"]["exit_code"], 0);

    let same = findings(&json, "liveness-like-readiness");
    assert_eq!(same.len(), 1, "{json:#}");
    let same = same[0];
    assert!(same["file"].as_str().unwrap().ends_with("web/deployment.yaml"), "{same}");
    assert_eq!(same["kind"], "Deployment");
    assert_eq!(same["namespace"], "shop");
    assert_eq!(same["name"], "web");
    assert_eq!(same["container"], "web");
    assert_eq!(same["probe"], "livenessProbe");
    assert_eq!(same["severity"], "warning");
    assert_eq!(same["field"], "spec.template.spec.containers[0].livenessProbe");
    // Startup: 0 + 10 + 1 = 11 s; readiness then 10 + 1 more.
    assert_eq!(same["timings"]["ready_after_start_seconds"], 22, "{same}");
    assert_eq!(same["timings"]["ready_after_kubelet_restart_seconds"], 11, "started is kept: readiness only");
    assert_eq!(same["timings"]["ready_after_kubelet_restart_rerunning_startup_seconds"], 22, "{same}");
    assert_eq!(same["timings"]["liveness_restart_seconds"], 61, "{same}");
    assert_eq!(same["timings"]["start_tolerance_seconds"], 290, "{same}");

    let ready = findings(&json, "time-to-ready");
    let api = ready.iter().find(|f| f["name"] == "api").unwrap();
    assert_eq!(api["kind"], "Pod");
    assert_eq!(api["namespace"], Value::Null);
    assert_eq!(api["severity"], "info");
    assert_eq!(api["timings"]["ready_after_start_seconds"], 11, "5 s delay + 5 s period + 1 s timeout");

    let objects = json["objects"].as_array().unwrap();
    let probes = &objects.iter().find(|o| o["name"] == "api").unwrap()["containers"][0]["probes"];
    assert_eq!(probes[0]["probe"], "readinessProbe");
    assert_eq!(probes[0]["timeout_seconds"], 1);
    assert_eq!(probes[0]["failure_threshold"], 3);
    assert!(probes[0]["defaulted"].as_array().unwrap().contains(&Value::from("timeoutSeconds: 1")));

    let text = lint(&[], &[dir.path()]);
    assert_eq!(text.code, 0);
    assert!(
        text.stdout.contains("deployment.yaml: Deployment shop/web\n  container web\n"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("warning liveness-like-readiness [livenessProbe]: "), "{}", text.stdout);
    assert!(
        text.stdout.ends_with(
            "2 files, 2 objects with a pod spec (1 other document skipped): 0 errors, 1 warning\n"
        ),
        "{}",
        text.stdout
    );
}

#[test]
fn an_error_finding_exits_1() {
    let dir = TempDir::new("errors");
    dir.write("api.json", POD);
    let job = dir.write("job.yaml", INVALID);

    let json = lint_json(dir.path(), 1);
    let invalid = findings(&json, "invalid");
    assert_eq!(invalid.len(), 1, "{json:#}");
    assert_eq!(invalid[0]["kind"], "Job");
    assert_eq!(invalid[0]["severity"], "error");
    assert_eq!(
        invalid[0]["message"],
        "spec.template.spec.containers[0].livenessProbe.periodSeconds: Invalid value: -5: must be greater than or equal to 0"
    );
    assert_eq!(invalid[0]["timings"], Value::Null, "no timings from invalid values");
    assert_eq!(json["summary"]["errors"], 1);

    // One file as the argument: the same.
    let run = lint(&[], &[&job]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout.contains("error   invalid [livenessProbe]: spec.template.spec.containers[0]"),
        "{}",
        run.stdout
    );
}

/// A reader that stops reading (`probelet lint DIR | head`) ends lint's report early, not lint:
/// the exit code is still the report's, and no panic is printed (`print!` panicked on the broken
/// pipe, with a backtrace, and exited 101). The reader is gone before lint writes a byte.
#[test]
fn a_reader_gone_early_leaves_the_exit_code_and_prints_no_panic() {
    let dir = TempDir::new("epipe");
    dir.write("api.json", POD);
    dir.write("job.yaml", INVALID);
    for format in ["json", "text"] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let output = Command::new(env!("CARGO_BIN_EXE_probelet"))
            .args(["lint", "--format", format])
            .arg(dir.path())
            .env("NO_COLOR", "1")
            .env("RUST_BACKTRACE", "1")
            .stdout(writer)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{format}: {stderr}");
        assert!(!stderr.contains("panicked"), "{format}: {stderr}");
    }
    // A stream that takes nothing (a full disk) is a report not given: said, and exit 2.
    let full = fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_probelet"))
        .arg("lint")
        .arg(dir.path())
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error: writing the report: No space left on device"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Notes that standard error cannot take leave the report and its exit code as they are.
    dir.write("broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [\n");
    let full = fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_probelet"))
        .args(["lint", "--format", "json"])
        .arg(dir.path())
        .stderr(full)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["summary"]["unreadable"], 1, "{json:#}");
}

/// A pod the API server refuses for its active deadline or for the size of its annotations, a
/// Pod or a workload's template: errors about the pod (no container, no probe), in the API
/// server's words, each naming the field where the manifest has it.
#[test]
fn a_bad_active_deadline_or_too_many_annotation_bytes_are_errors_about_the_pod() {
    let dir = TempDir::new("pod-limits");
    // With the key `a`: a byte more than the API server's 262144.
    let big = "x".repeat(256 * 1024);
    dir.write(
        "pod.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: big\n  annotations:\n    a: {big}\n\
             spec:\n  activeDeadlineSeconds: 60\n  containers:\n    - {{name: app, image: app:1}}\n"
        ),
    );
    dir.write(
        "job.yaml",
        &format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: late}}\nspec:\n  template:\n    \
             metadata:\n      annotations:\n        a: {big}\n    spec:\n      restartPolicy: Never\n      \
             activeDeadlineSeconds: 0\n      containers:\n        - {{name: app, image: app:1}}\n"
        ),
    );

    let json = lint_json(dir.path(), 1);
    let invalid = findings(&json, "invalid");
    let got = named(&invalid);
    let too_long = TOO_LONG;
    assert_eq!(
        got,
        [
            (
                "late",
                "spec.template.metadata.annotations",
                &*format!("spec.template.annotations: {too_long}")
            ),
            (
                "late",
                "spec.template.spec.activeDeadlineSeconds",
                "spec.template.spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive"
            ),
            ("big", "metadata.annotations", &*format!("metadata.annotations: {too_long}")),
        ]
    );
    assert_object_errors(&invalid);
    assert_eq!(json["summary"]["errors"], 3);

    let text = lint(&[], &[dir.path()]);
    assert_eq!(text.code, 1);
    assert!(
        text.stdout.contains(&format!(
            "job.yaml: Job late\n  error   invalid: spec.template.annotations: {too_long}\n  error   invalid: spec.template.spec.activeDeadlineSeconds: "
        )),
        "{}",
        text.stdout
    );
}

/// Two Pods of one namespace/name in one folder: the second is an error at `metadata.name`
/// naming the first's file, as `probelet run` refuses it (docs/reliability.md, "A new manifest
/// never displaces a running pod"). Pods of another namespace, or of another folder (another
/// node's manifests), may share the name.
#[test]
fn a_second_pod_of_one_name_in_a_folder_is_an_error() {
    let dir = TempDir::new("duplicate-pods");
    let pod = |namespace: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n{namespace}spec:\n  containers:\n    - {{name: app, image: app:1}}\n"
        )
    };
    let first = dir.write("a.yaml", &pod(""));
    dir.write("b.yaml", &pod("  namespace: default\n"));
    dir.write("c.yaml", &pod("  namespace: other\n"));
    dir.write("node-b/a.yaml", &pod(""));

    let json = lint_json(dir.path(), 1);
    let invalid = findings(&json, "invalid");
    let message = format!(
        "metadata.name: Duplicate value: \"web\": pod default/web is also in {}; `probelet run` on this folder runs only one of them",
        first.display()
    );
    assert_eq!(named(&invalid), [("web", "metadata.name", message.as_str())]);
    assert_eq!(invalid[0]["file"].as_str(), Some(dir.path().join("b.yaml").to_str().unwrap()));
    assert_object_errors(&invalid);

    // The same folder written two ways is one folder.
    let other_way = dir.path().join("node-b").join("..").join("b.yaml");
    let run = lint(&["--format", "json"], &[&first, &other_way]);
    assert_eq!(run.code, 1, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    assert_eq!(named(&findings(&run.json(), "invalid")), [("web", "metadata.name", message.as_str())]);
}

/// A workload whose own annotations are over the limit is refused as a Pod is: an error at
/// `metadata.annotations`, in the same words, before its template's; at the limit, none.
#[test]
fn a_workloads_own_annotations_over_the_limit_are_an_error() {
    let dir = TempDir::new("object-annotations");
    // With the key `a`: a byte more than the API server's 262144, and exactly that.
    let over = "x".repeat(256 * 1024);
    let limit = "x".repeat(256 * 1024 - 1);
    let template = "  selector: {matchLabels: {app: a}}\n  template:\n    metadata: {labels: {app: a}}\n    \
                    spec:\n      containers:\n        - {name: app, image: app:1}\n";
    dir.write(
        "deployment.yaml",
        &format!("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  annotations:\n    a: {over}\nspec:\n{template}"),
    );
    dir.write(
        "statefulset.yaml",
        &format!("apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\n  annotations:\n    a: {limit}\nspec:\n{template}"),
    );
    dir.write(
        "cronjob.yaml",
        &format!(
            "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: nightly\n  annotations:\n    a: {over}\n\
             spec:\n  schedule: '0 3 * * *'\n  jobTemplate:\n    spec:\n      template:\n        metadata:\n          \
             annotations:\n            a: {over}\n        spec:\n          restartPolicy: Never\n          \
             containers:\n            - {{name: app, image: app:1}}\n"
        ),
    );

    let json = lint_json(dir.path(), 1);
    let invalid = findings(&json, "invalid");
    let got = named(&invalid);
    let too_long = TOO_LONG;
    let own = format!("metadata.annotations: {too_long}");
    assert_eq!(
        got,
        [
            ("nightly", "metadata.annotations", &*own),
            (
                "nightly",
                "spec.jobTemplate.spec.template.metadata.annotations",
                &*format!("spec.jobTemplate.spec.template.annotations: {too_long}")
            ),
            ("web", "metadata.annotations", &*own),
        ]
    );
    assert_object_errors(&invalid);
    assert_eq!(json["summary"]["errors"], 3);

    let text = lint(&[], &[dir.path()]);
    assert_eq!(text.code, 1);
    assert!(
        text.stdout.contains(&format!("deployment.yaml: Deployment web\n  error   invalid: {own}\n")),
        "{}",
        text.stdout
    );
}

#[test]
fn a_workload_that_keeps_its_pods_running_may_not_set_an_active_deadline() {
    let dir = TempDir::new("workload-deadline");
    let template = "  selector: {matchLabels: {app: a}}\n  template:\n    metadata: {labels: {app: a}}\n    \
                    spec:\n      activeDeadlineSeconds: 30\n      containers:\n        - {name: app, image: app:1}\n";
    dir.write(
        "deployment.yaml",
        &format!("apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n{template}"),
    );
    dir.write(
        "daemonset.yaml",
        &format!("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: agent}}\nspec:\n{template}"),
    );
    dir.write(
        "job.yaml",
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: batch}\nspec:\n  template:\n    spec:\n      \
         restartPolicy: Never\n      activeDeadlineSeconds: 30\n      containers:\n        - {name: app, image: app:1}\n",
    );

    let json = lint_json(dir.path(), 1);
    let mut got: Vec<(String, String)> = findings(&json, "invalid")
        .iter()
        .map(|f| {
            let text = |key: &str| f[key].as_str().expect("a string field").to_owned();
            (text("name"), text("message"))
        })
        .collect();
    got.sort();
    let field = "spec.template.spec.activeDeadlineSeconds";
    assert_eq!(
        got,
        [
            (
                "agent".to_owned(),
                format!("{field}: Forbidden: activeDeadlineSeconds in DaemonSet is not Supported")
            ),
            (
                "web".to_owned(),
                format!("{field}: Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported")
            ),
        ],
        "the Job may run to a deadline"
    );
}

/// A workload of `kind` named `name`, with `selector` and `labels` (flow YAML) and the template
/// spec's extra lines `spec` (at the template spec's indentation) before its one container.
fn workload(kind: &str, name: &str, selector: &str, labels: &str, spec: &str) -> String {
    let (api_version, head) = match kind {
        "Job" => ("batch/v1", String::new()),
        _ => ("apps/v1", format!("  selector: {selector}\n")),
    };
    let head = if kind == "Job" && !selector.is_empty() {
        format!("  manualSelector: true\n  selector: {selector}\n")
    } else {
        head
    };
    format!(
        "apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: {name}}}\nspec:\n{head}  template:\n    \
         metadata: {{labels: {labels}}}\n    spec:\n{spec}      containers:\n        - {{name: app, image: app:1}}\n"
    )
}

/// A CronJob named `name` whose job's pod template has the extra lines `spec`.
fn cron_job(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: CronJob\nmetadata: {{name: {name}}}\nspec:\n  schedule: '0 3 * * *'\n  \
         jobTemplate:\n    spec:\n      template:\n        spec:\n{spec}          containers:\n            \
         - {{name: app, image: app:1}}\n"
    )
}

/// `probelet lint --format json` on a folder of `files` (name, contents), which must exit with
/// `code`: its `invalid` findings as (object name, field, message), in file order, each an error
/// about the whole object.
fn invalid_findings(tag: &str, files: &[(&str, String)], code: i32) -> Vec<(String, String, String)> {
    let dir = TempDir::new(tag);
    for (name, contents) in files {
        dir.write(name, contents);
    }
    let json = lint_json(dir.path(), code);
    let invalid = findings(&json, "invalid");
    assert_object_errors(&invalid);
    named(&invalid).into_iter().map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned())).collect()
}

fn owned(want: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    want.iter().map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned())).collect()
}

/// A Deployment's, ReplicaSet's, StatefulSet's or DaemonSet's pods run for good: their template's
/// `restartPolicy` must be `Always` (the default), after the pod's own errors and before the
/// forbidden deadline, as the API server checks them.
#[test]
fn a_workload_that_keeps_its_pods_running_must_restart_them_always() {
    let labels = "{app: a}";
    let selector = "{matchLabels: {app: a}}";
    let files = [
        (
            "a-deployment.yaml",
            workload("Deployment", "web", selector, labels, "      restartPolicy: OnFailure\n"),
        ),
        (
            "b-replicaset.yaml",
            workload(
                "ReplicaSet",
                "rs",
                selector,
                labels,
                "      restartPolicy: Never\n      activeDeadlineSeconds: 5\n",
            ),
        ),
        (
            "c-statefulset.yaml",
            workload("StatefulSet", "db", selector, labels, "      restartPolicy: Always\n"),
        ),
        ("d-daemonset.yaml", workload("DaemonSet", "agent", selector, labels, "")),
    ];
    let field = "spec.template.spec.restartPolicy";
    let deadline = "spec.template.spec.activeDeadlineSeconds";
    assert_eq!(
        invalid_findings("workload-restart", &files, 1),
        owned(&[
            (
                "web",
                field,
                &format!("{field}: Unsupported value: \"OnFailure\": supported values: \"Always\"")
            ),
            ("rs", field, &format!("{field}: Unsupported value: \"Never\": supported values: \"Always\"")),
            (
                "rs",
                deadline,
                &format!("{deadline}: Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported")
            ),
        ]),
        "an explicit or a defaulted Always is fine"
    );
}

/// A Job's and a CronJob's pods run to completion: their template's `restartPolicy` must be
/// `OnFailure` or `Never` — unset is `Always` to the API server, which asks for one — and
/// `Never` with a `podFailurePolicy`. A value of none of the three is refused by the pod's own
/// check and by the Job's.
#[test]
fn a_job_must_restart_its_pods_on_failure_or_never() {
    let policy =
        "  podFailurePolicy: {rules: [{action: FailJob, onExitCodes: {operator: In, values: [42]}}]}\n";
    let job = |name: &str, restart: &str, failure_policy: bool| {
        let yaml = workload("Job", name, "", "{app: a}", &format!("      restartPolicy: {restart}\n"));
        if failure_policy { yaml.replace("  template:\n", &format!("{policy}  template:\n")) } else { yaml }
    };
    let files = [
        ("a-unset.yaml", workload("Job", "unset", "", "{app: a}", "")),
        ("b-sometimes.yaml", job("sometimes", "Sometimes", false)),
        ("c-on-failure-with-policy.yaml", job("strict", "OnFailure", true)),
        ("d-never-with-policy.yaml", job("fine", "Never", true)),
        ("e-on-failure.yaml", job("retry", "OnFailure", false)),
        ("f-cron-always.yaml", cron_job("nightly", "          restartPolicy: Always\n")),
        ("g-cron-never.yaml", cron_job("hourly", "          restartPolicy: Never\n")),
    ];
    let field = "spec.template.spec.restartPolicy";
    let cron = "spec.jobTemplate.spec.template.spec.restartPolicy";
    let required = "Required value: valid values: \"OnFailure\", \"Never\"";
    assert_eq!(
        invalid_findings("job-restart", &files, 1),
        owned(&[
            ("unset", field, &format!("{field}: {required}")),
            (
                "sometimes",
                field,
                &format!(
                    "{field}: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
                )
            ),
            (
                "sometimes",
                field,
                &format!(
                    "{field}: Unsupported value: \"Sometimes\": supported values: \"OnFailure\", \"Never\""
                )
            ),
            (
                "strict",
                field,
                &format!(
                    "{field}: Invalid value: \"OnFailure\": only \"Never\" is supported when podFailurePolicy is specified"
                )
            ),
            ("nightly", cron, &format!("{cron}: {required}")),
        ])
    );
}

/// A CronJob whose `jobTemplate` is empty (`jobTemplate: ~`, as an empty Helm value renders)
/// has no pod, and its errors are at the template's fields, as the API server names them: they
/// were said at a Pod's (`spec.containers: Required value`).
#[test]
fn an_empty_job_template_is_refused_at_the_templates_fields() {
    let yaml = "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: nightly}\nspec:\n  schedule: '0 3 * * *'\n  \
                jobTemplate: ~\n";
    let cron = "spec.jobTemplate.spec.template.spec";
    assert_eq!(
        invalid_findings("empty-job-template", &[("cron.yaml", yaml.to_owned())], 1),
        owned(&[
            ("nightly", &format!("{cron}.containers"), &format!("{cron}.containers: Required value")),
            (
                "nightly",
                &format!("{cron}.restartPolicy"),
                &format!("{cron}.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"")
            ),
        ])
    );
}

/// A workload's own name, as the API server checks it: an RFC 1123 subdomain, but a label for a
/// StatefulSet (its pods' hostnames are its name and an ordinal), and at most 52 characters for
/// a CronJob (its Jobs add 11 to it); a `generateName` stands in for a missing name.
#[test]
fn a_workloads_own_name_is_checked_by_its_kinds_rule() {
    let labels = "{app: a}";
    let selector = "{matchLabels: {app: a}}";
    let long = "c".repeat(53);
    let longest = "c".repeat(52);
    let files = [
        ("a-deployment.yaml", workload("Deployment", "Web_1", selector, labels, "")),
        ("b-deployment.yaml", workload("Deployment", "web.shop", selector, labels, "")),
        ("c-statefulset.yaml", workload("StatefulSet", "db.main", selector, labels, "")),
        ("d-statefulset.yaml", workload("StatefulSet", "db-main", selector, labels, "")),
        ("e-cron.yaml", cron_job(&long, "          restartPolicy: Never\n")),
        ("f-cron.yaml", cron_job(&longest, "          restartPolicy: Never\n")),
        (
            "g-job.yaml",
            workload("Job", "x", "", labels, "      restartPolicy: Never\n")
                .replace("metadata: {name: x}", "metadata: {generateName: report-}"),
        ),
    ];
    let subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or \
                     '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
                     validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    assert_eq!(
        invalid_findings("workload-names", &files, 1),
        owned(&[
            ("Web_1", "metadata.name", &format!("metadata.name: Invalid value: \"Web_1\": {subdomain}")),
            ("db.main", "metadata.name", "metadata.name: Invalid value: \"db.main\": must not contain dots"),
            (
                &long,
                "metadata.name",
                &format!("metadata.name: Invalid value: \"{long}\": must be no more than 52 characters")
            ),
        ])
    );
}

/// The API server's text for a qualified name's name part (a label key, an annotation key).
const NAME_PART: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
                         with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used \
                         for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// Labels are checked as the API server checks them (`ValidateLabels`: each key a qualified name,
/// each value a label value), a Pod's and a workload's own at `metadata.labels` with its name,
/// a template's after the workload's selector at the template's path (`spec.template.labels`,
/// the finding's field where they are written), as `probelet run` refuses a Pod's; a pod's node
/// selector too, after its restart policy. Neither was checked.
#[test]
fn labels_are_checked_as_the_api_server_checks_them() {
    let name_part = NAME_PART;
    let value = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and \
                 must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', \
                 regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {'-x': v, ok: ''}}\nspec:\n  \
               nodeSelector: {'a!': v}\n  containers: [{name: app, image: app:1}]\n";
    let deployment = workload("Deployment", "web", "{matchLabels: {app: a}}", "{app: a, tier: -x}", "")
        .replace("metadata: {name: web}", "metadata: {name: web, labels: {'x!': v}}");
    let files = [("a-pod.yaml", pod.to_owned()), ("b-deployment.yaml", deployment)];
    assert_eq!(
        invalid_findings("labels", &files, 1),
        owned(&[
            ("p", "metadata.labels", &format!("metadata.labels: Invalid value: \"-x\": {name_part}")),
            ("p", "spec.nodeSelector", &format!("spec.nodeSelector: Invalid value: \"a!\": {name_part}")),
            ("web", "metadata.labels", &format!("metadata.labels: Invalid value: \"x!\": {name_part}")),
            (
                "web",
                "spec.template.metadata.labels",
                &format!("spec.template.labels: Invalid value: \"-x\": {value}")
            ),
        ])
    );
}

/// Annotation keys are checked as the API server checks them (`ValidateAnnotations`: a qualified
/// name once made lower case): a Pod's at `metadata.annotations`, a workload's own there too,
/// its template's at `spec.template.annotations` (the finding's field where they are written).
/// They were not checked.
#[test]
fn annotation_keys_are_checked_as_the_api_server_checks_them() {
    let name_part = NAME_PART;
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {'-x': v, Example.com/Ok: v}}\nspec:\n  \
               containers: [{name: app, image: app:1}]\n";
    let deployment =
        workload("Deployment", "web", "{matchLabels: {app: a}}", "{app: a}, annotations: {'y!': v}", "")
            .replace("metadata: {name: web}", "metadata: {name: web, annotations: {'x!': v}}");
    let files = [("a-pod.yaml", pod.to_owned()), ("b-deployment.yaml", deployment)];
    assert_eq!(
        invalid_findings("annotation-keys", &files, 1),
        owned(&[
            (
                "p",
                "metadata.annotations",
                &format!("metadata.annotations: Invalid value: \"-x\": {name_part}")
            ),
            (
                "web",
                "metadata.annotations",
                &format!("metadata.annotations: Invalid value: \"x!\": {name_part}")
            ),
            (
                "web",
                "spec.template.metadata.annotations",
                &format!("spec.template.annotations: Invalid value: \"y!\": {name_part}")
            ),
        ])
    );
}

/// A Deployment's, ReplicaSet's, StatefulSet's or DaemonSet's `matchLabels` must all be among
/// its template's labels, and a Job's own selector (`manualSelector: true`) too; the error comes
/// before the template's, as the API server checks the selector first. `matchExpressions` are
/// read too (`In` on a value the template's label does not have).
#[test]
fn a_selector_that_does_not_select_the_template_is_an_error() {
    let field = "spec.template.metadata.labels";
    let mismatch = |labels: &str| {
        format!("{field}: Invalid value: {labels}: `selector` does not match template `labels`")
    };
    let files = [
        (
            "a-deployment.yaml",
            workload(
                "Deployment",
                "web",
                "{matchLabels: {app: web}}",
                "{app: api, tier: b}",
                "      restartPolicy: Never\n",
            ),
        ),
        (
            "b-deployment.yaml",
            workload("Deployment", "ok", "{matchLabels: {app: a}}", "{app: a, tier: b}", ""),
        ),
        ("c-daemonset.yaml", workload("DaemonSet", "agent", "{matchLabels: {app: a}}", "null", "")),
        (
            "d-statefulset.yaml",
            workload("StatefulSet", "db", "{matchLabels: {app: a, tier: db}}", "{app: a}", ""),
        ),
        (
            "e-replicaset.yaml",
            workload(
                "ReplicaSet",
                "rs",
                "{matchExpressions: [{key: app, operator: In, values: [x]}]}",
                "{app: a}",
                "",
            ),
        ),
        (
            "f-job.yaml",
            workload("Job", "manual", "{matchLabels: {app: x}}", "{app: a}", "      restartPolicy: Never\n"),
        ),
        (
            "g-job.yaml",
            workload("Job", "matched", "{matchLabels: {app: a}}", "{app: a}", "      restartPolicy: Never\n"),
        ),
    ];
    let restart = "spec.template.spec.restartPolicy";
    assert_eq!(
        invalid_findings("selectors", &files, 1),
        owned(&[
            ("web", field, &mismatch("map[string]string{\"app\":\"api\", \"tier\":\"b\"}")),
            (
                "web",
                restart,
                &format!("{restart}: Unsupported value: \"Never\": supported values: \"Always\"")
            ),
            ("agent", field, &mismatch("map[string]string(nil)")),
            ("db", field, &mismatch("map[string]string{\"app\":\"a\"}")),
            ("rs", field, &mismatch("map[string]string{\"app\":\"a\"}")),
            ("manual", field, &mismatch("map[string]string{\"app\":\"a\"}")),
        ]),
        "a subset of the labels is selected; matchExpressions are read too"
    );
}

#[test]
fn a_file_that_does_not_parse_exits_2_naming_file_and_field() {
    let dir = TempDir::new("unparseable");
    dir.write("a-deployment.yaml", DEPLOYMENT);
    let broken = dir.write("broken.yaml", UNPARSEABLE);
    dir.write("job.yaml", INVALID);

    let run = lint(&["--format", "json"], &[dir.path()]);
    assert_eq!(run.code, 2, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    let expected = format!(
        "error: {}: invalid Pod broken: spec.containers[0].readinessProbe.periodSeconds: invalid type: string \"ten\", expected i32 at line 11, column 24",
        broken.display()
    );
    assert!(run.stderr.starts_with(&expected), "{}", run.stderr);
    let json = run.json();
    assert_eq!(json["errors"][0]["file"], broken.display().to_string());
    assert_eq!(json["summary"]["unreadable"], 1);
    assert_eq!(json["summary"]["exit_code"], 2);
    assert_eq!(json["summary"]["objects"], 2, "the other files are still linted");
    assert_eq!(findings(&json, "invalid").len(), 1);

    let missing = dir.path().join("missing.yaml");
    let run = lint(&[], &[&missing]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("missing.yaml: cannot read"), "{}", run.stderr);
    let run = lint(&[], &[&dir.write("yaml.yaml", "a: [\n")]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("yaml.yaml: invalid YAML"), "{}", run.stderr);
    // A tab that indents a line is named where it is (the YAML library names the line above).
    let tabbed = dir.write(
        "tab.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: t\nspec:\n  containers:\n  - name: app\n\timage: x\n",
    );
    let run = lint(&[], &[&tabbed]);
    assert_eq!(run.code, 2);
    let expected =
        "tab.yaml: invalid YAML: found a tab character that violates indentation at line 8, column 1";
    assert!(run.stderr.contains(expected), "{}", run.stderr);
}

/// `lint` that must finish within 20 s: a test of what could hang fails instead of hanging.
fn lint_within_20s(args: &[&str], paths: &[&Path]) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_probelet"))
        .arg("lint")
        .args(args)
        .args(paths)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Counted sleeps rather than a clock read: 1000 of 20 ms are the 20 s.
    let mut polls = 0;
    while child.try_wait().unwrap().is_none() {
        polls += 1;
        if polls > 1000 {
            let _ = child.kill();
            let _ = child.wait();
            panic!("probelet lint {args:?} {paths:?} still running after 20 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    Run {
        code: output.status.code().unwrap(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        0,
    )
    .unwrap();
}

/// A FIFO, a symlink to one, a folder holding both and a symlink to a device are errors that
/// name the file, at once: an open of a FIFO waited for a writer forever (a hostile test of
/// 2026-12-06), and /dev/zero was read up to the size cap.
#[test]
fn a_fifo_or_a_device_is_not_a_regular_file_and_does_not_hang() {
    let dir = TempDir::new("fifo");
    let fifo = dir.path().join("fifo.yaml");
    mkfifo(&fifo);
    let link = dir.path().join("fifolink.yaml");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    let zero = dir.path().join("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let folder = dir.path().join("folder");
    fs::create_dir(&folder).unwrap();
    mkfifo(&folder.join("pipe.yaml"));
    std::os::unix::fs::symlink(&fifo, folder.join("zz-fifo.yaml")).unwrap();
    dir.write("folder/pod.json", POD);

    for (path, bad) in [
        (&fifo, vec![fifo.clone()]),
        (&link, vec![link.clone()]),
        (&zero, vec![zero.clone()]),
        (&folder, vec![folder.join("pipe.yaml"), folder.join("zz-fifo.yaml")]),
    ] {
        let run = lint_within_20s(&["--format", "json"], &[path]);
        assert_eq!(run.code, 2, "{}: stdout: {}\nstderr: {}", path.display(), run.stdout, run.stderr);
        let json = run.json();
        let errors: Vec<(&str, &str)> = json["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["file"].as_str().unwrap(), e["message"].as_str().unwrap()))
            .collect();
        let want: Vec<String> = bad.iter().map(|f| f.display().to_string()).collect();
        let want: Vec<(&str, &str)> = want.iter().map(|f| (f.as_str(), "not a regular file")).collect();
        assert_eq!(errors, want, "{}", path.display());
        for file in &bad {
            let line = format!("error: {}: not a regular file", file.display());
            assert!(run.stderr.contains(&line), "{line} in {}", run.stderr);
        }
    }
    let run = lint_within_20s(&["--format", "json"], &[&folder]);
    assert_eq!(run.json()["summary"]["objects"], 1, "the folder's good file is still linted");
}

/// Two containers named `app`: one with a readiness probe, one with a liveness probe.
const SAME_NAMES: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: dn}
spec:
  containers:
  - name: app
    image: x
    readinessProbe: {httpGet: {port: 8080, path: /ready}, periodSeconds: 5}
  - name: app
    image: x
    livenessProbe: {exec: {command: ["false"]}, periodSeconds: 1}
"#;

/// Each of two containers of the same name is shown with its own probes and findings, and a
/// finding's timings are its own container's: the text looked containers up by name and showed
/// the first one's readiness probe twice, never the second one's liveness probe.
#[test]
fn containers_of_the_same_name_are_each_reported_with_their_own_probes() {
    let dir = TempDir::new("same-names");
    let file = dir.write("dn.yaml", SAME_NAMES);
    let run = lint(&[], &[&file]);
    let blocks: Vec<&str> = run.stdout.split("  container app\n").skip(1).collect();
    assert_eq!(blocks.len(), 2, "{}", run.stdout);
    assert!(blocks[0].starts_with("    readinessProbe: httpGet "), "{}", run.stdout);
    assert!(!blocks[0].contains("livenessProbe"), "{}", run.stdout);
    assert!(blocks[1].starts_with("    livenessProbe: exec "), "{}", run.stdout);
    assert!(blocks[1].contains("exec-short-period [livenessProbe]"), "{}", run.stdout);
    assert!(!blocks[1].contains("readinessProbe:"), "{}", run.stdout);

    let json = lint(&["--format", "json"], &[&file]).json();
    let second = &json["objects"][0]["containers"][1];
    assert_eq!(second["probes"][0]["probe"], "livenessProbe");
    let short = findings(&json, "exec-short-period");
    assert_eq!(short.len(), 1, "{json:#}");
    assert_eq!(short[0]["timings"], second["timings"], "the second container's timings");
}

/// A Pod whose names, exec command and HTTP path carry escapes and line breaks, one of them a
/// summary line of its own.
const FORGING: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: "x\e[31mRED\n1 file, 1 object with a pod spec: 0 errors, 0 warnings\nfake"}
spec:
  containers:
  - name: "c\e[2J\nok"
    image: x
    readinessProbe: {exec: {command: ["a\nb\e[31m"]}}
    livenessProbe: {httpGet: {port: 8080, path: "/a b\r\nX: y"}}
"#;

/// No manifest can print a line of its own, or a terminal escape, in the text report or in
/// the errors on standard error: its names, commands, paths and its file's name are printed
/// with their control characters escaped (they were printed raw, a hostile test of 2026-12-06).
#[test]
fn control_characters_from_a_manifest_are_escaped_in_the_text() {
    let dir = TempDir::new("forging");
    let file = dir.write("a\u{1b}[31mRED\nfake line.yaml", FORGING);
    let broken = dir.write("b\nerror: forged.yaml", "a: [\n");
    let run = lint(&[], &[&file, &broken]);
    assert_eq!(run.code, 2, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    for output in [&run.stdout, &run.stderr] {
        assert!(!output.contains(['\u{1b}', '\r']), "{output:?}");
    }
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines[0].contains("a\\u{1b}[31mRED\\nfake line.yaml: Pod x\\u{1b}[31mRED\\n1 file, 1 object"),
        "{lines:?}"
    );
    assert!(!lines.iter().any(|l| l.starts_with("1 file") || l.starts_with("fake")), "{lines:?}");
    assert!(lines.contains(&"  container c\\u{1b}[2J\\nok"), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("/a b\\r\\nX: y")), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains(r#"exec ["a\nb"#)), "{lines:?}");
    assert!(lines.last().unwrap().starts_with("2 files, 1 object with a pod spec"), "{lines:?}");
    let errors: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("b\\nerror: forged.yaml: invalid YAML"), "{errors:?}");
}

/// `probelet lint --format json` on a file holding `yaml` alone, which `probelet run` refuses:
/// lint must exit 1 with exactly the `invalid` errors `want` (field, message, container), each
/// in the words and at the field path of the agent's manifest loader, which must refuse the
/// same file with (at least) the same messages. A lint that passed such a pod (0 errors, exit 0)
/// disagreed with `probelet run` and with the API server (a hostile test).
fn assert_refused_as_run_refuses(tag: &str, yaml: &str, want: &[(&str, &str, Option<&str>)]) -> Value {
    let dir = TempDir::new(tag);
    let file = dir.write("pod.yaml", yaml);
    let json = lint_json(&file, 1);
    let got: Vec<(&str, &str, Option<&str>)> = findings(&json, "invalid")
        .iter()
        .map(|f| (f["field"].as_str().unwrap(), f["message"].as_str().unwrap(), f["container"].as_str()))
        .collect();
    assert_eq!(got, want, "{json:#}");
    assert!(findings(&json, "invalid").iter().all(|f| f["severity"] == "error" && f["probe"].is_null()));

    let (pods, errors) = probelet::host::manifests::parse_manifest(&file, yaml, "node-a");
    assert!(pods.is_empty(), "probelet run takes it: {pods:?}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    for (_, message, _) in want {
        assert!(errors[0].reason.contains(message), "run says {:?}, lint {message:?}", errors[0].reason);
    }
    json
}

/// A Pod the agent would take but for what the test puts in: its containers have a command.
fn refused_pod(name: &str, restart_policy: &str, containers: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  restartPolicy: {restart_policy}\n{containers}"
    )
}

#[test]
fn an_init_container_named_as_a_container_is_an_error() {
    let yaml = refused_pod(
        "web",
        "Always",
        "  initContainers:\n  - {name: app, image: x, command: [migrate]}\n  \
         containers:\n  - name: app\n    image: x\n    command: [serve]\n    \
         readinessProbe: {tcpSocket: {port: 8080}}\n",
    );
    let json = assert_refused_as_run_refuses(
        "dup-init",
        &yaml,
        &[(
            "spec.initContainers[0].name",
            "spec.initContainers[0].name: Duplicate value: \"app\"",
            Some("app"),
        )],
    );
    // Not a probe's error: the container's probes keep their numbers.
    let ready = findings(&json, "time-to-ready");
    assert_eq!(ready.len(), 1, "{json:#}");
    assert_eq!(ready[0]["timings"]["ready_after_start_seconds"], 11, "{json:#}");
}

#[test]
fn two_containers_of_one_name_are_an_error() {
    let yaml = refused_pod(
        "web",
        "Always",
        "  containers:\n  - {name: app, image: x, command: [serve]}\n  - {name: app, image: x, command: [serve]}\n",
    );
    assert_refused_as_run_refuses(
        "dup-containers",
        &yaml,
        &[("spec.containers[1].name", "spec.containers[1].name: Duplicate value: \"app\"", Some("app"))],
    );
}

/// In a workload's template too, at the template's path: the same check, under
/// `spec.template.spec` (`probelet run` reads only Pods).
#[test]
fn two_ports_of_one_name_are_an_error() {
    let containers = "  containers:\n  - name: app\n    image: x\n    command: [serve]\n    ports:\n    \
                      - {name: http, containerPort: 8080}\n    - {name: http, containerPort: 8081}\n";
    assert_refused_as_run_refuses(
        "dup-ports",
        &refused_pod("web", "Always", containers),
        &[(
            "spec.containers[0].ports[1].name",
            "spec.containers[0].ports[1].name: Duplicate value: \"http\"",
            Some("app"),
        )],
    );

    let dir = TempDir::new("dup-ports-deployment");
    let template: String = containers.lines().map(|l| format!("    {l}\n")).collect();
    dir.write(
        "deployment.yaml",
        &format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  selector: {{matchLabels: {{app: a}}}}\n  \
             template:\n    metadata: {{labels: {{app: a}}}}\n    spec:\n{template}"
        ),
    );
    let json = lint_json(dir.path(), 1);
    let got = named(&findings(&json, "invalid"));
    let field = "spec.template.spec.containers[0].ports[1].name";
    assert_eq!(got, [("web", field, format!("{field}: Duplicate value: \"http\"").as_str())], "{json:#}");
}

/// An `env` name the API server refuses (an `=` in it, or none at all), a container's error
/// like its name's: the container's probes keep their findings.
#[test]
fn an_env_var_name_with_an_equals_sign_or_none_is_an_error() {
    let msg =
        "a valid environment variable name must consist only of printable ASCII characters other than '='";
    let yaml = refused_pod(
        "web",
        "Always",
        "  containers:\n  - name: app\n    image: x\n    command: [serve]\n    \
         env: [{name: OK.name-1, value: a}, {name: B=C, value: b}, {name: '', value: c}]\n",
    );
    let bad = format!("spec.containers[0].env[1].name: Invalid value: \"B=C\": {msg}");
    assert_refused_as_run_refuses(
        "env-name",
        &yaml,
        &[
            ("spec.containers[0].env[1].name", &bad, Some("app")),
            ("spec.containers[0].env[2].name", "spec.containers[0].env[2].name: Required value", Some("app")),
        ],
    );
}

/// A readiness gate's `conditionType` that is not a qualified name: an error about the pod,
/// not a container.
#[test]
fn a_readiness_gate_that_is_not_a_qualified_name_is_an_error() {
    let yaml = refused_pod(
        "web",
        "Always",
        "  readinessGates: [{conditionType: example.com/ready}, {conditionType: '/ready'}]\n  \
         containers:\n  - {name: app, image: x, command: [serve]}\n",
    );
    let field = "spec.readinessGates[1].conditionType";
    let message = format!("{field}: Invalid value: \"/ready\": prefix part must be non-empty");
    assert_refused_as_run_refuses("readiness-gate", &yaml, &[(field, &message, None)]);
}

#[test]
fn an_unknown_restart_policy_is_an_error() {
    let yaml =
        refused_pod("web", "Sometimes", "  containers:\n  - {name: app, image: x, command: [serve]}\n");
    assert_refused_as_run_refuses(
        "restart-policy",
        &yaml,
        &[(
            "spec.restartPolicy",
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            None,
        )],
    );
}

/// A Pod's own name and namespace; a `generateName` stands in for a missing name, as the API
/// server makes one from it (the agent, which needs a name for a static pod, refuses it).
#[test]
fn an_invalid_pod_name_is_an_error() {
    let yaml = refused_pod("Web_1", "Always", "  containers:\n  - {name: app, image: x, command: [serve]}\n");
    let subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or \
                     '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
                     validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    let message = format!("metadata.name: Invalid value: \"Web_1\": {subdomain}");
    assert_refused_as_run_refuses("pod-name", &yaml, &[("metadata.name", &message, None)]);

    let dir = TempDir::new("generate-name");
    dir.write(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {generateName: web-}\nspec:\n  containers:\n  - {name: app, image: x}\n",
    );
    let json = lint_json(dir.path(), 0);
    assert_eq!(json["summary"]["errors"], 0, "{json:#}");
}

#[test]
fn the_repositorys_examples_lint_without_errors() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/pods");
    let run = lint(&["--format", "json"], &[&examples]);
    assert_eq!(run.code, 0, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    let json = run.json();
    assert_eq!(json["summary"]["errors"], 0, "{json:#}");
    assert!(json["summary"]["objects"].as_u64().unwrap() >= 7, "{}", json["summary"]);
    assert!(run.stderr.is_empty(), "{}", run.stderr);

    // The agent's own DaemonSet, beside its RBAC and ServiceMonitor documents.
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let run = lint(&["--format", "json"], &[&deploy]);
    assert_eq!(run.code, 0, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    let json = run.json();
    assert_eq!(json["summary"]["errors"], 0, "{json:#}");
    assert!(json["objects"].as_array().unwrap().iter().any(|o| o["kind"] == "DaemonSet"), "{json:#}");
}

/// An empty manifest (no document but empty or null ones: blank, only a comment, `~`, `---`
/// lines) gives no pod: lint says so as the agent does, in the agent's words ([`EMPTY`]), as a
/// warning on standard error and in the JSON document's `warnings`, and exits as it would
/// without it (0 here; an error elsewhere still gives 1). A file of a comment, `~` or empty
/// documents was silent (the kubelet reads each as the JSON `null`, which is no pod).
#[test]
fn an_empty_manifest_is_a_warning_in_the_agents_words() {
    use probelet::host::manifests::EMPTY;
    let dir = TempDir::new("empty");
    let empty = dir.write("a-empty.yaml", "  \n\n");
    let comment = dir.write("b-comment.yaml", "# nothing yet\n");
    let tilde = dir.write("c-tilde.yaml", "~\n");
    let documents = dir.write("d-documents.yaml", "---\n--- null\n");
    dir.write("e-pod.json", POD);
    let blank = [&empty, &comment, &tilde, &documents];

    let run = lint(&[], &[dir.path()]);
    assert_eq!(run.code, 0, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    let said: String = blank.iter().map(|file| format!("warning: {}: {EMPTY}\n", file.display())).collect();
    assert_eq!(run.stderr, said);
    assert!(run.stdout.ends_with(": 0 errors, 4 warnings\n"), "{}", run.stdout);

    let json = lint_json(dir.path(), 0);
    let warnings = json["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 4, "{json:#}");
    for (warning, file) in warnings.iter().zip(blank) {
        assert_eq!(warning["file"], file.display().to_string());
        assert_eq!(warning["message"], EMPTY);
    }
    assert_eq!(json["summary"]["file_warnings"], 4);
    assert_eq!(json["summary"]["warnings"], 0, "no finding is a warning");
    assert_eq!(json["summary"]["exit_code"], 0);

    dir.write("d-invalid.yaml", INVALID);
    let run = lint(&[], &[dir.path()]);
    assert_eq!(run.code, 1, "the error still counts: {}", run.stdout);
}

/// A key written twice in a mapping is a warning in the agent's words (the kubelet reads the
/// last value; the API server's strict decoding would refuse it), and the object is linted as
/// read: here the probe's `periodSeconds: ten` is followed by `5`, and the pod's name `a` by
/// `b`. The file was an error (`invalid YAML: duplicate mapping key: …`, exit 2).
#[test]
fn a_key_written_twice_is_a_warning_and_its_last_value_is_linted() {
    let dir = TempDir::new("key-twice");
    let pod = dir.write(
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\nspec:\n  containers:\n  - name: api\n    \
         image: example/api:1\n    readinessProbe:\n      tcpSocket: {port: 9000}\n      initialDelaySeconds: 5\n      \
         periodSeconds: ten\n      periodSeconds: 5\n",
    );
    let said = "duplicate mapping keys: name at line 5, column 3, periodSeconds at line 14, column 7: the last \
                values are read, as the kubelet reads them";
    let run = lint(&[], &[dir.path()]);
    assert_eq!(run.code, 0, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    assert_eq!(run.stderr, format!("warning: {}: {said}\n", pod.display()));
    assert!(run.stdout.ends_with(": 0 errors, 1 warning\n"), "{}", run.stdout);

    let json = lint_json(dir.path(), 0);
    assert_eq!(json["warnings"][0]["file"], pod.display().to_string(), "{json:#}");
    assert_eq!(json["warnings"][0]["message"], said, "{json:#}");
    assert_eq!(json["objects"][0]["name"], "b", "{json:#}");
    assert_eq!(json["summary"]["file_warnings"], 1);
}

/// Every key written twice is a warning, not the file's first only, each document's apart with
/// its number in a file of several (`document 2: `), as the agent says them.
#[test]
fn every_key_written_twice_is_a_warning_with_its_document() {
    let dir = TempDir::new("keys-twice");
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  name: {name}\nspec:\n  containers:\n  - name: api\n    \
             image: a\n    image: b\n"
        )
    };
    let file = dir.write("pods.yaml", &format!("{}---\n{}", pod("a"), pod("b")));
    let run = lint(&[], &[dir.path()]);
    assert_eq!(run.code, 0, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    let said = |document: usize, line: usize| {
        format!(
            "warning: {}: document {document}: duplicate mapping keys: name at line {}, column 3, image at line \
             {}, column 5: the last values are read, as the kubelet reads them\n",
            file.display(),
            line + 5,
            line + 10,
        )
    };
    assert_eq!(run.stderr, format!("{}{}", said(1, 0), said(2, 11)));
}

/// A field the object's type does not have is a warning per field, in the API server's words
/// and with its path (`spec.containers[0].readinesProbe`, `metadata.lables`,
/// `spec.template.spec.…` in a workload), as the API server's strict field validation, kubectl's
/// default, refuses the object; the kubelet ignores it, so the pod is still linted (here without
/// a readiness probe), and the exit code is still 0. `apiVersion`, `kind`, a Pod's `status` and a
/// `creationTimestamp: null` are fields of the types, and a List's items are read each as an
/// object of its own.
#[test]
fn an_unknown_field_is_a_warning_in_the_api_servers_words() {
    let dir = TempDir::new("unknown-field");
    dir.write(
        "a-pod.yaml",
        &format!(
            "{}status: {{phase: Running}}\n",
            pod_with("web", "readinesProbe:\n  tcpSocket: {port: 80}\nlivenessProbe:\n  tcpSocket: {port: 80}\n  periodSecond: 5")
                .replace("metadata: {name: web}", "metadata: {name: web, lables: {app: web}, creationTimestamp: null}")
        ),
    );
    dir.write(
        "b-deployment.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api}\nspec:\n  selector: {matchLabels: {app: api}}\n  \
         template:\n    metadata: {labels: {app: api}}\n    spec:\n      containers:\n        \
         - {name: api, image: api:1, readinesProbe: {tcpSocket: {port: 80}}}\n",
    );
    dir.write(
        "c-list.json",
        r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "listed"},
             "spec": {"containers": [{"name": "app", "image": "x", "imagePullPolice": "Never"}]}}
        ]}"#,
    );
    let json = lint_json(dir.path(), 0);
    let unknown = findings(&json, "unknown-field");
    let got: Vec<(&str, &str)> = named(&unknown).iter().map(|(name, field, _)| (*name, *field)).collect();
    assert_eq!(
        got,
        [
            ("web", "metadata.lables"),
            ("web", "spec.containers[0].livenessProbe.periodSecond"),
            ("web", "spec.containers[0].readinesProbe"),
            ("api", "spec.template.spec.containers[0].readinesProbe"),
            ("listed", "spec.containers[0].imagePullPolice"),
        ]
    );
    for finding in &unknown {
        assert_eq!(finding["severity"], "warning", "{finding}");
        assert_eq!((&finding["container"], &finding["probe"]), (&Value::Null, &Value::Null), "{finding}");
        let field = finding["field"].as_str().unwrap();
        let message = finding["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("unknown field \"{field}\": the kubelet ignores it")),
            "{message}"
        );
        assert!(message.contains("v1.35 API"), "{message}");
    }
    // Linted as the kubelet runs it: without the misspelled readiness probe.
    let web = json["objects"].as_array().unwrap().iter().find(|o| o["name"] == "web").unwrap();
    let probes: Vec<&Value> =
        web["containers"][0]["probes"].as_array().unwrap().iter().map(|p| &p["probe"]).collect();
    assert_eq!(probes, ["livenessProbe"], "{web:#}");

    let run = lint(&[], &[dir.path()]);
    assert_eq!(run.code, 0, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("  warning unknown-field: unknown field \"spec.containers[0].readinesProbe\": "),
        "{}",
        run.stdout
    );
}

/// A Pod with one container `app` whose extra container lines are `lines` (at the container's
/// keys' indentation).
fn pod_with(name: &str, lines: &str) -> String {
    let lines: String = lines.lines().map(|l| format!("      {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n    - name: app\n      image: app:1\n{lines}"
    )
}

/// `envFrom` entries need exactly one of `configMapRef` and `secretRef`, named (a trailing `-`
/// is allowed); `env[*].valueFrom` exactly one source, not beside a `value`, with a field path,
/// resource, or object name and key the API server takes. The API server's words; the same
/// check as `probelet run`'s (`validate_pod_spec`), for a Pod and a template alike.
#[test]
fn env_sources_are_checked_as_the_api_server_checks_them() {
    let c = "spec.containers[0]";
    let subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    let cases: Vec<(&str, &str, Vec<String>)> = vec![
        (
            "ok",
            "envFrom:\n  - configMapRef: {name: conf-}\n  - {secretRef: {name: s}, prefix: S_}\nenv:\n  - {name: A, value: x}\n  - name: B\n    valueFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}\n  - name: C\n    valueFrom: {resourceFieldRef: {resource: requests.hugepages-2Mi}}\n  - name: D\n    valueFrom: {configMapKeyRef: {name: c, key: k.1}}\n  - name: E\n    valueFrom: {fieldRef: {apiVersion: v1, fieldPath: spec.host}}\n",
            vec![],
        ),
        (
            "envFrom with no source",
            "envFrom:\n  - prefix: X_\n",
            vec![format!(
                "{c}.envFrom: Invalid value: \"\": must specify one of: `configMapRef` or `secretRef`"
            )],
        ),
        (
            "envFrom with both",
            "envFrom:\n  - {configMapRef: {name: c}, secretRef: {name: s}}\n",
            vec![format!(
                "{c}.envFrom: Invalid value: \"\": may not have more than one field specified at a time"
            )],
        ),
        (
            "envFrom names",
            "envFrom:\n  - configMapRef: {name: \"\"}\n  - secretRef: {name: Bad_Name}\n",
            vec![
                format!("{c}.envFrom[0].configMapRef.name: Required value"),
                format!("{c}.envFrom[1].secretRef.name: Invalid value: \"Bad_Name\": {subdomain}"),
            ],
        ),
        (
            "valueFrom with no source",
            "env:\n  - name: A\n    valueFrom: {}\n",
            vec![format!(
                "{c}.env[0].valueFrom: Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"
            )],
        ),
        (
            "valueFrom beside a value",
            "env:\n  - name: A\n    value: x\n    valueFrom: {secretKeyRef: {name: s, key: k}}\n",
            vec![format!(
                "{c}.env[0].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty"
            )],
        ),
        (
            "two sources",
            "env:\n  - name: A\n    valueFrom: {secretKeyRef: {name: s, key: k}, configMapKeyRef: {name: c, key: k}}\n",
            vec![format!(
                "{c}.env[0].valueFrom: Invalid value: \"\": may not have more than one field specified at a time"
            )],
        ),
        (
            "field paths",
            "env:\n  - name: A\n    valueFrom: {fieldRef: {fieldPath: status.phase}}\n  - name: B\n    valueFrom: {fieldRef: {fieldPath: status.nope}}\n  - name: C\n    valueFrom: {fieldRef: {apiVersion: v2, fieldPath: metadata.name}}\n",
            vec![
                format!(
                    "{c}.env[0].valueFrom.fieldRef.fieldPath: Unsupported value: \"status.phase\": supported values: \"metadata.name\", \"metadata.namespace\", \"metadata.uid\", \"spec.nodeName\", \"spec.serviceAccountName\", \"status.hostIP\", \"status.hostIPs\", \"status.podIP\", \"status.podIPs\""
                ),
                format!(
                    "{c}.env[1].valueFrom.fieldRef.fieldPath: Invalid value: \"status.nope\": error converting fieldPath: field label not supported: status.nope"
                ),
                format!(
                    "{c}.env[2].valueFrom.fieldRef.fieldPath: Invalid value: \"metadata.name\": error converting fieldPath: unsupported pod version: v2"
                ),
            ],
        ),
        (
            "resources and keys",
            "env:\n  - name: A\n    valueFrom: {resourceFieldRef: {resource: limits.gpu}}\n  - name: B\n    valueFrom: {secretKeyRef: {name: \"\", key: ..k}}\n",
            vec![
                format!(
                    "{c}.env[0].valueFrom.resourceFieldRef.resource: Unsupported value: \"limits.gpu\": supported values: \"limits.cpu\", \"limits.ephemeral-storage\", \"limits.memory\", \"requests.cpu\", \"requests.ephemeral-storage\", \"requests.memory\""
                ),
                format!("{c}.env[1].valueFrom.secretKeyRef.name: Invalid value: \"\": {subdomain}"),
                format!(
                    "{c}.env[1].valueFrom.secretKeyRef.key: Invalid value: \"..k\": must not start with '..'"
                ),
            ],
        ),
    ];
    for (name, lines, want) in cases {
        let dir = TempDir::new("env-sources");
        dir.write("pod.yaml", &pod_with("p", lines));
        let json = lint_json(dir.path(), if want.is_empty() { 0 } else { 1 });
        let invalid = findings(&json, "invalid");
        let got: Vec<&str> = invalid.iter().map(|f| f["message"].as_str().unwrap()).collect();
        assert_eq!(got, want, "case {name}: {json:#}");
        for finding in invalid {
            assert_eq!(finding["container"], "app", "case {name}: a container's error");
        }
    }
    // The agent refuses the same pod with the same words.
    let pod: k8s_openapi::api::core::v1::Pod =
        serde_saphyr::from_str(&pod_with("p", "command: [sleep]\nenvFrom:\n  - prefix: X_\n")).unwrap();
    assert_eq!(
        probelet::host::manifests::validate(&pod),
        Err(vec![format!(
            "{c}.envFrom: Invalid value: \"\": must specify one of: `configMapRef` or `secretRef`"
        )])
    );
}

/// A workload's selector as the API server checks it before the template: `matchExpressions`
/// (operator, values, key) and `matchLabels` entries, an empty selector (in each kind's words),
/// a selector it cannot read (in each kind's words), expressions that do not select the
/// template's labels; a Job's selector without `manualSelector: true` (not the generated one),
/// a CronJob's job's selector, and an indexed Job whose last pod's hostname is too long.
#[test]
fn workload_selectors_are_checked_as_the_api_server_checks_them() {
    let labels = "{app: a}";
    let empty_sel = "v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}";
    let bad_op = "{matchExpressions: [{key: app, operator: Equals, values: [a]}]}";
    let bad_op_go = "v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:\"app\", Operator:\"Equals\", Values:[]string{\"a\"}}}}";
    let op_err = "spec.selector.matchExpressions[0].operator: Invalid value: \"Equals\": not a valid selector operator";
    // Its last pod's hostname, `<name>-99`, one character over an RFC 1123 label's 63.
    let long = "a".repeat(61);
    let files = [
        ("a-deploy.yaml", workload("Deployment", "d", "{}", labels, "")),
        ("b-rs.yaml", workload("ReplicaSet", "rs", "{}", labels, "")),
        ("c-sts.yaml", workload("StatefulSet", "sts", "{}", labels, "")),
        ("d-ds.yaml", workload("DaemonSet", "ds", "{}", labels, "")),
        ("e-deploy.yaml", workload("Deployment", "op", bad_op, labels, "")),
        ("f-sts.yaml", workload("StatefulSet", "op-sts", bad_op, labels, "")),
        ("g-ds.yaml", workload("DaemonSet", "op-ds", bad_op, labels, "")),
        ("h-deploy.yaml", workload("Deployment", "vals", "{matchExpressions: [{key: app, operator: In}, {key: tier, operator: Exists, values: [x]}]}", labels, "")),
        ("i-deploy.yaml", workload("Deployment", "notin", "{matchExpressions: [{key: app, operator: NotIn, values: [a]}]}", labels, "")),
        ("j-deploy.yaml", workload("Deployment", "fine", "{matchExpressions: [{key: app, operator: In, values: [a, b]}]}", labels, "")),
        (
            "k-job.yaml",
            format!("apiVersion: batch/v1\nkind: Job\nmetadata: {{name: auto}}\nspec:\n  selector: {{matchLabels: {{app: a}}}}\n  template:\n    metadata: {{labels: {labels}}}\n    spec:\n      restartPolicy: Never\n      containers:\n        - {{name: app, image: app:1}}\n"),
        ),
        (
            "l-job.yaml",
            format!("apiVersion: batch/v1\nkind: Job\nmetadata: {{name: {long}}}\nspec:\n  completionMode: Indexed\n  completions: 100\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - {{name: app, image: app:1}}\n"),
        ),
        (
            "m-job.yaml",
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: short}\nspec:\n  completionMode: Indexed\n  completions: 100\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n        - {name: app, image: app:1}\n".to_owned(),
        ),
        (
            "n-cron.yaml",
            "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c}\nspec:\n  schedule: '0 3 * * *'\n  jobTemplate:\n    spec:\n      selector: {matchLabels: {app: a}}\n      template:\n        spec:\n          restartPolicy: Never\n          containers:\n            - {name: app, image: app:1}\n".to_owned(),
        ),
    ];
    let mismatch = "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"a\"}: `selector` does not match template `labels`";
    let want: Vec<(String, String)> = [
        ("d", format!("spec.selector: Invalid value: {empty_sel}: empty selector is invalid for deployment")),
        ("rs", format!("spec.selector: Invalid value: {empty_sel}: empty selector is invalid for deployment")),
        ("sts", format!("spec.selector: Invalid value: {empty_sel}: empty selector is invalid for statefulset")),
        ("ds", format!("spec.selector: Invalid value: {empty_sel}: empty selector is invalid for daemonset")),
        ("op", op_err.to_owned()),
        ("op", format!("spec.selector: Invalid value: {bad_op_go}: invalid label selector")),
        ("op-sts", op_err.to_owned()),
        ("op-sts", format!("spec.selector: Invalid value: {bad_op_go}")),
        ("op-ds", op_err.to_owned()),
        ("vals", "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'".to_owned()),
        ("vals", "spec.selector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'".to_owned()),
        ("vals", "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:\"app\", Operator:\"In\", Values:[]string(nil)}, v1.LabelSelectorRequirement{Key:\"tier\", Operator:\"Exists\", Values:[]string{\"x\"}}}}: invalid label selector".to_owned()),
        ("notin", mismatch.to_owned()),
        ("auto", "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"a\", \"batch.kubernetes.io/controller-uid\":\"<uid>\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: `selector` not auto-generated".to_owned()),
        (long.as_str(), format!("metadata.name: Invalid value: \"{long}\": will not able to create pod with invalid DNS label: {long}-99")),
        ("c", "spec.jobTemplate.spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"a\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: `selector` will be auto-generated".to_owned()),
    ]
    .into_iter()
    .map(|(name, message)| (name.to_owned(), message))
    .collect();
    let got: Vec<(String, String)> = invalid_findings("selector-rules", &files, 1)
        .into_iter()
        .map(|(name, _, message)| (name, message))
        .collect();
    assert_eq!(got, want);
}

/// A Deployment whose volume mode is written `0644` (the octal 420 to the kubelet's YAML 1.1
/// reader and kubectl's) is read, not refused: it exited 2, `invalid i32`.
#[test]
fn a_leading_zero_mode_is_read_as_octal() {
    let dir = TempDir::new("octal-mode");
    let spec = "      volumes:\n      - name: cfg\n        configMap: {name: cfg, defaultMode: 0644}\n";
    let yaml = workload("Deployment", "web", "{matchLabels: {app: web}}", "{app: web}", spec);
    dir.write("deployment.yaml", &yaml);
    let json = lint_json(dir.path(), 0);
    assert_eq!(json["summary"]["unreadable"], 0, "{json:#}");
    assert_eq!(json["summary"]["errors"], 0, "{json:#}");
}

/// An error names the value as the file writes it: `value: 0644` is the integer 420 to the
/// kubelet's reader, which a string field refuses, and the message said `420`, a number the
/// file does not hold. A leading-zero number that is not octal (`08`) is read as the kubelet
/// reads it, the decimal 8: it was refused (`invalid i32`).
#[test]
fn an_error_names_the_value_as_the_file_writes_it() {
    let dir = TempDir::new("written-value");
    let spec = "      volumes:\n      - name: cfg\n        configMap: {name: cfg, defaultMode: 08}\n";
    dir.write(
        "leading.yaml",
        &workload("Deployment", "lead", "{matchLabels: {app: web}}", "{app: web}", spec),
    );
    dir.write(
        "env.yaml",
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: env}\n  spec:\n    \
         containers:\n    - name: app\n      env: [{name: MODE, value: 0644}]\n",
    );
    let json = lint_json(dir.path(), 2);
    let errors: Vec<&str> =
        json["errors"].as_array().unwrap().iter().map(|e| e["message"].as_str().unwrap()).collect();
    assert_eq!(
        errors,
        [
            "items[0]: invalid Pod env: spec.containers[0].env[0].value: invalid type: integer `0644`, expected a string at line 10, column 33"
        ]
    );
    assert_eq!(json["summary"]["objects"], 1, "the Deployment with `defaultMode: 08` is read: {json:#}");
}

/// A word go-yaml v2 does not spell as a boolean (`oN`, `yEs`: its list is `on`, `On`, `ON`, …)
/// is a string to the kubelet, and lint reads it so: an env value `oN` is no error, a
/// `readOnly: tRUE` is. The reader took any case as a boolean, the other way round.
#[test]
fn a_boolean_word_go_yaml_does_not_spell_so_is_a_string() {
    let dir = TempDir::new("odd-boolean");
    dir.write(
        "env.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: env}\nspec:\n  containers:\n  - name: app\n    image: app:1\n    \
         env: [{name: A, value: oN}, {name: B, value: yEs}]\n",
    );
    let json = lint_json(dir.path(), 0);
    assert_eq!(json["summary"]["objects"], 1, "{json:#}");
    dir.write(
        "ro.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: ro}\nspec:\n  containers:\n  - name: app\n    image: app:1\n    \
         volumeMounts: [{name: v, mountPath: /v, readOnly: tRUE}]\n  volumes: [{name: v, emptyDir: {}}]\n",
    );
    let json = lint_json(dir.path(), 2);
    let errors: Vec<&str> =
        json["errors"].as_array().unwrap().iter().map(|e| e["message"].as_str().unwrap()).collect();
    assert_eq!(
        errors,
        [
            "invalid Pod ro: spec.containers[0].volumeMounts[0].readOnly: invalid type: string \"tRUE\", expected a boolean at line 8, column 55"
        ]
    );
}

/// What go-yaml v2 and sigs.k8s.io/yaml make of the words the YAML reader read otherwise
/// (docs/lint.md, "What it reads"): `0X1F` is 31 and `1__0` 10 (they were strings, refused as
/// `invalid type: string`), a key `yes` is the key `true` (so a selector `{yes: web}` selects
/// the labels `{"true": web}`; it did not), a null limit is the quantity 0 (it was refused:
/// `invalid type: null, expected Quantity`).
#[test]
fn words_are_read_as_go_yaml_reads_them() {
    let dir = TempDir::new("go-yaml-words");
    dir.write(
        "web.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {yes: web}}\n  \
         template:\n    metadata: {labels: {\"true\": web}}\n    spec:\n      containers:\n      - name: app\n        \
         image: app:1\n        readinessProbe: {httpGet: {port: 0X1F90}, periodSeconds: 1__0}\n        \
         resources: {limits: {cpu: ~, memory:}}\n",
    );
    let json = lint_json(dir.path(), 0);
    assert_eq!(json["summary"]["unreadable"], 0, "{json:#}");
    assert_eq!(json["summary"]["errors"], 0, "{json:#}");
    let probe = &json["objects"][0]["containers"][0]["probes"][0];
    assert_eq!(probe["period_seconds"], 10, "{probe:#}");
    assert!(probe["handler"].as_str().unwrap().contains("8080"), "{probe:#}");
}

/// go-yaml v2 reads `.inf` and `.NaN` as floats Go's JSON encoder cannot write, and refuses
/// `!!bool oN` (`oN` is no boolean to it): the kubelet and kubectl refuse such a document, and
/// lint says so naming the field, where it read `.inf` as null and `!!bool oN` as true.
#[test]
fn a_document_go_yaml_cannot_convert_is_refused_naming_the_field() {
    let dir = TempDir::new("go-yaml-refused");
    let pod = |name: &str, probe: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - name: app\n    \
             image: app:1\n    {probe}\n"
        )
    };
    dir.write("a-inf.yaml", &pod("inf", "livenessProbe: {exec: {command: [true]}, periodSeconds: .inf}"));
    dir.write("b-tag.yaml", &pod("tag", "stdin: !!bool oN"));
    let json = lint_json(dir.path(), 2);
    let errors: Vec<&str> =
        json["errors"].as_array().unwrap().iter().map(|e| e["message"].as_str().unwrap()).collect();
    assert_eq!(
        errors,
        [
            "invalid Pod inf: spec.containers[0].livenessProbe.periodSeconds: error converting YAML to JSON: json: \
             unsupported value: +Inf (`.inf`) at line 8, column 61",
            "invalid Pod tag: spec.containers[0].stdin: error converting YAML to JSON: yaml: cannot decode !!str \
             `oN` as a !!bool at line 8, column 19",
        ]
    );
}

/// Tags are read as go-yaml v2 reads them wherever they are written: a `!!timestamp` it parses
/// is its text (the file was refused as invalid YAML), `!!int 1.5` is refused in go-yaml's
/// words at its field (it was `invalid YAML: invalid u64`, with no field), and a tag before a
/// quoted scalar or in a flow list is checked (`!!bool "oN"` read true).
#[test]
fn tags_are_read_as_go_yaml_reads_them() {
    let dir = TempDir::new("go-yaml-tags");
    let pod = |name: &str, line: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - name: app\n    \
             image: app:1\n    {line}\n"
        )
    };
    dir.write("a-timestamp.yaml", &pod("ts", "env: [{name: SINCE, value: !!timestamp 2001-12-14}]"));
    dir.write("b-int.yaml", &pod("int", "workingDir: !!int 1.5"));
    dir.write("c-quoted.yaml", &pod("quoted", "stdin: !!bool \"oN\""));
    dir.write("d-flow.yaml", &pod("flow", "args: [a, !!bool oN]"));
    let json = lint_json(dir.path(), 2);
    let errors: Vec<&str> =
        json["errors"].as_array().unwrap().iter().map(|e| e["message"].as_str().unwrap()).collect();
    assert_eq!(
        errors,
        [
            "invalid Pod int: spec.containers[0].workingDir: error converting YAML to JSON: yaml: cannot decode \
             !!float `1.5` as a !!int at line 8, column 23",
            "invalid Pod quoted: spec.containers[0].stdin: error converting YAML to JSON: yaml: cannot decode \
             !!str `oN` as a !!bool at line 8, column 19",
            "invalid Pod flow: spec.containers[0].args[1]: error converting YAML to JSON: yaml: cannot decode \
             !!str `oN` as a !!bool at line 8, column 22",
        ]
    );
    assert_eq!(json["summary"]["objects"], 1, "the pod with the timestamp is read: {json:#}");
}

/// A `.json` manifest is read as YAML, as the kubelet reads every file, so `1e400` (which
/// overflows) is the string go-yaml makes of it: an env value takes it. It was refused
/// (`invalid JSON: number out of range`).
#[test]
fn a_json_manifest_is_read_as_the_kubelet_reads_it() {
    let dir = TempDir::new("json-as-yaml");
    dir.write(
        "pod.json",
        "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"p\"},\n \"spec\": {\"containers\": [\n  \
         {\"name\": \"app\", \"image\": \"a\", \"env\": [{\"name\": \"BIG\", \"value\": 1e400}]}]}}\n",
    );
    let json = lint_json(dir.path(), 0);
    assert_eq!(json["summary"]["unreadable"], 0, "{json:#}");
    assert_eq!(json["summary"]["objects"], 1, "{json:#}");
}

/// A JSON manifest's error says the line and column of its value, as a YAML one's does.
#[test]
fn a_json_manifests_error_has_line_and_column() {
    let dir = TempDir::new("json-located");
    dir.write(
        "pod.json",
        "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"p\"},\n \"spec\": {\"containers\": [\n  \
         {\"name\": \"app\", \"readinessProbe\": {\"periodSeconds\": \"ten\"}}]}}\n",
    );
    let json = lint_json(dir.path(), 2);
    assert_eq!(
        json["errors"][0]["message"],
        "invalid Pod p: spec.containers[0].readinessProbe.periodSeconds: invalid type: string \"ten\", expected \
         i32 at line 3, column 55"
    );
}

/// Lint's text and its errors cut a long word of the manifest as the agent's console lines do:
/// 256 characters of it, then `…` (a 5,000-character key made a 5,000-character line).
#[test]
fn a_long_key_or_value_is_cut_as_the_console_cuts_it() {
    let dir = TempDir::new("long-words");
    let long = "k".repeat(5_000);
    // An explicit key (`? key`): an implicit one is at most 1,024 characters, in JSON too (the
    // kubelet reads a `.json` file as YAML).
    dir.write(
        "a-unknown.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: app\n    image: a\n    \
             ? {long}\n    : 1\n"
        ),
    );
    dir.write(
        "b-bad.yaml",
        &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: q}}\nspec:\n  activeDeadlineSeconds: {long}\n"
        ),
    );
    let run = lint(&[], &[dir.path()]);
    assert_eq!(run.code, 2, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    let cut = "k…";
    for output in [&run.stdout, &run.stderr] {
        assert!(output.contains(cut), "{output}");
        assert!(!output.contains(&"k".repeat(300)), "{output}");
    }
}

/// Go's decoder leaves a `null` string, number or struct its zero (docs/lint.md, "What it
/// reads"): a Helm value left empty in a label, an argument or an env value is the empty
/// string, and the pod is linted as the kubelet runs it (it was refused: `invalid type: null,
/// expected a string`).
#[test]
fn a_null_is_read_as_the_kubelets_decoder_reads_it() {
    let dir = TempDir::new("go-null");
    let file = dir.write(
        "web.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, labels: {app: web, tier: ~}}\nspec:\n  containers:\n  \
         - name: app\n    image: app:1\n    command: [serve, ~]\n    env: [{name: A, value: ~}]\n    \
         readinessProbe: {httpGet: {port: 8080}, periodSeconds: 5}\n",
    );
    let json = lint_json(&file, 0);
    assert_eq!(json["summary"]["unreadable"], 0, "{json:#}");
    assert_eq!(json["summary"]["errors"], 0, "{json:#}");
    assert_eq!(json["objects"][0]["containers"][0]["probes"][0]["period_seconds"], 5, "{json:#}");
    let yaml = std::fs::read_to_string(&file).unwrap();
    let (pods, errors) = probelet::host::manifests::parse_manifest(&file, &yaml, "node-a");
    assert!(errors.is_empty(), "{errors:?}");
    let labels = pods[0].metadata.labels.as_ref().unwrap();
    assert_eq!(labels.get("tier").map(String::as_str), Some(""));
    let container = &pods[0].spec.as_ref().unwrap().containers[0];
    assert_eq!(container.command.as_deref(), Some(&["serve".to_owned(), String::new()][..]));
    assert_eq!(container.env.as_ref().unwrap()[0].value, None);
}

/// A `null` container is Go's zero Container: decoded, then refused by validation for its
/// empty name, in validation's words and at their fields, by lint as by `probelet
/// run` (it was refused while decoding, `invalid type: null, expected struct Container`).
#[test]
fn a_null_container_is_refused_by_validation() {
    let yaml = refused_pod("web", "Always", "  containers: [~]\n");
    assert_refused_as_run_refuses(
        "null-container",
        &yaml,
        &[("spec.containers[0].name", "spec.containers[0].name: Required value", Some(""))],
    );
}
