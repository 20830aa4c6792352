//! The body of the kubelet's `PATCH pods/{name}/status` (step 4 of `syncPod`): a two-way strategic
//! merge patch from the API server's status to the merged one, with `metadata.uid` always present
//! as a precondition. Upstream: `preparePatchBytesForPodStatus` in `pkg/util/pod/pod.go` and
//! `strategicpatch.CreateTwoWayMergePatch` in apimachinery, for `v1.Pod`.
//!
//! The diff works on the JSON forms (k8s-openapi leaves `None` fields out, as Go's `omitempty`
//! does):
//! * a field that changed is sent with its new value; a field present in the API copy but gone
//!   from the merged one is sent as `null` — the server merges objects field by field, so a
//!   cleared condition `reason` that is simply left out would keep its old value;
//! * objects are diffed field by field;
//! * the lists PodStatus merges by key (`conditions` by `type`, `podIPs` and `hostIPs` by `ip`)
//!   carry only new items (whole), changed items (their key, changed fields, `null` for removed
//!   ones) and `{"<key>": …, "$patch": "delete"}` for removed ones, plus a
//!   `$setElementOrder/<list>` with the keys of all merged items whenever anything about the
//!   list changed, so the server ends up with exactly the merged order;
//! * every other list is atomic and sent whole when it differs, never with `$setElementOrder`:
//!   v1.36 drops the connection on a directive for an atomic list (fixture 5).
//!
//! One deliberate difference from upstream: when a key occurs more than once in the API list
//! (the server does not reject duplicate condition types), upstream pairs the copies up by
//! position and its `$patch: delete` for the extra copy removes every item with that key,
//! leaving a partial item behind. Here a key with duplicates on either side that is not
//! unchanged is sent as a delete directive plus the merged items whole: the server applies
//! deletions first, so the result is the merged item.

use k8s_openapi::api::core::v1::PodStatus;
use serde_json::{Map, Value};

/// Prefix of the parallel list that fixes the order of a merge-keyed list.
pub const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder/";
/// The directive field of a list item.
pub const PATCH_DIRECTIVE: &str = "$patch";
/// `$patch` value that removes the items with the same key.
pub const DELETE_DIRECTIVE: &str = "delete";

/// The lists of `v1.PodStatus` with `patchStrategy:"merge"` and their `patchMergeKey`. Every
/// other list is atomic. `resourceClaimStatuses` is merge-keyed upstream too, but the merge
/// always copies it from the API status, so it never differs and is treated as atomic here.
pub const POD_STATUS_MERGE_KEYS: [(&str, &str); 3] =
    [("conditions", "type"), ("hostIPs", "ip"), ("podIPs", "ip")];

/// Why no patch could be built.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// A status did not serialise to JSON.
    #[error("failed to serialise pod status: {0}")]
    Serialize(#[from] serde_json::Error),
    /// A status serialised to something other than a JSON object.
    #[error("pod status did not serialise to a JSON object")]
    NotAnObject,
    /// An item of a merge-keyed list has no key (upstream `mergepatch.ErrNoMergeKey`).
    #[error("status.{list}: item {item} does not contain declared merge key: {key}")]
    MissingMergeKey {
        /// The list's field name.
        list: String,
        /// The merge key.
        key: &'static str,
        /// The offending item, as JSON.
        item: String,
    },
}

/// The kubelet's PATCH body for pods/status: the two-way strategic merge patch from
/// `{status: api}` to `{metadata: {uid}, status: merged}`, with `metadata.uid` always present as a
/// precondition. Returns `None` when the patch would contain only `metadata.uid` (nothing to
/// send: upstream's "Status for pod is up-to-date").
pub fn pod_status_patch(uid: &str, api: &PodStatus, merged: &PodStatus) -> Result<Option<Value>, PatchError> {
    pod_status_patch_json(uid, &serde_json::to_value(api)?, &serde_json::to_value(merged)?)
}

/// [`pod_status_patch`] from the JSON forms of the two statuses: a status as the server returned
/// it keeps the fields k8s-openapi's structs lack, and a field both sides carry unchanged is not
/// in the patch, whether the structs know it or not.
pub fn pod_status_patch_json(uid: &str, api: &Value, merged: &Value) -> Result<Option<Value>, PatchError> {
    let (Value::Object(api), Value::Object(merged)) = (api, merged) else {
        return Err(PatchError::NotAnObject);
    };
    let status = diff_maps(api, merged, &POD_STATUS_MERGE_KEYS)?;
    if status.is_empty() {
        return Ok(None);
    }
    let mut metadata = Map::new();
    metadata.insert("uid".to_owned(), Value::String(uid.to_owned()));
    let mut patch = Map::new();
    patch.insert("metadata".to_owned(), Value::Object(metadata));
    patch.insert("status".to_owned(), Value::Object(status));
    Ok(Some(Value::Object(patch)))
}

/// The conditions part of a status patch, sent alone: `metadata.uid` (still a precondition),
/// `status.conditions` and its `$setElementOrder`, nothing else, and so no resourceVersion
/// precondition. `None` when the patch does not touch the conditions.
///
/// The conditions merge by type on the server: the part carries only the changed items of the
/// types the merge changed (the owned ones), so a condition of another type, newer on the server
/// than the copy the patch was computed from, is left as the server holds it, and the container
/// status lists (atomic, the runtime's) are not in it at all (docs/sync.md §7.5).
pub fn conditions_only(patch: &Value) -> Option<Value> {
    let status = patch.get("status")?.as_object()?;
    let order = format!("{SET_ELEMENT_ORDER_PREFIX}conditions");
    let conditions: Map<String, Value> = status
        .iter()
        .filter(|(field, _)| *field == "conditions" || **field == order)
        .map(|(field, value)| (field.clone(), value.clone()))
        .collect();
    if conditions.is_empty() {
        return None;
    }
    let mut metadata = Map::new();
    if let Some(uid) = patch.get("metadata").and_then(|m| m.get("uid")) {
        metadata.insert("uid".to_owned(), uid.clone());
    }
    let mut alone = Map::new();
    alone.insert("metadata".to_owned(), Value::Object(metadata));
    alone.insert("status".to_owned(), Value::Object(conditions));
    Some(Value::Object(alone))
}

fn merge_key(merge_keys: &[(&str, &'static str)], field: &str) -> Option<&'static str> {
    merge_keys.iter().find(|(list, _)| *list == field).map(|(_, key)| *key)
}

/// Upstream `diffMaps`: the fields of `modified` that are new or changed, and `null` for the
/// fields `modified` lacks. `merge_keys` names the merge-keyed lists at this level only; the
/// PodStatus types have none deeper down.
fn diff_maps(
    original: &Map<String, Value>,
    modified: &Map<String, Value>,
    merge_keys: &[(&str, &'static str)],
) -> Result<Map<String, Value>, PatchError> {
    let mut patch = Map::new();
    for (field, new) in modified {
        let Some(old) = original.get(field) else {
            patch.insert(field.clone(), new.clone());
            continue;
        };
        match (old, new) {
            (Value::Object(old), Value::Object(new)) => {
                let nested = diff_maps(old, new, &[])?;
                if !nested.is_empty() {
                    patch.insert(field.clone(), Value::Object(nested));
                }
            }
            (Value::Array(old), Value::Array(new)) => match merge_key(merge_keys, field) {
                Some(key) => diff_keyed_list(field, key, old, new, &mut patch)?,
                None if old != new => {
                    patch.insert(field.clone(), Value::Array(new.clone()));
                }
                None => {}
            },
            _ if old != new => {
                patch.insert(field.clone(), new.clone());
            }
            _ => {}
        }
    }
    for field in original.keys() {
        if !modified.contains_key(field) {
            patch.insert(field.clone(), Value::Null);
        }
    }
    Ok(patch)
}

/// Upstream `handleSliceDiff` → `diffLists` for a list of objects merged by `key`. Writes the
/// patch list (new and changed items in `modified` order, then delete directives) and the
/// `$setElementOrder` list into `patch`.
fn diff_keyed_list(
    field: &str,
    key: &'static str,
    original: &[Value],
    modified: &[Value],
    patch: &mut Map<String, Value>,
) -> Result<(), PatchError> {
    // Upstream: an empty original gets the modified list whole, without a directive.
    if original.is_empty() {
        if !modified.is_empty() {
            patch.insert(field.to_owned(), Value::Array(modified.to_vec()));
        }
        return Ok(());
    }
    let original = keyed_items(field, key, original)?;
    let modified = keyed_items(field, key, modified)?;
    let mut items = Vec::new();
    let mut deletions: Vec<&Value> = Vec::new();
    for item in &modified {
        let old = with_key(&original, item.key);
        let new = with_key(&modified, item.key);
        match (old.as_slice(), new.as_slice()) {
            ([], _) => items.push(Value::Object(item.fields.clone())),
            ([old], [_]) => {
                let mut changed = diff_maps(old, item.fields, &[])?;
                if !changed.is_empty() {
                    changed.insert(key.to_owned(), item.key.clone());
                    items.push(Value::Object(changed));
                }
            }
            // Duplicates on either side (see the module doc): unchanged copies send nothing;
            // otherwise delete every copy and send the merged ones whole.
            _ if old != new => {
                if !deletions.contains(&item.key) {
                    deletions.push(item.key);
                }
                items.push(Value::Object(item.fields.clone()));
            }
            _ => {}
        }
    }
    let mut removed: Vec<&Value> = Vec::new();
    for item in &original {
        if !modified.iter().any(|m| m.key == item.key) && !removed.contains(&item.key) {
            removed.push(item.key);
        }
    }
    // Upstream walks both lists sorted by key, so its delete directives come in key order.
    removed.sort_by_key(|k| key_string(k));
    deletions.extend(removed);

    let order_same =
        original.len() == modified.len() && original.iter().zip(&modified).all(|(o, m)| o.key == m.key);
    let changed = !items.is_empty() || !deletions.is_empty();
    items.extend(deletions.iter().map(|k| delete_directive(key, k)));
    if !items.is_empty() {
        patch.insert(field.to_owned(), Value::Array(items));
    }
    // Upstream builds the directive from every modified item, and leaves it out when that is
    // an empty list.
    if (changed || !order_same) && !modified.is_empty() {
        let order = modified.iter().map(|item| key_only(key, item.key)).collect();
        patch.insert(format!("{SET_ELEMENT_ORDER_PREFIX}{field}"), Value::Array(order));
    }
    Ok(())
}

/// An item of a merge-keyed list: its merge-key value and its fields.
struct Keyed<'a> {
    key: &'a Value,
    fields: &'a Map<String, Value>,
}

/// The fields of every item with merge-key value `k`, in list order.
fn with_key<'a>(items: &[Keyed<'a>], k: &Value) -> Vec<&'a Map<String, Value>> {
    items.iter().filter(|item| item.key == k).map(|item| item.fields).collect()
}

/// Each item with its merge-key value, or the error upstream gives for an item without one.
fn keyed_items<'a>(field: &str, key: &'static str, items: &'a [Value]) -> Result<Vec<Keyed<'a>>, PatchError> {
    items
        .iter()
        .map(|item| match item.as_object().and_then(|fields| Some((fields.get(key)?, fields))) {
            Some((k, fields)) if !k.is_null() => Ok(Keyed { key: k, fields }),
            _ => Err(PatchError::MissingMergeKey { list: field.to_owned(), key, item: item.to_string() }),
        })
        .collect()
}

/// Upstream sorts by `fmt.Sprintf("%v", key)`; for the string keys of PodStatus that is the string.
fn key_string(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn key_only(key: &str, k: &Value) -> Value {
    let mut item = Map::new();
    item.insert(key.to_owned(), k.clone());
    Value::Object(item)
}

fn delete_directive(key: &str, k: &Value) -> Value {
    let mut item = Map::new();
    item.insert(key.to_owned(), k.clone());
    item.insert(PATCH_DIRECTIVE.to_owned(), Value::String(DELETE_DIRECTIVE.to_owned()));
    Value::Object(item)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use crate::status::merge::merge_pod_status;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateWaiting, ContainerStatus, HostIP, PodCondition,
        PodIP,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use proptest::prelude::*;
    use serde_json::json;

    const UID: &str = "UID-1";

    // === a strategic-merge apply, the server's side ===

    /// What the API server does with a status patch (apimachinery `mergeMap`/`mergeSlice`,
    /// checked against the recorded cases in [`server_replay_matches_the_recording`]): objects
    /// merge field by field and `null` removes a field; merge-keyed lists apply `$patch: delete`
    /// first, merge items by key, then order the result (see [`order_merged`]); other lists and
    /// scalars are replaced.
    fn apply(server: &Value, patch: &Value) -> Value {
        let mut status = server.as_object().unwrap().clone();
        apply_map(&mut status, patch["status"].as_object().unwrap(), &POD_STATUS_MERGE_KEYS);
        Value::Object(status)
    }

    fn apply_map(
        target: &mut Map<String, Value>,
        patch: &Map<String, Value>,
        merge_keys: &[(&str, &'static str)],
    ) {
        for (field, value) in patch {
            if let Some(list) = field.strip_prefix(SET_ELEMENT_ORDER_PREFIX) {
                // A directive without its list only reorders.
                if !patch.contains_key(list) {
                    let key = merge_key(merge_keys, list).unwrap();
                    if let Some(Value::Array(items)) = target.get(list) {
                        let reordered = merge_keyed_list(items, &[], Some(value), key);
                        target.insert(list.to_owned(), Value::Array(reordered));
                    }
                }
                continue;
            }
            if value.is_null() {
                target.remove(field);
                continue;
            }
            match (merge_key(merge_keys, field), value) {
                (Some(key), Value::Array(items)) => {
                    let order = patch.get(&format!("{SET_ELEMENT_ORDER_PREFIX}{field}"));
                    let server = target.get(field).and_then(Value::as_array).cloned().unwrap_or_default();
                    target.insert(field.clone(), Value::Array(merge_keyed_list(&server, items, order, key)));
                }
                (_, Value::Object(fields)) => {
                    let entry = target.entry(field.clone()).or_insert_with(|| json!({}));
                    if !entry.is_object() {
                        *entry = json!({});
                    }
                    apply_map(entry.as_object_mut().unwrap(), fields, &[]);
                }
                _ => {
                    target.insert(field.clone(), value.clone());
                }
            }
        }
    }

    fn merge_keyed_list(server: &[Value], patch: &[Value], order: Option<&Value>, key: &str) -> Vec<Value> {
        let is_delete = |item: &Value| item.get(PATCH_DIRECTIVE).is_some_and(|d| d == DELETE_DIRECTIVE);
        let mut list = server.to_vec();
        for item in patch.iter().filter(|i| is_delete(i)) {
            list.retain(|s| s[key] != item[key]);
        }
        let mut patch_keys = Vec::new();
        for item in patch.iter().filter(|i| !is_delete(i)) {
            patch_keys.push(item[key].clone());
            match list.iter_mut().find(|s| s[key] == item[key]) {
                Some(existing) => {
                    apply_map(existing.as_object_mut().unwrap(), item.as_object().unwrap(), &[])
                }
                None => {
                    let mut fresh = Map::new();
                    apply_map(&mut fresh, item.as_object().unwrap(), &[]);
                    list.push(Value::Object(fresh));
                }
            }
        }
        let order_keys = match order {
            Some(order) => order.as_array().unwrap().iter().map(|o| o[key].clone()).collect(),
            None => patch_keys,
        };
        let server_keys: Vec<Value> = server.iter().map(|s| s[key].clone()).collect();
        order_merged(list, &order_keys, &server_keys, key)
    }

    /// apimachinery `normalizeElementOrder` + `mergeSortedSlice`: the items named by the order
    /// (`$setElementOrder`, else the patch list) in that order; the server-only items, in server
    /// order, are slotted in before the first ordered item that comes after them on the server
    /// (an ordered item the server did not have counts as "not after": it goes first).
    fn order_merged(list: Vec<Value>, order: &[Value], server_order: &[Value], key: &str) -> Vec<Value> {
        let position = |keys: &[Value], item: &Value| keys.iter().position(|k| *k == item[key]);
        let (mut ordered, server_only): (Vec<Value>, Vec<Value>) =
            list.into_iter().partition(|item| position(order, item).is_some());
        ordered.sort_by_key(|item| position(order, item));
        let mut out = Vec::new();
        let (mut left, mut right) = (server_only.into_iter().peekable(), ordered.into_iter().peekable());
        loop {
            match (left.peek(), right.peek()) {
                (None, None) => break,
                (Some(_), None) => out.extend(left.next()),
                (None, Some(_)) => out.extend(right.next()),
                (Some(l), Some(r)) => {
                    let before = match (position(server_order, l), position(server_order, r)) {
                        (Some(li), Some(ri)) => li < ri,
                        _ => false,
                    };
                    out.extend(if before { left.next() } else { right.next() });
                }
            }
        }
        out
    }

    /// Requests and results recorded from kube-apiserver v1.36.2
    /// (`fixtures/apiserver/pod-status-patches.json`, nulls the server prints for unset fields
    /// dropped): one `{case, before, patch, after}` per line, `patch` being the body's `status`.
    /// Steps whose result depends on the podIP → podIPs conversion are left out.
    const SERVER_RECORDING: &str = r#"
{"case":"1a/patch","before":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"},"patch":{"$setElementOrder/conditions":[{"type":"Ready"},{"type":"ContainersReady"},{"type":"PodScheduled"}],"conditions":[{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"ContainersReady","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"}]},"after":{"phase":"Pending","conditions":[{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"ContainersReady","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"}}
{"case":"1b/patch","before":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"},"patch":{"$setElementOrder/conditions":[{"type":"Ready"},{"type":"ContainersReady"},{"type":"PodScheduled"},{"type":"example.com/feature"}],"conditions":[{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"ContainersReady","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"}]},"after":{"phase":"Pending","conditions":[{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"ContainersReady","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"}}
{"case":"1c/patch","before":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"},"patch":{"$setElementOrder/conditions":[{"type":"Ready"},{"type":"ContainersReady"}],"conditions":[{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"ContainersReady","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"}]},"after":{"phase":"Pending","conditions":[{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"ContainersReady","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"}}
{"case":"1d/patch","before":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"},"patch":{"$setElementOrder/conditions":[{"type":"PodScheduled"},{"type":"Ready"},{"type":"ContainersReady"}],"conditions":[{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"ContainersReady","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"}]},"after":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"ContainersReady","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"}}
{"case":"1e/patch","before":{"phase":"Pending","conditions":[{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"},{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"}],"qosClass":"BestEffort"},"patch":{"$setElementOrder/conditions":[{"type":"Ready"},{"type":"ContainersReady"},{"type":"PodScheduled"}],"conditions":[{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"ContainersReady","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"}]},"after":{"phase":"Pending","conditions":[{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"ContainersReady","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"},{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"}],"qosClass":"BestEffort"}}
{"case":"2a/patch","before":{"phase":"Running","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"ContainersReady","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"},"patch":{"$setElementOrder/conditions":[{"type":"PodScheduled"},{"type":"Ready"},{"type":"ContainersReady"},{"type":"example.com/feature"}],"conditions":[{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"}]},"after":{"phase":"Running","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"},{"type":"ContainersReady","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"}}
{"case":"2b/patch-without-reason","before":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"False","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"}],"qosClass":"BestEffort"},"patch":{"$setElementOrder/conditions":[{"type":"PodScheduled"},{"type":"Ready"}],"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z"}]},"after":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"}],"qosClass":"BestEffort"}}
{"case":"2b/patch-null-reason-message","before":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z","reason":"ContainersNotReady","message":"containers with unready status: [app]"}],"qosClass":"BestEffort"},"patch":{"$setElementOrder/conditions":[{"type":"PodScheduled"},{"type":"Ready"}],"conditions":[{"type":"Ready","reason":null,"message":null}]},"after":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z"}],"qosClass":"BestEffort"}}
{"case":"3/patch","before":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"},"patch":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z"}]},"after":{"phase":"Pending","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z"},{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"}}
{"case":"3/patch-update-existing-first","before":{"phase":"Pending","conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z"},{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"},"patch":{"conditions":[{"type":"Initialized","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z"},{"type":"PodScheduled","status":"False"}]},"after":{"phase":"Pending","conditions":[{"type":"Initialized","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z"},{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:01:00Z"},{"type":"PodScheduled","status":"False","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"}}
{"case":"4/delete-existing","before":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"ContainersReady","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"example.com/feature","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z","reason":"FeatureOn","message":"set by an external controller"}],"qosClass":"BestEffort"},"patch":{"conditions":[{"type":"example.com/feature","$patch":"delete"}]},"after":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"ContainersReady","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"}],"qosClass":"BestEffort"}}
{"case":"4/delete-missing","before":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"ContainersReady","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"}],"qosClass":"BestEffort"},"patch":{"conditions":[{"type":"example.com/absent","$patch":"delete"}]},"after":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"ContainersReady","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"}],"qosClass":"BestEffort"}}
{"case":"4/delete-with-setelementorder","before":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"Ready","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"ContainersReady","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"}],"qosClass":"BestEffort"},"patch":{"$setElementOrder/conditions":[{"type":"PodScheduled"},{"type":"ContainersReady"}],"conditions":[{"type":"Ready","$patch":"delete"}]},"after":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"},{"type":"ContainersReady","status":"True","lastTransitionTime":"2025-01-01T00:00:00Z"}],"qosClass":"BestEffort"}}
{"case":"5/patch","before":{"phase":"Pending","containerStatuses":[{"name":"app","state":{"waiting":{"reason":"ContainerCreating"}},"lastState":{},"ready":false,"restartCount":0,"image":"registry.k8s.io/pause:3.10","imageID":""},{"name":"sidecar","state":{"waiting":{"reason":"ContainerCreating"}},"lastState":{},"ready":false,"restartCount":0,"image":"registry.k8s.io/pause:3.10","imageID":""}],"qosClass":"BestEffort"},"patch":{"containerStatuses":[{"name":"app","ready":true,"restartCount":0,"image":"registry.k8s.io/pause:3.10","imageID":"registry.k8s.io/pause:3.10@sha256:0000000000000000000000000000000000000000000000000000000000000000","state":{"running":{"startedAt":"2025-01-01T00:00:00Z"}},"containerID":"containerd://app-0001","started":true}]},"after":{"phase":"Pending","containerStatuses":[{"name":"app","state":{"running":{"startedAt":"2025-01-01T00:00:00Z"}},"lastState":{},"ready":true,"restartCount":0,"image":"registry.k8s.io/pause:3.10","imageID":"registry.k8s.io/pause:3.10@sha256:0000000000000000000000000000000000000000000000000000000000000000","containerID":"containerd://app-0001","started":true}],"qosClass":"BestEffort"}}
{"case":"6/patch","before":{"phase":"Pending","initContainerStatuses":[{"name":"init-a","state":{"waiting":{"reason":"ContainerCreating"}},"lastState":{},"ready":false,"restartCount":0,"image":"registry.k8s.io/pause:3.10","imageID":""},{"name":"init-b","state":{"waiting":{"reason":"ContainerCreating"}},"lastState":{},"ready":false,"restartCount":0,"image":"registry.k8s.io/pause:3.10","imageID":""}],"containerStatuses":[{"name":"app","state":{"waiting":{"reason":"ContainerCreating"}},"lastState":{},"ready":false,"restartCount":0,"image":"registry.k8s.io/pause:3.10","imageID":""}],"qosClass":"BestEffort"},"patch":{"initContainerStatuses":[{"name":"init-a","ready":false,"restartCount":0,"image":"registry.k8s.io/pause:3.10","imageID":"","state":{"terminated":{"exitCode":0,"reason":"Completed","startedAt":"2025-01-01T00:00:00Z","finishedAt":"2025-01-01T00:01:00Z","containerID":"containerd://init-a-0001"}},"containerID":"containerd://init-a-0001"}]},"after":{"phase":"Pending","initContainerStatuses":[{"name":"init-a","state":{"terminated":{"exitCode":0,"reason":"Completed","startedAt":"2025-01-01T00:00:00Z","finishedAt":"2025-01-01T00:01:00Z","containerID":"containerd://init-a-0001"}},"lastState":{},"ready":false,"restartCount":0,"image":"registry.k8s.io/pause:3.10","imageID":"","containerID":"containerd://init-a-0001"}],"containerStatuses":[{"name":"app","state":{"waiting":{"reason":"ContainerCreating"}},"lastState":{},"ready":false,"restartCount":0,"image":"registry.k8s.io/pause:3.10","imageID":""}],"qosClass":"BestEffort"}}
{"case":"7/podips-hostips-add-ipv6-with-order","before":{"phase":"Running","hostIP":"192.168.0.10","hostIPs":[{"ip":"192.168.0.10"}],"podIP":"10.244.0.5","podIPs":[{"ip":"10.244.0.5"}],"qosClass":"BestEffort"},"patch":{"$setElementOrder/podIPs":[{"ip":"10.244.0.5"},{"ip":"fd00:10:244::5"}],"podIPs":[{"ip":"fd00:10:244::5"}],"$setElementOrder/hostIPs":[{"ip":"192.168.0.10"},{"ip":"fd00:192:168::10"}],"hostIPs":[{"ip":"fd00:192:168::10"}]},"after":{"phase":"Running","hostIP":"192.168.0.10","hostIPs":[{"ip":"192.168.0.10"},{"ip":"fd00:192:168::10"}],"podIP":"10.244.0.5","podIPs":[{"ip":"10.244.0.5"},{"ip":"fd00:10:244::5"}],"qosClass":"BestEffort"}}
{"case":"8/null-message","before":{"phase":"Running","message":"waiting for things","reason":"Waiting","podIP":"10.244.0.9","podIPs":[{"ip":"10.244.0.9"}],"startTime":"2025-01-01T00:00:00Z","qosClass":"BestEffort"},"patch":{"message":null,"reason":null},"after":{"phase":"Running","podIP":"10.244.0.9","podIPs":[{"ip":"10.244.0.9"}],"startTime":"2025-01-01T00:00:00Z","qosClass":"BestEffort"}}
"#;

    #[test]
    fn server_replay_matches_the_recording() {
        for line in SERVER_RECORDING.lines().filter(|l| !l.trim().is_empty()) {
            let step: Value = serde_json::from_str(line).unwrap();
            let got = apply(&step["before"], &json!({ "status": step["patch"] }));
            assert_eq!(
                without_defaults(got),
                without_defaults(step["after"].clone()),
                "case: {}",
                step["case"]
            );
        }
    }

    /// Drops the `lastState: {}` the server fills into every container status (a Go struct
    /// field without `omitempty`): defaulting, not merging.
    fn without_defaults(mut status: Value) -> Value {
        for list in ["containerStatuses", "initContainerStatuses"] {
            for item in status.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
                if item.get("lastState") == Some(&json!({})) {
                    item.as_object_mut().unwrap().remove("lastState");
                }
            }
        }
        status
    }

    // === table tests ===

    fn status(value: Value) -> PodStatus {
        serde_json::from_value(value).unwrap()
    }

    fn cond(type_: &str, status: &str, at: &str) -> Value {
        json!({ "type": type_, "status": status, "lastTransitionTime": at })
    }

    fn cond_why(type_: &str, status: &str, at: &str, reason: &str, message: &str) -> Value {
        json!({ "type": type_, "status": status, "lastTransitionTime": at, "reason": reason, "message": message })
    }

    fn order(key: &str, keys: &[&str]) -> Value {
        Value::Array(keys.iter().map(|k| json!({ key: k })).collect())
    }

    const T0: &str = "2025-01-01T00:00:00Z";
    const T1: &str = "2025-01-01T00:01:00Z";
    const UNREADY: &str = "containers with unready status: [app]";

    fn scheduled() -> Value {
        cond("PodScheduled", "True", T0)
    }

    fn feature() -> Value {
        cond_why("example.com/feature", "True", T0, "FeatureOn", "set by an external controller")
    }

    fn not_ready(type_: &str) -> Value {
        cond_why(type_, "False", T1, "ContainersNotReady", UNREADY)
    }

    fn container(name: &str, ready: bool, state: Value) -> Value {
        json!({ "name": name, "ready": ready, "restartCount": 0, "image": "registry.k8s.io/pause:3.10",
                "imageID": "", "state": state })
    }

    struct Case {
        name: &'static str,
        api: Value,
        merged: Value,
        /// The `status` part of the patch; `None`: nothing to send.
        want: Option<Value>,
    }

    fn cases() -> Vec<Case> {
        let waiting = json!({ "waiting": { "reason": "ContainerCreating" } });
        let running = json!({ "running": { "startedAt": T0 } });
        vec![
            Case {
                name: "1b: new kubelet conditions, foreign one last, kubelet-style order",
                api: json!({ "phase": "Pending", "conditions": [scheduled(), feature()], "qosClass": "BestEffort" }),
                merged: json!({ "phase": "Pending", "qosClass": "BestEffort", "conditions":
                    [not_ready("Ready"), not_ready("ContainersReady"), scheduled(), feature()] }),
                want: Some(json!({
                    "$setElementOrder/conditions":
                        order("type", &["Ready", "ContainersReady", "PodScheduled", "example.com/feature"]),
                    "conditions": [not_ready("Ready"), not_ready("ContainersReady")],
                })),
            },
            Case {
                name: "1d: new conditions after PodScheduled, foreign last",
                api: json!({ "conditions": [scheduled(), feature()] }),
                merged: json!({ "conditions":
                    [scheduled(), not_ready("Ready"), not_ready("ContainersReady"), feature()] }),
                want: Some(json!({
                    "$setElementOrder/conditions":
                        order("type", &["PodScheduled", "Ready", "ContainersReady", "example.com/feature"]),
                    "conditions": [not_ready("Ready"), not_ready("ContainersReady")],
                })),
            },
            Case {
                name: "1e: foreign first on the server and in merged (mergePodStatus order)",
                api: json!({ "conditions": [feature(), scheduled()] }),
                merged: json!({ "conditions":
                    [feature(), scheduled(), not_ready("Ready"), not_ready("ContainersReady")] }),
                want: Some(json!({
                    "$setElementOrder/conditions":
                        order("type", &["example.com/feature", "PodScheduled", "Ready", "ContainersReady"]),
                    "conditions": [not_ready("Ready"), not_ready("ContainersReady")],
                })),
            },
            Case {
                name: "2a: only Ready changes, with reason and message",
                api: json!({ "phase": "Running", "conditions": [scheduled(), cond("Ready", "True", T0),
                    cond("ContainersReady", "True", T0), feature()] }),
                merged: json!({ "phase": "Running", "conditions": [scheduled(), not_ready("Ready"),
                    cond("ContainersReady", "True", T0), feature()] }),
                want: Some(json!({
                    "$setElementOrder/conditions":
                        order("type", &["PodScheduled", "Ready", "ContainersReady", "example.com/feature"]),
                    "conditions": [{ "type": "Ready", "status": "False", "lastTransitionTime": T1,
                        "reason": "ContainersNotReady", "message": UNREADY }],
                })),
            },
            Case {
                name: "2b: reason and message cleared are sent as null",
                api: json!({ "conditions": [scheduled(), cond_why("Ready", "False", T0, "ContainersNotReady", UNREADY)] }),
                merged: json!({ "conditions": [scheduled(), cond("Ready", "True", T1)] }),
                want: Some(json!({
                    "$setElementOrder/conditions": order("type", &["PodScheduled", "Ready"]),
                    "conditions": [{ "type": "Ready", "status": "True", "lastTransitionTime": T1,
                        "reason": null, "message": null }],
                })),
            },
            Case {
                name: "3: first conditions on a pod without any: the whole list, no directive",
                api: json!({ "phase": "Pending" }),
                merged: json!({ "phase": "Pending", "conditions": [scheduled(), cond("Ready", "True", T1)] }),
                want: Some(json!({ "conditions": [scheduled(), cond("Ready", "True", T1)] })),
            },
            Case {
                name: "3: a condition appended after existing ones",
                api: json!({ "conditions": [scheduled(), feature()] }),
                merged: json!({ "conditions": [scheduled(), feature(), cond("Ready", "True", T1)] }),
                want: Some(json!({
                    "$setElementOrder/conditions": order("type", &["PodScheduled", "example.com/feature", "Ready"]),
                    "conditions": [cond("Ready", "True", T1)],
                })),
            },
            Case {
                name: "4: removed condition is a delete directive",
                api: json!({ "conditions": [scheduled(), cond("Ready", "True", T0), cond("ContainersReady", "True", T0)] }),
                merged: json!({ "conditions": [scheduled(), cond("ContainersReady", "True", T0)] }),
                want: Some(json!({
                    "$setElementOrder/conditions": order("type", &["PodScheduled", "ContainersReady"]),
                    "conditions": [{ "type": "Ready", "$patch": "delete" }],
                })),
            },
            Case {
                name: "4: changed item first, delete directives last in key order",
                api: json!({ "conditions": [cond("Ready", "True", T0), cond("b.io/x", "True", T0),
                    cond("a.io/x", "True", T0)] }),
                merged: json!({ "conditions": [cond("Ready", "False", T1)] }),
                want: Some(json!({
                    "$setElementOrder/conditions": order("type", &["Ready"]),
                    "conditions": [{ "type": "Ready", "status": "False", "lastTransitionTime": T1 },
                        { "type": "a.io/x", "$patch": "delete" }, { "type": "b.io/x", "$patch": "delete" }],
                })),
            },
            Case {
                name: "conditions all gone: the field is nulled",
                api: json!({ "conditions": [scheduled()] }),
                merged: json!({}),
                want: Some(json!({ "conditions": null })),
            },
            Case {
                name: "conditions emptied: deletions only, no empty directive",
                api: json!({ "conditions": [scheduled()] }),
                merged: json!({ "conditions": [] }),
                want: Some(json!({ "conditions": [{ "type": "PodScheduled", "$patch": "delete" }] })),
            },
            Case {
                name: "order only: the directive alone",
                api: json!({ "conditions": [scheduled(), feature()] }),
                merged: json!({ "conditions": [feature(), scheduled()] }),
                want: Some(json!({
                    "$setElementOrder/conditions": order("type", &["example.com/feature", "PodScheduled"]),
                })),
            },
            Case {
                name: "duplicate type on the server: delete all copies, send the merged one whole",
                api: json!({ "conditions": [cond("Ready", "True", T0), scheduled(), cond("Ready", "False", T0)] }),
                merged: json!({ "conditions": [scheduled(), cond("Ready", "True", T1)] }),
                want: Some(json!({
                    "$setElementOrder/conditions": order("type", &["PodScheduled", "Ready"]),
                    "conditions": [cond("Ready", "True", T1), { "type": "Ready", "$patch": "delete" }],
                })),
            },
            Case {
                name: "duplicate type unchanged: nothing to send",
                api: json!({ "conditions": [feature(), feature(), scheduled()] }),
                merged: json!({ "conditions": [feature(), feature(), scheduled()] }),
                want: None,
            },
            Case {
                name: "5: containerStatuses replaced whole, never a directive",
                api: json!({ "phase": "Pending", "containerStatuses":
                    [container("app", false, waiting.clone()), container("sidecar", false, waiting.clone())] }),
                merged: json!({ "phase": "Pending", "containerStatuses": [container("app", true, running.clone())] }),
                want: Some(json!({ "containerStatuses": [container("app", true, running.clone())] })),
            },
            Case {
                name: "5: containerStatuses reordered: replaced whole",
                api: json!({ "containerStatuses":
                    [container("b", false, waiting.clone()), container("a", false, waiting.clone())] }),
                merged: json!({ "containerStatuses":
                    [container("a", false, waiting.clone()), container("b", false, waiting.clone())] }),
                want: Some(json!({ "containerStatuses":
                    [container("a", false, waiting.clone()), container("b", false, waiting.clone())] })),
            },
            Case {
                name: "6: initContainerStatuses replaced whole, containerStatuses untouched",
                api: json!({ "initContainerStatuses":
                    [container("init-a", false, waiting.clone()), container("init-b", false, waiting.clone())],
                    "containerStatuses": [container("app", false, waiting.clone())] }),
                merged: json!({ "initContainerStatuses": [container("init-a", false, running.clone())],
                    "containerStatuses": [container("app", false, waiting.clone())] }),
                want: Some(json!({ "initContainerStatuses": [container("init-a", false, running.clone())] })),
            },
            Case {
                name: "6: ephemeral and resource claim statuses are atomic too",
                api: json!({ "ephemeralContainerStatuses": [container("debug", false, waiting.clone())],
                    "resourceClaimStatuses": [{ "name": "gpu", "resourceClaimName": "gpu-1" }] }),
                merged: json!({ "ephemeralContainerStatuses": [container("debug", false, running.clone())],
                    "resourceClaimStatuses": [{ "name": "gpu", "resourceClaimName": "gpu-2" }] }),
                want: Some(json!({
                    "ephemeralContainerStatuses": [container("debug", false, running.clone())],
                    "resourceClaimStatuses": [{ "name": "gpu", "resourceClaimName": "gpu-2" }],
                })),
            },
            Case {
                name: "7: dual-stack podIPs and hostIPs added by ip",
                api: json!({ "phase": "Running", "podIP": "10.244.0.5", "podIPs": [{ "ip": "10.244.0.5" }],
                    "hostIP": "192.168.0.10", "hostIPs": [{ "ip": "192.168.0.10" }] }),
                merged: json!({ "phase": "Running", "podIP": "10.244.0.5",
                    "podIPs": [{ "ip": "10.244.0.5" }, { "ip": "fd00:10:244::5" }],
                    "hostIP": "192.168.0.10", "hostIPs": [{ "ip": "192.168.0.10" }, { "ip": "fd00:192:168::10" }] }),
                want: Some(json!({
                    "$setElementOrder/podIPs": order("ip", &["10.244.0.5", "fd00:10:244::5"]),
                    "podIPs": [{ "ip": "fd00:10:244::5" }],
                    "$setElementOrder/hostIPs": order("ip", &["192.168.0.10", "fd00:192:168::10"]),
                    "hostIPs": [{ "ip": "fd00:192:168::10" }],
                })),
            },
            Case {
                name: "7: IPv4 podIP removed, podIP moved",
                api: json!({ "podIP": "10.244.0.5", "podIPs": [{ "ip": "10.244.0.5" }, { "ip": "fd00:10:244::5" }] }),
                merged: json!({ "podIP": "fd00:10:244::5", "podIPs": [{ "ip": "fd00:10:244::5" }] }),
                want: Some(json!({
                    "podIP": "fd00:10:244::5",
                    "$setElementOrder/podIPs": order("ip", &["fd00:10:244::5"]),
                    "podIPs": [{ "ip": "10.244.0.5", "$patch": "delete" }],
                })),
            },
            Case {
                name: "8: phase, podIP, startTime set; reason and message nulled",
                api: json!({ "phase": "Pending", "message": "waiting for things", "reason": "Waiting",
                    "qosClass": "BestEffort" }),
                merged: json!({ "phase": "Running", "podIP": "10.244.0.9", "startTime": T0, "qosClass": "BestEffort" }),
                want: Some(json!({ "phase": "Running", "podIP": "10.244.0.9", "startTime": T0,
                    "message": null, "reason": null })),
            },
            Case {
                name: "nested object diffed field by field",
                api: json!({ "allocatedResources": { "cpu": "1", "memory": "1Gi" } }),
                merged: json!({ "allocatedResources": { "cpu": "2" } }),
                want: Some(json!({ "allocatedResources": { "cpu": "2", "memory": null } })),
            },
            Case {
                name: "unchanged: nothing to send",
                api: json!({ "phase": "Running", "conditions": [scheduled(), feature()], "podIPs": [{ "ip": "10.0.0.1" }],
                    "containerStatuses": [container("app", true, running.clone())], "startTime": T0 }),
                merged: json!({ "phase": "Running", "conditions": [scheduled(), feature()], "podIPs": [{ "ip": "10.0.0.1" }],
                    "containerStatuses": [container("app", true, running.clone())], "startTime": T0 }),
                want: None,
            },
            Case { name: "both empty: nothing to send", api: json!({}), merged: json!({}), want: None },
        ]
    }

    #[test]
    fn patches_like_the_kubelet() {
        for case in cases() {
            let (api, merged) = (status(case.api), status(case.merged));
            let got = pod_status_patch(UID, &api, &merged).unwrap();
            let want = case.want.map(|status| json!({ "metadata": { "uid": UID }, "status": status }));
            assert_eq!(got, want, "case: {}", case.name);
            // And the server, given that patch, ends up with exactly the merged status.
            let applied = got.map_or_else(|| to_value(&api), |patch| apply(&to_value(&api), &patch));
            assert_eq!(applied, to_value(&merged), "case (applied): {}", case.name);
        }
    }

    #[test]
    fn kubelet_merge_then_patch() {
        // The API copy as after fixture 1a's setup; the kubelet's status has PodScheduled and
        // two unready conditions. mergePodStatus keeps the foreign condition first.
        let api = status(json!({ "phase": "Pending", "conditions": [scheduled(), feature()] }));
        let new = status(json!({ "phase": "Pending", "conditions":
            [scheduled(), not_ready("Ready"), not_ready("ContainersReady")] }));
        let merged = merge_pod_status(&api, &new, true, Time(Timestamp::constant(60, 0)), None);
        let patch = pod_status_patch(UID, &api, &merged).unwrap().unwrap();
        assert_eq!(
            patch,
            json!({ "metadata": { "uid": UID }, "status": {
                "$setElementOrder/conditions":
                    order("type", &["example.com/feature", "PodScheduled", "Ready", "ContainersReady"]),
                "conditions": [not_ready("Ready"), not_ready("ContainersReady")],
            } })
        );
    }

    #[test]
    fn item_without_merge_key_is_an_error() {
        let api =
            json!({ "conditions": [{ "type": "Ready", "status": "True" }] }).as_object().unwrap().clone();
        let merged = json!({ "conditions": [{ "status": "True" }] }).as_object().unwrap().clone();
        let err = diff_maps(&api, &merged, &POD_STATUS_MERGE_KEYS).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"status.conditions: item {"status":"True"} does not contain declared merge key: type"#
        );
    }

    #[test]
    fn fields_the_structs_lack_are_diffed_like_any_other() {
        let item = |ready: bool| {
            json!({"name": "app", "ready": ready, "restartCount": 0, "image": "i", "imageID": "",
                   "volumeMounts": [{"name": "data", "mountPath": "/data",
                                     "volumeStatus": {"image": {"imageRef": "r@sha256:1"}}}]})
        };
        let api =
            json!({"phase": "Running", "futureStatusField": {"a": 1}, "containerStatuses": [item(false)]});
        assert_eq!(pod_status_patch_json(UID, &api, &api).unwrap(), None, "unchanged, unknown or not");
        let mut merged = api.clone();
        merged["containerStatuses"] = json!([item(true)]);
        assert_eq!(
            pod_status_patch_json(UID, &api, &merged).unwrap(),
            Some(json!({"metadata": {"uid": UID}, "status": {"containerStatuses": [item(true)]}})),
            "the atomic list is resent whole, its unknown fields included; other unknown fields are left alone"
        );
        assert!(matches!(pod_status_patch_json(UID, &json!([]), &merged), Err(PatchError::NotAnObject)));
    }

    fn to_value(status: &PodStatus) -> Value {
        serde_json::to_value(status).unwrap()
    }

    /// A readiness-only patch (containers and owned conditions) computed from a copy that is
    /// stale by then: the runtime has since changed a container's state and a condition of its
    /// own. The conditions part, sent alone without the resourceVersion, sets the owned
    /// conditions and leaves both of the runtime's changes as the server holds them.
    #[test]
    fn the_conditions_alone_leave_what_the_server_holds_newer_as_it_is() {
        let running = json!({ "running": { "startedAt": T0 } });
        let stale = json!({ "phase": "Running",
            "conditions": [scheduled(), not_ready("Ready"), not_ready("ContainersReady"),
                           cond("example.com/feature", "False", T0)],
            "containerStatuses": [container("app", false, running.clone())] });
        let mut merged = stale.clone();
        merged["conditions"][1] = cond("Ready", "True", T1);
        merged["conditions"][2] = cond("ContainersReady", "True", T1);
        merged["containerStatuses"][0]["ready"] = json!(true);
        let full = pod_status_patch_json(UID, &stale, &merged).unwrap().unwrap();
        let full = json!({ "metadata": { "uid": UID, "resourceVersion": "41" }, "status": full["status"] });

        let alone = conditions_only(&full).unwrap();
        assert_eq!(alone["metadata"], json!({ "uid": UID }), "no resourceVersion: {alone}");
        let mut keys: Vec<&String> = alone["status"].as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["$setElementOrder/conditions", "conditions"], "{alone}");
        assert!(
            alone["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["type"] == "Ready" || c["type"] == "ContainersReady"),
            "only the owned conditions that changed: {alone}"
        );

        // The server moved on since the copy: the runtime restarted the container and set its
        // own condition.
        let mut server = stale.clone();
        server["conditions"][3] = cond("example.com/feature", "True", T1);
        server["containerStatuses"][0]["state"] = json!({ "waiting": { "reason": "CrashLoopBackOff" } });
        let after = apply(&server, &alone);
        assert_eq!(after["conditions"][3], cond("example.com/feature", "True", T1), "the newer foreign one");
        assert_eq!(after["containerStatuses"], server["containerStatuses"], "the runtime's containers");
        assert_eq!(after["conditions"][1], cond("Ready", "True", T1));
        assert_eq!(after["conditions"][2], cond("ContainersReady", "True", T1));
        assert_eq!(after["phase"], "Running");

        // Nothing of the conditions changed: nothing to send alone.
        let containers_only = json!({ "metadata": { "uid": UID, "resourceVersion": "42" },
            "status": { "containerStatuses": merged["containerStatuses"] } });
        assert_eq!(conditions_only(&containers_only), None);
    }

    // === property: the server ends up with the merged status ===

    const CONDITION_TYPES: [&str; 9] = [
        "PodScheduled",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodReadyToStartContainers",
        "DisruptionTarget",
        "example.com/feature",
        "example.com/other",
        "x.io/gate",
    ];

    fn time() -> impl Strategy<Value = Option<Time>> {
        proptest::option::of((0i64..3).prop_map(|m| Time(Timestamp::constant(m * 60, 0))))
    }

    fn text(pool: &'static [&'static str]) -> impl Strategy<Value = Option<String>> {
        proptest::option::of(proptest::sample::select(pool).prop_map(str::to_owned))
    }

    /// Conditions with distinct types (the server keeps duplicates, but neither side makes them).
    fn conditions() -> impl Strategy<Value = Option<Vec<PodCondition>>> {
        let types =
            proptest::sample::subsequence(CONDITION_TYPES.to_vec(), 0..=CONDITION_TYPES.len()).prop_shuffle();
        let conditions = types.prop_flat_map(|types| {
            types
                .into_iter()
                .map(|type_| {
                    (
                        proptest::sample::select(&["True", "False", "Unknown"][..]),
                        text(&["ContainersNotReady", "PodCompleted", "FeatureOn"]),
                        text(&["containers with unready status: [app]", "set by an external controller"]),
                        time(),
                        time(),
                    )
                        .prop_map(move |(status, reason, message, transition, probe)| {
                            PodCondition {
                                type_: type_.to_owned(),
                                status: status.to_owned(),
                                reason,
                                message,
                                last_transition_time: transition,
                                last_probe_time: probe,
                                ..Default::default()
                            }
                        })
                })
                .collect::<Vec<_>>()
        });
        proptest::option::of(conditions)
    }

    fn ips<T: std::fmt::Debug>(
        pool: &'static [&'static str],
        make: fn(&str) -> T,
    ) -> impl Strategy<Value = Option<Vec<T>>> {
        proptest::option::of(
            proptest::sample::subsequence(pool, 0..=pool.len())
                .prop_shuffle()
                .prop_map(move |ips| ips.into_iter().map(make).collect()),
        )
    }

    fn container_statuses() -> impl Strategy<Value = Option<Vec<ContainerStatus>>> {
        let one = |name: &'static str| {
            (any::<bool>(), 0i32..3, proptest::option::of(any::<bool>()), any::<bool>()).prop_map(
                move |(ready, restart_count, started, running)| ContainerStatus {
                    name: name.to_owned(),
                    ready,
                    restart_count,
                    started,
                    image: "registry.k8s.io/pause:3.10".to_owned(),
                    state: Some(if running {
                        ContainerState {
                            running: Some(ContainerStateRunning { started_at: None }),
                            ..Default::default()
                        }
                    } else {
                        ContainerState {
                            waiting: Some(ContainerStateWaiting {
                                reason: Some("ContainerCreating".to_owned()),
                                message: None,
                            }),
                            ..Default::default()
                        }
                    }),
                    ..Default::default()
                },
            )
        };
        proptest::option::of(
            proptest::sample::subsequence(vec!["app", "sidecar", "web"], 0..=3)
                .prop_shuffle()
                .prop_flat_map(move |names| names.into_iter().map(one).collect::<Vec<_>>()),
        )
    }

    fn pod_status() -> impl Strategy<Value = PodStatus> {
        (
            conditions(),
            ips(&["10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2"], |ip| PodIP { ip: ip.to_owned() }),
            ips(&["192.168.0.1", "fd00:1::1"], |ip| HostIP { ip: ip.to_owned() }),
            container_statuses(),
            container_statuses(),
            text(&["Pending", "Running", "Succeeded", "Failed"]),
            text(&["Evicted", "Waiting"]),
            text(&["waiting for things", "evicted"]),
            text(&["10.0.0.1", "fd00::1"]),
            time(),
        )
            .prop_map(
                |(
                    conditions,
                    pod_ips,
                    host_ips,
                    containers,
                    inits,
                    phase,
                    reason,
                    message,
                    pod_ip,
                    start,
                )| {
                    PodStatus {
                        conditions,
                        pod_ips,
                        host_ips,
                        container_statuses: containers,
                        init_container_statuses: inits,
                        phase,
                        reason,
                        message,
                        pod_ip,
                        start_time: start,
                        qos_class: Some("BestEffort".to_owned()),
                        ..Default::default()
                    }
                },
            )
    }

    fn check_round_trip(api: &PodStatus, merged: &PodStatus) -> Result<(), TestCaseError> {
        let patch = pod_status_patch(UID, api, merged).unwrap();
        let applied = match &patch {
            Some(patch) => {
                prop_assert_eq!(&patch["metadata"], &json!({ "uid": UID }));
                let status = patch["status"].as_object().unwrap();
                prop_assert!(!status.is_empty());
                for (field, _) in status.iter().filter(|(f, _)| f.starts_with(SET_ELEMENT_ORDER_PREFIX)) {
                    let list = &field[SET_ELEMENT_ORDER_PREFIX.len()..];
                    prop_assert!(merge_key(&POD_STATUS_MERGE_KEYS, list).is_some(), "directive for {}", list);
                }
                apply(&to_value(api), patch)
            }
            None => to_value(api),
        };
        prop_assert_eq!(applied, to_value(merged));
        Ok(())
    }

    proptest! {
        #[test]
        fn applying_the_patch_gives_merged(api in pod_status(), merged in pod_status()) {
            check_round_trip(&api, &merged)?;
        }

        #[test]
        fn applying_the_patch_gives_kubelet_merge(
            api in pod_status(),
            new in pod_status(),
            could_run in any::<bool>(),
        ) {
            let merged = merge_pod_status(&api, &new, could_run, Time(Timestamp::constant(180, 0)), None);
            check_round_trip(&api, &merged)?;
        }

        #[test]
        fn same_status_sends_nothing(status in pod_status()) {
            prop_assert_eq!(pod_status_patch(UID, &status, &status).unwrap(), None);
        }
    }
}
