//! A container spec as its pod holds it: [`PodContainer`] is the pod's `Arc` and the place of
//! one container in its spec, so the prober manager, every worker and every probe read the one
//! copy of the pod the host handed in instead of a clone of the container each (upstream's
//! worker keeps a shallow copy of `v1.Container`, which shares the strings and slices with the
//! pod; a Rust clone would copy them all). docs/memory.md has the measurements.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, LazyLock};

use k8s_openapi::api::core::v1::{Container, Pod};

/// The first name two of the pod's containers share, if any: init containers (sidecars
/// included) and regular containers are one name space, as for the API server
/// (`spec.containers[1].name: Duplicate value: "app"`). The engine keys probe workers, probe
/// results and container statuses by container name, so it cannot probe such a pod as written:
/// the prober manager refuses it ([`crate::Pipeline::add_pod`]), and so does the engine's
/// `sync_pod`.
pub fn duplicate_container_name(pod: &Pod) -> Option<&str> {
    let spec = pod.spec.as_ref()?;
    let mut seen = std::collections::HashSet::new();
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .map(|c| c.name.as_str())
        .find(|name| !seen.insert(*name))
}

/// One container of a pod, read through the pod's shared `Arc`. Cloning it clones the `Arc`.
#[derive(Clone)]
pub struct PodContainer {
    pod: Arc<Pod>,
    at: Place,
}

/// Where the container is.
#[derive(Clone)]
enum Place {
    /// `spec.containers[i]`.
    Regular(usize),
    /// `spec.initContainers[i]` (a sidecar).
    Init(usize),
    /// A container that is not in the pod's spec (a host passed one of its own): kept apart.
    Own(Arc<Container>),
}

/// What a [`PodContainer`] reads as if its place is not in the pod. The pod is never mutated
/// behind its `Arc`, so a place found at construction stays valid; this only keeps a read from
/// ever panicking.
static NO_CONTAINER: LazyLock<Container> = LazyLock::new(Container::default);

impl PodContainer {
    /// The container named `name` among the pod's regular containers, then its init
    /// containers; `None` if the spec has none of that name.
    pub fn find(pod: &Arc<Pod>, name: &str) -> Option<Self> {
        let spec = pod.spec.as_ref()?;
        let at = match spec.containers.iter().position(|c| c.name == name) {
            Some(i) => Place::Regular(i),
            None => Place::Init(spec.init_containers.iter().flatten().position(|c| c.name == name)?),
        };
        Some(PodContainer { pod: pod.clone(), at })
    }

    /// Every regular container of the pod, then every init container, in spec order.
    pub fn all(pod: &Arc<Pod>) -> impl Iterator<Item = PodContainer> + '_ {
        let spec = pod.spec.as_ref();
        let regular = spec.map_or(0, |s| s.containers.len());
        let init = spec.and_then(|s| s.init_containers.as_ref()).map_or(0, Vec::len);
        (0..regular)
            .map(Place::Regular)
            .chain((0..init).map(Place::Init))
            .map(move |at| PodContainer { pod: pod.clone(), at })
    }

    /// The pod's container of this spec's name when the pod has one equal to it, else this spec
    /// kept on its own (a host that passes a container the pod does not list).
    pub fn in_pod_or_own(pod: &Arc<Pod>, container: Arc<Container>) -> Self {
        match Self::find(pod, &container.name) {
            Some(found) if *found == *container => found,
            _ => PodContainer { pod: pod.clone(), at: Place::Own(container) },
        }
    }

    /// The pod the container belongs to.
    pub fn pod(&self) -> &Arc<Pod> {
        &self.pod
    }

    /// Whether it is one of the pod's init containers (a sidecar, when probed).
    pub fn is_init(&self) -> bool {
        matches!(self.at, Place::Init(_))
    }

    /// Whether this container is read from the pod's own spec (not a copy kept apart).
    pub fn is_shared_with_pod(&self) -> bool {
        !matches!(self.at, Place::Own(_))
    }
}

impl Deref for PodContainer {
    type Target = Container;

    fn deref(&self) -> &Container {
        let spec = self.pod.spec.as_ref();
        let found = match &self.at {
            Place::Regular(i) => spec.and_then(|s| s.containers.get(*i)),
            Place::Init(i) => spec.and_then(|s| s.init_containers.as_ref()).and_then(|c| c.get(*i)),
            Place::Own(container) => Some(&**container),
        };
        found.unwrap_or(&NO_CONTAINER)
    }
}

impl fmt::Debug for PodContainer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PodContainer")
            .field("pod_uid", &self.pod.metadata.uid)
            .field("container", &self.name)
            .finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod() -> Arc<Pod> {
        let container = |name: &str| Container { name: name.into(), ..Default::default() };
        Arc::new(Pod {
            spec: Some(PodSpec {
                containers: vec![container("app"), container("web")],
                init_containers: Some(vec![container("sidecar")]),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn a_found_container_reads_the_pods_own_spec() {
        let pod = pod();
        for (name, expected) in [
            ("app", &pod.spec.as_ref().unwrap().containers[0]),
            ("web", &pod.spec.as_ref().unwrap().containers[1]),
            ("sidecar", &pod.spec.as_ref().unwrap().init_containers.as_ref().unwrap()[0]),
        ] {
            let found = PodContainer::find(&pod, name).unwrap();
            assert!(std::ptr::eq(&*found, expected), "{name}: not the pod's own container");
            assert!(Arc::ptr_eq(found.pod(), &pod) && found.is_shared_with_pod(), "{name}");
        }
        assert!(PodContainer::find(&pod, "db").is_none());
        assert!(PodContainer::find(&Arc::new(Pod::default()), "app").is_none());
    }

    #[test]
    fn all_lists_regular_then_init_containers_and_only_clones_the_pod_arc() {
        let pod = pod();
        let all: Vec<_> = PodContainer::all(&pod).collect();
        let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["app", "web", "sidecar"]);
        assert_eq!(Arc::strong_count(&pod), 4, "one pod, three handles, no copies");
    }

    #[test]
    fn a_container_the_pod_does_not_list_is_kept_apart() {
        let pod = pod();
        let own =
            Arc::new(Container { name: "app".into(), image: Some("other".into()), ..Default::default() });
        let kept = PodContainer::in_pod_or_own(&pod, own.clone());
        assert!(!kept.is_shared_with_pod(), "differs from the pod's app container");
        assert_eq!(kept.image.as_deref(), Some("other"));
        let same = Arc::new(pod.spec.as_ref().unwrap().containers[1].clone());
        let shared = PodContainer::in_pod_or_own(&pod, same);
        assert!(shared.is_shared_with_pod() && shared.name == "web");
    }
}
