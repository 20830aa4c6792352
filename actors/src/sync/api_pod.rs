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
}

impl ApiPod {
    /// Reads a pod's JSON, keeping it.
    pub fn from_json(raw: Value) -> Result<ApiPod, serde_json::Error> {
        let pod = Pod::deserialize(&raw)?;
        Ok(ApiPod { pod, raw })
    }

    /// A pod known only typed (a test, or a host without the JSON): its JSON is the typed one.
    pub fn from_typed(pod: Pod) -> ApiPod {
        let raw = serde_json::to_value(&pod).unwrap_or(Value::Null);
        ApiPod { pod, raw }
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

impl<'de> Deserialize<'de> for ApiPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(deserializer)?;
        ApiPod::from_json(raw).map_err(serde::de::Error::custom)
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
