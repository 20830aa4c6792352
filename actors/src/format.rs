//! How pods are named in logs, errors and events: the two forms the kubelet uses, and nothing
//! else. `pod = ns/name` in every log line (klog's `KObj`), and `name_namespace(uid)` where
//! upstream prints `format.Pod` (probe errors such as "missing probe handler for …"). And the
//! other values of the log lines copied from the kubelet's, in the forms klog's text format
//! gives them (docs/architecture.md, "Log lines").

use k8s_openapi::api::core::v1::{Pod, PodStatus};

/// `namespace/name`, as klog's `KObj` prints a pod: the `pod` field of log lines.
pub fn pod_ref(pod: &Pod) -> String {
    pod_key(
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// `namespace/name`, or the name alone without a namespace, as klog's `KRef` prints it.
pub fn pod_key(namespace: &str, name: &str) -> String {
    if namespace.is_empty() { name.to_owned() } else { format!("{namespace}/{name}") }
}

/// The pod's UID (empty without one): the `podUID` field of the kubelet's lines.
pub fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

/// A status as klog's text format writes a struct value: its JSON, on one line (`status=`
/// of "Status for pod updated successfully", "Ignoring same status for pod").
pub fn status_json(status: &PodStatus) -> String {
    serde_json::to_string(status).unwrap_or_default()
}

/// `name_namespace(uid)`, the kubelet's `format.Pod`.
pub fn pod_name(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn the_kubelets_two_forms() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                uid: Some("u-1".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(pod_ref(&pod), "shop/web");
        assert_eq!(pod_name(&pod), "web_shop(u-1)");
        assert_eq!(pod_uid(&pod), "u-1");
    }

    /// klog's `KObj` and `KRef` leave out an empty namespace, slash and all.
    #[test]
    fn a_pod_without_a_namespace_is_its_name() {
        let pod = Pod {
            metadata: ObjectMeta { name: Some("web".into()), ..Default::default() },
            ..Default::default()
        };
        assert_eq!(pod_ref(&pod), "web");
        assert_eq!(pod_key("", "web"), "web");
        assert_eq!(pod_key("shop", "web"), "shop/web");
    }
}
