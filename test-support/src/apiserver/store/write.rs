//! Create, update, patch, delete and bind, as the pod, pods/status, binding and event
//! strategies run them in the generic registry store, plus the test-fixture insert.

use serde_json::{Map, Value, json};

use super::decode::{PatchResult, apply_patch, decode_body, delete_options, patch_type};
use super::defaults::{default_pod, qos_class};
use super::render::{canonical, to_storage};
use super::*;
use crate::apiserver::golang::{self, Instant, quote};
use crate::apiserver::schema::{self, schemas};
use crate::apiserver::validation::{self as v, ApiError, FieldError, Resource};

impl Store {
    /// Inserts an object as a test fixture (no admission, no validation), emitting ADDED or
    /// MODIFIED. Fills in uid, creationTimestamp and generation when missing.
    pub fn insert(&mut self, api: Api, obj: &Value) -> Result<Value, String> {
        let decoded = schema::decode(obj, api.ty()).map_err(|e| e.json_message())?;
        self.insert_as_is(api, decoded.value)
    }

    /// [`Store::insert`] without the schema's decoding: an object as another writer or a newer
    /// server could leave it, fields of unexpected types included.
    pub fn insert_as_is(&mut self, api: Api, obj: Value) -> Result<Value, String> {
        let mut o = to_storage(api, obj);
        if meta_str(&o, "namespace").is_empty() {
            set_meta(&mut o, "namespace", json!("default"));
        }
        if meta_str(&o, "name").is_empty() {
            return Err("metadata.name is required".into());
        }
        if meta_str(&o, "uid").is_empty() {
            let uid = self.uid();
            set_meta(&mut o, "uid", json!(uid));
        }
        if o.pointer("/metadata/creationTimestamp").is_none_or(Value::is_null) {
            set_meta(&mut o, "creationTimestamp", json!(Instant::now().rfc3339()));
        }
        if api == Api::Pods && o.pointer("/metadata/generation").is_none() {
            set_meta(&mut o, "generation", json!(1));
        }
        let kind = api.kind();
        let prev = self.map(kind).get(&obj_key(&o)).cloned();
        let ty = if prev.is_some() { ChangeType::Modified } else { ChangeType::Added };
        let stored = self.commit(kind, ty, prev, o);
        Ok(render(api, &stored))
    }
    /// Another writer's change to a stored pod (`FaultKind::Touch`): the annotation
    /// `fake.probelet.test/touched` set to the new resourceVersion, emitting MODIFIED. Nothing
    /// when there is no such pod. With `phase`, `status.phase` is set to it in the same write.
    pub fn touch_pod(&mut self, ns: &str, name: &str, phase: Option<&str>) {
        let key = (ns.to_string(), name.to_string());
        let Some(prev) = self.pods.get(&key).cloned() else { return };
        let mut pod = prev.clone();
        if !pod.pointer("/metadata/annotations").is_some_and(Value::is_object) {
            set_meta(&mut pod, "annotations", json!({}));
        }
        if let Some(annotations) = pod.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
            annotations.insert("fake.probelet.test/touched".to_owned(), json!((self.rv + 1).to_string()));
        }
        if let Some(phase) = phase
            && let Some(status) = pod.get_mut("status").and_then(Value::as_object_mut)
        {
            status.insert("phase".to_owned(), json!(phase));
        }
        self.commit(Kind::Pod, ChangeType::Modified, Some(prev), pod);
    }

    pub fn create(&mut self, api: Api, ns: &str, req: &Req) -> Outcome {
        if req.content_type != "application/json" {
            return ApiError {
                code: 415,
                reason: "UnsupportedMediaType",
                message: "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/cbor".into(),
                details: None,
                retry_after: None,
            }
            .into();
        }
        let (obj, warnings) = match decode_body(api, req) {
            Ok(x) => x,
            Err(e) => return e.into(),
        };
        let mut obj = to_storage(api, obj);
        let body_ns = meta_str(&obj, "namespace").to_string();
        if !body_ns.is_empty() && body_ns != ns {
            return ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            )
            .into();
        }
        set_meta(&mut obj, "namespace", json!(ns));
        if meta_str(&obj, "name").is_empty() {
            let prefix = meta_str(&obj, "generateName").to_string();
            if !prefix.is_empty() {
                let name = self.generated_name(&prefix);
                set_meta(&mut obj, "name", json!(name));
            }
        }
        let name = meta_str(&obj, "name").to_string();
        // System fields the client may not set.
        if let Some(Value::Object(m)) = obj.get_mut("metadata") {
            for key in [
                "uid",
                "resourceVersion",
                "selfLink",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "managedFields",
                "generation",
            ] {
                m.remove(key);
            }
        }
        let errs = match api {
            Api::Pods => {
                default_pod(&mut obj);
                let qos = qos_class(obj.get("spec").unwrap_or(&Value::Null));
                obj["status"] = json!({"phase": "Pending", "qosClass": qos});
                set_meta(&mut obj, "generation", json!(1));
                v::validate_pod_create(&obj)
            }
            _ => {
                if obj.get("source").is_none() {
                    obj["source"] = json!({});
                }
                let mut errs = v::validate_event_create(&obj, api.event_api());
                if errs.is_empty() && name.is_empty() {
                    errs.push(FieldError::required("metadata.name", "name or generateName is required"));
                }
                errs
            }
        };
        if !errs.is_empty() {
            return ApiError::invalid("", api.kind_name(), &name, &errs).into();
        }
        let key = (ns.to_string(), name.clone());
        if self.map(api.kind()).contains_key(&key) {
            return ApiError::already_exists(&api.resource(), &name).into();
        }
        let uid = self.uid();
        set_meta(&mut obj, "uid", json!(uid));
        set_meta(&mut obj, "creationTimestamp", json!(Instant::now().rfc3339()));
        let stored = if req.dry_run() { obj } else { self.commit(api.kind(), ChangeType::Added, None, obj) };
        let mut r = Reply::object(201, &render(api, &stored), api.ty());
        r.warnings = warnings;
        Outcome::Reply(r)
    }

    /// PATCH of a pod, pods/status or an event.
    pub fn patch(&mut self, api: Api, sub: Sub, ns: &str, name: &str, req: &Req) -> Outcome {
        let Some(pt) = patch_type(req.content_type) else { return ApiError::unsupported_media_type().into() };
        let key = (ns.to_string(), name.to_string());
        let Some(current) = self.map(api.kind()).get(&key).cloned() else {
            return ApiError::not_found(&api.resource(), name).into();
        };
        let versioned = render(api, &current);
        let validation = req.field_validation();
        let (patched, warnings) = match apply_patch(api, pt, &versioned, req, validation) {
            Ok(PatchResult::Patched(p, w)) => (p, w),
            Ok(PatchResult::Drop) => return Outcome::Drop,
            Err(e) => return e.into(),
        };
        self.finish_update(api, sub, current, to_storage(api, patched), warnings, req.dry_run())
    }

    /// PUT of a pod, pods/status or an event.
    pub fn update(&mut self, api: Api, sub: Sub, ns: &str, name: &str, req: &Req) -> Outcome {
        if req.content_type != "application/json" {
            return ApiError::unsupported_media_type().into();
        }
        let (obj, warnings) = match decode_body(api, req) {
            Ok(x) => x,
            Err(e) => return e.into(),
        };
        let mut obj = to_storage(api, obj);
        let body_name = meta_str(&obj, "name").to_string();
        if body_name != name {
            return ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            ))
            .into();
        }
        let body_ns = meta_str(&obj, "namespace").to_string();
        if !body_ns.is_empty() && body_ns != ns {
            return ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            )
            .into();
        }
        set_meta(&mut obj, "namespace", json!(ns));
        let key = (ns.to_string(), name.to_string());
        let Some(current) = self.map(api.kind()).get(&key).cloned() else {
            return ApiError::not_found(&api.resource(), name).into();
        };
        let uid = meta_str(&obj, "uid").to_string();
        let current_uid = meta_str(&current, "uid").to_string();
        if !uid.is_empty() && uid != current_uid {
            let msg = format!(
                "StorageError: invalid object, Code: 4, Key: /registry/{}/{ns}/{name}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object meta: {current_uid}",
                api.resource().plural
            );
            return ApiError::conflict(&api.resource(), name, &msg).into();
        }
        self.finish_update(api, sub, current, obj, warnings, req.dry_run())
    }

    /// The common tail of PATCH and PUT: optimistic concurrency, the strategy, validation,
    /// the no-op check, the commit.
    fn finish_update(
        &mut self,
        api: Api,
        sub: Sub,
        current: Value,
        mut new: Value,
        warnings: Vec<String>,
        dry_run: bool,
    ) -> Outcome {
        let name = meta_str(&current, "name").to_string();
        let new_rv = meta_str(&new, "resourceVersion").to_string();
        if !new_rv.is_empty() {
            match new_rv.parse::<u64>() {
                Err(_) => {
                    return ApiError::internal(format!(
                        "strconv.ParseUint: parsing {}: invalid syntax",
                        quote(&new_rv)
                    ))
                    .into();
                }
                Ok(n) if n != 0 && n.to_string() != meta_str(&current, "resourceVersion") => {
                    return ApiError::modified(&api.resource(), &name).into();
                }
                Ok(_) => {}
            }
        }
        // The strategy's PrepareForUpdate.
        if api == Api::Pods {
            match sub {
                Sub::Status => prepare_status_update(&mut new, &current),
                Sub::Main => {
                    new["status"] = current.get("status").cloned().unwrap_or(json!({}));
                }
            }
        }
        // rest.BeforeUpdate: fields a request cannot change.
        let old_gen = current.pointer("/metadata/generation").cloned();
        match old_gen {
            Some(g) => set_meta(&mut new, "generation", g),
            None => remove_meta(&mut new, "generation"),
        }
        if api == Api::Pods && sub == Sub::Main && new.get("spec") != current.get("spec") {
            let g = current.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
            set_meta(&mut new, "generation", json!(g + 1));
        }
        if meta_str(&new, "uid").is_empty() {
            set_meta(&mut new, "uid", json!(meta_str(&current, "uid")));
        }
        for key in ["creationTimestamp", "deletionTimestamp"] {
            match current.pointer(&format!("/metadata/{key}")) {
                Some(t) => set_meta(&mut new, key, t.clone()),
                None => remove_meta(&mut new, key),
            }
        }
        if new.pointer("/metadata/deletionGracePeriodSeconds").is_none()
            && let Some(g) = current.pointer("/metadata/deletionGracePeriodSeconds")
        {
            set_meta(&mut new, "deletionGracePeriodSeconds", g.clone());
        }
        if let Some(mf) = current.pointer("/metadata/managedFields") {
            set_meta(&mut new, "managedFields", mf.clone());
        }
        set_meta(&mut new, "resourceVersion", json!(meta_str(&current, "resourceVersion")));
        let mut errs = v::validate_object_meta_update(&new, &current);
        match api {
            Api::Pods => errs.extend(match sub {
                Sub::Status => v::validate_pod_status_update(&new, &current),
                Sub::Main => v::validate_pod_update(&new, &current),
            }),
            _ => errs.extend(v::validate_event_update(&new, &current, api.event_api())),
        }
        if !errs.is_empty() {
            return ApiError::invalid("", api.kind_name(), &name, &errs).into();
        }
        let new = canonical(api, new);
        let stored = if new == current || dry_run {
            if new == current { current } else { new }
        } else {
            let kind = api.kind();
            let updated = self.commit(kind, ChangeType::Modified, Some(current), new);
            self.delete_if_finished(kind, updated)
        };
        let mut r = Reply::object(200, &render(api, &stored), api.ty());
        r.warnings = warnings;
        Outcome::Reply(r)
    }

    /// An object with a deletion timestamp, grace period 0 and no finalizers left is removed.
    fn delete_if_finished(&mut self, kind: Kind, obj: Value) -> Value {
        let terminating = obj.pointer("/metadata/deletionTimestamp").is_some();
        let grace0 = obj.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64) == Some(0);
        let no_finalizers =
            obj.pointer("/metadata/finalizers").and_then(Value::as_array).is_none_or(Vec::is_empty);
        if terminating && grace0 && no_finalizers {
            self.commit(kind, ChangeType::Deleted, Some(obj.clone()), obj)
        } else {
            obj
        }
    }

    pub fn delete(&mut self, api: Api, ns: &str, name: &str, req: &Req) -> Outcome {
        let opts = match delete_options(req) {
            Ok(o) => o,
            Err(e) => return e.into(),
        };
        let dry_run = req.dry_run() || opts["dryRun"].as_array().is_some_and(|d| d.contains(&json!("All")));
        let key = (ns.to_string(), name.to_string());
        let Some(current) = self.map(api.kind()).get(&key).cloned() else {
            return ApiError::not_found(&api.resource(), name).into();
        };
        let precondition_res = Resource { group: "", plural: api.kind_name() };
        if let Some(uid) = opts.pointer("/preconditions/uid").and_then(Value::as_str) {
            let current_uid = meta_str(&current, "uid");
            if uid != current_uid {
                return ApiError::conflict(
                    &precondition_res,
                    name,
                    &format!("the UID in the precondition ({uid}) does not match the UID in record ({current_uid}). The object might have been deleted and then recreated"),
                )
                .into();
            }
        }
        if let Some(rv) = opts.pointer("/preconditions/resourceVersion").and_then(Value::as_str) {
            let current_rv = meta_str(&current, "resourceVersion");
            if rv != current_rv {
                return ApiError::conflict(
                    &precondition_res,
                    name,
                    &format!("the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({current_rv}). The object might have been modified"),
                )
                .into();
            }
        }
        let kind = api.kind();
        if api != Api::Pods {
            if dry_run {
                return Outcome::Reply(Reply::object(200, &deleted_status(api, &current), &schemas().status));
            }
            self.commit(kind, ChangeType::Deleted, Some(current.clone()), current.clone());
            return Outcome::Reply(Reply::object(200, &deleted_status(api, &current), &schemas().status));
        }
        let grace = opts.get("gracePeriodSeconds").and_then(Value::as_i64).map(|g| if g < 0 { 1 } else { g });
        let now = Instant::now();
        let mut next = current.clone();
        // rest.BeforeDelete with the pod strategy's CheckGracefulDelete.
        let (graceful, pending) = if current.pointer("/metadata/deletionTimestamp").is_some() {
            match current.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64) {
                None | Some(0) => (false, false),
                Some(old_grace) => match grace {
                    Some(g) if g < old_grace => {
                        let old_ts = current
                            .pointer("/metadata/deletionTimestamp")
                            .and_then(Value::as_str)
                            .and_then(|s| golang::parse_rfc3339(s).ok())
                            .unwrap_or(now);
                        let ts = old_ts.plus_secs(g - old_grace);
                        set_meta(&mut next, "deletionTimestamp", json!(ts.rfc3339()));
                        set_meta(&mut next, "deletionGracePeriodSeconds", json!(g));
                        (true, false)
                    }
                    _ => (false, true),
                },
            }
        } else {
            let mut period = grace.unwrap_or_else(|| {
                current.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0)
            });
            if current.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("").is_empty() {
                period = 0;
            }
            let phase = current.pointer("/status/phase").and_then(Value::as_str).unwrap_or("");
            if phase == "Succeeded" || phase == "Failed" {
                period = 0;
            }
            set_meta(&mut next, "deletionTimestamp", json!(now.plus_secs(period).rfc3339()));
            set_meta(&mut next, "deletionGracePeriodSeconds", json!(period));
            let g = current.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
            if g > 0 {
                set_meta(&mut next, "generation", json!(g + 1));
            }
            (true, false)
        };
        if dry_run {
            return Outcome::Reply(Reply::object(200, &render(api, &next), api.ty()));
        }
        let result = if pending {
            current
        } else if graceful {
            let updated = self.commit(kind, ChangeType::Modified, Some(current), next);
            self.delete_if_finished(kind, updated)
        } else {
            self.commit(kind, ChangeType::Deleted, Some(current.clone()), current)
        };
        Outcome::Reply(Reply::object(200, &render(api, &result), api.ty()))
    }

    /// POST pods/{name}/binding, what the scheduler does.
    pub fn bind(&mut self, ns: &str, name: &str, req: &Req) -> Outcome {
        let body: Value = match serde_json::from_slice(req.body) {
            Ok(b) => b,
            Err(_) => {
                let msg = golang::json_syntax_error(req.body).unwrap_or_else(|| "invalid body".into());
                return ApiError::bad_request(msg).into();
            }
        };
        let binding = match schema::decode(&body, &schemas().binding) {
            Ok(d) => d.value,
            Err(e) => return ApiError::bad_request(e.json_message()).into(),
        };
        let target = binding.pointer("/target/name").and_then(Value::as_str).unwrap_or("").to_string();
        if target.is_empty() {
            return ApiError::invalid("", "Binding", name, &[FieldError::required("target.name", "")]).into();
        }
        let key = (ns.to_string(), name.to_string());
        let Some(current) = self.pods.get(&key).cloned() else {
            return ApiError::not_found(&Resource::PODS, name).into();
        };
        let res = Resource { group: "", plural: "pods/binding" };
        if current.pointer("/metadata/deletionTimestamp").is_some() {
            return ApiError::conflict(
                &res,
                name,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            )
            .into();
        }
        let node = current.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("");
        if !node.is_empty() {
            return ApiError::conflict(
                &res,
                name,
                &format!("pod {name} is already assigned to node {}", quote(node)),
            )
            .into();
        }
        let mut next = current.clone();
        next["spec"]["nodeName"] = json!(target);
        if let Some(Value::Object(ann)) = binding.pointer("/metadata/annotations") {
            for (k, val) in ann {
                let mut anns = next.pointer("/metadata/annotations").cloned().unwrap_or(json!({}));
                anns[k] = val.clone();
                set_meta(&mut next, "annotations", anns);
            }
        }
        let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": Instant::now().rfc3339()});
        let conds = next["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let mut conds: Vec<Value> =
            conds.into_iter().filter(|c| c.get("type") != Some(&json!("PodScheduled"))).collect();
        conds.push(cond);
        next["status"]["conditions"] = Value::Array(conds);
        if !req.dry_run() {
            self.commit(Kind::Pod, ChangeType::Modified, Some(current), next);
        }
        let status =
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201});
        Outcome::Reply(Reply::object(201, &status, &schemas().status))
    }
}

fn deleted_status(api: Api, obj: &Value) -> Value {
    let res = api.resource();
    let mut details = Map::new();
    details.insert("name".into(), json!(meta_str(obj, "name")));
    if !res.group.is_empty() {
        details.insert("group".into(), json!(res.group));
    }
    details.insert("kind".into(), json!(res.plural));
    details.insert("uid".into(), json!(meta_str(obj, "uid")));
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": Value::Object(details)})
}

/// podStatusStrategy.PrepareForUpdate and the v1→internal conversion of pod IPs.
fn prepare_status_update(new: &mut Value, old: &Value) {
    new["spec"] = old.get("spec").cloned().unwrap_or(json!({}));
    match old.pointer("/metadata/ownerReferences") {
        Some(r) => set_meta(new, "ownerReferences", r.clone()),
        None => remove_meta(new, "ownerReferences"),
    }
    if !new.get("status").is_some_and(Value::is_object) {
        new["status"] = json!({});
    }
    let status = &mut new["status"];
    if status.get("qosClass").and_then(Value::as_str).unwrap_or("").is_empty()
        && let Some(q) = old.pointer("/status/qosClass")
    {
        status["qosClass"] = q.clone();
    }
    // preserveOldObservedGeneration
    if status.get("observedGeneration").and_then(Value::as_i64).unwrap_or(0) == 0
        && let Some(g) = old.pointer("/status/observedGeneration")
    {
        status["observedGeneration"] = g.clone();
    }
    let mut old_gens: Vec<(String, i64)> = old
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c.get("type").and_then(Value::as_str).unwrap_or("").to_string(),
                c.get("observedGeneration").and_then(Value::as_i64).unwrap_or(0),
            )
        })
        .collect();
    if let Some(Value::Array(conds)) = status.get_mut("conditions") {
        for c in conds {
            let t = c.get("type").and_then(Value::as_str).unwrap_or("").to_string();
            let old_gen =
                old_gens.iter().position(|(ot, _)| *ot == t).map(|i| old_gens.remove(i).1).unwrap_or(0);
            if c.get("observedGeneration").and_then(Value::as_i64).unwrap_or(0) == 0 && old_gen != 0 {
                c["observedGeneration"] = json!(old_gen);
            }
        }
    }
    normalize_pod_ips(new);
}

/// `Convert_v1_PodStatus_To_core_PodStatus` and back: `podIP` is authoritative over `podIPs`.
fn normalize_pod_ips(pod: &mut Value) {
    let Some(Value::Object(status)) = pod.get_mut("status") else { return };
    let pod_ip = status.get("podIP").and_then(Value::as_str).unwrap_or("").to_string();
    let first = status.pointer_first_ip();
    let has_ips = status.get("podIPs").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    if !pod_ip.is_empty() && (!has_ips || first.as_deref() != Some(pod_ip.as_str())) {
        status.insert("podIPs".into(), json!([{"ip": pod_ip}]));
    }
    match status.pointer_first_ip() {
        Some(ip) => {
            status.insert("podIP".into(), json!(ip));
        }
        None => {
            status.remove("podIP");
        }
    }
}

trait FirstIp {
    fn pointer_first_ip(&self) -> Option<String>;
}

impl FirstIp for Map<String, Value> {
    fn pointer_first_ip(&self) -> Option<String> {
        self.get("podIPs")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(|p| p.get("ip"))
            .and_then(Value::as_str)
            .map(String::from)
    }
}
