//! What the server fills in on create: pod and container defaulting (`SetDefaults_*`), the
//! admission plugins a default cluster runs, and the QoS class.

use serde_json::{Value, json};

/// Pod defaulting (`SetDefaults_*`) plus the admission plugins a default cluster runs
/// (DefaultTolerationSeconds, Priority).
pub(super) fn default_pod(pod: &mut Value) {
    if !pod.get("spec").is_some_and(Value::is_object) {
        pod["spec"] = json!({});
    }
    let spec = &mut pod["spec"];
    let defaults = [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("securityContext", json!({})),
        ("schedulerName", json!("default-scheduler")),
        ("priority", json!(0)),
        ("enableServiceLinks", json!(true)),
        ("preemptionPolicy", json!("PreemptLowerPriority")),
    ];
    for (k, val) in defaults {
        if spec.get(k).is_none_or(|x| x.is_null() || x == &json!("")) {
            spec[k] = val;
        }
    }
    for key in ["initContainers", "containers"] {
        if let Some(Value::Array(list)) = spec.get_mut(key) {
            for c in list {
                default_container(c);
            }
        }
    }
    let mut tols = spec.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
        let present = tols.iter().any(|t| {
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            let op = t.get("operator").and_then(Value::as_str).unwrap_or("");
            (t.get("key").and_then(Value::as_str) == Some(key) || (t.get("key").is_none() && op == "Exists"))
                && (effect.is_empty() || effect == "NoExecute")
        });
        if !present {
            tols.push(
                json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}),
            );
        }
    }
    spec["tolerations"] = Value::Array(tols);
}

fn default_container(c: &mut Value) {
    let set = |c: &mut Value, k: &str, val: Value| {
        if c.get(k).is_none_or(|x| x.is_null() || x == &json!("")) {
            c[k] = val;
        }
    };
    set(c, "terminationMessagePath", json!("/dev/termination-log"));
    set(c, "terminationMessagePolicy", json!("File"));
    let image = c.get("image").and_then(Value::as_str).unwrap_or("").to_string();
    let last = image.rsplit('/').next().unwrap_or("");
    let policy = if image.contains('@') {
        "IfNotPresent"
    } else {
        match last.rsplit_once(':') {
            Some((_, tag)) if tag != "latest" => "IfNotPresent",
            _ => "Always",
        }
    };
    set(c, "imagePullPolicy", json!(policy));
    if !c.get("resources").is_some_and(Value::is_object) {
        c["resources"] = json!({});
    }
    // Requests default to limits.
    if let Some(limits) = c.pointer("/resources/limits").and_then(Value::as_object).cloned() {
        let mut requests =
            c.pointer("/resources/requests").and_then(Value::as_object).cloned().unwrap_or_default();
        for (k, val) in limits {
            requests.entry(k).or_insert(val);
        }
        c["resources"]["requests"] = Value::Object(requests);
    }
    if let Some(Value::Array(ports)) = c.get_mut("ports") {
        for p in ports {
            if p.get("protocol").is_none_or(|x| x == &json!("")) {
                p["protocol"] = json!("TCP");
            }
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).filter(|p| p.is_object()) {
            for (k, d) in [
                ("timeoutSeconds", 1),
                ("periodSeconds", 10),
                ("successThreshold", 1),
                ("failureThreshold", 3),
            ] {
                if p.get(k).and_then(Value::as_i64).unwrap_or(0) == 0 {
                    p[k] = json!(d);
                }
            }
            if let Some(h) = p.get_mut("httpGet").filter(|h| h.is_object()) {
                if h.get("path").is_none_or(|x| x == &json!("")) {
                    h["path"] = json!("/");
                }
                if h.get("scheme").is_none_or(|x| x == &json!("")) {
                    h["scheme"] = json!("HTTP");
                }
            }
        }
    }
}

/// A quantity as a number (approximate; enough to compare requests and limits).
fn quantity(q: &Value) -> f64 {
    let s = match q {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let suffixes: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    for (suffix, mult) in suffixes {
        if let Some(n) = s.strip_suffix(suffix) {
            return n.parse::<f64>().unwrap_or(0.0) * mult;
        }
    }
    s.parse().unwrap_or(0.0)
}

/// `qos.GetPodQOS`.
pub(super) fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|k| spec.get(*k).and_then(Value::as_array).into_iter().flatten())
        .collect();
    let get = |c: &Value, kind: &str, res: &str| {
        c.pointer(&format!("/resources/{kind}/{res}")).map(quantity).filter(|q| *q > 0.0)
    };
    let any = containers.iter().any(|c| {
        ["cpu", "memory"].iter().any(|r| get(c, "requests", r).is_some() || get(c, "limits", r).is_some())
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        ["cpu", "memory"].iter().all(|r| match (get(c, "limits", r), get(c, "requests", r)) {
            (Some(l), Some(q)) => (l - q).abs() < f64::EPSILON * l.max(1.0),
            _ => false,
        })
    });
    if guaranteed { "Guaranteed" } else { "Burstable" }
}
