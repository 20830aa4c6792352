//! Pod manifests from a folder (`probelet::host::manifests`): decoding YAML and JSON, defaults,
//! validation with the API server's messages, the static pod UID, and scan/diff of a folder.
//! Every test works in its own folder under the system temp dir and removes it afterwards.
// Helpers may panic: a panic there fails the test that called it.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use probelet::host::manifests::{
    CONFIG_HASH_ANNOTATION, CONFIG_SOURCE_ANNOTATION, DUPLICATE_KEY_READ, DuplicateKey, EMPTY, EMPTY_FOR_NOW,
    FAILS_FOR_NOW, HELD_SCANS_MAX, LINE_QUOTES_MAX, LoadedPod, MAX_MANIFEST_BYTES, ManifestError, ParseCache,
    QUOTED_CHARS_MAX, RanBefore, Removal, Snapshot, SourceChange, UNREADABLE_FOR_NOW, UnknownFields,
    apply_defaults, decode_noting_unknown, diff, duplicate_key_line, ignored_fields_line, kept_for_now,
    leads_to_a_file, load_dir, parse_manifest, parse_manifest_noting_unknown, removal, rescan, scan,
    scan_cached, scan_with, static_pod_uid, validate, validate_with,
};
use probelet::{Feature, FeatureGates};
use proptest::prelude::*;
use serde_json::{Value, json};

const NODE: &str = "node-a";

/// A folder of its own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("probelet-manifests-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let file = self.0.join(name);
        fs::write(&file, contents).unwrap();
        file
    }

    fn remove(&self, name: &str) {
        fs::remove_file(self.0.join(name)).unwrap();
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn pod_yaml(name: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: app
    command: [sleep, '1000']
"
    )
}

fn names(pods: &[LoadedPod]) -> Vec<String> {
    pods.iter().map(|p| format!("{}/{}", p.namespace(), p.name())).collect()
}

fn reasons(errors: &[ManifestError]) -> Vec<String> {
    errors.iter().map(|e| e.reason.clone()).collect()
}

// === decoding ===

#[test]
fn multi_document_yaml_loads_every_pod_and_skips_empty_documents() {
    let file = Path::new("/m/pods.yaml");
    let contents = format!("---\n{}---\n---\n# only a comment\n---\n{}", pod_yaml("one"), pod_yaml("two"));
    let (pods, errors) = parse_manifest(file, &contents, NODE);
    assert_eq!(errors, vec![]);
    let got: Vec<_> = pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    assert_eq!(got, vec!["one", "two"]);
}

#[test]
fn json_file_loads_and_reports_positions() {
    let dir = TempDir::new("json");
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "from-json", "namespace": "tools"},
        "spec": {"containers": [{"name": "app", "command": ["true"]}]}
    });
    dir.write("pod.json", serde_json::to_string_pretty(&pod).unwrap());
    dir.write("broken.json", "{\"apiVersion\": \"v1\",\n \"kind\": \"Pod\",,}");
    dir.write(
        "typed.json",
        "{\"apiVersion\": \"v1\", \"kind\": \"Pod\",\n \"metadata\": {\"name\": \"x\"},\n \"spec\": {\"containers\": 5}}",
    );
    let (pods, errors) = load_dir(dir.path(), NODE);
    assert_eq!(names(&pods), vec!["tools/from-json"]);
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert_eq!(errors[0].file, dir.path().join("broken.json"));
    // Read as YAML, as the kubelet reads a `.json` file: its syntax errors are YAML's.
    assert!(errors[0].reason.starts_with("invalid YAML: "), "{}", errors[0].reason);
    assert!(errors[0].reason.contains("line 2, column"), "{}", errors[0].reason);
    assert_eq!(errors[1].file, dir.path().join("typed.json"));
    assert!(
        errors[1].reason.starts_with("invalid Pod: spec.containers: invalid type: integer `5`"),
        "{}",
        errors[1].reason
    );
    assert!(errors[1].reason.contains("line 3"), "{}", errors[1].reason);
}

/// A type error under a tagged key (`!!str yes:`, the key `yes` as go-yaml reads it) is placed
/// at its line and column, as under any other key.
#[test]
fn a_type_error_under_a_tagged_key_has_its_line_and_column() {
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n  labels: {!!str yes: [a]}\nspec:\n  \
                containers:\n  - name: a\n    command: [x]\n";
    let (pods, errors) = parse_manifest(Path::new("/m/tagged.yaml"), yaml, NODE);
    assert!(pods.is_empty());
    assert_eq!(
        reasons(&errors),
        vec![
            "invalid Pod: metadata.labels.yes: invalid type: sequence, expected a string at line 5, column 23"
        ]
    );
}

#[test]
fn type_errors_name_the_field_path_line_and_column() {
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: a\n    command: [x]\n    \
                env: [{name: PORT, value: '8080'}]\n    readinessProbe:\n      httpGet: {port: 80}\n      periodSeconds: often\n";
    let (pods, errors) = parse_manifest(Path::new("/m/typed.yaml"), yaml, NODE);
    assert!(pods.is_empty());
    assert_eq!(
        reasons(&errors),
        vec![
            "invalid Pod: spec.containers[0].readinessProbe.periodSeconds: invalid type: string \"often\", expected i32 at line 12, column 22"
        ],
        "the scalar that does not fit its field is named, with its line and column"
    );

    // Several documents: the document number comes first, then the path.
    let second = "apiVersion: v1\nkind: Pod\nmetadata: {name: why}\nspec:\n  containers:\n  - name: b\n    command: [x]\n    \
                  ports: [{containerPort: 99999999999}]\n";
    let (pods, errors) = parse_manifest(Path::new("/m/two.yaml"), &format!("{yaml}---\n{second}"), NODE);
    assert!(pods.is_empty());
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[1].reason.starts_with("document 2: invalid Pod: spec.containers[0].ports[0].containerPort: "),
        "{}",
        errors[1].reason
    );

    let json = "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"x\"},\n \"spec\": {\"containers\": \
                [{\"name\": \"a\", \"command\": [\"x\"], \"livenessProbe\": {\"failureThreshold\": \"3\"}}]}}";
    let (_, errors) = parse_manifest(Path::new("/m/typed.json"), json, NODE);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].reason.starts_with(
            "invalid Pod: spec.containers[0].livenessProbe.failureThreshold: invalid type: string"
        ),
        "{}",
        errors[0].reason
    );
    assert!(errors[0].reason.contains("line 2, column"), "{}", errors[0].reason);
}

/// A `.json` manifest is read as YAML, as the kubelet reads every file (its
/// `tryDecodeSinglePod`: "JSON is valid YAML"), so its numbers are go-yaml's: `1e400`, which
/// overflows, is the string `1e400`, which a string field takes. It was refused (`invalid JSON:
/// number out of range`). A key over 1,024 characters is refused as go-yaml refuses it.
#[test]
fn a_json_manifest_is_read_as_yaml_as_the_kubelet_reads_it() {
    let json = "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": \"j\"},\n\t\"spec\": \
                {\"containers\": [{\"name\": \"app\", \"command\": [\"x\"], \"workingDir\": 1e400}]}}";
    let (pods, errors) = parse_manifest(Path::new("/m/pod.json"), json, NODE);
    assert_eq!(errors, []);
    assert_eq!(pods[0].spec.as_ref().unwrap().containers[0].working_dir.as_deref(), Some("1e400"));

    let long = json.replace("\"workingDir\"", &format!("\"{}\"", "k".repeat(1025)));
    let (_, errors) = parse_manifest(Path::new("/m/long.json"), &long, NODE);
    assert!(
        errors[0]
            .reason
            .starts_with("invalid YAML: while parsing a flow mapping, did not find expected ',' or '}'"),
        "{errors:?}"
    );
}

#[test]
fn yaml_errors_carry_line_and_column_and_never_panic() {
    let file = Path::new("/m/bad.yaml");
    let cases = [
        ("syntax", "apiVersion: v1\nkind: Pod\nmetadata: {name: [x\n", "invalid YAML: "),
        ("bad indentation", "a: b\n  c: d\n", "invalid YAML: "),
        (
            "type error",
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\nspec:\n  containers:\n  - name: a\n    command: [x]\n    ports:\n    - containerPort: abc\n",
            "invalid Pod: ",
        ),
    ];
    for (name, contents, prefix) in cases {
        let (pods, errors) = parse_manifest(file, contents, NODE);
        assert!(pods.is_empty(), "case {name}");
        assert_eq!(errors.len(), 1, "case {name}: {errors:?}");
        let reason = &errors[0].reason;
        assert!(reason.starts_with(prefix), "case {name}: {reason}");
        assert!(reason.contains("line "), "case {name}: {reason}");
        assert!(!reason.contains('\n'), "case {name}: one line: {reason}");
    }
}

// === unknown fields ===

/// The fields a Pod and each workload kind `probelet lint` reads do not have, with the API
/// server's paths (`spec.template.spec.containers[0].readinesProbe`): a misspelled field is
/// ignored when decoding, as the kubelet ignores it, and the API server's strict field
/// validation refuses the object naming these paths.
#[test]
fn unknown_fields_are_named_by_their_api_paths_in_every_kind() {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    use k8s_openapi::serde::de::DeserializeOwned;

    fn unknown<T: DeserializeOwned>(document: Value) -> Vec<String> {
        decode_noting_unknown::<T, _>(document).unwrap().1
    }
    let pod_spec = json!({
        "containers": [
            {"name": "sidecar", "command": ["x"]},
            {"name": "app", "command": ["x"], "readinesProbe": {"tcpSocket": {"port": 80}},
             "livenessProbe": {"tcpSocket": {"port": 80}, "periodSecond": 5}}
        ],
        "restartPolicy": "Always"
    });
    let template = json!({"metadata": {"lables": {"app": "web"}}, "spec": pod_spec});
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "lables": {"app": "web"}, "creationTimestamp": null},
        "spec": pod_spec,
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "reson": "x"}]}
    });
    // In the order decoded: a JSON value holds an object's keys sorted.
    assert_eq!(
        unknown::<Pod>(pod),
        [
            "metadata.lables",
            "spec.containers[1].livenessProbe.periodSecond",
            "spec.containers[1].readinesProbe",
            "status.conditions[0].reson",
        ]
    );
    let in_template = [
        "spec.template.metadata.lables",
        "spec.template.spec.containers[1].livenessProbe.periodSecond",
        "spec.template.spec.containers[1].readinesProbe",
    ];
    let workload = |api_version: &str, kind: &str| {
        json!({
            "apiVersion": api_version, "kind": kind, "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template, "replica": 2}
        })
    };
    let with_replica = [&["spec.replica"], &in_template[..]].concat();
    assert_eq!(unknown::<Deployment>(workload("apps/v1", "Deployment")), with_replica);
    assert_eq!(unknown::<StatefulSet>(workload("apps/v1", "StatefulSet")), with_replica);
    assert_eq!(unknown::<DaemonSet>(workload("apps/v1", "DaemonSet")), with_replica);
    assert_eq!(unknown::<ReplicaSet>(workload("apps/v1", "ReplicaSet")), with_replica);
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": template}});
    assert_eq!(unknown::<Job>(job), in_template);
    let cron_job = json!({
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
    });
    let in_job_template: Vec<String> =
        in_template.iter().map(|path| path.replacen("spec.", "spec.jobTemplate.spec.", 1)).collect();
    assert_eq!(unknown::<CronJob>(cron_job), in_job_template);
}

/// A manifest's unknown fields are told with the file (and document) they are in, and the pod
/// loads without them, as the kubelet loads it: YAML (the decode that reads the pod finds
/// them), JSON, and a field that is only a case away from a known one (the API server's
/// decoding is case-sensitive).
#[test]
fn a_manifests_unknown_fields_are_told_and_its_pod_loads_without_them() {
    let yaml = format!(
        "{}    readinesProbe:\n      tcpSocket: {{port: 80}}\n---\n{}    ReadinessProbe: {{}}\n",
        pod_yaml("one"),
        pod_yaml("two")
    );
    let file = Path::new("/m/pods.yaml");
    let (pods, errors, unknown) = parse_manifest_noting_unknown(file, &yaml, NODE, &FeatureGates::default());
    assert_eq!(errors, vec![]);
    assert_eq!(pods.len(), 2);
    assert!(pods.iter().all(|p| p.spec.as_ref().unwrap().containers[0].readiness_probe.is_none()));
    let want = |document, path: &str| UnknownFields {
        file: file.to_path_buf(),
        document,
        paths: vec![path.to_owned()],
    };
    assert_eq!(
        unknown,
        [
            want(Some(1), "spec.containers[0].readinesProbe"),
            want(Some(2), "spec.containers[0].ReadinessProbe")
        ]
    );
    assert_eq!(
        ignored_fields_line(&unknown[0]),
        "manifest field ignored, as the kubelet ignores it: /m/pods.yaml: document 1: unknown field \"spec.containers[0].readinesProbe\""
    );
    let json = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j", "lables": {}},
        "spec": {"containers": [{"name": "app", "command": ["x"], "imagePullPolice": "Never"}]}}"#;
    let file = Path::new("/m/pod.json");
    let (pods, errors, unknown) = parse_manifest_noting_unknown(file, json, NODE, &FeatureGates::default());
    assert_eq!((pods.len(), errors), (1, vec![]));
    assert_eq!(
        unknown.iter().map(ignored_fields_line).collect::<Vec<_>>(),
        [
            "manifest fields ignored, as the kubelet ignores them: /m/pod.json: unknown field \"metadata.lables\", unknown field \"spec.containers[0].imagePullPolice\""
        ]
    );
    let (_, _, unknown) = parse_manifest_noting_unknown(
        Path::new("/m/clean.yaml"),
        &pod_yaml("clean"),
        NODE,
        &FeatureGates::default(),
    );
    assert_eq!(unknown, []);
}

/// A scan carries each read file's unknown fields; a file held (caught half written) is not
/// read as what it is, and its fields are not told.
#[test]
fn a_scan_carries_the_unknown_fields_of_the_files_it_read() {
    let dir = TempDir::new("unknown");
    let misspelled = format!("{}    readinesProbe: {{tcpSocket: {{port: 80}}}}\n", pod_yaml("web"));
    dir.write("web.yaml", &misspelled);
    dir.write("clean.yaml", pod_yaml("clean"));
    let mut cache = ParseCache::default();
    let first = scan_cached(dir.path(), NODE, &FeatureGates::default(), &mut cache);
    assert_eq!(first.pods.len(), 2);
    assert_eq!(
        first.unknown_fields,
        [UnknownFields {
            file: dir.path().join("web.yaml"),
            document: None,
            paths: vec!["spec.containers[0].readinesProbe".to_owned()],
        }]
    );
    // Parsed again from the cache: the same.
    let again = rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, &first);
    assert_eq!(again.unknown_fields, first.unknown_fields);
    dir.write(
        "web.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, lables: {}}\nspec: {containers: 5}\n",
    );
    let held = rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, &again);
    assert!(held.errors.iter().any(|e| kept_for_now(&e.reason)), "{:?}", held.errors);
    assert_eq!(held.unknown_fields, []);
}

/// A pod's labels as `labels` (a flow or block mapping's lines under `labels:`) give them, with
/// the keys the scan says are written twice.
fn labels_read(labels: &str) -> (Vec<(String, String)>, Vec<String>) {
    let contents = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: l\n  labels:{labels}\nspec:\n  containers: [{{name: c, command: [x]}}]\n"
    );
    let dir = TempDir::new("labels");
    dir.write("pod.yaml", &contents);
    let snapshot = scan(dir.path(), NODE);
    assert_eq!(snapshot.errors, [], "{contents}");
    let labels = snapshot.pods.values().next().unwrap().pod.metadata.labels.clone().unwrap_or_default();
    (labels.into_iter().collect(), snapshot.duplicate_keys.into_iter().map(|key| key.text).collect())
}

/// A quoted key and the plain word go-yaml v2 resolves otherwise are two keys to the kubelet:
/// `'yes'` is the string `yes`, `yes` the boolean true, which sigs.k8s.io/yaml writes `true`;
/// each keeps its value and neither is written twice. Both labels took the last value.
#[test]
fn a_quoted_key_and_the_word_go_yaml_resolves_are_two_labels() {
    let (labels, twice) = labels_read(" {'yes': a, yes: b, !!str off: c, off: d}");
    let want = [("false", "d"), ("off", "c"), ("true", "b"), ("yes", "a")];
    assert_eq!(labels, want.map(|(k, v)| (k.to_owned(), v.to_owned())));
    assert_eq!(twice, Vec::<String>::new());
}

/// A merge key (`<<`) is applied where it is written, as go-yaml v2's `mapping` applies it: it
/// overrides the keys before it, a later merge overrides an earlier one, and a key after it
/// overrides it. The reader kept the mapping's own key and the first merge.
#[test]
fn a_merge_key_overrides_what_is_before_it_as_go_yaml_merges() {
    let (labels, twice) = labels_read(
        "\n    app: own\n    <<: {app: first, tier: first, zone: first}\n    <<: {tier: second}\n    zone: own",
    );
    let want = [("app", "first"), ("tier", "second"), ("zone", "own")];
    assert_eq!(labels, want.map(|(k, v)| (k.to_owned(), v.to_owned())));
    assert_eq!(twice, Vec::<String>::new());
    // A value the merge sets is the one refused, named where the merged mapping writes it.
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: m\n  labels:\n    app: ok\n    <<: {app: [x]}\n\
                spec:\n  containers: [{name: c, command: [x]}]\n";
    let (pods, errors) = parse_manifest(Path::new("/m/merge.yaml"), yaml, NODE);
    assert!(pods.is_empty());
    assert_eq!(
        reasons(&errors),
        ["invalid Pod: metadata.labels.app: invalid type: sequence, expected a string at line 7, column 15"]
    );
}

/// A merge of no mapping (`<<: 1`, `<<: ~`, `<<: [*x, 1]`) refuses its document in go-yaml
/// v2's words (`failWantMap`, as sigs.k8s.io/yaml wraps them), named where the value is, and the
/// file's other documents load. The YAML reader refused the whole file in its own words (`YAML
/// merge value must be mapping or sequence of mappings`).
#[test]
fn a_merge_of_no_mapping_is_refused_in_go_yaml_words() {
    let pod = |name: &str, labels: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels:{labels}\n\
             spec:\n  containers: [{{name: c, command: [x]}}]\n"
        )
    };
    let merge =
        "error converting YAML to JSON: yaml: map merge requires map or sequence of maps as the value";
    let cases = [
        ("\n    <<: 1", "line 14, column 9"),
        ("\n    <<: ~", "line 14, column 9"),
        ("\n    << : 'x'", "line 14, column 10"),
        (" {a: b, <<: [{c: d}, 1]}", "line 13, column 31"),
    ];
    for (labels, at) in cases {
        let yaml = format!("{}---\n{}", pod("ok", ""), pod("m", labels));
        let (pods, errors) = parse_manifest(Path::new("/m/merge.yaml"), &yaml, NODE);
        assert_eq!(pods.len(), 1, "{labels}");
        assert_eq!(reasons(&errors), [format!("document 2: metadata.labels: {merge} at {at}")], "{labels}");
    }
}

/// `0.0:` and `-0.0:` are one key to Go's map (0 and -0 are equal floats), which keeps the
/// later value and the later key's sign: sigs.k8s.io/yaml writes the key `-0`, and the key is
/// written twice. The reader kept two keys, `0` and `-0`, and said nothing. Every string map of
/// a pod has its keys checked by the API server; in a node selector `-0` is refused as a label
/// key, and refused once: one key (the values are pinned by the decoder's own test).
#[test]
fn a_float_zero_and_its_negative_are_one_key() {
    let contents = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: l\nspec:\n  nodeSelector: {0.0: a, -0.0: b}\n  \
                    containers: [{name: c, command: [x]}]\n";
    let dir = TempDir::new("zero");
    dir.write("pod.yaml", contents);
    let snapshot = scan(dir.path(), NODE);
    assert!(snapshot.pods.is_empty(), "{contents}");
    let errors: Vec<&str> = snapshot.errors.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("Pod \"l\" is invalid: spec.nodeSelector: Invalid value: \"-0\": name part "),
        "{errors:?}"
    );
    let twice: Vec<String> = snapshot.duplicate_keys.into_iter().map(|key| key.text).collect();
    assert_eq!(twice, [format!("duplicate mapping key: -0.0 at line 6, column 26: {DUPLICATE_KEY_READ}")]);
}

/// A key written twice in a mapping is read as the kubelet's file source reads it
/// (sigs.k8s.io/yaml: go-yaml v2, not strict): the last value wins, in a `.json` file too, and
/// so do keys that are one only once resolved (`1` and `01`); the file's words are still read as
/// go-yaml reads them. The file was refused (`invalid
/// YAML: duplicate mapping key: name at line 5, column 3`). A scan names the first such key with
/// where it is written again, without the YAML library's advice to its own callers ("set
/// DuplicateKeyPolicy in Options"), which a manifest's author cannot follow.
#[test]
fn a_key_written_twice_is_read_last_as_the_kubelet_reads_it() {
    let contents = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\n  labels: {1: p, 01: q}\n\
                    spec:\n  containers: [{name: c, image: first, command: [x], image: second, workingDir: oN}]\n";
    let (pods, errors) = parse_manifest(Path::new("/m/dup.yaml"), contents, NODE);
    assert_eq!(errors, []);
    assert_eq!(pods[0].metadata.name.as_deref(), Some("b"));
    let labels = pods[0].metadata.labels.clone().unwrap();
    assert_eq!(labels.into_iter().collect::<Vec<_>>(), [("1".to_owned(), "q".to_owned())]);
    assert_eq!(pods[0].spec.as_ref().unwrap().containers[0].image.as_deref(), Some("second"));
    // Its words read as go-yaml reads them, as in a file without such keys (`oN` a string).
    assert_eq!(pods[0].spec.as_ref().unwrap().containers[0].working_dir.as_deref(), Some("oN"));

    let json = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "name": "j"},
        "spec": {"containers": [{"name": "c", "command": ["x"]}]}}"#;
    let (pods, errors) = parse_manifest(Path::new("/m/dup.json"), json, NODE);
    assert_eq!(errors, []);
    assert_eq!(pods[0].metadata.name.as_deref(), Some("j"));

    let dir = TempDir::new("key-twice");
    let file = dir.write("dup.yaml", contents);
    let snapshot = scan(dir.path(), NODE);
    assert_eq!(snapshot.errors, []);
    assert_eq!(snapshot.pods.len(), 1);
    let text = "duplicate mapping keys: name at line 5, column 3, 01 at line 6, column 18, image at line 8, \
                column 54: the last values are read, as the kubelet reads them";
    assert_eq!(snapshot.duplicate_keys, [DuplicateKey { file: file.clone(), text: text.to_owned() }]);
    assert_eq!(
        duplicate_key_line(&snapshot.duplicate_keys[0]),
        format!("manifest key written twice: {}: {text}", file.display())
    );
    // Keys one once resolved are named so too; a file without such keys names none.
    dir.write("dup.yaml", contents.replace("  name: a\n", "").replace("image: first, ", ""));
    let text = format!("duplicate mapping key: 01 at line 5, column 18: {DUPLICATE_KEY_READ}");
    assert_eq!(scan(dir.path(), NODE).duplicate_keys, [DuplicateKey { file: file.clone(), text }]);
    dir.write(
        "dup.yaml",
        contents.replace("  name: a\n", "").replace("1: p, ", "").replace("image: first, ", ""),
    );
    assert_eq!(scan(dir.path(), NODE).duplicate_keys, []);
}

/// Every key written twice is named, not the file's first only (the rest were read last-wins
/// without a word), each document's apart with its number in a file of several (`document 3:`,
/// its `---` section, as the file's other per-document words say it), the first five of a
/// document named and the rest counted. They are said of a document whose pod is refused too:
/// the value read may be why (here the name `B`, written after `b`).
#[test]
fn every_key_written_twice_is_named_with_its_document() {
    let pod = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  containers: [{{name: c, command: [x]}}]\n"
        )
    };
    let twice = pod("a")
        .replace("metadata:\n", "metadata:\n  labels: {a: p, b: q, a: r, b: s, a: t, b: u, a: v, b: w}\n");
    let refused = pod("b").replace("  name: b\n", "  name: b\n  name: B\n");
    let contents = format!("{twice}---\n---\n{}---\n{refused}", pod("c"));
    let (pods, errors) = parse_manifest(Path::new("/m/dup.yaml"), &contents, NODE);
    assert_eq!(pods.len(), 2);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].reason.starts_with("document 4: "), "{errors:?}");

    let dir = TempDir::new("keys-twice");
    let file = dir.write("dup.yaml", &contents);
    let said = |text: &str| DuplicateKey { file: file.clone(), text: text.to_owned() };
    assert_eq!(
        scan(dir.path(), NODE).duplicate_keys,
        [
            said(
                "document 1: duplicate mapping keys: a at line 4, column 24, b at line 4, column 30, a at line \
                 4, column 36, b at line 4, column 42, a at line 4, column 48 and 1 more: the last values \
                 are read, as the kubelet reads them"
            ),
            said(&format!(
                "document 4: duplicate mapping key: name at line 21, column 3: {DUPLICATE_KEY_READ}"
            )),
        ]
    );
}

/// A tab that indents a line is placed where it is, as the kubelet's reader places it (`line 8:
/// found a tab character that violates indentation`): the YAML library places it at the value the
/// line before began (`app`, line 7, column 11), where there is no tab to find.
#[test]
fn a_tab_that_indents_a_line_is_named_at_the_tab() {
    let contents = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: tabbed\nspec:\n  containers:\n  - name: app\n\timage: x\n    command: [sleep, \"1000\"]\n";
    let (pods, errors) = parse_manifest(Path::new("/m/tab.yaml"), contents, NODE);
    assert!(pods.is_empty());
    assert_eq!(
        reasons(&errors),
        vec!["invalid YAML: found a tab character that violates indentation at line 8, column 1"]
    );
    // After spaces, below a value that spans lines, and with a line of blanks and a tab between.
    let contents = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: tabbed\n  labels:\n    a: one\n      two\n \t\n  \t b: c\n";
    let (_, errors) = parse_manifest(Path::new("/m/tab.yaml"), contents, NODE);
    assert_eq!(
        reasons(&errors),
        vec!["invalid YAML: found a tab character that violates indentation at line 9, column 3"]
    );
    // A tab right of the block's indentation is the value's own blank, not the error: the tab
    // named is the first left of it (`labels` at column 3: a continuation of `one` must start
    // past column 5), on a line that holds more than blanks or a comment. Before, the first
    // tab in any line's indentation was named (line 7, column 6, a tab the reader accepts).
    for (contents, line, column) in [
        (
            "kind: Pod\nmetadata:\n  name: t\n  labels:\n    a: one\n      two\n     \tthree\n \t# c\n   \tfour\n",
            9,
            4,
        ),
        ("kind: Pod\nmetadata:\n  labels:\n    a:\n      one\n     \ttwo\n    \tthree\n", 7, 5),
        ("kind: Pod\nmetadata:\n  labels:\n  - - one\n     \ttwo\n    \tthree\n", 6, 5),
        ("kind: Pod\r\nmetadata:\r\n  name: \u{e9}t\u{e9}\r\n\tx\r\n", 4, 1),
        ("kind: Pod\rmetadata:\r  name: t\r\tx\r", 4, 1),
    ] {
        let (_, errors) = parse_manifest(Path::new("/m/tab.yaml"), contents, NODE);
        let expected = format!(
            "invalid YAML: found a tab character that violates indentation at line {line}, column {column}"
        );
        assert_eq!(reasons(&errors), vec![expected], "{contents:?}");
    }
    // A tab the library places itself keeps its words and place.
    let contents = "apiVersion: v1\nkind: Pod\nmetadata:\n\tname: t2\n";
    let (_, errors) = parse_manifest(Path::new("/m/tab.yaml"), contents, NODE);
    assert_eq!(
        reasons(&errors),
        vec!["invalid YAML: tabs disallowed within this context (block indentation) at line 4, column 2"]
    );
}

/// A string field takes a quoted scalar; an unquoted `8080` is a number, which the kubelet's
/// decoder refuses there (`json: cannot unmarshal number into Go struct field
/// EnvVar.spec.containers.env.value of type string`), and so does the agent. It loaded.
#[test]
fn a_string_field_takes_a_quoted_scalar_not_a_number() {
    let contents = format!("{}    env:\n    - name: PORT\n      value: '8080'\n", pod_yaml("env"));
    let (pods, errors) = parse_manifest(Path::new("/m/env.yaml"), &contents, NODE);
    assert_eq!(errors, vec![]);
    let env = pods[0].spec.as_ref().unwrap().containers[0].env.clone().unwrap();
    assert_eq!(env[0].value.as_deref(), Some("8080"));
    let (pods, errors) = parse_manifest(Path::new("/m/env.yaml"), &contents.replace("'8080'", "8080"), NODE);
    assert!(pods.is_empty());
    assert_eq!(
        reasons(&errors),
        [
            "invalid Pod: spec.containers[0].env[0].value: invalid type: integer `8080`, expected a string at line 11, column 14"
        ]
    );
}

/// An error names a document by its `---` section, as a reader counts them: an empty section (or
/// one of comments only) keeps its number, though the decoder passes over it.
#[test]
fn documents_are_numbered_by_their_sections_empty_ones_included() {
    let file = Path::new("/m/gaps.yaml");
    let contents = format!(
        "{}---\n# retired: the old pod\n---\n---\napiVersion: v1\nkind: Job\n---\n{}",
        pod_yaml("first"),
        pod_yaml("last")
    );
    let (pods, errors) = parse_manifest(file, &contents, NODE);
    assert_eq!(pods.len(), 2);
    assert_eq!(reasons(&errors), vec!["document 4: kind \"Job\" is not supported: expected \"Pod\""]);
}

#[test]
fn only_v1_pods_are_accepted_and_other_documents_still_load() {
    let file = Path::new("/m/mixed.yaml");
    let contents = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d}}\n---\n{}---\nkind: Pod\nmetadata: {{name: p}}\n\
         ---\napiVersion: v2\nkind: Pod\n---\n- a\n- b\n---\napiVersion: v1\n---\nkind: 5\napiVersion: v1\n",
        pod_yaml("good")
    );
    let (pods, errors) = parse_manifest(file, &contents, NODE);
    assert_eq!(pods.len(), 1);
    assert_eq!(pods[0].metadata.name.as_deref(), Some("good"));
    assert_eq!(
        reasons(&errors),
        vec![
            "document 1: kind \"Deployment\" is not supported: expected \"Pod\"",
            "document 3: apiVersion is missing: expected \"v1\"",
            "document 4: apiVersion \"v2\" is not supported for kind Pod: expected \"v1\"",
            "document 5: expected a Pod object, found a sequence",
            "document 6: kind is missing: expected \"Pod\"",
            "document 7: kind 5 is not supported: expected \"Pod\"",
        ]
    );
    assert!(errors.iter().all(|e| e.file == file));
}

#[test]
fn a_single_document_error_names_no_document() {
    let (pods, errors) = parse_manifest(Path::new("/m/svc.yaml"), "apiVersion: v1\nkind: Service\n", NODE);
    assert!(pods.is_empty());
    assert_eq!(reasons(&errors), vec!["kind \"Service\" is not supported: expected \"Pod\""]);
    assert_eq!(errors[0].to_string(), "/m/svc.yaml: kind \"Service\" is not supported: expected \"Pod\"");
}

#[test]
fn invalid_pods_are_reported_in_the_api_servers_words() {
    let contents = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n  - name: app\n    command: [x]\n";
    let (pods, errors) = parse_manifest(Path::new("/m/web.yaml"), contents, NODE);
    assert!(pods.is_empty());
    assert_eq!(
        reasons(&errors),
        vec![
            "Pod \"web\" is invalid: [spec.containers[0].command: Required value: the standalone runtime runs each \
             container's command as a local process, spec.containers[1].name: Duplicate value: \"app\"]"
        ]
    );
}

/// A manifest the API server would refuse for its active deadline or for the size of its
/// annotations is refused by file and field, in the API server's words, while the folder's
/// other pods load.
#[test]
fn a_bad_active_deadline_or_too_many_annotation_bytes_refuse_the_manifest() {
    let dir = TempDir::new("deadline-annotations");
    dir.write("good.yaml", pod_yaml("good") + "  activeDeadlineSeconds: 30\n");
    dir.write("zero.yaml", pod_yaml("zero") + "  activeDeadlineSeconds: 0\n");
    dir.write("negative.yaml", pod_yaml("negative") + "  activeDeadlineSeconds: -1\n");
    let big = pod_yaml("big").replace(
        "  name: big\n",
        &format!("  name: big\n  annotations:\n    example.com/big: {}\n", "x".repeat(256 * 1024)),
    );
    dir.write("big.yaml", big);
    let (pods, errors) = load_dir(dir.path(), NODE);
    assert_eq!(names(&pods), vec!["default/good"]);
    let file = |name: &str| dir.path().join(name).display().to_string();
    let range = "must be between 1 and 2147483647, inclusive";
    assert_eq!(
        errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        vec![
            format!(
                "{}: Pod \"big\" is invalid: metadata.annotations: Too long: may not be more than 262144 bytes",
                file("big.yaml")
            ),
            format!(
                "{}: Pod \"negative\" is invalid: spec.activeDeadlineSeconds: Invalid value: -1: {range}",
                file("negative.yaml")
            ),
            format!(
                "{}: Pod \"zero\" is invalid: spec.activeDeadlineSeconds: Invalid value: 0: {range}",
                file("zero.yaml")
            ),
        ]
    );
}

// === what a loaded pod looks like ===

#[test]
fn loaded_pods_have_defaults_uid_annotations_node_and_only_conditions() {
    let contents = "apiVersion: v1
kind: Pod
metadata:
  name: web
  uid: from-the-manifest
  annotations: {team: a}
spec:
  nodeName: elsewhere
  readinessGates: [{conditionType: example.com/ready}]
  initContainers:
  - name: sidecar
    restartPolicy: Always
    command: [x]
    startupProbe: {tcpSocket: {port: 9000}}
  containers:
  - name: app
    command: [x]
    ports: [{name: http, containerPort: 8080}, {containerPort: 53, protocol: UDP}]
    livenessProbe:
      httpGet: {port: http}
      periodSeconds: 0
      timeoutSeconds: 0
      successThreshold: 0
      failureThreshold: 0
    readinessProbe:
      httpGet: {port: 8080, path: /ready, scheme: HTTPS}
      periodSeconds: 5
      timeoutSeconds: 2
      successThreshold: 2
      failureThreshold: 7
      initialDelaySeconds: 3
status:
  phase: Running
  podIP: 10.0.0.1
  conditions:
  - {type: example.com/ready, status: 'True'}
";
    let file = Path::new("/m/web.yaml");
    let (pods, errors) = parse_manifest(file, contents, NODE);
    assert_eq!(errors, vec![]);
    let pod = &pods[0];
    let meta = &pod.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    let uid = meta.uid.clone().unwrap();
    assert_ne!(uid, "from-the-manifest");
    assert_eq!(uid, static_pod_uid(NODE, file, pod), "the UID of a loaded pod computes to itself");
    let annotations = meta.annotations.clone().unwrap();
    assert_eq!(annotations.get(CONFIG_SOURCE_ANNOTATION).map(String::as_str), Some("file"));
    assert_eq!(annotations.get(CONFIG_HASH_ANNOTATION), Some(&uid));
    assert_eq!(annotations.get("team").map(String::as_str), Some("a"));

    let spec = pod.spec.as_ref().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some(NODE));
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    let app = &spec.containers[0];
    let ports = app.ports.as_ref().unwrap();
    assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
    assert_eq!(ports[1].protocol.as_deref(), Some("UDP"));

    let live = app.liveness_probe.as_ref().unwrap();
    let timing = |p: &k8s_openapi::api::core::v1::Probe| {
        (
            p.timeout_seconds,
            p.period_seconds,
            p.success_threshold,
            p.failure_threshold,
            p.initial_delay_seconds,
        )
    };
    assert_eq!(timing(live), (Some(1), Some(10), Some(1), Some(3), None), "zero values are defaulted");
    let http = live.http_get.as_ref().unwrap();
    assert_eq!((http.path.as_deref(), http.scheme.as_deref()), (Some("/"), Some("HTTP")));
    let ready = app.readiness_probe.as_ref().unwrap();
    assert_eq!(timing(ready), (Some(2), Some(5), Some(2), Some(7), Some(3)), "explicit values are kept");
    let http = ready.http_get.as_ref().unwrap();
    assert_eq!((http.path.as_deref(), http.scheme.as_deref()), (Some("/ready"), Some("HTTPS")));
    let sidecar = &spec.init_containers.as_ref().unwrap()[0];
    let startup = sidecar.startup_probe.as_ref().unwrap();
    assert_eq!(timing(startup), (Some(1), Some(10), Some(1), Some(3), None), "init container probes too");

    let status = pod.status.as_ref().unwrap();
    assert_eq!(status.phase, None);
    assert_eq!(status.pod_ip, None);
    let conditions = status.conditions.as_ref().unwrap();
    assert_eq!((conditions[0].type_.as_str(), conditions[0].status.as_str()), ("example.com/ready", "True"));
}

#[test]
fn status_without_conditions_is_dropped() {
    let contents = format!("{}status: {{phase: Running}}\n", pod_yaml("web"));
    let (pods, _) = parse_manifest(Path::new("/m/web.yaml"), &contents, NODE);
    assert_eq!(pods[0].status, None);
}

#[test]
fn apply_defaults_fills_an_empty_pod() {
    let mut pod = Pod::default();
    apply_defaults(&mut pod);
    assert_eq!(pod.metadata.namespace.as_deref(), Some("default"));
    let spec = pod.spec.unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
}

#[test]
fn apply_defaults_leaves_negative_values_for_validation() {
    let mut pod = pod_from(json!({"livenessProbe": {"exec": {"command": ["x"]}, "periodSeconds": -2}}));
    apply_defaults(&mut pod);
    let probe = pod.spec.as_ref().unwrap().containers[0].liveness_probe.clone().unwrap();
    assert_eq!(probe.period_seconds, Some(-2));
    assert_eq!(
        validate(&pod),
        Err(vec!["spec.containers[0].livenessProbe.periodSeconds: Invalid value: -2: must be greater than or equal to 0".to_owned()])
    );
}

// === validation ===

/// A valid pod whose first container is `app` with extra fields from `container`.
fn pod_from(container: Value) -> Pod {
    let mut app = json!({"name": "app", "command": ["sleep", "100"], "ports": [{"name": "http", "containerPort": 8080}]});
    if let (Value::Object(app), Value::Object(extra)) = (&mut app, container) {
        app.extend(extra);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": [app]}
    }))
    .unwrap()
}

const ACTIVE_DEADLINE_RANGE: &str = "must be between 1 and 2147483647, inclusive";

fn set_active_deadline(pod: &mut Pod, seconds: i64) {
    pod.spec.as_mut().unwrap().active_deadline_seconds = Some(seconds);
}

/// Annotations of `bytes` bytes in all, keys and values counted as the API server counts them:
/// two annotations, so that the sum is what is measured, not one value.
fn annotate(pod: &mut Pod, bytes: usize) {
    let (first, second) = ("example.com/first", "example.com/second");
    let values = bytes - first.len() - second.len();
    let annotations = pod.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert(first.into(), "a".repeat(values / 2));
    annotations.insert(second.into(), "b".repeat(values - values / 2));
}

const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and \
must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is \
'[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_MSG: &str = r"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// The API server's `ValidateLabels` (upstream `IsQualifiedName` for each key, `IsValidLabelValue`
/// for each value) refuses a pod whose label key or value is not one, at `metadata.labels` with
/// the key or the value, in its words; the kubelet's static pods are validated so. So is
/// `spec.nodeSelector`, as labels. Neither was checked, and such a pod ran.
#[test]
fn labels_are_validated_as_the_api_server_validates_them() {
    let name_part = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an \
                     alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation \
                     is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let value_msg = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', \
                     and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or \
                     '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
    let long = "v".repeat(64);
    let cases: Vec<(String, Vec<String>)> = vec![
        // Valid: a prefix, dots, dashes and underscores inside, an empty value, 63 characters.
        (format!("{{app: web, example.com/Tier_1.x: '', a: {}}}", "v".repeat(63)), vec![]),
        ("{'bad key!': ok}".into(), vec![format!("Invalid value: \"bad key!\": name part {name_part}")]),
        ("{app: -web}".into(), vec![format!("Invalid value: \"-web\": {value_msg}")]),
        (
            format!("{{app: {long}}}"),
            vec![format!("Invalid value: \"{long}\": must be no more than 63 characters")],
        ),
        (
            "{Example.com/x: v}".into(),
            vec![format!("Invalid value: \"Example.com/x\": prefix part {SUBDOMAIN_MSG}")],
        ),
        (
            "{/x: v, x/: z}".into(),
            vec![
                "Invalid value: \"/x\": prefix part must be non-empty".into(),
                "Invalid value: \"x/\": name part must be non-empty".into(),
                format!("Invalid value: \"x/\": name part {name_part}"),
            ],
        ),
        // A resolved key (`-0.0`, the float -0) is checked as the label it becomes.
        ("{-0.0: a}".into(), vec![format!("Invalid value: \"-0\": name part {name_part}")]),
    ];
    // The node selector is checked as labels (upstream's ValidatePodSpec), at its own path.
    for (place, field) in [("metadata", "labels"), ("spec", "nodeSelector")] {
        for (labels, want) in &cases {
            let (labels_line, selector_line) = match place {
                "metadata" => (format!("  labels: {labels}\n"), String::new()),
                _ => (String::new(), format!("  nodeSelector: {labels}\n")),
            };
            let yaml = format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n{labels_line}spec:\n{selector_line}  \
                 containers: [{{name: c, command: [x]}}]\n"
            );
            let (pods, errors) = parse_manifest(Path::new("/m/web.yaml"), &yaml, NODE);
            let want: Vec<String> = want.iter().map(|msg| format!("{place}.{field}: {msg}")).collect();
            if want.is_empty() {
                assert_eq!(reasons(&errors), Vec::<String>::new(), "{field}: {labels}");
                assert_eq!(pods.len(), 1, "{field}: {labels}");
                continue;
            }
            assert!(pods.is_empty(), "{field}: {labels}");
            let joined = if want.len() == 1 { want[0].clone() } else { format!("[{}]", want.join(", ")) };
            assert_eq!(reasons(&errors), [format!("Pod \"web\" is invalid: {joined}")], "{field}: {labels}");
            assert_eq!(errors[0].file, Path::new("/m/web.yaml"));
        }
    }
}

/// The API server's `ValidateAnnotations` refuses a pod whose annotation key is not a qualified
/// name once made lower case (`Example.com/Key` is one), at `metadata.annotations` with the key
/// as written, before their size. Annotation keys were not checked, and such a pod ran.
#[test]
fn annotation_keys_are_validated_as_the_api_server_validates_them() {
    let name_part = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
                     with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for \
                     validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let mut pod = pod_from(json!({}));
    let annotations = pod.metadata.annotations.get_or_insert_with(Default::default);
    annotations.insert("Example.com/Key".into(), "v".into());
    // Go lowers each character alone, and 'İ' (U+0130) is 'i' to it: the API server takes the key.
    annotations.insert("example.com/İstanbul".into(), "v".into());
    assert_eq!(validate(&pod), Ok(()));
    pod.metadata.annotations.get_or_insert_with(Default::default).insert("bad key".into(), "v".into());
    assert_eq!(
        validate(&pod),
        Err(vec![format!("metadata.annotations: Invalid value: \"bad key\": {name_part}")])
    );
    annotate(&mut pod, 262_145);
    let errors = validate(&pod).unwrap_err();
    assert_eq!(errors.len(), 2);
    assert_eq!(errors[1], "metadata.annotations: Too long: may not be more than 262144 bytes");
}

#[test]
fn validation_rules_and_messages() {
    type Mutate = fn(&mut Pod);
    let exec = || json!({"exec": {"command": ["check"]}});
    let probe = |kind: &str, extra: Value| {
        let mut p = exec();
        if let (Value::Object(p), Value::Object(extra)) = (&mut p, extra) {
            p.extend(extra);
        }
        let mut container = serde_json::Map::new();
        container.insert(kind.to_owned(), p);
        pod_from(Value::Object(container))
    };
    let c0 = "spec.containers[0]";
    let cases: Vec<(&str, Pod, Mutate, Vec<String>)> = vec![
        ("valid", pod_from(json!({})), |_| {}, vec![]),
        (
            "missing name",
            pod_from(json!({})),
            |p| p.metadata.name = None,
            vec!["metadata.name: Required value: name or generateName is required".into()],
        ),
        (
            "bad name",
            pod_from(json!({})),
            |p| p.metadata.name = Some("Web_1".into()),
            vec![format!("metadata.name: Invalid value: \"Web_1\": {SUBDOMAIN_MSG}")],
        ),
        (
            "namespace with dots",
            pod_from(json!({})),
            |p| p.metadata.namespace = Some("a.b".into()),
            vec!["metadata.namespace: Invalid value: \"a.b\": must not contain dots".into()],
        ),
        (
            "no containers",
            pod_from(json!({})),
            |p| p.spec.as_mut().unwrap().containers.clear(),
            vec!["spec.containers: Required value".into()],
        ),
        ("no spec", pod_from(json!({})), |p| p.spec = None, vec!["spec.containers: Required value".into()]),
        (
            "empty container name",
            pod_from(json!({"name": ""})),
            |_| {},
            vec![format!("{c0}.name: Required value")],
        ),
        (
            "container name not a label",
            pod_from(json!({"name": "App"})),
            |_| {},
            vec![format!("{c0}.name: Invalid value: \"App\": {LABEL_MSG}")],
        ),
        (
            "duplicate container names",
            pod_from(json!({})),
            |p| {
                let spec = p.spec.as_mut().unwrap();
                let copy = spec.containers[0].clone();
                spec.containers.push(copy);
            },
            vec!["spec.containers[1].name: Duplicate value: \"app\"".into()],
        ),
        (
            "init container named like a container",
            pod_from(json!({})),
            |p| {
                let spec = p.spec.as_mut().unwrap();
                let mut init = spec.containers[0].clone();
                init.ports = None;
                spec.init_containers = Some(vec![init]);
            },
            vec!["spec.initContainers[0].name: Duplicate value: \"app\"".into()],
        ),
        (
            "no command",
            pod_from(json!({"command": null})),
            |_| {},
            vec![format!(
                "{c0}.command: Required value: the standalone runtime runs each container's command as a local process"
            )],
        ),
        (
            "empty command",
            pod_from(json!({"command": []})),
            |_| {},
            vec![format!(
                "{c0}.command: Required value: the standalone runtime runs each container's command as a local process"
            )],
        ),
        (
            "container port zero",
            pod_from(json!({"ports": [{"containerPort": 0}]})),
            |_| {},
            vec![format!("{c0}.ports[0].containerPort: Required value")],
        ),
        (
            "container port too big",
            pod_from(json!({"ports": [{"containerPort": 70000}]})),
            |_| {},
            vec![format!("{c0}.ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive")],
        ),
        (
            "host port negative",
            pod_from(json!({"ports": [{"containerPort": 80, "hostPort": -1}]})),
            |_| {},
            vec![format!("{c0}.ports[0].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive")],
        ),
        (
            "protocol",
            pod_from(json!({"ports": [{"containerPort": 80, "protocol": "ICMP"}]})),
            |_| {},
            vec![format!(
                "{c0}.ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\""
            )],
        ),
        (
            "duplicate port name",
            pod_from(json!({"ports": [{"name": "http", "containerPort": 80}, {"name": "http", "containerPort": 81}]})),
            |_| {},
            vec![format!("{c0}.ports[1].name: Duplicate value: \"http\"")],
        ),
        (
            "bad port name",
            pod_from(json!({"ports": [{"name": "HTTP", "containerPort": 80}]})),
            |_| {},
            vec![
                format!(
                    "{c0}.ports[0].name: Invalid value: \"HTTP\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
                ),
                format!("{c0}.ports[0].name: Invalid value: \"HTTP\": must contain at least one letter (a-z)"),
            ],
        ),
        (
            "liveness successThreshold",
            probe("livenessProbe", json!({"successThreshold": 2})),
            |_| {},
            vec![format!("{c0}.livenessProbe.successThreshold: Invalid value: 2: must be 1")],
        ),
        (
            "startup successThreshold",
            probe("startupProbe", json!({"successThreshold": 3})),
            |_| {},
            vec![format!("{c0}.startupProbe.successThreshold: Invalid value: 3: must be 1")],
        ),
        ("readiness successThreshold may be more", probe("readinessProbe", json!({"successThreshold": 3})), |_| {}, vec![]),
        ("zero timing is defaulted", probe("livenessProbe", json!({"periodSeconds": 0, "timeoutSeconds": 0})), |_| {}, vec![]),
        (
            "no handler",
            pod_from(json!({"readinessProbe": {"periodSeconds": 3}})),
            |_| {},
            vec![format!("{c0}.readinessProbe: Required value: must specify a handler type")],
        ),
        (
            "two handlers",
            probe("livenessProbe", json!({"httpGet": {"port": 80}, "tcpSocket": {"port": 81}})),
            |_| {},
            vec![
                format!("{c0}.livenessProbe.httpGet: Forbidden: may not specify more than 1 handler type"),
                format!("{c0}.livenessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type"),
            ],
        ),
        (
            "readiness grace period",
            probe("readinessProbe", json!({"terminationGracePeriodSeconds": 10})),
            |_| {},
            vec![format!(
                "{c0}.readinessProbe.terminationGracePeriodSeconds: Invalid value: 10: must not be set for readinessProbes"
            )],
        ),
        (
            "probe grace period zero",
            probe("livenessProbe", json!({"terminationGracePeriodSeconds": 0})),
            |_| {},
            vec![format!("{c0}.livenessProbe.terminationGracePeriodSeconds: Invalid value: 0: must be greater than 0")],
        ),
        ("probe grace period positive", probe("startupProbe", json!({"terminationGracePeriodSeconds": 5})), |_| {}, vec![]),
        (
            "negative timing",
            probe(
                "readinessProbe",
                json!({"initialDelaySeconds": -1, "timeoutSeconds": -2, "periodSeconds": -3, "successThreshold": -4, "failureThreshold": -5}),
            ),
            |_| {},
            vec![
                format!("{c0}.readinessProbe.initialDelaySeconds: Invalid value: -1: must be greater than or equal to 0"),
                format!("{c0}.readinessProbe.timeoutSeconds: Invalid value: -2: must be greater than or equal to 0"),
                format!("{c0}.readinessProbe.periodSeconds: Invalid value: -3: must be greater than or equal to 0"),
                format!("{c0}.readinessProbe.successThreshold: Invalid value: -4: must be greater than or equal to 0"),
                format!("{c0}.readinessProbe.failureThreshold: Invalid value: -5: must be greater than or equal to 0"),
            ],
        ),
        (
            "negative liveness successThreshold",
            probe("livenessProbe", json!({"successThreshold": -1})),
            |_| {},
            vec![
                format!("{c0}.livenessProbe.successThreshold: Invalid value: -1: must be greater than or equal to 0"),
                format!("{c0}.livenessProbe.successThreshold: Invalid value: -1: must be 1"),
            ],
        ),
        (
            "exec without command",
            pod_from(json!({"livenessProbe": {"exec": {}}})),
            |_| {},
            vec![format!("{c0}.livenessProbe.exec.command: Required value")],
        ),
        (
            "http port zero",
            pod_from(json!({"livenessProbe": {"httpGet": {"port": 0}}})),
            |_| {},
            vec![format!("{c0}.livenessProbe.httpGet.port: Invalid value: 0: must be between 1 and 65535, inclusive")],
        ),
        (
            "tcp port too big",
            pod_from(json!({"readinessProbe": {"tcpSocket": {"port": 65536}}})),
            |_| {},
            vec![format!(
                "{c0}.readinessProbe.tcpSocket.port: Invalid value: 65536: must be between 1 and 65535, inclusive"
            )],
        ),
        (
            "grpc port zero",
            pod_from(json!({"startupProbe": {"grpc": {"port": 0}}})),
            |_| {},
            vec![format!("{c0}.startupProbe.grpc.port: Invalid value: 0: must be between 1 and 65535, inclusive")],
        ),
        ("named port", pod_from(json!({"livenessProbe": {"httpGet": {"port": "http"}}})), |_| {}, vec![]),
        (
            "unknown named port",
            pod_from(json!({"livenessProbe": {"httpGet": {"port": "metrics"}}})),
            |_| {},
            vec![format!(
                "{c0}.livenessProbe.httpGet.port: Invalid value: \"metrics\": must be the name of one of the container's ports"
            )],
        ),
        (
            "named port of another container",
            pod_from(json!({"ports": null, "readinessProbe": {"tcpSocket": {"port": "http"}}})),
            |_| {},
            vec![format!(
                "{c0}.readinessProbe.tcpSocket.port: Invalid value: \"http\": must be the name of one of the container's ports"
            )],
        ),
        (
            "port name syntax",
            pod_from(json!({"livenessProbe": {"tcpSocket": {"port": "a--b"}}})),
            |_| {},
            vec![format!("{c0}.livenessProbe.tcpSocket.port: Invalid value: \"a--b\": must not contain consecutive hyphens")],
        ),
        (
            "scheme",
            pod_from(json!({"livenessProbe": {"httpGet": {"port": 80, "scheme": "FTP"}}})),
            |_| {},
            vec![format!(
                "{c0}.livenessProbe.httpGet.scheme: Unsupported value: \"FTP\": supported values: \"HTTP\", \"HTTPS\""
            )],
        ),
        (
            "header name",
            pod_from(json!({"livenessProbe": {"httpGet": {"port": 80, "httpHeaders": [{"name": "Bad Header", "value": "x"}]}}})),
            |_| {},
            vec![format!(
                "{c0}.livenessProbe.httpGet.httpHeaders: Invalid value: \"Bad Header\": a valid HTTP header must consist of \
                 alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')"
            )],
        ),
        (
            "probe on an init container",
            pod_from(json!({})),
            |p| {
                let spec = p.spec.as_mut().unwrap();
                let mut init = spec.containers[0].clone();
                init.name = "init".into();
                init.liveness_probe = spec.containers[0].liveness_probe.clone().or(Some(Default::default()));
                spec.init_containers = Some(vec![init]);
            },
            vec![
                "spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always"
                    .into(),
            ],
        ),
        (
            "sidecar probes are validated",
            pod_from(json!({})),
            |p| {
                let spec = p.spec.as_mut().unwrap();
                let mut init = spec.containers[0].clone();
                init.name = "sidecar".into();
                init.restart_policy = Some("Always".into());
                init.liveness_probe = serde_json::from_value(json!({"exec": {"command": ["x"]}, "successThreshold": 2})).unwrap();
                spec.init_containers = Some(vec![init]);
            },
            vec!["spec.initContainers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1".into()],
        ),
        (
            "init container restart policy",
            pod_from(json!({})),
            |p| {
                let spec = p.spec.as_mut().unwrap();
                let mut init = spec.containers[0].clone();
                init.name = "init".into();
                init.restart_policy = Some("Sometimes".into());
                spec.init_containers = Some(vec![init]);
            },
            vec![
                "spec.initContainers[0].restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\", \"OnFailure\""
                    .into(),
            ],
        ),
        (
            "an init container's own Never and rules",
            pod_from(json!({})),
            |p| {
                let spec = p.spec.as_mut().unwrap();
                let mut init = spec.containers[0].clone();
                init.name = "init".into();
                init.restart_policy = Some("Never".into());
                init.restart_policy_rules = serde_json::from_value(
                    json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [3]}}]),
                )
                .unwrap();
                spec.init_containers = Some(vec![init]);
            },
            vec![],
        ),
        (
            "a sidecar with restart rules",
            pod_from(json!({})),
            |p| {
                let spec = p.spec.as_mut().unwrap();
                let mut init = spec.containers[0].clone();
                init.name = "side".into();
                init.restart_policy = Some("Always".into());
                init.restart_policy_rules = serde_json::from_value(
                    json!([{"action": "Restart", "exitCodes": {"operator": "In", "values": [3]}}]),
                )
                .unwrap();
                spec.init_containers = Some(vec![init]);
            },
            vec![
                "spec.initContainers[0].restartPolicyRules: Forbidden: restartPolicyRules are not allowed for init containers with restart policy Always"
                    .into(),
            ],
        ),
        ("a container's own restart policy", pod_from(json!({"restartPolicy": "Never"})), |_| {}, vec![]),
        (
            "a container's own restart policy the API does not know",
            pod_from(json!({"restartPolicy": "Sometimes"})),
            |_| {},
            vec![format!(
                "{c0}.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"Never\", \"OnFailure\""
            )],
        ),
        (
            "restart rules",
            pod_from(json!({"restartPolicy": "Never", "restartPolicyRules": [
                {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0]}},
                {"action": "Stop", "exitCodes": {"operator": "Is", "values": [1]}},
                {"action": "Restart"},
            ]})),
            |_| {},
            vec![
                format!("{c0}.restartPolicyRules[1].action: Unsupported value: \"Stop\": supported values: \"Restart\""),
                format!(
                    "{c0}.restartPolicyRules[1].exitCodes.operator: Unsupported value: \"Is\": supported values: \"In\", \"NotIn\""
                ),
                format!("{c0}.restartPolicyRules[2].exitCodes: Required value: must be specified"),
            ],
        ),
        (
            "restart rules without a restart policy",
            pod_from(json!({"restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [1]}}]})),
            |_| {},
            vec![format!("{c0}.restartPolicy: Required value: must specify restartPolicy when restart rules are used")],
        ),
        (
            "too many restart rules and exit codes",
            pod_from(json!({"restartPolicy": "Never"})),
            |p| {
                let rule = |n: i32| {
                    serde_json::from_value(json!({"action": "Restart", "exitCodes": {"operator": "In", "values": (0..n).collect::<Vec<_>>()}}))
                        .unwrap()
                };
                let mut rules: Vec<_> = (0..20).map(|_| rule(1)).collect();
                rules.push(rule(256));
                p.spec.as_mut().unwrap().containers[0].restart_policy_rules = Some(rules);
            },
            vec![
                format!("{c0}.restartPolicyRules: Too many: 21: must have at most 20 items"),
                format!("{c0}.restartPolicyRules[20].exitCodes.values: Too many: 256: must have at most 255 items"),
            ],
        ),
        (
            "pod restart policy",
            pod_from(json!({})),
            |p| p.spec.as_mut().unwrap().restart_policy = Some("Sometimes".into()),
            vec![
                "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
                    .into(),
            ],
        ),
        ("active deadline of 1 s", pod_from(json!({})), |p| set_active_deadline(p, 1), vec![]),
        ("largest active deadline", pod_from(json!({})), |p| set_active_deadline(p, 2_147_483_647), vec![]),
        (
            "active deadline of 0",
            pod_from(json!({})),
            |p| set_active_deadline(p, 0),
            vec![format!("spec.activeDeadlineSeconds: Invalid value: 0: {ACTIVE_DEADLINE_RANGE}")],
        ),
        (
            "negative active deadline",
            pod_from(json!({})),
            |p| set_active_deadline(p, -5),
            vec![format!("spec.activeDeadlineSeconds: Invalid value: -5: {ACTIVE_DEADLINE_RANGE}")],
        ),
        (
            "active deadline past int32",
            pod_from(json!({})),
            |p| set_active_deadline(p, 2_147_483_648),
            vec![format!("spec.activeDeadlineSeconds: Invalid value: 2147483648: {ACTIVE_DEADLINE_RANGE}")],
        ),
        ("annotations of exactly 256 KiB", pod_from(json!({})), |p| annotate(p, 256 * 1024), vec![]),
        (
            "annotations one byte over 256 KiB",
            pod_from(json!({})),
            |p| annotate(p, 256 * 1024 + 1),
            vec!["metadata.annotations: Too long: may not be more than 262144 bytes".into()],
        ),
    ];
    for (name, mut pod, mutate, want) in cases {
        mutate(&mut pod);
        let before = validate(&pod);
        apply_defaults(&mut pod);
        let got = validate(&pod);
        let want = if want.is_empty() { Ok(()) } else { Err(want) };
        assert_eq!(got, want, "case {name}");
        assert_eq!(before, got, "case {name}: same answer before and after defaulting");
    }
}

const ENV_NAME_MSG: &str =
    "a valid environment variable name must consist only of printable ASCII characters other than '='";

/// `env` names and `envFrom` prefixes, of containers and init containers alike, as the API
/// server has checked them since `RelaxedEnvironmentVariableValidation` went GA (v1.34): any
/// printable ASCII but `=` (so `1X`, `my.env-name`, a space or a `$` are fine, which the strict
/// C-identifier-like rule of old refused), a name required, one message however many
/// characters are wrong, and a name given twice is no error.
#[test]
fn env_names_are_printable_ascii_without_an_equals_sign() {
    type Case = (&'static str, Value, Vec<String>);
    let env = |names: &[&str]| {
        let vars: Vec<Value> = names.iter().map(|n| json!({"name": n, "value": "v"})).collect();
        json!({"env": vars})
    };
    let c0 = "spec.containers[0]";
    let cases: Vec<Case> = vec![
        (
            "relaxed names",
            env(&["PATH", "1X", "my.env-name", "with space", "$(odd)~!", " ", "DUP", "DUP"]),
            vec![],
        ),
        (
            "an equals sign",
            env(&["A", "B=C"]),
            vec![format!("{c0}.env[1].name: Invalid value: \"B=C\": {ENV_NAME_MSG}")],
        ),
        ("empty", env(&["A", ""]), vec![format!("{c0}.env[1].name: Required value")]),
        (
            "control and non-ASCII characters, one message each",
            env(&["tab\there", "caf\u{e9}", "=\u{7f}="]),
            vec![
                format!("{c0}.env[0].name: Invalid value: \"tab\\there\": {ENV_NAME_MSG}"),
                format!("{c0}.env[1].name: Invalid value: \"caf\u{e9}\": {ENV_NAME_MSG}"),
                format!("{c0}.env[2].name: Invalid value: \"=\\x7f=\": {ENV_NAME_MSG}"),
            ],
        ),
        (
            "envFrom prefixes",
            json!({"envFrom": [
                {"prefix": "OK_", "configMapRef": {"name": "c"}},
                {"prefix": "", "configMapRef": {"name": "c"}},
                {"configMapRef": {"name": "c"}},
                {"prefix": "P=", "secretRef": {"name": "s"}},
            ]}),
            vec![format!("{c0}.envFrom[3].prefix: Invalid value: \"P=\": {ENV_NAME_MSG}")],
        ),
        (
            "env before envFrom, after ports",
            json!({
                "ports": [{"containerPort": 0}],
                "envFrom": [{"prefix": "=", "configMapRef": {"name": "c"}}],
                "env": [{"name": "="}],
            }),
            vec![
                format!("{c0}.ports[0].containerPort: Required value"),
                format!("{c0}.env[0].name: Invalid value: \"=\": {ENV_NAME_MSG}"),
                format!("{c0}.envFrom[0].prefix: Invalid value: \"=\": {ENV_NAME_MSG}"),
            ],
        ),
    ];
    for (name, container, want) in cases {
        let mut pod = pod_from(container);
        let want = if want.is_empty() { Ok(()) } else { Err(want) };
        assert_eq!(validate(&pod), want, "case {name}");
        apply_defaults(&mut pod);
        assert_eq!(validate(&pod), want, "case {name}: after defaulting");
    }

    // An init container's, a sidecar's too.
    let mut pod = pod_from(json!({}));
    let spec = pod.spec.as_mut().unwrap();
    let mut init: k8s_openapi::api::core::v1::Container =
        serde_json::from_value(json!({"name": "init", "command": ["x"], "env": [{"name": "A=B"}]})).unwrap();
    let mut sidecar = init.clone();
    sidecar.name = "sidecar".into();
    sidecar.restart_policy = Some("Always".into());
    init.env_from = serde_json::from_value(json!([{"prefix": "X=", "secretRef": {"name": "s"}}])).unwrap();
    spec.init_containers = Some(vec![init, sidecar]);
    assert_eq!(
        validate(&pod),
        Err(vec![
            format!("spec.initContainers[0].env[0].name: Invalid value: \"A=B\": {ENV_NAME_MSG}"),
            format!("spec.initContainers[0].envFrom[0].prefix: Invalid value: \"X=\": {ENV_NAME_MSG}"),
            format!("spec.initContainers[1].env[0].name: Invalid value: \"A=B\": {ENV_NAME_MSG}"),
        ])
    );
}

const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and \
end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is \
'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// Each `spec.readinessGates[*].conditionType` must be a qualified name (upstream
/// `validateReadinessGates`): the messages the API server gives, checked after `restartPolicy`
/// and before `activeDeadlineSeconds`.
#[test]
fn readiness_gate_condition_types_are_qualified_names() {
    let gated = |types: &[&str]| {
        let mut pod = pod_from(json!({}));
        let gates = types.iter().map(|t| json!({"conditionType": t})).collect::<Vec<_>>();
        pod.spec.as_mut().unwrap().readiness_gates = serde_json::from_value(Value::Array(gates)).unwrap();
        pod
    };
    let at = |i: usize, value: &str, msg: &str| {
        format!("spec.readinessGates[{i}].conditionType: Invalid value: \"{value}\": {msg}")
    };
    let long = "n".repeat(64);
    let cases: Vec<(&str, Pod, Vec<String>)> = vec![
        ("valid", gated(&["example.com/ready", "Ready", "a.b_c-D9", "x/y", &"n".repeat(63)]), vec![]),
        (
            "empty",
            gated(&["ok", ""]),
            vec![
                at(1, "", "name part must be non-empty"),
                at(1, "", &format!("name part {QUALIFIED_NAME_MSG}")),
            ],
        ),
        (
            "bad prefix and name",
            gated(&["not a valid/type!"]),
            vec![
                at(0, "not a valid/type!", &format!("prefix part {SUBDOMAIN_MSG}")),
                at(0, "not a valid/type!", &format!("name part {QUALIFIED_NAME_MSG}")),
            ],
        ),
        (
            "two slashes",
            gated(&["a/b/c"]),
            vec![at(
                0,
                "a/b/c",
                &format!(
                    "a valid label key {QUALIFIED_NAME_MSG} with an optional DNS subdomain prefix and '/' (e.g. \
                     'example.com/MyName')"
                ),
            )],
        ),
        ("empty prefix", gated(&["/ready"]), vec![at(0, "/ready", "prefix part must be non-empty")]),
        (
            "empty name",
            gated(&["example.com/"]),
            vec![
                at(0, "example.com/", "name part must be non-empty"),
                at(0, "example.com/", &format!("name part {QUALIFIED_NAME_MSG}")),
            ],
        ),
        ("long name", gated(&[&long]), vec![at(0, &long, "name part must be no more than 63 characters")]),
        (
            "leading dash",
            gated(&["-ready"]),
            vec![at(0, "-ready", &format!("name part {QUALIFIED_NAME_MSG}"))],
        ),
    ];
    for (name, mut pod, want) in cases {
        let want = if want.is_empty() { Ok(()) } else { Err(want) };
        assert_eq!(validate(&pod), want, "case {name}");
        apply_defaults(&mut pod);
        assert_eq!(validate(&pod), want, "case {name}: after defaulting");
    }

    let mut pod = gated(&["-"]);
    let spec = pod.spec.as_mut().unwrap();
    spec.restart_policy = Some("Sometimes".into());
    spec.active_deadline_seconds = Some(0);
    assert_eq!(
        validate(&pod),
        Err(vec![
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
                .into(),
            at(0, "-", &format!("name part {QUALIFIED_NAME_MSG}")),
            format!("spec.activeDeadlineSeconds: Invalid value: 0: {ACTIVE_DEADLINE_RANGE}"),
        ])
    );
}

/// With `ContainerRestartRules` off, as before v1.35: a regular container may not set a restart
/// policy, and an init container only `Always`.
#[test]
fn without_container_restart_rules_only_sidecars_set_a_restart_policy() {
    let gates = FeatureGates::default().with(Feature::ContainerRestartRules, false).unwrap();
    let pod = pod_from(json!({"restartPolicy": "Always"}));
    assert_eq!(
        validate_with(&pod, &gates),
        Err(vec![
            "spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers".into()
        ])
    );
    assert_eq!(validate(&pod), Ok(()), "the default gates take it");
    let mut pod = pod_from(json!({}));
    let spec = pod.spec.as_mut().unwrap();
    let mut init = spec.containers[0].clone();
    init.name = "init".into();
    init.restart_policy = Some("Never".into());
    spec.init_containers = Some(vec![init]);
    assert_eq!(
        validate_with(&pod, &gates),
        Err(vec!["spec.initContainers[0].restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"".into()])
    );
    assert_eq!(validate(&pod), Ok(()));
}

/// `RestartAllContainersOnContainerExits` (KEP-5532): a rule's action may be
/// `RestartAllContainers` — on a regular container, an init container, and, the gate allowing
/// rules on sidecars, a sidecar — only with the gate on; off, the API server's words refuse it
/// as before, and a sidecar still may have no rules.
#[test]
fn restart_all_containers_is_an_action_only_under_its_gate() {
    let on = FeatureGates::default().with(Feature::RestartAllContainersOnContainerExits, true).unwrap();
    let rule = |action: &str| json!([{"action": action, "exitCodes": {"operator": "In", "values": [42]}}]);
    let regular =
        pod_from(json!({"restartPolicy": "Never", "restartPolicyRules": rule("RestartAllContainers")}));
    assert_eq!(validate_with(&regular, &on), Ok(()));
    assert_eq!(
        validate(&regular),
        Err(vec![
            "spec.containers[0].restartPolicyRules[0].action: Unsupported value: \"RestartAllContainers\": supported values: \"Restart\""
                .into()
        ]),
        "gate off"
    );
    let with_init = |policy: &str, action: &str| {
        let mut pod = pod_from(json!({}));
        let spec = pod.spec.as_mut().unwrap();
        let mut init = spec.containers[0].clone();
        init.name = "init".into();
        init.restart_policy = Some(policy.into());
        init.restart_policy_rules = serde_json::from_value(rule(action)).unwrap();
        spec.init_containers = Some(vec![init]);
        pod
    };
    assert_eq!(validate_with(&with_init("Never", "RestartAllContainers"), &on), Ok(()), "init container");
    assert_eq!(validate_with(&with_init("Always", "RestartAllContainers"), &on), Ok(()), "sidecar");
    assert_eq!(validate_with(&with_init("Always", "Restart"), &on), Ok(()), "a sidecar's rules, any action");
    assert_eq!(
        validate(&with_init("Always", "RestartAllContainers")),
        Err(vec![
            "spec.initContainers[0].restartPolicyRules: Forbidden: restartPolicyRules are not allowed for init containers with restart policy Always"
                .into()
        ]),
        "sidecar, gate off"
    );
    assert_eq!(
        validate_with(&with_init("Always", "Stop"), &on),
        Err(vec![
            "spec.initContainers[0].restartPolicyRules[0].action: Unsupported value: \"Stop\": supported values: \"Restart\", \"RestartAllContainers\""
                .into()
        ]),
        "the actions the gate allows"
    );
    // Without ContainerRestartRules there are no rules at all, whatever this gate says.
    let no_rules = on.with(Feature::ContainerRestartRules, false).unwrap();
    assert_eq!(
        validate_with(&regular, &no_rules),
        Err(vec![
            "spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers".into()
        ])
    );
}

// === folder ===

/// The default gates with `MutableContainerProbes` on.
fn in_place() -> FeatureGates {
    FeatureGates::default().with(Feature::MutableContainerProbes, true).unwrap()
}

#[test]
fn a_bad_file_is_reported_by_name_while_good_files_load() {
    let dir = TempDir::new("mixed");
    dir.write("a.yaml", pod_yaml("alpha"));
    let bad = dir.write("b.yaml", "apiVersion: v1\nkind: Pod\nmetadata: [oops\n");
    dir.write("c.yml", pod_yaml("gamma"));
    let not_utf8 = dir.write("d.json", b"{\"kind\": \"Pod\xff\"}");
    dir.write("e.yaml", format!("{}  - name: app\n    command: [x]\n", pod_yaml("dup-containers")));
    dir.write("notes.txt", "not a manifest");
    dir.write(".hidden.yaml", pod_yaml("hidden"));
    dir.write("README", "hello");
    fs::create_dir(dir.path().join("sub.yaml")).unwrap();
    let fifo = dir.path().join("pipe.yaml");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());

    let (pods, mut errors) = load_dir(dir.path(), NODE);
    assert_eq!(names(&pods), vec!["default/alpha", "default/gamma"]);
    assert_eq!(pods[0].file, dir.path().join("a.yaml"));
    // A folder or a FIFO named like a manifest is said, where it was skipped without a word.
    let mut named_like_manifests: Vec<ManifestError> = errors.drain(..2).collect();
    named_like_manifests.sort_by(|a, b| a.file.cmp(&b.file));
    assert_eq!(
        named_like_manifests,
        vec![
            ManifestError { file: fifo, reason: "not a regular file".into() },
            ManifestError {
                file: dir.path().join("sub.yaml"),
                reason: "not recursing into manifest path".into()
            },
        ]
    );
    assert_eq!(errors.len(), 3, "{errors:?}");
    assert_eq!(errors[0].file, bad);
    assert!(errors[0].reason.starts_with("invalid YAML: "), "{}", errors[0].reason);
    assert!(errors[0].to_string().starts_with(&format!("{}: invalid YAML: ", bad.display())));
    assert_eq!(errors[1].file, not_utf8);
    assert!(errors[1].reason.starts_with("invalid UTF-8: "), "{}", errors[1].reason);
    assert_eq!(errors[2].file, dir.path().join("e.yaml"));
    assert_eq!(
        errors[2].reason,
        "Pod \"dup-containers\" is invalid: spec.containers[1].name: Duplicate value: \"app\""
    );
}

#[test]
fn a_missing_folder_is_an_error() {
    let dir = TempDir::new("missing");
    let gone = dir.path().join("nope");
    let (pods, errors) = load_dir(&gone, NODE);
    assert!(pods.is_empty());
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].file, gone);
    assert!(errors[0].reason.starts_with("cannot read directory: "), "{}", errors[0].reason);
}

#[test]
fn the_second_pod_with_a_name_is_a_duplicate() {
    let dir = TempDir::new("dups");
    let first = dir.write("a.yaml", format!("{}---\n{}", pod_yaml("web"), pod_yaml("web")));
    let second = dir.write("b.json", r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"c","command":["x"]}]}}"#);
    dir.write("c.yaml", pod_yaml("web").replace("name: web", "name: web\n  namespace: other"));
    let (pods, errors) = load_dir(dir.path(), NODE);
    assert_eq!(names(&pods), vec!["default/web", "other/web"]);
    assert_eq!(pods[0].file, first);
    // Each names the field, both files, and the document where a file holds several.
    let runs_from = format!(
        "metadata.name: Duplicate value: \"web\": pod default/web runs from {}, document 1; this one is not started while it does",
        first.display()
    );
    assert_eq!(
        errors,
        vec![
            ManifestError { file: first.clone(), reason: format!("document 2: {runs_from}") },
            ManifestError { file: second, reason: runs_from },
        ]
    );
}

#[test]
fn files_over_one_mib_are_refused() {
    let dir = TempDir::new("big");
    let pod = pod_yaml("at-cap");
    let cap = usize::try_from(MAX_MANIFEST_BYTES).unwrap();
    // A comment pads the file to exactly the cap: still loaded.
    let padding = cap - pod.len() - 3;
    dir.write("a.yaml", format!("{pod}# {}\n", "x".repeat(padding)));
    assert_eq!(fs::metadata(dir.path().join("a.yaml")).unwrap().len(), MAX_MANIFEST_BYTES);
    let big = dir.write("b.yaml", format!("{}# {}\n", pod_yaml("over"), "x".repeat(cap)));
    let (pods, errors) = load_dir(dir.path(), NODE);
    assert_eq!(names(&pods), vec!["default/at-cap"]);
    assert_eq!(errors, vec![ManifestError { file: big, reason: "file larger than 1 MiB".into() }]);

    let huge = "a".repeat(cap + 1);
    let (pods, errors) = parse_manifest(Path::new("/m/huge.yaml"), &huge, NODE);
    assert!(pods.is_empty());
    assert_eq!(reasons(&errors), vec!["file larger than 1 MiB"]);
}

#[test]
fn a_folder_that_cannot_be_listed_keeps_the_last_good_pods() {
    let dir = TempDir::new("unlistable");
    let folder = dir.path().join("pods");
    fs::create_dir(&folder).unwrap();
    fs::write(folder.join("a.yaml"), pod_yaml("alpha")).unwrap();
    fs::write(folder.join("b.yaml"), pod_yaml("beta")).unwrap();
    let good = scan(&folder, NODE).keeping_unreadable(&Snapshot::default());
    assert_eq!(good.pods.len(), 2);
    assert_eq!(good.folder_unreadable, None);

    // The folder becomes a symlink loop: listing fails (ELOOP), as it would with EMFILE.
    fs::rename(&folder, dir.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(&folder, &folder).unwrap();
    let failed = scan(&folder, NODE);
    assert!(failed.pods.is_empty(), "the scan itself saw nothing");
    assert!(failed.folder_unreadable.is_some());
    assert_eq!(failed.errors.len(), 1, "{:?}", failed.errors);
    assert!(failed.errors[0].reason.starts_with("cannot read directory: "), "{}", failed.errors[0].reason);
    let kept = failed.keeping_unreadable(&good);
    assert_eq!(kept.pods, good.pods, "the last good set stays");
    assert_eq!(diff(&good, &kept), vec![], "no pod is stopped or started again");

    // A folder that does not exist has no pods, as with the kubelet.
    fs::remove_file(&folder).unwrap();
    let gone = scan(&folder, NODE);
    assert_eq!(gone.folder_unreadable, None);
    let gone = gone.keeping_unreadable(&kept);
    assert!(gone.pods.is_empty());
    assert_eq!(summary(&diff(&kept, &gone)), vec!["-default/alpha", "-default/beta"]);
}

/// A rescan reuses the parse of every file whose contents did not change: what it finds is
/// exactly what a fresh scan finds, through edits, errors, duplicates, removals and a file
/// put back with its old contents.
#[test]
fn a_cached_scan_finds_what_a_fresh_scan_finds() {
    let dir = TempDir::new("cached");
    let mut cache = ParseCache::default();
    let gates = FeatureGates::default();
    // The same, but for the files it parsed afresh: a fresh scan parses them all.
    let mut check = |step: &str| {
        let mut cached = scan_cached(dir.path(), NODE, &gates, &mut cache);
        let mut fresh = scan_with(dir.path(), NODE, &gates);
        let changed = std::mem::take(&mut cached.changed_files);
        fresh.changed_files.clear();
        assert_eq!(cached, fresh, "{step}");
        cached.changed_files = changed;
        cached
    };
    let names = |snapshot: &Snapshot| -> Vec<String> {
        snapshot.changed_files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect()
    };
    dir.write("a.yaml", pod_yaml("alpha"));
    dir.write("b.yaml", pod_yaml("beta"));
    let first = check("two files");
    assert_eq!(first.pods.len(), 2);
    assert_eq!(names(&first), ["a.yaml", "b.yaml"], "read for the first time");
    let same = check("nothing changed");
    assert_eq!(same.pods.len(), 2);
    assert!(same.changed_files.is_empty(), "nothing parsed afresh");
    dir.write("b.yaml", pod_yaml("beta").replace("'1000'", "'7'"));
    let edited = check("b.yaml edited");
    assert_eq!(edited.pods.len(), 2);
    assert_eq!(names(&edited), ["b.yaml"], "only the edited file parsed afresh");
    dir.write("c.yaml", "kind: Pod\n  - : [\n");
    assert_eq!(check("a broken file").errors.len(), 1);
    assert_eq!(check("a broken file, again").errors.len(), 1);
    dir.write("d.yaml", pod_yaml("alpha"));
    assert_eq!(check("a duplicate").errors.len(), 2);
    dir.remove("a.yaml");
    assert_eq!(check("the first of the duplicates removed").errors.len(), 1);
    dir.write("a.yaml", pod_yaml("alpha"));
    check("put back with its old contents");
    dir.remove("d.yaml");
    assert_eq!(check("back to the start").pods.len(), 2);
}

#[test]
fn a_file_that_cannot_be_read_keeps_its_pods_and_a_removed_one_does_not() {
    let dir = TempDir::new("unreadable");
    dir.write("a.yaml", format!("{}---\n{}", pod_yaml("alpha"), pod_yaml("alpha-2")));
    dir.write("b.yaml", pod_yaml("beta"));
    let good = scan(dir.path(), NODE).keeping_unreadable(&Snapshot::default());
    assert_eq!(good.pods.len(), 3);

    // a.yaml cannot be read (EIO here, a link to the reader's own memory at an unmapped
    // address; EMFILE on a node short of descriptors).
    let a = dir.path().join("a.yaml");
    dir.remove("a.yaml");
    std::os::unix::fs::symlink("/proc/self/mem", &a).unwrap();
    let next = scan(dir.path(), NODE);
    assert_eq!(next.pods.len(), 1);
    assert!(next.unreadable_files.contains_key(&a), "{:?}", next.unreadable_files);
    let next = next.keeping_unreadable(&good);
    assert_eq!(diff(&good, &next), vec![], "a.yaml's pods keep running");
    assert_eq!(next.errors.len(), 1);
    assert!(next.errors[0].reason.starts_with("cannot read file: "), "{}", next.errors[0].reason);

    // While a.yaml is unreadable, another file gives one of its pods' names: the kept pod runs
    // on and the newcomer is refused (it displaced the kept pod before), whether the scan knew
    // what runs or not.
    let c = dir.write("c.yaml", pod_yaml("alpha").replace("'1000'", "'7'"));
    let refused = format!(
        "metadata.name: Duplicate value: \"alpha\": pod default/alpha runs from {}, document 1; this one is not started while it does",
        a.display()
    );
    for (how, taken) in [
        ("rescan", rescan(dir.path(), NODE, &FeatureGates::default(), &mut ParseCache::default(), &next)),
        ("scan, then keeping_unreadable", scan(dir.path(), NODE).keeping_unreadable(&next)),
    ] {
        assert_eq!(diff(&next, &taken), vec![], "{how}: a.yaml's pods keep running");
        assert!(
            taken.errors.contains(&ManifestError { file: c.clone(), reason: refused.clone() }),
            "{how}: {:?}",
            taken.errors
        );
    }
    let taken = next_snapshot(dir.path(), &next);

    // Once a.yaml is gone for real, its pods go too, and c.yaml's starts in the same scan.
    fs::remove_file(&a).unwrap();
    let after = next_snapshot(dir.path(), &taken);
    assert_eq!(summary(&diff(&taken, &after)), vec!["-default/alpha", "-default/alpha-2", "+default/alpha"]);
    assert!(after.unreadable_files.is_empty());
    assert_eq!(after.errors, vec![]);
}

// === UID ===

#[test]
fn uid_is_stable_for_the_same_content_and_changes_with_it() {
    let file = Path::new("/m/web.yaml");
    let uid = |node: &str, file: &Path, contents: &str| {
        let (pods, errors) = parse_manifest(file, contents, node);
        assert_eq!(errors, vec![]);
        pods[0].metadata.uid.clone().unwrap()
    };
    let original = pod_yaml("web");
    let first = uid(NODE, file, &original);
    assert_eq!(first, uid(NODE, file, &original), "same content, same UID");
    let reformatted = original.replace("command: [sleep, '1000']", "command:\n    - sleep\n    - \"1000\"");
    assert_eq!(first, uid(NODE, file, &reformatted), "formatting is not content");
    assert_ne!(first, uid(NODE, file, &original.replace("'1000'", "'999'")), "changed content");
    assert_ne!(first, uid("node-b", file, &original), "another node");
    assert_ne!(first, uid(NODE, Path::new("/m/other.yaml"), &original), "another file");
}

// === scan and diff ===

fn summary(changes: &[SourceChange]) -> Vec<String> {
    changes
        .iter()
        .map(|c| match c {
            SourceChange::Removed { namespace, name, .. } => format!("-{namespace}/{name}"),
            SourceChange::Added(p) => format!("+{}/{}", p.namespace(), p.name()),
            SourceChange::Updated(p) => format!("~{}/{}", p.namespace(), p.name()),
        })
        .collect()
}

#[test]
fn scan_and_diff_follow_added_changed_and_removed_files() {
    let dir = TempDir::new("scan");
    let empty = Snapshot::default();

    dir.write("a.yaml", pod_yaml("alpha"));
    dir.write("b.yaml", format!("{}---\n{}", pod_yaml("beta"), pod_yaml("gamma")));
    let first = scan(dir.path(), NODE);
    assert_eq!(first.errors, vec![]);
    assert_eq!(first.pods.len(), 2 + 1);
    for (uid, loaded) in &first.pods {
        assert_eq!(uid, loaded.uid());
    }
    assert_eq!(summary(&diff(&empty, &first)), vec!["+default/alpha", "+default/beta", "+default/gamma"]);
    assert_eq!(diff(&first, &scan(dir.path(), NODE)), vec![], "nothing changed");

    // Change one document of b.yaml: only that pod is replaced, under a new UID.
    dir.write("b.yaml", format!("{}---\n{}", pod_yaml("beta"), pod_yaml("gamma").replace("'1000'", "'5'")));
    let second = scan(dir.path(), NODE);
    let changes = diff(&first, &second);
    assert_eq!(summary(&changes), vec!["-default/gamma", "+default/gamma"]);
    let (SourceChange::Removed { uid: old_uid, file, .. }, SourceChange::Added(new)) =
        (&changes[0], &changes[1])
    else {
        panic!("{changes:?}");
    };
    assert_eq!(file, &dir.path().join("b.yaml"));
    assert_ne!(old_uid, new.uid());
    assert!(first.pods.contains_key(old_uid.as_str()));

    // Remove a.yaml, add c.yaml.
    dir.remove("a.yaml");
    dir.write("c.json", r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"delta"},"spec":{"containers":[{"name":"c","command":["x"]}]}}"#);
    let third = scan(dir.path(), NODE);
    assert_eq!(summary(&diff(&second, &third)), vec!["-default/alpha", "+default/delta"]);

    // A file that stops parsing takes its pods away and reports why.
    dir.write("c.json", "{");
    let fourth = scan(dir.path(), NODE);
    assert_eq!(summary(&diff(&third, &fourth)), vec!["-default/delta"]);
    assert_eq!(fourth.errors.len(), 1);
    assert_eq!(fourth.errors[0].file, dir.path().join("c.json"));
}

// === robustness ===

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn parse_manifest_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        for file in ["/m/x.yaml", "/m/x.json"] {
            let (pods, errors) = parse_manifest(Path::new(file), &text, NODE);
            prop_assert!(pods.len() + errors.len() <= text.len() + 1);
        }
    }

    #[test]
    fn parse_manifest_never_panics_on_yaml_like_text(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("apiVersion: v1\n"), Just("kind: Pod\n"), Just("---\n"), Just("metadata:\n"),
                Just("  name: web\n"), Just("spec:\n"), Just("  containers:\n"), Just("  - name: app\n"),
                Just("    command: [x]\n"), Just("    livenessProbe:\n"), Just("      httpGet: {port: 80}\n"),
                Just("      periodSeconds: -1\n"), Just("[ "), Just("{ "), Just("&a "), Just("*a "),
                Just("!!binary zz\n"), Just(": "), Just("- "), Just("  "), Just("\t"), Just("\"q"), Just("'"),
                Just("~\n"), Just("<<: *a\n"), Just("9999999999999999999999\n"), Just("\n"),
            ],
            0..40,
        ),
        tail in "\\PC{0,40}",
    ) {
        let text = format!("{}{}", parts.concat(), tail);
        for file in ["/m/x.yaml", "/m/x.json"] {
            let (pods, errors) = parse_manifest(Path::new(file), &text, NODE);
            for pod in &pods {
                prop_assert!(validate(pod).is_ok());
                prop_assert!(pod.metadata.uid.is_some());
            }
            prop_assert!(errors.iter().all(|e| e.file == Path::new(file)));
        }
    }
}

// === the probe timing annotation ===

#[test]
fn a_valid_probe_timing_annotation_loads() {
    let contents = r#"apiVersion: v1
kind: Pod
metadata:
  name: fast
  annotations:
    probelet.dev/probe-timing: '{"app": {"readiness": {"periodMs": 250, "startIntervalMs": 100}}}'
spec:
  containers:
  - name: app
    command: [sleep, "60"]
    readinessProbe:
      exec: {command: ["true"]}
"#;
    let (pods, errors) = parse_manifest(Path::new("/m/fast.yaml"), contents, NODE);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(pods.len(), 1);
}

#[test]
fn an_invalid_probe_timing_annotation_rejects_the_pod_naming_file_annotation_and_path() {
    let pod = |timing: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: fast
  annotations:
    probelet.dev/probe-timing: '{timing}'
spec:
  containers:
  - name: app
    command: [sleep, "60"]
    readinessProbe:
      exec: {{command: ["true"]}}
"#
        )
    };
    let prefix = "/m/fast.yaml: Pod \"fast\" is invalid: metadata.annotations[probelet.dev/probe-timing]: Invalid value: ";
    let cases = [
        (
            "below the floor",
            r#"{"app": {"readiness": {"periodMs": 50}}}"#,
            "app.readiness.periodMs: 50 is below the floor of 100 ms",
        ),
        (
            "unknown container",
            r#"{"web": {"readiness": {}}}"#,
            "web: the pod has no container or sidecar named \"web\"",
        ),
        (
            "undefined probe",
            r#"{"app": {"liveness": {"periodMs": 500}}}"#,
            "app.liveness: container \"app\" has no liveness probe",
        ),
        (
            "unknown field",
            r#"{"app": {"readiness": {"period": 5}}}"#,
            "app.readiness.period: unknown field `period`",
        ),
        ("not JSON", "{app", "key must be a string at line 1 column 2"),
    ];
    for (name, timing, want) in cases {
        let (pods, errors) = parse_manifest(Path::new("/m/fast.yaml"), &pod(timing), NODE);
        assert!(pods.is_empty(), "{name}: the pod is rejected");
        assert_eq!(errors.len(), 1, "{name}: {errors:?}");
        let got = errors[0].to_string();
        let want = format!("{prefix}{want}");
        assert!(got.starts_with(&want), "{name}: got {got:?}, want {want:?}");
    }
}

fn probed_pod_yaml(command: &str, period: u32) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: probed
spec:
  containers:
  - name: app
    command: [sleep, '1000']
    readinessProbe:
      exec:
        command: [{command}]
      periodSeconds: {period}
"
    )
}

#[test]
fn with_probes_in_place_a_probe_only_change_keeps_the_uid_and_is_an_update() {
    let dir = TempDir::new("in-place");
    dir.write("p.yaml", probed_pod_yaml("'false'", 10));
    let first = scan_with(dir.path(), NODE, &in_place());
    dir.write("p.yaml", probed_pod_yaml("'true'", 3));
    let second = scan_with(dir.path(), NODE, &in_place());
    let changes = diff(&first, &second);
    assert_eq!(summary(&changes), vec!["~default/probed"]);
    let SourceChange::Updated(updated) = &changes[0] else { panic!("{changes:?}") };
    assert!(first.pods.contains_key(updated.uid()), "same UID");
    let probe = updated.pod.spec.as_ref().unwrap().containers[0].readiness_probe.clone().unwrap();
    assert_eq!(probe.period_seconds, Some(3), "the update carries the new probe");
    assert_eq!(
        updated.pod.metadata.annotations.as_ref().unwrap().get(CONFIG_HASH_ANNOTATION).map(String::as_str),
        Some(updated.uid())
    );
    assert_eq!(diff(&second, &scan_with(dir.path(), NODE, &in_place())), vec![], "nothing changed");

    // Anything else that changes still replaces the pod.
    dir.write("p.yaml", probed_pod_yaml("'true'", 3).replace("'1000'", "'5'"));
    assert_eq!(
        summary(&diff(&second, &scan_with(dir.path(), NODE, &in_place()))),
        vec!["-default/probed", "+default/probed"]
    );
}

#[test]
fn without_probes_in_place_a_probe_change_replaces_the_pod() {
    let dir = TempDir::new("not-in-place");
    dir.write("p.yaml", probed_pod_yaml("'false'", 10));
    let first = scan(dir.path(), NODE);
    dir.write("p.yaml", probed_pod_yaml("'true'", 10));
    assert_eq!(summary(&diff(&first, &scan(dir.path(), NODE))), vec!["-default/probed", "+default/probed"]);
}

/// An edit of `activeDeadlineSeconds` replaces the pod (a new UID, so a new start time for the
/// deadline to count from), even where a probe-only edit is applied in place: the manifest is
/// not an API object updated in place (docs/reliability.md, "A pod's active deadline").
#[test]
fn an_active_deadline_edit_replaces_the_pod() {
    let dir = TempDir::new("deadline-edit");
    dir.write("p.yaml", pod_yaml("job") + "  activeDeadlineSeconds: 30\n");
    let first = scan_with(dir.path(), NODE, &in_place());
    dir.write("p.yaml", pod_yaml("job") + "  activeDeadlineSeconds: 60\n");
    let changes = diff(&first, &scan_with(dir.path(), NODE, &in_place()));
    assert_eq!(summary(&changes), vec!["-default/job", "+default/job"]);
}

// === one pod per namespace/name: the running one keeps it ===

/// The agent's next snapshot: a scan of the folder made knowing what runs (`running`, the last
/// snapshot), as `StandaloneKubelet::rescan` makes it.
fn next_snapshot(dir: &Path, running: &Snapshot) -> Snapshot {
    rescan(dir, NODE, &FeatureGates::default(), &mut ParseCache::default(), running)
}

/// A running manifest written in place reads empty for a moment (truncated, not yet written): a
/// scan that catches it keeps its pod and its name, so the pod is not stopped and a refused
/// newcomer does not take over; empty at the next scan too, it gives no pod, and says so. An
/// empty file that never gave a pod says so at once. Before, an empty file was silent, its pod
/// stopped and the newcomer started (a hostile test).
#[test]
fn a_running_manifest_caught_empty_keeps_its_pod_for_one_scan() {
    let dir = TempDir::new("emptied");
    let running_file = dir.write("b.yaml", pod_yaml("web"));
    let mut cache = ParseCache::default();
    let mut scan =
        |running: &Snapshot| rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, running);
    let running = scan(&Snapshot::default());
    let newcomer = dir.write("a.yaml", pod_yaml("web").replace("'1000'", "'7'"));
    let before = scan(&running);
    assert_eq!(before.pods, running.pods);

    dir.write("b.yaml", "");
    let caught = scan(&before);
    assert_eq!(summary(&diff(&before, &caught)), Vec::<String>::new(), "the pod keeps running");
    assert_eq!(reasons(&caught.errors).len(), 2, "{:?}", caught.errors);
    assert!(
        caught.errors.iter().any(|e| e.file == running_file && e.reason == EMPTY_FOR_NOW),
        "{:?}",
        caught.errors
    );
    assert!(
        caught.errors.iter().any(|e| e.file == newcomer),
        "the newcomer still refused: {:?}",
        caught.errors
    );
    dir.write("b.yaml", pod_yaml("web"));
    let written = scan(&caught);
    assert_eq!(summary(&diff(&caught, &written)), Vec::<String>::new(), "written back: nothing restarts");
    assert_eq!(written.pods, running.pods);

    // Empty for two scans: it gives no pod, and the newcomer starts.
    dir.write("b.yaml", "\n");
    let caught = scan(&written);
    let still = scan(&caught);
    let changes = diff(&caught, &still);
    assert_eq!(summary(&changes), vec!["-default/web", "+default/web"]);
    let SourceChange::Added(added) = &changes[1] else { panic!("{changes:?}") };
    assert_eq!(added.file, newcomer);
    assert!(still.errors.iter().any(|e| e.file == running_file && e.reason == EMPTY), "{:?}", still.errors);

    // A new empty file says so at once.
    let blank = dir.write("c.yaml", "");
    let next = scan(&still);
    assert!(next.errors.iter().any(|e| e.file == blank && e.reason == EMPTY), "{:?}", next.errors);
}

/// A file with no document but empty or null ones (`~`, `null`, `---` lines, only a comment)
/// gives no pod as a blank file does, and says so in the same words ([`EMPTY`]); it was silent.
/// (The kubelet reads each as the JSON `null` and logs that it cannot parse it as a pod.) A
/// running manifest caught so is held as one caught blank.
#[test]
fn a_file_of_null_documents_is_empty() {
    let dir = TempDir::new("null-documents");
    let files = [
        ("a.yaml", "~\n"),
        ("b.yaml", "null\n"),
        ("c.yaml", "---\n---\n"),
        ("d.yaml", "--- ~\n...\n"),
        ("e.yaml", "# nothing yet\n"),
    ];
    for (name, contents) in files {
        dir.write(name, contents);
    }
    let (pods, errors) = load_dir(dir.path(), NODE);
    assert!(pods.is_empty());
    assert_eq!(reasons(&errors), vec![EMPTY; files.len()], "{errors:?}");

    let mut cache = ParseCache::default();
    let mut scan =
        |running: &Snapshot| rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, running);
    dir.write("a.yaml", pod_yaml("web"));
    let running = scan(&Snapshot::default());
    assert_eq!(running.pods.len(), 1);
    dir.write("a.yaml", "~\n");
    let caught = scan(&running);
    assert_eq!(summary(&diff(&running, &caught)), Vec::<String>::new(), "the pod keeps running");
    assert!(caught.errors.iter().any(|e| e.reason == EMPTY_FOR_NOW), "{:?}", caught.errors);
}

/// A running manifest written in place can be caught half written: it does not parse, or
/// parses short of a field. A scan that catches it keeps its pods and their names, as for an
/// empty file; failing at the next scan too, it is reported as what is wrong and its pods go.
/// Before, the first such scan stopped the pod and gave its name to a refused newcomer.
#[test]
fn a_running_manifest_caught_half_written_keeps_its_pods_for_one_scan() {
    let dir = TempDir::new("half-written");
    let whole = format!("{}---\n{}", pod_yaml("web"), pod_yaml("api"));
    let running_file = dir.write("b.yaml", &whole);
    let mut cache = ParseCache::default();
    let mut scan =
        |running: &Snapshot| rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, running);
    let running = scan(&Snapshot::default());
    assert_eq!(running.pods.len(), 2);
    let newcomer = dir.write("a.yaml", pod_yaml("web").replace("'1000'", "'7'"));
    let before = scan(&running);
    assert_eq!(before.pods, running.pods);

    let held = |snapshot: &Snapshot| {
        snapshot.errors.iter().any(|e| e.file == running_file && e.reason.starts_with(FAILS_FOR_NOW))
    };
    // Cut inside a YAML string (does not parse), after `containers:` of the second document
    // (validates short of a field), after the first document's `spec:` (both lost).
    let cuts = [whole.len() - 4, whole.rfind("  - name").unwrap(), whole.find("  containers").unwrap()];
    for cut in cuts {
        dir.write("b.yaml", &whole[..cut]);
        let caught = scan(&before);
        assert_eq!(
            summary(&diff(&before, &caught)),
            Vec::<String>::new(),
            "cut at {cut}: the pods keep running"
        );
        assert!(held(&caught), "cut at {cut}: {:?}", caught.errors);
        assert!(
            caught.errors.iter().any(|e| e.file == newcomer),
            "the newcomer still refused: {:?}",
            caught.errors
        );
        dir.write("b.yaml", &whole);
        let written = scan(&caught);
        assert_eq!(summary(&diff(&caught, &written)), Vec::<String>::new(), "cut at {cut}: nothing restarts");
        assert_eq!(written.pods, running.pods);
    }

    // Still failing at the next scan: what is wrong is reported, and the newcomer takes the name.
    dir.write("b.yaml", whole.replace("name: web", "name: Web"));
    let caught = scan(&before);
    assert!(held(&caught), "{:?}", caught.errors);
    let still = scan(&caught);
    let changes = diff(&caught, &still);
    assert_eq!(summary(&changes), vec!["-default/web", "+default/web"], "api keeps running");
    let SourceChange::Added(added) = &changes[1] else { panic!("{changes:?}") };
    assert_eq!(added.file, newcomer);
    assert!(!held(&still), "{:?}", still.errors);
    assert!(
        still
            .errors
            .iter()
            .any(|e| e.file == running_file && e.reason.contains("metadata.name: Invalid value: \"Web\"")),
        "{:?}",
        still.errors
    );
    // An edit that breaks a document but loses no running pod is not held.
    let two = still;
    dir.write("b.yaml", format!("{}---\n{}---\nkind: Pod\n", pod_yaml("Web"), pod_yaml("api")));
    let next = scan(&two);
    assert!(!held(&next), "{:?}", next.errors);
}

/// A running manifest written in place can be caught cut inside a character (a writer's block
/// that ends in the middle of an `é`): it is held as a half-written file is, its pod and name
/// kept, and nothing restarts once it is whole; cut at the same place at the next scan too, it
/// is reported as what is wrong and its pod goes. Before, such a file was not held: the first
/// scan that caught it stopped its pod (`file does not load`), gave its name to a refused
/// newcomer, and the pod started again once the file was whole.
#[test]
fn a_running_manifest_caught_cut_inside_a_character_keeps_its_pod_while_held() {
    let dir = TempDir::new("cut-in-a-character");
    let whole = pod_yaml("web").replace("metadata:\n", "metadata:\n  annotations:\n    note: 'caf\u{e9}'\n");
    let running_file = dir.write("b.yaml", &whole);
    let mut cache = ParseCache::default();
    let mut scan =
        |running: &Snapshot| rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, running);
    let running = scan(&Snapshot::default());
    assert_eq!(running.pods.len(), 1, "{:?}", running.errors);
    let newcomer = dir.write("a.yaml", pod_yaml("web").replace("'1000'", "'7'"));
    let before = scan(&running);
    assert_eq!(before.pods, running.pods);
    let held = |snapshot: &Snapshot| {
        snapshot.errors.iter().any(|e| {
            e.file == running_file
                && e.reason.starts_with(FAILS_FOR_NOW)
                && e.reason.contains("invalid UTF-8")
        })
    };
    // One byte into the two of `é`.
    let cut = whole.find('\u{e9}').unwrap() + 1;
    dir.write("b.yaml", &whole.as_bytes()[..cut]);
    let caught = scan(&before);
    assert_eq!(summary(&diff(&before, &caught)), Vec::<String>::new(), "the pod keeps running");
    assert!(held(&caught), "{:?}", caught.errors);
    assert!(caught.errors.iter().any(|e| e.file == newcomer), "the newcomer still refused");
    dir.write("b.yaml", &whole);
    let written = scan(&caught);
    assert_eq!(summary(&diff(&caught, &written)), Vec::<String>::new(), "whole again: nothing restarts");
    assert_eq!(written.pods, running.pods);

    // Cut at the same place for two scans: the writer is done, and the pod goes.
    dir.write("b.yaml", &whole.as_bytes()[..cut]);
    let caught = scan(&written);
    assert!(held(&caught), "{:?}", caught.errors);
    let still = scan(&caught);
    let changes = diff(&caught, &still);
    assert_eq!(summary(&changes), vec!["-default/web", "+default/web"]);
    let SourceChange::Added(added) = &changes[1] else { panic!("{changes:?}") };
    assert_eq!(added.file, newcomer);
    assert!(!held(&still), "{:?}", still.errors);
    let why = removal(&still, &running_file, "default", "web", true);
    assert_eq!(why, Removal::DoesNotLoad);
    // Said as what it is from then on, and not held again.
    let after = scan(&still);
    assert_eq!(summary(&diff(&still, &after)), Vec::<String>::new());
    assert!(
        after.errors.iter().any(|e| e.file == running_file && e.reason.starts_with("invalid UTF-8")),
        "{:?}",
        after.errors
    );
}

/// A running manifest written slowly in place (`cp` of a large file, `dd` in small blocks) is
/// caught empty, then half written at several scans in a row, each time further along: its pods
/// are kept while it changes, and nothing restarts once it is whole. Before, the second scan
/// that caught it failing stopped its pods and gave the name to a refused newcomer (a hostile
/// test: a manifest rewritten with its own contents in 32-byte blocks, 0.7 s apart, restarted
/// its container). A file that stays the same, or goes on failing for
/// [`HELD_SCANS_MAX`] scans, is reported and its pods go.
#[test]
fn a_running_manifest_written_slowly_keeps_its_pods_while_it_changes() {
    let dir = TempDir::new("slowly");
    let whole = pod_yaml("web");
    let running_file = dir.write("b.yaml", &whole);
    let mut cache = ParseCache::default();
    let mut scan =
        |running: &Snapshot| rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, running);
    let running = scan(&Snapshot::default());
    let newcomer = dir.write("a.yaml", pod_yaml("web").replace("'1000'", "'7'"));
    let mut last = scan(&running);
    assert_eq!(last.pods, running.pods);
    let held = |snapshot: &Snapshot| {
        snapshot.errors.iter().any(|e| {
            e.file == running_file && (e.reason == EMPTY_FOR_NOW || e.reason.starts_with(FAILS_FOR_NOW))
        })
    };
    // Empty, then cut at each of its first lines in turn: each one a failing prefix.
    let cuts: Vec<usize> =
        std::iter::once(0).chain(whole.match_indices('\n').map(|(i, _)| i + 1).take(4)).collect();
    for &cut in &cuts {
        dir.write("b.yaml", &whole[..cut]);
        let caught = scan(&last);
        assert_eq!(
            summary(&diff(&last, &caught)),
            Vec::<String>::new(),
            "cut at {cut}: the pod keeps running"
        );
        assert!(held(&caught), "cut at {cut}: {:?}", caught.errors);
        assert!(caught.errors.iter().any(|e| e.file == newcomer), "the newcomer still refused");
        last = caught;
    }
    dir.write("b.yaml", &whole);
    let written = scan(&last);
    assert_eq!(summary(&diff(&last, &written)), Vec::<String>::new(), "whole again: nothing restarts");
    assert_eq!(written.pods, running.pods);

    // Failing and changing for longer than HELD_SCANS_MAX scans: the pod goes at the last.
    let mut last = written;
    for round in 0..HELD_SCANS_MAX {
        dir.write("b.yaml", format!("{}# {round}\n", &whole[..cuts[2]]));
        let caught = scan(&last);
        assert!(held(&caught), "round {round}: {:?}", caught.errors);
        last = caught;
    }
    dir.write("b.yaml", format!("{}# more\n", &whole[..cuts[2]]));
    let dropped = scan(&last);
    assert!(!held(&dropped), "{:?}", dropped.errors);
    assert_eq!(summary(&diff(&last, &dropped)), vec!["-default/web", "+default/web"]);
}

/// A running file flipping between two broken contents, each losing another of its pods, is
/// held while it changes, but no longer than the kubelet's full read of the folder (10 scans,
/// 20 s): then what is wrong is reported (a review found it held, and its errors unsaid, for
/// good).
#[test]
fn a_file_flipping_between_broken_contents_is_held_ten_scans_at_most() {
    let dir = TempDir::new("flipping");
    let whole = format!("{}---\n{}", pod_yaml("web"), pod_yaml("api"));
    let running_file = dir.write("b.yaml", &whole);
    let mut cache = ParseCache::default();
    let mut scan =
        |running: &Snapshot| rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, running);
    let mut running = scan(&Snapshot::default());
    assert_eq!(running.pods.len(), 2);
    let held = |snapshot: &Snapshot| {
        snapshot.errors.iter().any(|e| e.file == running_file && kept_for_now(&e.reason))
    };
    // web good and api broken; web broken and api good.
    let one = format!("{}---\n{}", pod_yaml("web"), pod_yaml("api").replace("name: api", "name: Api"));
    let two = format!("{}---\n{}", pod_yaml("web").replace("name: web", "name: Web"), pod_yaml("api"));
    let mut holds = Vec::new();
    for n in 0..11 {
        dir.write("b.yaml", if n % 2 == 0 { &one } else { &two });
        let next = scan(&running);
        holds.push(held(&next));
        running = next;
    }
    assert_eq!(holds, [[true; 10].as_slice(), &[false]].concat(), "{:?}", running.errors);
    assert!(
        running.errors.iter().any(|e| e.file == running_file && e.reason.contains("Invalid value: \"Api\"")),
        "{:?}",
        running.errors
    );
}

/// An agent that starts while the manifest the previous agent ran a name from is caught empty
/// or half written holds that file as if it had not restarted: a newcomer of that name is
/// refused, for as long as the file is held, and the file takes its name back once whole. The
/// first scan had no grace for it, and gave the name to the newcomer (a hostile test).
#[test]
fn a_manifest_caught_half_written_as_the_agent_starts_keeps_its_name() {
    let dir = TempDir::new("held-at-start");
    let whole = pod_yaml("web");
    let running_file = dir.write("b.yaml", &whole);
    let ran = next_snapshot(dir.path(), &Snapshot::default());
    let newcomer = dir.write("a.yaml", pod_yaml("web").replace("'1000'", "'7'"));
    // What the state directory tells the next agent.
    let ran_before = RanBefore {
        uids: ran.pods.keys().cloned().collect(),
        files: [(("default".to_owned(), "web".to_owned()), running_file.clone())].into(),
        ..RanBefore::default()
    };
    let start = Snapshot { ran_before, ..Snapshot::default() };

    let mut cache = ParseCache::default();
    let mut scan =
        |running: &Snapshot| rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, running);
    let waits = |snapshot: &Snapshot| {
        snapshot.errors.iter().any(|e| e.file == newcomer && e.reason.contains("before this agent started"))
    };
    let held = |snapshot: &Snapshot| {
        snapshot.errors.iter().any(|e| e.file == running_file && kept_for_now(&e.reason))
    };
    dir.write("b.yaml", "");
    let first = scan(&start);
    assert!(first.pods.is_empty(), "{:?}", first.pods);
    assert!(held(&first) && waits(&first), "{:?}", first.errors);
    dir.write("b.yaml", &whole[..whole.len() - 4]);
    let second = scan(&first);
    assert!(second.pods.is_empty(), "{:?}", second.pods);
    assert!(held(&second) && waits(&second), "{:?}", second.errors);
    dir.write("b.yaml", &whole);
    let third = scan(&second);
    let started: Vec<_> = third.pods.values().map(|p| p.file.clone()).collect();
    assert_eq!(started, std::slice::from_ref(&running_file), "{:?}", third.errors);
    assert_eq!(third.pods, ran.pods, "the very pod that ran before");
    assert!(
        third.errors.iter().any(|e| e.file == newcomer),
        "the newcomer still refused: {:?}",
        third.errors
    );

    // Empty for good: after the hold the newcomer gets the name.
    let mut cache = ParseCache::default();
    dir.write("b.yaml", "");
    let first = rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, &start);
    let second = rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, &first);
    let started: Vec<_> = second.pods.values().map(|p| p.file.clone()).collect();
    assert_eq!(started, [newcomer], "{:?}", second.errors);
}

/// The name of a manifest held as the agent starts is carried from scan to scan with the UID
/// it ran under, for the state directory's record of what runs, so that an agent started
/// during the hold holds the file too; once the file is whole again, or given up after its
/// hold, it is not. Only the name was carried, and the record named only the running pods: a
/// second restart during the hold lost the name to a newcomer.
#[test]
fn a_name_held_at_start_is_carried_with_the_uid_it_ran_under_while_held() {
    let dir = TempDir::new("held-at-start-carried");
    let whole = pod_yaml("web");
    let running_file = dir.write("b.yaml", &whole);
    let ran = next_snapshot(dir.path(), &Snapshot::default());
    let uid = ran.pods.keys().next().unwrap().clone();
    let web = ("default".to_owned(), "web".to_owned());
    // What the state directory tells the next agent.
    let ran_before = RanBefore {
        uids: [uid.clone()].into(),
        files: [(web.clone(), running_file.clone())].into(),
        uid_by_name: [(web, uid)].into(),
    };
    let start = Snapshot { ran_before: ran_before.clone(), ..Snapshot::default() };

    let mut cache = ParseCache::default();
    let mut scan =
        |running: &Snapshot| rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, running);
    dir.write("b.yaml", "");
    let first = scan(&start);
    assert_eq!(first.ran_before, ran_before, "{:?}", first.errors);
    dir.write("b.yaml", &whole[..whole.len() - 4]);
    let second = scan(&first);
    assert_eq!(second.ran_before, ran_before, "{:?}", second.errors);
    dir.write("b.yaml", &whole);
    let third = scan(&second);
    assert_eq!(third.pods, ran.pods, "the very pod that ran before");
    assert_eq!(third.ran_before, RanBefore::default());

    // Unreadable: carried for the 10 scans of its hold, then given up.
    let mut cache = ParseCache::default();
    make_unreadable(&running_file);
    let mut running = start;
    let mut carried = Vec::new();
    for _ in 0..11 {
        running = rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, &running);
        carried.push(running.ran_before == ran_before);
    }
    assert_eq!(carried, [[true; 10].as_slice(), &[false]].concat(), "{:?}", running.errors);
    assert_eq!(running.ran_before, RanBefore::default());
}

/// A symlink loop (or a link through a file) in place of a running manifest leads to no file,
/// as a dangling link does: its pods go. It was kept as a file that cannot be read for now
/// (out of descriptors), so the pods ran on from a manifest that no longer existed.
#[test]
fn a_symlink_loop_in_place_of_a_running_manifest_stops_its_pods() {
    let dir = TempDir::new("looped");
    let a = dir.write("a.yaml", pod_yaml("alpha"));
    let b = dir.write("b.yaml", pod_yaml("beta"));
    let running = next_snapshot(dir.path(), &Snapshot::default());
    assert_eq!(running.pods.len(), 2);
    dir.remove("a.yaml");
    std::os::unix::fs::symlink(&a, &a).unwrap();
    dir.remove("b.yaml");
    std::os::unix::fs::symlink(dir.write("file", "x").join("b.yaml"), &b).unwrap();
    let next = next_snapshot(dir.path(), &running);
    assert_eq!(summary(&diff(&running, &next)), vec!["-default/alpha", "-default/beta"]);
    assert!(next.unreadable_files.is_empty(), "{:?}", next.unreadable_files);
    let mut said: Vec<_> =
        next.errors.iter().map(|e| (e.file.clone(), e.reason.starts_with("cannot read file: "))).collect();
    said.sort();
    assert_eq!(said, vec![(a, true), (b, true)]);
}

/// Puts an unreadable file at `file`: a link to the reader's own memory, which opens and fails
/// to read (`EIO`), as a file chmodded to 000 fails to open (`EACCES`) for any agent but root's.
fn make_unreadable(file: &Path) {
    let _ = fs::remove_file(file);
    std::os::unix::fs::symlink("/proc/self/mem", file).unwrap();
}

/// A running manifest that cannot be read (not for a shortage of the agent's) is held as a
/// half-written one is: its pods and their names kept for [`HELD_SCANS_MAX`] scans, then its
/// pods stop (`file unreadable`) and a refused newcomer takes the name. Readable again within
/// the hold, nothing restarts. Before, its pods ran on for good from a file nobody could read,
/// where the kubelet drops it at its next full read of the folder.
#[test]
fn a_running_manifest_that_cannot_be_read_is_held_ten_scans_then_its_pods_stop() {
    let dir = TempDir::new("unreadable-held");
    let whole = pod_yaml("web");
    let running_file = dir.write("b.yaml", &whole);
    let mut cache = ParseCache::default();
    let mut scan =
        |running: &Snapshot| rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, running);
    let running = scan(&Snapshot::default());
    let newcomer = dir.write("a.yaml", pod_yaml("web").replace("'1000'", "'7'"));
    let before = scan(&running);
    assert_eq!(before.pods, running.pods);
    let held = |snapshot: &Snapshot| {
        snapshot.errors.iter().any(|e| {
            e.file == running_file
                && kept_for_now(&e.reason)
                && e.reason.starts_with(&format!("{UNREADABLE_FOR_NOW}: cannot read file: "))
        })
    };
    let refused = |snapshot: &Snapshot| snapshot.errors.iter().any(|e| e.file == newcomer);

    // Unreadable for a moment: held, the newcomer refused; readable again, nothing restarts.
    make_unreadable(&running_file);
    let caught = scan(&before);
    assert_eq!(summary(&diff(&before, &caught)), Vec::<String>::new(), "the pod keeps running");
    assert!(held(&caught) && refused(&caught), "{:?}", caught.errors);
    dir.remove("b.yaml");
    dir.write("b.yaml", &whole);
    let readable = scan(&caught);
    assert_eq!(summary(&diff(&caught, &readable)), Vec::<String>::new(), "nothing restarts");
    assert_eq!(readable.pods, running.pods);
    assert!(!held(&readable) && refused(&readable), "{:?}", readable.errors);

    // Unreadable for longer than the hold: the pod stops at the scan after the last held one,
    // and the newcomer starts in its place.
    make_unreadable(&running_file);
    let mut last = readable;
    for round in 0..HELD_SCANS_MAX {
        let next = scan(&last);
        assert_eq!(summary(&diff(&last, &next)), Vec::<String>::new(), "round {round}");
        assert!(held(&next) && refused(&next), "round {round}: {:?}", next.errors);
        last = next;
    }
    let dropped = scan(&last);
    let changes = diff(&last, &dropped);
    assert_eq!(summary(&changes), vec!["-default/web", "+default/web"]);
    let SourceChange::Added(added) = &changes[1] else { panic!("{changes:?}") };
    assert_eq!(added.file, newcomer);
    assert!(!held(&dropped), "{:?}", dropped.errors);
    assert!(!dropped.unreadable_files.contains_key(&running_file), "{:?}", dropped.unreadable_files);
    assert!(leads_to_a_file(&running_file));
    let why = removal(&dropped, &running_file, "default", "web", leads_to_a_file(&running_file));
    assert_eq!(why, Removal::Unreadable);
    assert_eq!(why.to_string(), "file unreadable");
    // Given up: not held again, nor said to keep pods, while it stays unreadable.
    let after = scan(&dropped);
    assert_eq!(summary(&diff(&dropped, &after)), Vec::<String>::new());
    assert!(!held(&after) && !after.unreadable_files.contains_key(&running_file), "{:?}", after.errors);
    assert!(
        after.errors.iter().any(|e| e.file == running_file && e.reason.starts_with("cannot read file: "))
    );
    // Readable again, it gives its pod, refused now: the newcomer runs the name.
    dir.remove("b.yaml");
    dir.write("b.yaml", &whole);
    let back = scan(&after);
    assert_eq!(summary(&diff(&after, &back)), Vec::<String>::new());
    assert!(back.errors.iter().any(|e| e.file == running_file && e.reason.contains("Duplicate value")));
}

/// The hold's words say how long it lasts.
#[test]
fn the_hold_of_an_unreadable_file_says_how_many_scans() {
    assert!(UNREADABLE_FOR_NOW.contains(&format!("up to {HELD_SCANS_MAX} scans")), "{UNREADABLE_FOR_NOW}");
}

/// An agent that starts while the manifest the previous agent ran a name from cannot be read
/// holds it as for a half-written one: the newcomer of that name waits for the hold, and the
/// file, readable again within it, runs the very pod that ran before; unreadable for longer,
/// the newcomer starts. It waited for good before.
#[test]
fn a_manifest_that_cannot_be_read_as_the_agent_starts_keeps_its_name_while_held() {
    let dir = TempDir::new("unreadable-at-start");
    let whole = pod_yaml("web");
    let running_file = dir.write("b.yaml", &whole);
    let ran = next_snapshot(dir.path(), &Snapshot::default());
    let newcomer = dir.write("a.yaml", pod_yaml("web").replace("'1000'", "'7'"));
    let ran_before = RanBefore {
        uids: ran.pods.keys().cloned().collect(),
        files: [(("default".to_owned(), "web".to_owned()), running_file.clone())].into(),
        ..RanBefore::default()
    };
    let start = Snapshot { ran_before, ..Snapshot::default() };
    let waits = |snapshot: &Snapshot| {
        snapshot.errors.iter().any(|e| e.file == newcomer && e.reason.contains("before this agent started"))
    };
    let held = |snapshot: &Snapshot| {
        snapshot.errors.iter().any(|e| e.file == running_file && e.reason.starts_with(UNREADABLE_FOR_NOW))
    };

    // Readable again within the hold.
    make_unreadable(&running_file);
    let mut cache = ParseCache::default();
    let mut scan =
        |running: &Snapshot| rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, running);
    let first = scan(&start);
    assert!(first.pods.is_empty(), "{:?}", first.pods);
    assert!(held(&first) && waits(&first), "{:?}", first.errors);
    dir.remove("b.yaml");
    dir.write("b.yaml", &whole);
    let second = scan(&first);
    assert_eq!(second.pods, ran.pods, "the very pod that ran before: {:?}", second.errors);

    // Unreadable for longer than the hold: the newcomer waits for it, then starts.
    make_unreadable(&running_file);
    let mut cache = ParseCache::default();
    let mut scan =
        |running: &Snapshot| rescan(dir.path(), NODE, &FeatureGates::default(), &mut cache, running);
    let mut last = start;
    for round in 0..HELD_SCANS_MAX {
        let next = scan(&last);
        assert!(next.pods.is_empty(), "round {round}: {:?}", next.pods);
        assert!(held(&next) && waits(&next), "round {round}: {:?}", next.errors);
        last = next;
    }
    let given_up = scan(&last);
    let started: Vec<_> = given_up.pods.values().map(|p| p.file.clone()).collect();
    assert_eq!(started, std::slice::from_ref(&newcomer), "{:?}", given_up.errors);
    assert!(!held(&given_up) && !waits(&given_up), "{:?}", given_up.errors);
    assert!(given_up.ran_before.files.is_empty(), "{:?}", given_up.ran_before);
    let after = scan(&given_up);
    assert_eq!(after.pods, given_up.pods);
    assert!(!held(&after) && !waits(&after), "{:?}", after.errors);
}

/// A running manifest that is a symlink whose target vanished (a ConfigMap volume's `..data`
/// link caught mid-swap, or a plain dangling link) stops its pods as deleted: it said `file
/// does not load`, as the link itself was still there.
#[test]
fn a_running_manifest_whose_link_target_vanished_is_said_deleted() {
    let dir = TempDir::new("dangling");
    fs::create_dir(dir.path().join("..data")).unwrap();
    let target = dir.write("..data/web.yaml", pod_yaml("web"));
    let link = dir.path().join("web.yaml");
    std::os::unix::fs::symlink("..data/web.yaml", &link).unwrap();
    let running = next_snapshot(dir.path(), &Snapshot::default());
    assert_eq!(running.pods.len(), 1, "{:?}", running.errors);
    assert!(leads_to_a_file(&link));
    fs::remove_file(&target).unwrap();
    let next = next_snapshot(dir.path(), &running);
    assert_eq!(summary(&diff(&running, &next)), vec!["-default/web"]);
    assert!(!leads_to_a_file(&link));
    assert_eq!(removal(&next, &link, "default", "web", leads_to_a_file(&link)), Removal::Deleted);
    // A link that leads to a file that cannot be read is there.
    make_unreadable(&link);
    assert!(leads_to_a_file(&link));
}

/// `metadata.name: Duplicate value` for a pod of `file` refused because `keeper` runs the name.
fn refused(file: &Path, name: &str, keeper: &Path) -> ManifestError {
    ManifestError {
        file: file.to_owned(),
        reason: format!(
            "metadata.name: Duplicate value: \"{name}\": pod default/{name} runs from {}; this one is not started while it does",
            keeper.display()
        ),
    }
}

/// A file dropped beside a running manifest with the same namespace/name does not displace the
/// running pod, even when it comes first in file-name order: it is refused, naming both files
/// and `metadata.name` (docs/reliability.md, "A new manifest never displaces a running pod").
/// Before, the newcomer won by its file name, and the running pod was stopped for it.
#[test]
fn a_new_file_does_not_displace_the_running_pod_of_its_name() {
    let dir = TempDir::new("displace");
    let running_file = dir.write("b.yaml", pod_yaml("web"));
    let running = next_snapshot(dir.path(), &Snapshot::default());
    assert_eq!(running.errors, vec![]);

    let newcomer = dir.write("a.yaml", pod_yaml("web").replace("'1000'", "'7'"));
    let next = next_snapshot(dir.path(), &running);
    assert_eq!(summary(&diff(&running, &next)), Vec::<String>::new(), "b.yaml's pod keeps running");
    assert_eq!(next.pods, running.pods);
    assert_eq!(next.errors, vec![refused(&newcomer, "web", &running_file)]);
    let again = next_snapshot(dir.path(), &next);
    assert_eq!(again, next, "and so it stays, with the same words (the agent tells them once)");

    // The running file edited in place: its pod replaces itself (a new UID), the newcomer is
    // still refused in the same words.
    dir.write("b.yaml", pod_yaml("web").replace("'1000'", "'2000'"));
    let edited = next_snapshot(dir.path(), &next);
    let changes = diff(&next, &edited);
    assert_eq!(summary(&changes), vec!["-default/web", "+default/web"]);
    let SourceChange::Added(added) = &changes[1] else { panic!("{changes:?}") };
    assert_eq!(added.file, running_file, "the edit, not the newcomer");
    assert_eq!(edited.errors, next.errors);

    // The running file removed: the newcomer starts on the next scan.
    dir.remove("b.yaml");
    let taken = next_snapshot(dir.path(), &edited);
    let changes = diff(&edited, &taken);
    assert_eq!(summary(&changes), vec!["-default/web", "+default/web"]);
    let SourceChange::Added(added) = &changes[1] else { panic!("{changes:?}") };
    assert_eq!(added.file, newcomer);
    assert_eq!(taken.errors, vec![]);

    // b.yaml back: now it is the newcomer, refused although it comes second.
    dir.write("b.yaml", pod_yaml("web"));
    let back = next_snapshot(dir.path(), &taken);
    assert_eq!(diff(&taken, &back), vec![]);
    assert_eq!(back.errors, vec![refused(&running_file, "web", &newcomer)]);
}

/// The running file that stops giving the name (its pod renamed, or the file no longer
/// parses) lets the newcomer start on the same scan.
#[test]
fn a_running_file_that_stops_giving_the_name_lets_the_newcomer_start() {
    let dir = TempDir::new("renamed");
    let running_file = dir.write("b.yaml", pod_yaml("web"));
    let running = next_snapshot(dir.path(), &Snapshot::default());
    let newcomer = dir.write("a.yaml", pod_yaml("web").replace("'1000'", "'7'"));
    let refusing = next_snapshot(dir.path(), &running);
    assert_eq!(refusing.errors, vec![refused(&newcomer, "web", &running_file)]);

    dir.write("b.yaml", pod_yaml("api"));
    let renamed = next_snapshot(dir.path(), &refusing);
    assert_eq!(summary(&diff(&refusing, &renamed)), vec!["-default/web", "+default/web", "+default/api"]);
    assert_eq!(renamed.errors, vec![]);

    // A running file that stops parsing gives up its name the same way.
    dir.write("b.yaml", pod_yaml("web"));
    let swapped = next_snapshot(dir.path(), &renamed);
    assert_eq!(summary(&diff(&renamed, &swapped)), vec!["-default/api"], "a.yaml's web keeps running");
    dir.write("a.yaml", "kind: Pod\n  - : [\n");
    let broken = next_snapshot(dir.path(), &swapped);
    assert_eq!(summary(&diff(&swapped, &broken)), vec!["-default/web", "+default/web"]);
    assert_eq!(broken.errors.len(), 1, "{:?}", broken.errors);
    assert!(broken.errors[0].reason.starts_with("invalid YAML: "), "{:?}", broken.errors);
}

/// At start nothing runs: of the files giving one name, the first in file-name order wins and
/// the others are refused in the same words as later on; the winner then keeps the name.
#[test]
fn at_start_the_first_file_in_name_order_wins_and_then_keeps_the_name() {
    let dir = TempDir::new("start-order");
    let first = dir.write("a.yaml", pod_yaml("web"));
    let second = dir.write("b.yaml", pod_yaml("web").replace("'1000'", "'7'"));
    let start = next_snapshot(dir.path(), &Snapshot::default());
    assert_eq!(start.pods.values().map(|p| p.file.clone()).collect::<Vec<_>>(), vec![first.clone()]);
    assert_eq!(start.errors, vec![refused(&second, "web", &first)]);
    let (pods, errors) = load_dir(dir.path(), NODE);
    assert_eq!((pods.len(), errors), (1, start.errors.clone()), "load_dir: the same rule");
    let next = next_snapshot(dir.path(), &start);
    assert_eq!(next, start, "the same words on the next scan, told once");
}

/// `defaultMode: 0644`, as manifests everywhere write a volume's mode, is the octal 420 the
/// kubelet's YAML 1.1 reader makes of it. The file was refused (`invalid i32`: YAML 1.2 has no
/// leading-zero octal, and the reader took it for no integer at all).
#[test]
fn a_leading_zero_mode_is_octal_as_the_kubelet_reads_it() {
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: oct}\nspec:\n  containers:\n  - name: app\n    \
                command: [sleep, '3600']\n  volumes:\n  - name: cfg\n    configMap:\n      name: cfg\n      \
                defaultMode: 0644\n";
    let (pods, errors) = parse_manifest(Path::new("/m/oct.yaml"), yaml, NODE);
    assert_eq!(reasons(&errors), Vec::<String>::new());
    let volumes = pods[0].spec.as_ref().and_then(|s| s.volumes.as_ref()).expect("volumes");
    let mode = volumes[0].config_map.as_ref().and_then(|c| c.default_mode);
    assert_eq!(mode, Some(0o644));
}

/// A leading-zero integer that is not valid octal (`08`, `09`) is a float to go-yaml v2 (its
/// `resolve` tries `strconv.ParseInt` with base 0, then `yamlStyleFloat`), which Go's JSON
/// encoder writes without a fraction: the kubelet reads `periodSeconds: 08` as 8 and `port:
/// 08080` as 8080, and `10.0` as 10. They were refused (`invalid i32`; the int-or-string as
/// `floating point 8080.0`).
#[test]
fn a_leading_zero_number_that_is_not_octal_is_decimal_as_the_kubelet_reads_it() {
    let yaml = format!(
        "{}    readinessProbe:\n      periodSeconds: 08\n      timeoutSeconds: 10.0\n      failureThreshold: 09\n      \
         tcpSocket: {{port: 08080}}\n",
        pod_yaml("lead")
    );
    let (pods, errors) = parse_manifest(Path::new("/m/lead.yaml"), &yaml, NODE);
    assert_eq!(reasons(&errors), Vec::<String>::new());
    let probe = pods[0].spec.as_ref().unwrap().containers[0].readiness_probe.clone().unwrap();
    assert_eq!(
        (probe.period_seconds, probe.timeout_seconds, probe.failure_threshold),
        (Some(8), Some(10), Some(9))
    );
    assert_eq!(probe.tcp_socket.unwrap().port, IntOrString::Int(8080));
}

/// The kubelet decodes the JSON its YAML reader made strictly by type: a number or a boolean
/// where a string goes (`value: 0644`, `value: yes`, unquoted) and a string where a number
/// goes (`periodSeconds: '10'`) refuse the file, as `probelet lint` refuses it. The agent read
/// them leniently (`0644` kept as the text, `'10'` read as 10) and ran a pod the kubelet does
/// not. The error names the field, its line and column, and the value as the file writes it.
#[test]
fn a_scalar_of_the_wrong_type_is_refused_as_the_kubelet_refuses_it() {
    let cases = [
        (
            "    env: [{name: MODE, value: 0644}]\n",
            "invalid Pod: spec.containers[0].env[0].value: invalid type: integer `0644`, expected a string at line 9, column 31",
        ),
        (
            "    env: [{name: SWITCH, value: yes}]\n",
            "invalid Pod: spec.containers[0].env[0].value: invalid type: boolean `yes`, expected a string at line 9, column 33",
        ),
        (
            "    readinessProbe: {periodSeconds: '10', tcpSocket: {port: 80}}\n",
            "invalid Pod: spec.containers[0].readinessProbe.periodSeconds: invalid type: string \"10\", expected i32 at line 9, column 37",
        ),
        (
            "    readinessProbe: {periodSeconds: 08.5, tcpSocket: {port: 80}}\n",
            "invalid Pod: spec.containers[0].readinessProbe.periodSeconds: invalid type: floating point `08.5`, expected i32 at line 9, column 37",
        ),
    ];
    for (container, want) in cases {
        let yaml = format!("{}{container}", pod_yaml("typed"));
        let (pods, errors) = parse_manifest(Path::new("/m/typed.yaml"), &yaml, NODE);
        assert!(pods.is_empty(), "{container}");
        assert_eq!(reasons(&errors), [want], "{container}");
    }
}

/// A pod refused by validation is said refused, and nothing more: the fields it holds that a
/// Pod does not have were said too (`manifest field ignored`), of a pod that does not run.
#[test]
fn a_refused_pods_unknown_fields_are_not_told() {
    let yaml = format!("{}    readinesProbe: {{}}\n  activeDeadlineSeconds: -1\n", pod_yaml("refused"));
    let file = Path::new("/m/refused.yaml");
    let (pods, errors, unknown) = parse_manifest_noting_unknown(file, &yaml, NODE, &FeatureGates::default());
    assert!(pods.is_empty());
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(unknown, []);
}

/// A console line quotes at most [`QUOTED_CHARS_MAX`] characters of one word of the file's
/// text: a 900 KB key (an explicit one, `? key`: an implicit key is at most 1,024 characters,
/// in a `.json` manifest too) made a 900 KB line.
#[test]
fn a_long_key_is_cut_in_a_console_line() {
    let key = "k".repeat(900 * 1024);
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: j}}\n? {key}\n: 1\nspec:\n  containers:\n  - name: app\n    \
         command: [x]\n"
    );
    let (_, errors, unknown) =
        parse_manifest_noting_unknown(Path::new("/m/long.yaml"), &yaml, NODE, &FeatureGates::default());
    assert_eq!(errors, []);
    let line = ignored_fields_line(&unknown[0]);
    let cut = format!("unknown field \"{}…\"", "k".repeat(QUOTED_CHARS_MAX - 1));
    assert!(line.ends_with(&cut), "{}", &line[..300]);
    assert!(line.len() < 400, "{} bytes", line.len());
    let error =
        ManifestError { file: PathBuf::from("/m/long.yaml"), reason: format!("invalid Pod: {key}: x") };
    assert!(error.for_a_line().len() < 400);
    // A key of short words is no long word: the line is cut as a whole.
    let words = "a ".repeat(450 * 1024);
    let error =
        ManifestError { file: PathBuf::from("/m/words.yaml"), reason: format!("invalid Pod: {words}") };
    let line = error.for_a_line();
    assert!(
        line.ends_with("a a…") && line.chars().count() < LINE_QUOTES_MAX + 100,
        "{} characters",
        line.len()
    );
}

/// Of two files giving one name, the refused one's fields a Pod does not have are not told:
/// its refusal (`metadata.name: Duplicate value`) is; the running one's are.
#[test]
fn a_pod_refused_for_its_name_has_its_unknown_fields_untold() {
    let dir = TempDir::new("refused-unknown");
    let first = dir.write("a.yaml", format!("{}    readinesProbe: {{}}\n", pod_yaml("web")));
    let second = dir.write("b.yaml", format!("{}    livenesProbe: {{}}\n", pod_yaml("web")));
    let start = next_snapshot(dir.path(), &Snapshot::default());
    assert_eq!(start.errors, vec![refused(&second, "web", &first)]);
    let files: Vec<&Path> = start.unknown_fields.iter().map(|u| u.file.as_path()).collect();
    assert_eq!(files, [first.as_path()]);
}

/// go-yaml v2 knows its booleans by a fixed list of spellings (`yes`, `Yes`, `YES`, `on`, `On`,
/// `ON`, …; resolve.go's `resolveMapList`), where the YAML reader takes those words in any case:
/// `oN`, `yEs`, `tRUE` are strings to the kubelet, which a string field takes and a boolean
/// field refuses. They were booleans here: a pod the kubelet runs was refused (its env value
/// `invalid type: boolean`), and `readOnly: tRUE` read true where the kubelet refuses it.
#[test]
fn a_boolean_word_in_a_case_go_yaml_does_not_know_is_a_string() {
    let yaml = format!(
        "{}    env:\n    - {{name: A, value: oN}}\n    - {{name: B, value: yEs}}\n    - name: C\n      value: tRUE\n",
        pod_yaml("case")
    );
    let (pods, errors) = parse_manifest(Path::new("/m/case.yaml"), &yaml, NODE);
    assert_eq!(reasons(&errors), Vec::<String>::new());
    let env = pods[0].spec.as_ref().unwrap().containers[0].env.clone().unwrap();
    let values: Vec<_> = env.iter().map(|e| e.value.as_deref().unwrap_or_default()).collect();
    assert_eq!(values, ["oN", "yEs", "tRUE"]);
    // go-yaml's own spellings stay booleans, refused in a string field.
    let (pods, errors) = parse_manifest(Path::new("/m/case.yaml"), &yaml.replace("oN", "On"), NODE);
    assert!(pods.is_empty());
    assert_eq!(
        reasons(&errors),
        [
            "invalid Pod: spec.containers[0].env[0].value: invalid type: boolean `On`, expected a string at line 10, column 24"
        ]
    );
    // A boolean field refuses the string, as the kubelet's decoder does.
    let volume = format!(
        "{}    volumeMounts: [{{name: v, mountPath: /v, readOnly: tRUE}}]\n  volumes: [{{name: v, emptyDir: {{}}}}]\n",
        pod_yaml("ro")
    );
    let (pods, errors) = parse_manifest(Path::new("/m/ro.yaml"), &volume, NODE);
    assert!(pods.is_empty());
    assert_eq!(
        reasons(&errors),
        [
            "invalid Pod: spec.containers[0].volumeMounts[0].readOnly: invalid type: string \"tRUE\", expected a boolean at line 9, column 55"
        ]
    );
}
