//! The four patch types kube-apiserver accepts, applied to JSON values.
//!
//! The strategic merge patch is a port of the apply half of `k8s.io/apimachinery`'s
//! `pkg/util/strategicpatch/patch.go` (v0.36): `$setElementOrder`, `$patch`, `$retainKeys`,
//! `$deleteFromPrimitiveList`, the server-side merge options (`MergeParallelList` and
//! `IgnoreUnmatchedNulls`), the list-order rules, and the places where Go compares uncomparable
//! values and panics (the real server then drops the connection). The JSON merge patch follows
//! RFC 7386, the JSON patch RFC 6902 (as `evanphx/json-patch` applies it), and server-side apply
//! is reduced to what a single field manager without conflicts sees.

use serde_json::{Map, Value};

use super::golang::fmt_v;
use super::schema::{Strategy, Ty};

const DIRECTIVE: &str = "$patch";
const SET_ORDER: &str = "$setElementOrder";
const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList";
const RETAIN_KEYS: &str = "$retainKeys";

/// Why a strategic merge patch failed.
#[derive(Debug, Clone, PartialEq)]
pub enum SmpError {
    /// Go returns this error; the server answers 500 with it (or 400/422 for the known ones).
    Failed { message: String, code: u16 },
    /// Go panics here; the server recovers and drops the connection without an answer.
    Panic(String),
}

fn fail(message: impl Into<String>) -> SmpError {
    SmpError::Failed { message: message.into(), code: 500 }
}

fn bad_request(message: &str) -> SmpError {
    SmpError::Failed { message: message.into(), code: 400 }
}

fn no_merge_key(m: &Map<String, Value>, key: &str) -> SmpError {
    fail(format!("map: {} does not contain declared merge key: {key}", fmt_v(&Value::Object(m.clone()))))
}

const ERR_BAD_SET_ORDER: &str = "invalid patch: $setElementOrder list must be a list";
const ERR_BAD_PRIMITIVE_LIST: &str = "invalid patch: $deleteFromPrimitiveList list must be a list";
const ERR_BAD_RETAIN_KEYS: &str = "invalid patch: $retainKeys patch format is wrong";

/// Go's `==` on two `interface{}` values: different dynamic types are unequal, two maps or two
/// slices panic.
fn go_eq(a: &Value, b: &Value) -> Result<bool, SmpError> {
    match (a, b) {
        (Value::Object(_), Value::Object(_)) => {
            Err(SmpError::Panic("runtime error: comparing uncomparable type map[string]interface {}".into()))
        }
        (Value::Array(_), Value::Array(_)) => {
            Err(SmpError::Panic("runtime error: comparing uncomparable type []interface {}".into()))
        }
        (Value::Number(x), Value::Number(y)) => Ok(x.is_f64() == y.is_f64() && x == y),
        _ => Ok(a == b),
    }
}

/// Using a value as a Go map key: maps and slices panic.
fn go_hashable(v: &Value) -> Result<(), SmpError> {
    match v {
        Value::Object(_) => {
            Err(SmpError::Panic("runtime error: hash of unhashable type map[string]interface {}".into()))
        }
        Value::Array(_) => {
            Err(SmpError::Panic("runtime error: hash of unhashable type []interface {}".into()))
        }
        _ => Ok(()),
    }
}

/// Applies a strategic merge patch the way the API server does
/// (`StrategicMergeMapPatch` with `MergeParallelList` and `IgnoreUnmatchedNulls`).
pub fn strategic_merge(original: &Value, patch: &Map<String, Value>, ty: &Ty) -> Result<Value, SmpError> {
    let orig = match original {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    merge_map(orig, patch.clone(), ty).map(Value::Object)
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    ty: &Ty,
) -> Result<Map<String, Value>, SmpError> {
    if let Some(d) = patch.get(DIRECTIVE).cloned() {
        return directive_in_map(&d, patch);
    }
    apply_retain_keys(&mut original, &mut patch)?;
    merge_set_element_order(&mut original, &mut patch, ty)?;

    // Go iterates a map in random order; sorting puts `$deleteFromPrimitiveList/x` before `x`.
    let keys: Vec<String> = patch.keys().cloned().collect();
    for key in keys {
        let Some(patch_v) = patch.remove(&key) else { continue };
        let (k, is_delete_list) = match key.strip_prefix(DELETE_PRIMITIVE) {
            Some(rest) => match rest.strip_prefix('/') {
                Some(k) if !k.is_empty() => (k.to_string(), true),
                _ => return Err(bad_request(ERR_BAD_PRIMITIVE_LIST)),
            },
            None => (key.clone(), false),
        };
        if patch_v.is_null() {
            original.remove(&k);
            continue;
        }
        let Some(orig_v) = original.get(&k).cloned() else {
            if !is_delete_list {
                let mut v = patch_v;
                discard_nulls(&mut v);
                match remove_directives(v) {
                    Some(v) => {
                        original.insert(k, v);
                    }
                    None => {
                        original.remove(&k);
                    }
                }
            }
            continue;
        };
        let same_type = matches!(
            (&orig_v, &patch_v),
            (Value::Object(_), Value::Object(_))
                | (Value::Array(_), Value::Array(_))
                | (Value::String(_), Value::String(_))
                | (Value::Bool(_), Value::Bool(_))
        ) || matches!((&orig_v, &patch_v), (Value::Number(a), Value::Number(b)) if a.is_f64() == b.is_f64());
        if !same_type {
            if !is_delete_list {
                let mut v = patch_v;
                discard_nulls(&mut v);
                match remove_directives(v) {
                    Some(v) => {
                        original.insert(k, v);
                    }
                    None => {
                        original.remove(&k);
                    }
                }
            }
            continue;
        }
        let (child_ty, strategy) = ty.member(&k);
        let merged = match (orig_v, patch_v) {
            (Value::Object(o), Value::Object(p)) => {
                if strategy == Strategy::Replace {
                    Value::Object(p)
                } else {
                    Value::Object(merge_map(o, p, &child_ty)?)
                }
            }
            (Value::Array(o), Value::Array(p)) => {
                Value::Array(merge_slice_handler(o, p, &child_ty, strategy, is_delete_list)?)
            }
            (_, p) => match remove_directives(p) {
                Some(v) => v,
                None => {
                    original.remove(&k);
                    continue;
                }
            },
        };
        original.insert(k, merged);
    }
    Ok(original)
}

fn directive_in_map(d: &Value, mut patch: Map<String, Value>) -> Result<Map<String, Value>, SmpError> {
    match d.as_str() {
        Some("replace") => {
            patch.remove(DIRECTIVE);
            Ok(patch)
        }
        Some("delete") => Ok(Map::new()),
        _ => Err(fail(format!("Unknown patch type: {}, in map: {}", fmt_v(d), fmt_v(&Value::Object(patch))))),
    }
}

fn discard_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(discard_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(discard_nulls),
        _ => {}
    }
}

/// Removes `$patch` directives; `None` when the value itself is a directive.
fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE) {
                return None;
            }
            Some(Value::Object(
                m.into_iter().filter_map(|(k, v)| remove_directives(v).map(|v| (k, v))).collect(),
            ))
        }
        Value::Array(a) => Some(Value::Array(a.into_iter().filter_map(remove_directives).collect())),
        v => Some(v),
    }
}

fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), SmpError> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else { return Ok(()) };
    let Value::Array(list) = retain else { return Err(bad_request(ERR_BAD_RETAIN_KEYS)) };
    let keep: Vec<String> = list.iter().filter_map(|v| v.as_str().map(String::from)).collect();
    for (k, v) in patch.iter() {
        if v.is_null() || k.starts_with(DELETE_PRIMITIVE) || k.starts_with(SET_ORDER) {
            continue;
        }
        if !keep.contains(k) {
            return Err(bad_request(ERR_BAD_RETAIN_KEYS));
        }
    }
    original.retain(|k, _| keep.contains(k));
    Ok(())
}

/// `mergePatchIntoOriginal`: lists that come with a `$setElementOrder/<list>` directive.
fn merge_set_element_order(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    ty: &Ty,
) -> Result<(), SmpError> {
    let keys: Vec<String> = patch.keys().filter(|k| k.starts_with(SET_ORDER)).cloned().collect();
    for key in keys {
        let Some(order_v) = patch.remove(&key) else { continue };
        let Value::Array(order) = order_v else {
            return Err(fail(format!("expected []interface {{}} but got {}", go_type_name(&order_v))));
        };
        let list_key = match key.split_once('/') {
            Some((SET_ORDER, k)) => k.to_string(),
            _ => return Err(bad_request(ERR_BAD_SET_ORDER)),
        };
        let orig_list = match original.get(&list_key) {
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => {
                return Err(fail(format!("expected []interface {{}} but got {}", go_type_name(other))));
            }
            None => None,
        };
        let patch_list = match patch.get(&list_key) {
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => {
                return Err(fail(format!("expected []interface {{}} but got {}", go_type_name(other))));
            }
            None => None,
        };
        let (child_ty, strategy) = ty.member(&list_key);
        let merge_key = merge_key_of(strategy);
        validate_patch_with_set_order(patch_list.as_deref().unwrap_or(&[]), &order, merge_key)?;
        let merged = match (&orig_list, &patch_list) {
            (Some(o), None) => o.clone(),
            (None, Some(p)) => match remove_directives(Value::Array(p.clone())) {
                Some(Value::Array(a)) => a,
                _ => continue,
            },
            (Some(o), Some(p)) => merge_slice_handler(o.clone(), p.clone(), &child_ty, strategy, false)?,
            (None, None) => continue,
        };
        let (patch_items, server_only) = match merge_key {
            None => partition_primitives(&merged, &order)?,
            Some(mk) => partition_maps(&merged, &order, mk)?,
        };
        let is_map =
            slice_element_is_map(orig_list.as_deref().unwrap_or(&[]), patch_list.as_deref().unwrap_or(&[]))?;
        let server_order = orig_list.unwrap_or_default();
        let both =
            normalize_element_order(patch_items, server_only, &order, &server_order, merge_key, is_map)?;
        original.insert(list_key.clone(), Value::Array(both));
        patch.remove(&list_key);
    }
    Ok(())
}

fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

fn merge_key_of(strategy: Strategy) -> Option<&'static str> {
    match strategy {
        Strategy::Merge(k) => k,
        Strategy::MergeRetainKeys(k) => Some(k),
        _ => None,
    }
}

fn is_merge(strategy: Strategy) -> bool {
    matches!(strategy, Strategy::Merge(_) | Strategy::MergeRetainKeys(_))
}

fn validate_patch_with_set_order(
    patch_list: &[Value],
    order: &[Value],
    merge_key: Option<&str>,
) -> Result<(), SmpError> {
    if order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<Value> = match merge_key {
        Some(_) => extract_to_delete(patch_list)?.0,
        None => patch_list.to_vec(),
    };
    let (mut pi, mut oi) = (0, 0);
    while pi < non_delete.len() && oi < order.len() {
        if non_delete[pi].as_object().is_some_and(|m| m.contains_key(DIRECTIVE)) {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(&non_delete[pi], &order[oi], merge_key)? {
            pi += 1;
        }
        oi += 1;
    }
    if pi < non_delete.len() && oi >= order.len() {
        return Err(fail(format!(
            "the order in patch list:\n{}\n doesn't match {SET_ORDER} list:\n{}",
            fmt_v(&Value::Array(patch_list.to_vec())),
            fmt_v(&Value::Array(order.to_vec()))
        )));
    }
    Ok(())
}

fn merge_key_value_equal(left: &Value, right: &Value, merge_key: Option<&str>) -> Result<bool, SmpError> {
    let Some(mk) = merge_key else { return go_eq(left, right) };
    let (Value::Object(l), Value::Object(r)) = (left, right) else {
        return Err(fail(format!("expected map[string]interface {{}} but got {}", go_type_name(left))));
    };
    let lv = l.get(mk).ok_or_else(|| no_merge_key(l, mk))?;
    let rv = r.get(mk).ok_or_else(|| no_merge_key(r, mk))?;
    go_eq(lv, rv)
}

fn merge_slice_handler(
    original: Vec<Value>,
    patch: Vec<Value>,
    ty: &Ty,
    strategy: Strategy,
    is_delete_list: bool,
) -> Result<Vec<Value>, SmpError> {
    if is_merge(strategy) {
        merge_slice(original, patch, &ty.elem(), merge_key_of(strategy), is_delete_list)
    } else {
        Ok(patch)
    }
}

fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    elem_ty: &Ty,
    merge_key: Option<&str>,
    is_delete_list: bool,
) -> Result<Vec<Value>, SmpError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let is_map = slice_element_is_map(&original, &patch)?;
    let (original, patch, merged) = if !is_map {
        if is_delete_list {
            for v in &patch {
                go_hashable(v)?;
            }
            let mut out = Vec::new();
            for v in original {
                go_hashable(&v)?;
                if !patch.contains(&v) {
                    out.push(v);
                }
            }
            return Ok(out);
        }
        let mut both = original.clone();
        both.extend(patch.iter().cloned());
        let merged = deduplicate_scalars(both)?;
        (original, patch, merged)
    } else {
        let Some(mk) = merge_key else {
            return Err(fail(format!("cannot merge lists without merge key for {}", elem_name(elem_ty))));
        };
        let (original, patch) = merge_slice_with_special_elements(original, patch, mk)?;
        let merged = merge_slice_without_special_elements(original.clone(), &patch, mk, elem_ty)?;
        (original, patch, merged)
    };
    let (patch_items, server_only) = match merge_key.filter(|_| is_map) {
        None => partition_primitives(&merged, &patch)?,
        Some(mk) => partition_maps(&merged, &patch, mk)?,
    };
    normalize_element_order(patch_items, server_only, &patch, &original, merge_key.filter(|_| is_map), is_map)
}

fn elem_name(ty: &Ty) -> String {
    match ty {
        Ty::Struct(s) => s.name.to_string(),
        _ => "interface {}".into(),
    }
}

fn slice_element_is_map(a: &[Value], b: &[Value]) -> Result<bool, SmpError> {
    let mut kind: Option<&'static str> = None;
    for v in a.iter().chain(b) {
        let k = go_type_name(v);
        match kind {
            None => {
                if k == "[]interface {}" {
                    return Err(fail("lists of lists are not supported"));
                }
                kind = Some(k);
            }
            Some(prev) if prev != k => {
                return Err(fail(format!(
                    "list element types are not identical: {}",
                    fmt_v(&Value::Array(vec![Value::Array(a.to_vec()), Value::Array(b.to_vec())]))
                )));
            }
            _ => {}
        }
    }
    match kind {
        None => Err(fail("no elements in any of the given slices")),
        Some(k) => Ok(k == "map[string]interface {}"),
    }
}

fn deduplicate_scalars(mut s: Vec<Value>) -> Result<Vec<Value>, SmpError> {
    // Go's "clever algorithm": a later duplicate is overwritten by the last element.
    let mut length = s.len() as isize - 1;
    let mut i: isize = 0;
    while i < length {
        let mut j = i + 1;
        while j <= length {
            if go_eq(&s[i as usize], &s[j as usize])? {
                s[j as usize] = s[length as usize].clone();
                s.truncate(length as usize);
                length -= 1;
                j -= 1;
            }
            j += 1;
        }
        i += 1;
    }
    Ok(s)
}

fn merge_slice_with_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    mk: &str,
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let mut without = Vec::new();
    let mut replace = false;
    for v in patch {
        let Value::Object(m) = &v else { return Err(fail("expected map[string]interface {} in list")) };
        match m.get(DIRECTIVE) {
            None => without.push(v),
            Some(d) => match d.as_str() {
                Some("delete") => {
                    let Some(val) = m.get(mk) else { return Err(no_merge_key(m, mk)) };
                    while let Some(i) = find_map_by_key(&original, mk, val)? {
                        original.remove(i);
                    }
                }
                Some("replace") => replace = true,
                Some("merge") => return Err(fail("merging lists cannot yet be specified in the patch")),
                _ => return Err(fail(format!("Unknown patch type: {}, in map: {}", fmt_v(d), fmt_v(&v)))),
            },
        }
    }
    if replace { Ok((without, Vec::new())) } else { Ok((original, without)) }
}

fn merge_slice_without_special_elements(
    mut original: Vec<Value>,
    patch: &[Value],
    mk: &str,
    elem_ty: &Ty,
) -> Result<Vec<Value>, SmpError> {
    for v in patch {
        let Value::Object(m) = v else { return Err(fail("expected map[string]interface {} in list")) };
        let Some(val) = m.get(mk) else { return Err(no_merge_key(m, mk)) };
        match find_map_by_key(&original, mk, val)? {
            Some(i) => {
                let orig = match &original[i] {
                    Value::Object(o) => o.clone(),
                    _ => Map::new(),
                };
                original[i] = Value::Object(merge_map(orig, m.clone(), elem_ty)?);
            }
            None => original.push(v.clone()),
        }
    }
    Ok(original)
}

fn find_map_by_key(list: &[Value], mk: &str, val: &Value) -> Result<Option<usize>, SmpError> {
    for (i, v) in list.iter().enumerate() {
        let Value::Object(m) = v else { return Err(fail(format!("value for key {i} is not a map."))) };
        if let Some(x) = m.get(mk)
            && go_eq(x, val)?
        {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

fn partition_primitives(list: &[Value], by: &[Value]) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    for v in by {
        go_hashable(v)?;
    }
    let (mut patch, mut server) = (Vec::new(), Vec::new());
    for v in list {
        go_hashable(v)?;
        let mut found = false;
        for b in by {
            if go_eq(v, b)? {
                found = true;
                break;
            }
        }
        if found { patch.push(v.clone()) } else { server.push(v.clone()) }
    }
    Ok((patch, server))
}

fn partition_maps(list: &[Value], by: &[Value], mk: &str) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let (mut patch, mut server) = (Vec::new(), Vec::new());
    for v in list {
        let Value::Object(m) = v else { return Err(fail("expected map[string]interface {} in list")) };
        let Some(val) = m.get(mk) else { return Err(no_merge_key(m, mk)) };
        if find_map_by_key(by, mk, val)?.is_some() { patch.push(v.clone()) } else { server.push(v.clone()) }
    }
    Ok((patch, server))
}

fn extract_to_delete(list: &[Value]) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let (mut keep, mut delete) = (Vec::new(), Vec::new());
    for v in list {
        let Value::Object(m) = v else { return Err(fail("expected map[string]interface {} in list")) };
        if m.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") {
            delete.push(v.clone());
        } else {
            keep.push(v.clone());
        }
    }
    Ok((keep, delete))
}

/// Position of `v` in `list` by merge key (maps) or by value.
fn index_of(list: &[Value], v: &Value, mk: Option<&str>, is_map: bool) -> Result<Option<usize>, SmpError> {
    let key = |item: &Value| -> Value {
        if is_map {
            item.as_object().and_then(|m| mk.and_then(|k| m.get(k))).cloned().unwrap_or(Value::Null)
        } else {
            item.clone()
        }
    };
    let want = key(v);
    for (i, item) in list.iter().enumerate() {
        if go_eq(&want, &key(item))? {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

fn normalize_slice_order(
    to_sort: Vec<Value>,
    order: &[Value],
    mk: Option<&str>,
    is_map: bool,
) -> Result<Vec<Value>, SmpError> {
    let (mut to_sort, to_delete) = if is_map {
        if let Some(k) = mk {
            for v in to_sort.iter().chain(order) {
                match v {
                    Value::Object(m) if !m.contains_key(k) => return Err(no_merge_key(m, k)),
                    Value::Object(_) => {}
                    other => {
                        return Err(fail(format!(
                            "expected map[string]interface {{}} but got {}",
                            go_type_name(other)
                        )));
                    }
                }
            }
        }
        extract_to_delete(&to_sort)?
    } else {
        (to_sort, Vec::new())
    };
    let mut idx = Vec::with_capacity(to_sort.len());
    for v in &to_sort {
        idx.push(index_of(order, v, mk, is_map)?);
    }
    // A stable insertion sort with Go's comparator (which calls "not found" less than anything).
    let mut items: Vec<(Option<usize>, Value)> = idx.into_iter().zip(to_sort.drain(..)).collect();
    let less = |a: &Option<usize>, b: &Option<usize>| match (a, b) {
        (Some(x), Some(y)) => x < y,
        _ => true,
    };
    for i in 1..items.len() {
        let mut j = i;
        while j > 0 && less(&items[j].0, &items[j - 1].0) {
            items.swap(j, j - 1);
            j -= 1;
        }
    }
    let mut out: Vec<Value> = items.into_iter().map(|(_, v)| v).collect();
    out.extend(to_delete);
    Ok(out)
}

fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    mk: Option<&str>,
    is_map: bool,
) -> Result<Vec<Value>, SmpError> {
    let patch = normalize_slice_order(patch, patch_order, mk, is_map)?;
    let server_only = normalize_slice_order(server_only, server_order, mk, is_map)?;
    merge_sorted(server_only, patch, server_order, mk, is_map)
}

/// `mergeSortedSlice`: a server-only item goes before a patch item only when both are on the
/// server and it comes first there; otherwise the patch item goes first.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    mk: Option<&str>,
    is_map: bool,
) -> Result<Vec<Value>, SmpError> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(left.len() + right.len());
    while i < left.len() || j < right.len() {
        if i >= left.len() {
            out.push(right[j].clone());
            j += 1;
        } else if j >= right.len() {
            out.push(left[i].clone());
            i += 1;
        } else {
            let li = index_of(server_order, &left[i], mk, is_map)?;
            let ri = index_of(server_order, &right[j], mk, is_map)?;
            if matches!((li, ri), (Some(l), Some(r)) if l < r) {
                out.push(left[i].clone());
                i += 1;
            } else {
                out.push(right[j].clone());
                j += 1;
            }
        }
    }
    Ok(out)
}

// === JSON merge patch (RFC 7386) ===

pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(p) => {
            let mut out = match target {
                Value::Object(t) => t.clone(),
                _ => Map::new(),
            };
            for (k, v) in p {
                if v.is_null() {
                    out.remove(k);
                } else {
                    let merged = merge_patch(out.get(k).unwrap_or(&Value::Null), v);
                    out.insert(k.clone(), merged);
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

// === JSON patch (RFC 6902) ===

/// Applies a JSON patch; the error is `evanphx/json-patch`'s reason (the server hides it).
pub fn json_patch(doc: &Value, ops: &[Value]) -> Result<Value, String> {
    let mut doc = doc.clone();
    for op in ops {
        let Value::Object(o) = op else { return Err("operation is not an object".into()) };
        let kind = o.get("op").and_then(Value::as_str).ok_or("missing op")?;
        let path = o.get("path").and_then(Value::as_str).ok_or("missing path")?;
        match kind {
            "add" => add(&mut doc, path, o.get("value").cloned().ok_or("missing value")?)?,
            "remove" => {
                remove(&mut doc, path)?;
            }
            "replace" => {
                remove(&mut doc, path)?;
                add(&mut doc, path, o.get("value").cloned().ok_or("missing value")?)?;
            }
            "move" => {
                let from = o.get("from").and_then(Value::as_str).ok_or("missing from")?;
                let v = remove(&mut doc, from)?;
                add(&mut doc, path, v)?;
            }
            "copy" => {
                let from = o.get("from").and_then(Value::as_str).ok_or("missing from")?;
                let v = doc.pointer(from).cloned().ok_or_else(|| format!("copy from missing path {from}"))?;
                add(&mut doc, path, v)?;
            }
            "test" => {
                let want = o.get("value").cloned().unwrap_or(Value::Null);
                let got = doc.pointer(path).cloned().unwrap_or(Value::Null);
                if got != want {
                    return Err(format!("testing value {path} failed: test failed"));
                }
            }
            other => return Err(format!("unexpected kind: {other}")),
        }
    }
    Ok(doc)
}

fn split_pointer(path: &str) -> Result<(String, String), String> {
    if path.is_empty() {
        return Err("root path not supported".into());
    }
    let idx = path.rfind('/').ok_or_else(|| format!("invalid path {path}"))?;
    let last = path[idx + 1..].replace("~1", "/").replace("~0", "~");
    Ok((path[..idx].to_string(), last))
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let (parent, last) = split_pointer(path)?;
    let target = doc
        .pointer_mut(&parent)
        .ok_or_else(|| format!("add operation does not apply: doc is missing path: {path}"))?;
    match target {
        Value::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
                return Ok(());
            }
            let i: usize = last.parse().map_err(|_| format!("invalid index {last}"))?;
            if i > a.len() {
                return Err(format!("index out of bounds: {i}"));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err(format!("add operation does not apply: doc is missing path: {path}")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split_pointer(path)?;
    let missing = || format!("doc is missing key: {path}");
    let target = doc.pointer_mut(&parent).ok_or_else(missing)?;
    match target {
        Value::Object(m) => m.remove(&last).ok_or_else(missing),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| missing())?;
            if i >= a.len() {
                return Err(missing());
            }
            Ok(a.remove(i))
        }
        _ => Err(missing()),
    }
}

// === server-side apply, one manager, no conflicts ===

/// Merges an applied configuration into the live object: maps recurse, lists with a merge key
/// (`listType=map`) merge by key keeping the live order and appending new items, other lists and
/// scalars are replaced. Fields the configuration leaves out stay, since nothing tracks ownership.
pub fn apply(live: &Value, config: &Value, ty: &Ty) -> Value {
    match (live, config) {
        (Value::Object(l), Value::Object(c)) => {
            let mut out = l.clone();
            for (k, cv) in c {
                let (child, strategy) = ty.member(k);
                let merged = match (l.get(k), cv, merge_key_of(strategy)) {
                    (Some(lv @ Value::Object(_)), Value::Object(_), _) => apply(lv, cv, &child),
                    (Some(Value::Array(la)), Value::Array(ca), Some(mk)) => {
                        let elem = child.elem();
                        let mut items = la.clone();
                        for item in ca {
                            let key = item.get(mk);
                            match items.iter().position(|x| x.get(mk).is_some() && x.get(mk) == key) {
                                Some(i) => items[i] = apply(&items[i], item, &elem),
                                None => items.push(item.clone()),
                            }
                        }
                        Value::Array(items)
                    }
                    _ => cv.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (_, c) => c.clone(),
    }
}
