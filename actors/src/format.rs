//! How pods are named in logs, errors and events: the two forms the kubelet uses, and nothing
//! else. `pod = ns/name` in every log line (klog's `KObj`), and `name_namespace(uid)` where
//! upstream prints `format.Pod` (probe errors such as "missing probe handler for …").

use k8s_openapi::api::core::v1::Pod;

/// `namespace/name`, as klog's `KObj` prints a pod: the `pod` field of log lines.
pub fn pod_ref(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
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
    }
}
