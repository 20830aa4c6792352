//! The process groups of the containers that run now, kept apart from the runtime actor so
//! that the agent can SIGKILL every container even when the actor cannot answer (a forced
//! shutdown).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::process::{Delivery, Signal, signal_group};

/// Who a running process group is, for logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOwner {
    pub pod: String,
    pub container: String,
}

/// The live container process groups, shared by every clone.
#[derive(Debug, Clone, Default)]
pub struct ContainerGroups {
    groups: Arc<Mutex<BTreeMap<u32, GroupOwner>>>,
}

impl ContainerGroups {
    pub fn new() -> Self {
        Self::default()
    }

    /// A container's group started.
    pub fn add(&self, pgid: u32, owner: GroupOwner) {
        self.lock().insert(pgid, owner);
    }

    /// A container's group was killed after its leader exited; its ID may be reused from now on.
    pub fn remove(&self, pgid: u32) {
        self.lock().remove(&pgid);
    }

    /// How many container groups run.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// SIGKILLs every group at once; returns how many were still there.
    pub fn kill_all(&self) -> usize {
        let groups = self.lock().clone();
        let mut killed = 0;
        for (pgid, owner) in groups {
            match signal_group(pgid, Signal::Kill) {
                Ok(Delivery::Sent) => {
                    killed += 1;
                    tracing::warn!(pgid, pod = %owner.pod, container = %owner.container, "container killed");
                }
                Ok(Delivery::Gone) => {}
                Err(error) => {
                    tracing::error!(pgid, pod = %owner.pod, container = %owner.container, %error, "cannot kill container")
                }
            }
        }
        killed
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, GroupOwner>> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
