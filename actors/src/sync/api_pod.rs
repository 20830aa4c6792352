//! The API server's copy of a pod as the syncer keeps it: the JSON the server returned, whole,
//! and the typed `Pod` read from it.
//!
//! k8s-openapi's structs know the fields of the API version they were generated for; a newer
//! server keeps fields they lack (a v1.36 server keeps `containerStatuses[].volumeMounts[]
//! .volumeStatus`, which the v1_35 structs do not have). A pod read into the typed structs and
//! written back loses them. So the merge base is this JSON: the typed view is for reading, and a
//! write that resends an atomic list resends the server's items with only what it owns changed.
//!
//! [`ApiPod`] is a [`kube::Resource`] that deserializes from a pod's JSON, so a watch or a
//! request through `Api<ApiPod>` yields it directly.
//!
//! Reading one never fails: a pod the typed structs cannot read (a field of another type than
//! they expect, which an admission webhook or an API server of another version can leave) is
//! kept with its metadata only and the error, with the field's path ([`ApiPod::undecodable`]);
//! an item that is no object at all (a `null` in a list) is kept so too, with no identity.
//! Failing would fail the whole list it came in, and every other pod of the node with it: the
//! watch would list again and again, and no pod would be probed or written (docs/sync.md, "A
//! pod that cannot be read"). A single answer that is no pod (a GET's or a PATCH's) is told
//! by its missing UID and kind (`pod_answer` in `sync/job.rs`).

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// A pod as the API server returned it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiPod {
    /// The typed view, for reading. Fields the structs lack are not in it.
    pub pod: Pod,
    /// The server's JSON, every field kept.
    raw: Value,
    /// Why the typed structs could not read it, with the field's path: the typed view then
    /// holds the metadata alone.
    undecodable: Option<std::sync::Arc<str>>,
}

impl ApiPod {
    /// Reads a pod's JSON, keeping it.
    pub fn from_json(raw: Value) -> Result<ApiPod, serde_json::Error> {
        let pod = Pod::deserialize(&raw)?;
        Ok(ApiPod { pod, raw, undecodable: None })
    }

    /// [`ApiPod::from_json`] that keeps a pod the typed structs cannot read, as
    /// [`ApiPod::undecodable`] (its metadata read on its own, or as much of it as the name,
    /// namespace, UID and resourceVersion).
    pub fn from_json_lenient(raw: Value) -> ApiPod {
        let why = match serde_path_to_error::deserialize::<_, Pod>(&raw) {
            Ok(pod) => return ApiPod { pod, raw, undecodable: None },
            Err(err) => match err.path().to_string() {
                path if path == "." => err.into_inner().to_string(),
                path => format!("{path}: {}", err.into_inner()),
            },
        };
        let metadata = raw
            .get("metadata")
            .and_then(|m| ObjectMeta::deserialize(m).ok().or_else(|| Some(identity_of(m))))
            .unwrap_or_default();
        ApiPod { pod: Pod { metadata, ..Pod::default() }, raw, undecodable: Some(why.into()) }
    }

    /// A pod known only typed (a test, or a host without the JSON): its JSON is the typed one.
    pub fn from_typed(pod: Pod) -> ApiPod {
        let raw = serde_json::to_value(&pod).unwrap_or(Value::Null);
        ApiPod { pod, raw, undecodable: None }
    }

    /// Why the typed structs could not read the pod (the field's path and the error), if they
    /// could not: then [`ApiPod::pod`] holds its metadata alone, and the pod is neither probed
    /// nor written, nor a merge base.
    pub fn undecodable(&self) -> Option<&str> {
        self.undecodable.as_deref()
    }

    /// The server's JSON of the pod.
    pub fn json(&self) -> &Value {
        &self.raw
    }

    /// The server's JSON of the pod's `status`, if it has one.
    pub fn status_json(&self) -> Option<&Value> {
        self.raw.get("status")
    }
}

impl From<Pod> for ApiPod {
    fn from(pod: Pod) -> Self {
        ApiPod::from_typed(pod)
    }
}

impl From<std::sync::Arc<Pod>> for ApiPod {
    fn from(pod: std::sync::Arc<Pod>) -> Self {
        ApiPod::from_typed(std::sync::Arc::unwrap_or_clone(pod))
    }
}

/// The identity fields of metadata that does not read as a whole.
fn identity_of(metadata: &Value) -> ObjectMeta {
    let text = |key: &str| metadata.get(key).and_then(Value::as_str).map(str::to_owned);
    ObjectMeta {
        name: text("name"),
        namespace: text("namespace"),
        uid: text("uid"),
        resource_version: text("resourceVersion"),
        ..ObjectMeta::default()
    }
}

impl<'de> Deserialize<'de> for ApiPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(ApiPod::from_json_lenient(Value::deserialize(deserializer)?))
    }
}

impl Serialize for ApiPod {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

impl kube::Resource for ApiPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        <Pod as kube::Resource>::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.pod.metadata
    }

    /// Changes only the typed view: the JSON stays as the server returned it.
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.pod.metadata
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use serde_json::json;

    /// A pod the structs cannot read is kept, with its metadata and the field's path, and does
    /// not fail the list it came in.
    #[test]
    fn a_pod_the_structs_cannot_read_is_kept_with_the_reason() {
        let odd = json!({
            "metadata": {"name": "odd", "namespace": "default", "uid": "o", "resourceVersion": "4"},
            "status": {"containerStatuses": [{"name": "app", "ready": false, "restartCount": "x",
                                              "image": "i", "imageID": ""}]},
        });
        let good = json!({"metadata": {"name": "good", "uid": "g"}});
        let list: kube::core::ObjectList<ApiPod> = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
            "items": [odd.clone(), good],
        }))
        .unwrap();
        assert_eq!(list.items.len(), 2);
        let read = &list.items[0];
        let why = read.undecodable().unwrap();
        assert!(
            why.starts_with("status.containerStatuses[0].restartCount: invalid type: string \"x\""),
            "{why}"
        );
        assert_eq!(read.pod.metadata.uid.as_deref(), Some("o"));
        assert_eq!(read.pod.metadata.resource_version.as_deref(), Some("4"));
        assert!(read.pod.status.is_none() && read.pod.spec.is_none());
        assert_eq!(read.json(), &odd, "the JSON is kept");
        assert!(list.items[1].undecodable().is_none());

        // Metadata that does not read either: its identity fields still do.
        let worse = ApiPod::from_json_lenient(json!({"metadata": {"name": "w", "uid": "u", "labels": 7}}));
        assert!(worse.undecodable().unwrap().starts_with("metadata.labels: "), "{:?}", worse.undecodable());
        assert_eq!(worse.pod.metadata.name.as_deref(), Some("w"));

        // No object at all: kept, with no identity, and the list it came in still reads (a
        // `null` item failed every list of the node's pods, none applied).
        let list: kube::core::ObjectList<ApiPod> = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
            "items": [null, "not a pod", {"metadata": {"name": "good", "uid": "g"}}],
        }))
        .unwrap();
        assert_eq!(list.items.len(), 3);
        for nothing in &list.items[..2] {
            assert!(
                nothing.undecodable().unwrap().starts_with("invalid type: "),
                "{:?}",
                nothing.undecodable()
            );
            assert_eq!(nothing.pod.metadata, ObjectMeta::default());
        }
        assert!(list.items[2].undecodable().is_none());
    }

    #[test]
    fn fields_the_structs_lack_stay_in_the_json() {
        let raw = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "uid": "u", "resourceVersion": "7"},
            "status": {"containerStatuses": [{
                "name": "app", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
                "futureField": 1,
                "volumeMounts": [{"name": "data", "mountPath": "/data",
                                  "volumeStatus": {"image": {"imageRef": "r@sha256:1"}}}],
            }]},
        });
        let pod: ApiPod = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(pod.pod.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(pod.json(), &raw, "the JSON is kept whole");
        assert_eq!(serde_json::to_value(&pod).unwrap(), raw, "and written back whole");
        let typed = serde_json::to_value(&pod.pod).unwrap();
        assert!(typed.pointer("/status/containerStatuses/0/futureField").is_none());
        assert_eq!(
            pod.status_json()
                .unwrap()
                .pointer("/containerStatuses/0/volumeMounts/0/volumeStatus/image/imageRef"),
            Some(&json!("r@sha256:1"))
        );
    }

    #[test]
    fn a_pod_is_at_the_pods_url() {
        use kube::Resource;
        assert_eq!(ApiPod::url_path(&(), Some("ns")), Pod::url_path(&(), Some("ns")));
        assert_eq!(ApiPod::kind(&()), "Pod");
    }
}
