//! Container identity as the runtime reports it (upstream `kubecontainer.ContainerID`).

use std::fmt;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};

/// A runtime container ID, `type://id` in its string form (`containerd://abc`). Its parts are
/// shared: a worker hands its container's ID to every probe and cache write, and a clone is
/// two reference counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ContainerId {
    /// The runtime type (`containerd`, `cri-o`, `probelet`).
    pub runtime: Arc<str>,
    /// The runtime's own ID.
    pub id: Arc<str>,
}

impl ContainerId {
    /// An ID from its two parts: the runtime type and the runtime's own ID.
    pub fn new(runtime: impl Into<Arc<str>>, id: impl Into<Arc<str>>) -> Self {
        ContainerId { runtime: runtime.into(), id: id.into() }
    }

    /// Parses `type://id`. A string without `://` is taken as an ID with an empty type, as
    /// upstream's `ParseString` would reject it: we keep it usable as an opaque key instead.
    pub fn parse(s: &str) -> Self {
        match s.split_once("://") {
            Some((runtime, id)) => ContainerId::new(runtime, id),
            None => ContainerId::new("", s),
        }
    }

    /// Whether `s` is this ID's string form: what [`ContainerId::parse`] would make this ID of
    /// (checked without building one).
    pub fn is(&self, s: &str) -> bool {
        // `parse` splits at the first `://`, so a parsed runtime never holds one: `s` is this
        // ID exactly when it is the runtime, `://`, then the ID. A bare ID has no `://` at all.
        match s.strip_prefix(&*self.runtime).and_then(|rest| rest.strip_prefix("://")) {
            Some(id) => !has_separator(&self.runtime) && *self.id == *id,
            None => self.runtime.is_empty() && *self.id == *s && !has_separator(s),
        }
    }

    /// The ID as upstream's `ContainerID.String()` writes it in its log lines: `type://id`
    /// always, `://` for an ID with neither part (where [`Display`](fmt::Display) writes a bare
    /// ID without its `://`, as it was parsed).
    pub fn kubelet_string(&self) -> String {
        format!("{}://{}", self.runtime, self.id)
    }

    /// Whether both parts are empty (the ID of a container status that has none yet).
    pub fn is_empty(&self) -> bool {
        self.runtime.is_empty() && self.id.is_empty()
    }
}

/// Whether `s` holds `://` (a byte scan: this runs on every probe, on short strings).
fn has_separator(s: &str) -> bool {
    s.as_bytes().windows(3).any(|w| w == b"://")
}

/// The status of the container with this ID, regular or init, if it is running (what a kill after
/// a failed liveness or startup probe must find: the container the probe ran against, still
/// there).
pub fn running_status<'a>(status: &'a PodStatus, id: &ContainerId) -> Option<&'a ContainerStatus> {
    let id = id.to_string();
    status.container_statuses.iter().flatten().chain(status.init_container_statuses.iter().flatten()).find(
        |c| {
            c.container_id.as_deref() == Some(id.as_str())
                && c.state.as_ref().is_some_and(|s| s.running.is_some())
        },
    )
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.runtime.is_empty() {
            f.write_str(&self.id)
        } else {
            write!(f, "{}://{}", self.runtime, self.id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_type_and_id() {
        let id = ContainerId::parse("containerd://abc123");
        assert_eq!(id, ContainerId::new("containerd", "abc123"));
        assert_eq!(id.to_string(), "containerd://abc123");
    }

    #[test]
    fn is_says_what_parse_would_make() {
        for raw in ["containerd://abc", "abc", "", "a://b://c", "://x", "://a://b", "cri-o://"] {
            let parsed = ContainerId::parse(raw);
            assert!(parsed.is(raw), "{raw}");
            for other in [
                "containerd://abd",
                "containerd://abc",
                "abc",
                "",
                "cri-o://abc",
                "x://",
                "a://b",
                "://a://b",
                "a://b://c",
            ] {
                assert_eq!(parsed.is(other), ContainerId::parse(other) == parsed, "{raw} against {other}");
            }
        }
    }

    #[test]
    fn is_matches_parse_for_ids_built_by_hand_too() {
        for id in [ContainerId::new("a://b", "c"), ContainerId::new("", "x://y"), ContainerId::new("r", "")] {
            for other in ["a://b://c", "a://b", "c", "x://y", "://x://y", "r://", "r"] {
                assert_eq!(id.is(other), ContainerId::parse(other) == id, "{id:?} against {other}");
            }
        }
    }

    #[test]
    fn keeps_a_bare_id() {
        let id = ContainerId::parse("abc");
        assert_eq!(id.to_string(), "abc");
    }
}
