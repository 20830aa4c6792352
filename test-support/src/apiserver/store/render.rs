//! How a stored object looks through each API: `kind`/`apiVersion` first, and the
//! core/v1 <-> events.k8s.io/v1 event conversion (both event APIs share one store).

use serde_json::{Map, Value, json};

use super::*;
use crate::apiserver::schema::{self, schemas};

/// The stored form of an object rendered for an API: kind and apiVersion added, events converted.
pub fn render(api: Api, stored: &Value) -> Value {
    let mut o = match api {
        Api::EventsV1 => {
            let v1 = core_event_to_v1(stored);
            schema::decode(&v1, api.ty()).map(|d| d.value).unwrap_or(v1)
        }
        _ => stored.clone(),
    };
    if let Value::Object(m) = &mut o {
        let mut out = Map::new();
        out.insert("kind".into(), json!(api.kind_name()));
        out.insert("apiVersion".into(), json!(api.api_version()));
        for (k, val) in std::mem::take(m) {
            if k != "kind" && k != "apiVersion" {
                out.insert(k, val);
            }
        }
        *m = out;
    }
    o
}

/// A decoded object of an API in its stored form.
pub(super) fn to_storage(api: Api, obj: Value) -> Value {
    let mut o = match api {
        Api::EventsV1 => {
            let core = v1_event_to_core(&obj);
            schema::decode(&core, &schemas().event_core).map(|d| d.value).unwrap_or(core)
        }
        _ => obj,
    };
    if let Value::Object(m) = &mut o {
        m.remove("kind");
        m.remove("apiVersion");
    }
    o
}

/// Re-encodes a stored object so that equal content compares equal.
pub(super) fn canonical(api: Api, obj: Value) -> Value {
    let ty = match api {
        Api::Pods => &schemas().pod,
        _ => &schemas().event_core,
    };
    let mut o = schema::decode(&obj, ty).map(|d| d.value).unwrap_or(obj);
    if let Value::Object(m) = &mut o {
        m.remove("kind");
        m.remove("apiVersion");
    }
    o
}

const EVENT_FIELD_MAP: [(&str, &str); 15] = [
    ("metadata", "metadata"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
    ("action", "action"),
    ("reason", "reason"),
    ("involvedObject", "regarding"),
    ("related", "related"),
    ("message", "note"),
    ("type", "type"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn core_event_to_v1(core: &Value) -> Value {
    let mut out = Map::new();
    for (c, n) in EVENT_FIELD_MAP {
        if let Some(val) = core.get(c) {
            out.insert(n.into(), val.clone());
        }
    }
    Value::Object(out)
}

fn v1_event_to_core(v1: &Value) -> Value {
    let mut out = Map::new();
    for (c, n) in EVENT_FIELD_MAP {
        if let Some(val) = v1.get(n) {
            out.insert(c.into(), val.clone());
        }
    }
    Value::Object(out)
}
