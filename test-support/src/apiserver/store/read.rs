//! Get and list: exact-version snapshots from the change history, `limit`/`continue` paging
//! and the resourceVersion rules of the watch cache.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::*;
use crate::apiserver::golang::quote;
use crate::apiserver::selectors::{FieldSelector, LabelSelector};
use crate::apiserver::validation::{ApiError, FieldError};

impl Store {
    pub fn get(&self, api: Api, ns: &str, name: &str, req: &Req) -> Outcome {
        if let Some(rv) = req.param("resourceVersion")
            && let Err(e) = parse_rv(rv)
        {
            return e.into();
        }
        match self.map(api.kind()).get(&(ns.to_string(), name.to_string())) {
            Some(o) => Outcome::Reply(Reply::object(200, &render(api, o), api.ty())),
            None => ApiError::not_found(&api.resource(), name).into(),
        }
    }

    /// The objects of `kind` as they were at version `rv`.
    fn snapshot_at(&self, kind: Kind, rv: u64) -> BTreeMap<Key, Value> {
        let mut m = self.map(kind).clone();
        for c in self.history.iter().rev().filter(|c| c.rv > rv && c.kind == kind) {
            let key = obj_key(&c.obj);
            match (&c.ty, &c.prev) {
                (ChangeType::Added, _) => {
                    m.remove(&key);
                }
                (_, Some(p)) => {
                    m.insert(key, p.clone());
                }
                (_, None) => {}
            }
        }
        m
    }

    pub fn list(&self, api: Api, ns: Option<&str>, req: &Req) -> Outcome {
        let fields = match FieldSelector::parse(req.param("fieldSelector").unwrap_or(""), api.field_set()) {
            Ok(f) => f,
            Err(e) => return ApiError::bad_request(e).into(),
        };
        let labels = match LabelSelector::parse(req.param("labelSelector").unwrap_or("")) {
            Ok(l) => l,
            Err(e) => return ApiError::bad_request(e).into(),
        };
        let rv_param = req.param("resourceVersion").filter(|s| !s.is_empty());
        let rv = match rv_param.map(parse_rv).transpose() {
            Ok(rv) => rv,
            Err(e) => return e.into(),
        };
        let rv_match = req.param("resourceVersionMatch").filter(|s| !s.is_empty());
        let limit: usize = req.param("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
        let continue_token = req.param("continue").filter(|s| !s.is_empty());

        if rv_match.is_some() && rv.is_none() {
            return ApiError::invalid(
                "meta.k8s.io",
                "ListOptions",
                "",
                &[FieldError::forbidden(
                    "resourceVersionMatch",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                )],
            )
            .into();
        }
        let (snapshot_rv, start_after) = match continue_token {
            Some(token) => match decode_continue(token) {
                Some((trv, key)) if trv >= self.floor => (trv, Some(key)),
                Some(_) => {
                    return ApiError::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.").into();
                }
                None => return ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)").into(),
            },
            None => match (rv, rv_match) {
                (Some(n), Some("Exact")) => {
                    if n < self.floor {
                        return ApiError::expired("The resourceVersion for the provided list is too old.").into();
                    }
                    if n > self.rv {
                        return too_large(n, self.rv).into();
                    }
                    (n, None)
                }
                (Some(n), _) if n > self.rv => return too_large(n, self.rv).into(),
                _ => (self.rv, None),
            },
        };
        let objects = if snapshot_rv == self.rv {
            self.map(api.kind()).clone()
        } else {
            self.snapshot_at(api.kind(), snapshot_rv)
        };
        let filtered = req.param("fieldSelector").is_some_and(|s| !s.is_empty())
            || req.param("labelSelector").is_some_and(|s| !s.is_empty());
        let mut items: Vec<(Key, Value)> = objects
            .into_iter()
            .filter(|(k, _)| start_after.as_ref().is_none_or(|s| k > s))
            .filter(|(k, _)| ns.is_none_or(|n| k.0 == n))
            .filter(|(_, o)| {
                fields.matches(o, api.field_set()) && labels.matches(o.pointer("/metadata/labels"))
            })
            .map(|(k, o)| (k, render(api, &o)))
            .collect();
        let mut meta = Map::new();
        meta.insert("resourceVersion".into(), json!(snapshot_rv.to_string()));
        if limit > 0 && items.len() > limit {
            let remaining = items.len() - limit;
            items.truncate(limit);
            if let Some((last, _)) = items.last() {
                meta.insert("continue".into(), json!(encode_continue(snapshot_rv, last)));
            }
            if !filtered {
                meta.insert("remainingItemCount".into(), json!(remaining));
            }
        }
        let items: Vec<Value> = items
            .into_iter()
            .map(|(_, mut o)| {
                if let Value::Object(m) = &mut o {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
                o
            })
            .collect();
        let list = json!({
            "kind": format!("{}List", api.kind_name()),
            "apiVersion": api.api_version(),
            "metadata": Value::Object(meta),
            "items": items,
        });
        Outcome::Reply(Reply::object(200, &list, api.list_ty()))
    }
}

pub(super) fn too_large(n: u64, current: u64) -> ApiError {
    ApiError {
        code: 504,
        reason: "Timeout",
        message: format!("Timeout: Too large resource version: {n}, current: {current}"),
        details: Some(
            json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
        ),
        retry_after: Some(1),
    }
}

pub(super) fn parse_rv(s: &str) -> Result<u64, ApiError> {
    s.parse::<u64>().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resource version: resourceVersion: Invalid value: {}: strconv.ParseUint: parsing {}: invalid syntax",
            quote(s),
            quote(s)
        ))
    })
}

fn encode_continue(rv: u64, key: &Key) -> String {
    let raw = format!("{rv}\u{0}{}\u{0}{}", key.0, key.1);
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn decode_continue(token: &str) -> Option<(u64, Key)> {
    if !token.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> =
        (0..token.len()).step_by(2).map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok()).collect();
    let raw = String::from_utf8(bytes?).ok()?;
    let mut parts = raw.split('\u{0}');
    let rv = parts.next()?.parse().ok()?;
    Some((rv, (parts.next()?.to_string(), parts.next()?.to_string())))
}
