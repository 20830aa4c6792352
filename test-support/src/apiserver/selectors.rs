//! Label and field selectors (`k8s.io/apimachinery/pkg/labels` and `pkg/fields`), and the field
//! labels pods and events can be selected by (`pkg/registry/core/pod.ToSelectableFields`,
//! `pkg/registry/core/event`).

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum LabelReq {
    Exists(String),
    NotExists(String),
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Splits at commas outside parentheses.
fn split_terms(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector(reqs));
        }
        for term in split_terms(s) {
            let t = term.trim();
            let bad = || format!("unable to parse requirement: found '{t}', expected: identifier");
            if t.is_empty() {
                return Err(bad());
            }
            if let Some(key) = t.strip_prefix('!') {
                reqs.push(LabelReq::NotExists(key.trim().to_string()));
            } else if let Some((k, v)) = t.split_once("!=") {
                reqs.push(LabelReq::NotEq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = t.split_once("==") {
                reqs.push(LabelReq::Eq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = t.split_once('=') {
                reqs.push(LabelReq::Eq(k.trim().into(), v.trim().into()));
            } else if let Some((k, rest)) = t.split_once(char::is_whitespace) {
                let rest = rest.trim();
                let (op, set) =
                    rest.split_once(char::is_whitespace).map(|(a, b)| (a, b.trim())).unwrap_or((rest, ""));
                let set = set.strip_prefix('(').and_then(|x| x.strip_suffix(')')).ok_or_else(bad)?;
                let values: Vec<String> = set.split(',').map(|v| v.trim().to_string()).collect();
                match op {
                    "in" => reqs.push(LabelReq::In(k.into(), values)),
                    "notin" => reqs.push(LabelReq::NotIn(k.into(), values)),
                    _ => return Err(bad()),
                }
            } else {
                reqs.push(LabelReq::Exists(t.to_string()));
            }
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, labels: Option<&Value>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
        })
    }
}

/// A parsed field selector: `(field, value, equal?)` terms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, String, bool)>);

/// What kind of object a field selector applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldSet {
    Pod,
    EventCore,
    EventV1,
}

impl FieldSelector {
    /// Parses and checks the field labels; the error is the 400 message.
    pub fn parse(s: &str, set: FieldSet) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        for raw in split_unescaped(s, ',') {
            if raw.is_empty() {
                continue;
            }
            let (field, value, eq) = if let Some(i) = find_unescaped(&raw, "!=") {
                (&raw[..i], &raw[i + 2..], false)
            } else if let Some(i) = find_unescaped(&raw, "==") {
                (&raw[..i], &raw[i + 2..], true)
            } else if let Some(i) = find_unescaped(&raw, "=") {
                (&raw[..i], &raw[i + 1..], true)
            } else {
                return Err(format!("invalid selector: '{s}'; can't understand '{raw}'"));
            };
            let field = convert_label(field, set)?;
            terms.push((field, unescape(value), eq));
        }
        Ok(FieldSelector(terms))
    }

    pub fn matches(&self, obj: &Value, set: FieldSet) -> bool {
        self.0.iter().all(|(f, v, eq)| (field_value(obj, f, set) == *v) == *eq)
    }
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut esc = false;
    for c in s.chars() {
        if esc {
            cur.push('\\');
            cur.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else if c == sep {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    out.push(cur);
    out
}

fn find_unescaped(s: &str, pat: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            i += 2;
            continue;
        }
        // The pattern is ASCII, so a byte match is always at a character boundary.
        if b[i..].starts_with(pat.as_bytes()) {
            return Some(i);
        }
        i += 1;
    }
    None
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut esc = false;
    for c in s.chars() {
        if esc {
            out.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else {
            out.push(c);
        }
    }
    out
}

const POD_FIELDS: [&str; 11] = [
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
];

const EVENT_FIELDS: [&str; 12] = [
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
];

fn convert_label(field: &str, set: FieldSet) -> Result<String, String> {
    let unsupported = || format!("field label not supported: {field}");
    match set {
        FieldSet::Pod => POD_FIELDS.contains(&field).then(|| field.to_string()).ok_or_else(unsupported),
        FieldSet::EventCore => (EVENT_FIELDS.contains(&field) || field == "type")
            .then(|| field.to_string())
            .ok_or_else(unsupported),
        FieldSet::EventV1 => {
            let core = if let Some(rest) = field.strip_prefix("regarding.") {
                format!("involvedObject.{rest}")
            } else if field == "reportingController" {
                "reportingComponent".to_string()
            } else if ["metadata.name", "metadata.namespace", "reason", "type"].contains(&field) {
                field.to_string()
            } else {
                return Err(unsupported());
            };
            (EVENT_FIELDS.contains(&core.as_str()) || core == "type").then_some(core).ok_or_else(unsupported)
        }
    }
}

fn str_at(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("").to_string()
}

fn field_value(obj: &Value, field: &str, set: FieldSet) -> String {
    match (set, field) {
        (FieldSet::Pod, "spec.hostNetwork") => {
            obj.pointer("/spec/hostNetwork").and_then(Value::as_bool).unwrap_or(false).to_string()
        }
        (FieldSet::Pod, "spec.restartPolicy") => str_at(obj, "/spec/restartPolicy"),
        (FieldSet::Pod, "status.podIP") => str_at(obj, "/status/podIPs/0/ip"),
        (FieldSet::Pod, "status.podIPs") => obj
            .pointer("/status/podIPs")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter().filter_map(|x| x.get("ip").and_then(Value::as_str)).collect::<Vec<_>>().join(",")
            })
            .unwrap_or_default(),
        (_, "source") => str_at(obj, "/source/component"),
        (_, f) => str_at(obj, &format!("/{}", f.replace('.', "/"))),
    }
}
