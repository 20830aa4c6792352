//! Micro benchmarks of the per-pod work on the status path (what one status change costs
//! before any I/O) and of the HTTP probe's request building (what every HTTP probe does before
//! it connects). `cargo bench -p probelet-actors --bench status`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerState, ContainerStateRunning, ContainerStatus, HTTPGetAction,
    HTTPHeader, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use probelet_actors::prober::http::HttpProbeRequest;
use probelet_actors::status::equality::ConditionOwnership;
use probelet_actors::status::equality::is_pod_status_by_kubelet_equal;
use probelet_actors::status::generate_kubelet_conditions;
use probelet_actors::status::merge::{merge_pod_status, merge_readiness_only};
use probelet_actors::status::normalize::normalize_status;
use probelet_actors::status::probe_status::PodProbeStatus;
use probelet_actors::status::stored::StoredStatus;
use probelet_actors::sync::api_pod::ApiPod;
use probelet_actors::sync::patch::{pod_status_patch, pod_status_patch_json};
use probelet_actors::sync::rules::{go_zero_values, readiness_only_sides};

fn pod(containers: usize) -> Pod {
    Pod {
        metadata: ObjectMeta { name: Some("web".into()), uid: Some("u1".into()), ..Default::default() },
        spec: Some(PodSpec {
            containers: (0..containers)
                .map(|i| Container { name: format!("c{i}"), ..Default::default() })
                .collect(),
            ..Default::default()
        }),
        status: Some(PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "example.com/feature".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn status(containers: usize, ready: bool) -> PodStatus {
    let started = Time(Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH));
    PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some("10.0.0.1".into()),
        start_time: Some(started.clone()),
        container_statuses: Some(
            (0..containers)
                .map(|i| ContainerStatus {
                    name: format!("c{i}"),
                    container_id: Some(format!("containerd://{i:064x}")),
                    ready,
                    started: Some(true),
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning { started_at: Some(started.clone()) }),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }
}

/// An `httpGet` as manifests write it: a named port, a path with a query, two headers.
fn http_get() -> (HTTPGetAction, Container) {
    let action = HTTPGetAction {
        path: Some("/healthz?verbose=1".into()),
        port: IntOrString::String("http".into()),
        http_headers: Some(vec![
            HTTPHeader { name: "x-probe".into(), value: "readiness".into() },
            HTTPHeader { name: "Accept".into(), value: "application/json".into() },
        ]),
        ..Default::default()
    };
    let container = Container {
        name: "app".into(),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: 8080,
            ..Default::default()
        }]),
        ..Default::default()
    };
    (action, container)
}

fn bench_http_request(c: &mut Criterion) {
    let (action, container) = http_get();
    c.bench_function("HttpProbeRequest::new (named port, query, 2 headers)", |b| {
        b.iter(|| HttpProbeRequest::new(black_box(&action), black_box(&container), "10.0.0.7"))
    });
    let Ok(request) = HttpProbeRequest::new(&action, &container, "10.0.0.7") else { return };
    c.bench_function("HttpProbeRequest::first_request (the kept request head, shared)", |b| {
        b.iter(|| black_box(&request).first_request())
    });
}

fn bench(c: &mut Criterion) {
    let pod = pod(3);
    let mut before = status(3, false);
    generate_kubelet_conditions(&pod, &mut before);
    let mut after = status(3, true);
    generate_kubelet_conditions(&pod, &mut after);
    let now = Time(Timestamp::from_second(1_800_000_100).unwrap_or(Timestamp::UNIX_EPOCH));

    c.bench_function("generate_kubelet_conditions (3 containers)", |b| {
        b.iter(|| {
            let mut s = status(3, true);
            generate_kubelet_conditions(black_box(&pod), &mut s);
            s
        })
    });
    // A pod of 10,000 containers: the generators look each container's status up by name, which
    // a scan per container makes quadratic (upstream's cost) and an index keeps linear.
    let big = self::pod(10_000);
    let big_status = status(10_000, true);
    c.bench_function("generate_kubelet_conditions (10,000 containers)", |b| {
        b.iter(|| {
            let mut s = big_status.clone();
            generate_kubelet_conditions(black_box(&big), &mut s);
            s
        })
    });
    c.bench_function("normalize_status (3 containers)", |b| {
        b.iter(|| {
            let mut s = after.clone();
            normalize_status(black_box(&pod), &mut s);
            s
        })
    });
    c.bench_function("is_pod_status_by_kubelet_equal", |b| {
        b.iter(|| is_pod_status_by_kubelet_equal(black_box(&before), black_box(&after)))
    });
    // The status at rest (docs/memory.md): what a status change pays to keep the status as its
    // JSON and to extract what probes read, against the clone the typed cache paid.
    let one = self::pod(1);
    let mut stored_status = status(1, true);
    generate_kubelet_conditions(&one, &mut stored_status);
    normalize_status(&one, &mut stored_status);
    let stored = StoredStatus::new(&stored_status);
    let probe = PodProbeStatus::from(&stored_status);
    c.bench_function("StoredStatus::new (1 container, 4 conditions)", |b| {
        b.iter(|| StoredStatus::new(black_box(&stored_status)))
    });
    c.bench_function("StoredStatus::decode (1 container, 4 conditions)", |b| {
        b.iter(|| black_box(&stored).decode())
    });
    c.bench_function("PodProbeStatus::of (1 container, the version before)", |b| {
        b.iter(|| PodProbeStatus::of(black_box(&stored_status), Some(&probe)))
    });
    c.bench_function("PodStatus::clone (1 container, 4 conditions)", |b| {
        b.iter(|| black_box(&stored_status).clone())
    });
    c.bench_function("merge + pod_status_patch (NotReady -> Ready)", |b| {
        b.iter(|| {
            let merged = merge_pod_status(black_box(&before), black_box(&after), true, now.clone(), None);
            pod_status_patch("u1", &before, &merged)
        })
    });

    // Cluster mode: the merge base is the server's JSON, with a field the typed structs lack in
    // every container status; the patch is computed from it (readiness only).
    let mut api_pod = serde_json::to_value(Pod { status: Some(before.clone()), ..pod.clone() })
        .unwrap_or(serde_json::Value::Null);
    for item in
        api_pod.pointer_mut("/status/containerStatuses").and_then(|l| l.as_array_mut()).into_iter().flatten()
    {
        item["volumeMounts"] = serde_json::json!([{"name": "data", "mountPath": "/data",
            "volumeStatus": {"image": {"imageRef": "quay.io/crio/artifact@sha256:1111"}}}]);
    }
    let base = ApiPod::from_json(api_pod.clone()).unwrap_or_else(|_| ApiPod::from_typed(pod.clone()));
    let ownership = ConditionOwnership::KUBELET;
    c.bench_function("ApiPod::from_json (3 containers)", |b| {
        b.iter(|| ApiPod::from_json(black_box(api_pod.clone())))
    });
    c.bench_function("readiness-only merge + SMP from the JSON merge base (NotReady -> Ready)", |b| {
        b.iter(|| {
            let api = go_zero_values(base.pod.status.clone().unwrap_or_default());
            let merged =
                go_zero_values(merge_readiness_only(&api, black_box(&after), now.clone(), None, &ownership));
            readiness_only_sides(black_box(&base), &api, &merged)
                .map(|(api_side, merged_side)| pod_status_patch_json("u1", &api_side, &merged_side))
        })
    });
    c.bench_function("readiness-only merge + SMP from the typed merge base (NotReady -> Ready)", |b| {
        b.iter(|| {
            let api = go_zero_values(base.pod.status.clone().unwrap_or_default());
            let merged =
                go_zero_values(merge_readiness_only(&api, black_box(&after), now.clone(), None, &ownership));
            pod_status_patch("u1", &api, &merged)
        })
    });
}

criterion_group!(benches, bench, bench_http_request);
criterion_main!(benches);
