//! Finding a container's status, or its spec, by name. Upstream scans the list once per
//! container (`podutil.GetContainerStatus`, `GetContainerByName`), which is quadratic in a pod's
//! containers: harmless for the usual handful, minutes of CPU for a pod of 10,000 containers that
//! is regenerated on every probe result. [`ByName`] answers the same question, first match wins
//! as with a scan, with an index once the list is long enough for one to pay.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, ContainerStatus};

/// Lists shorter than this are scanned; an index costs more than it saves on them.
const INDEX_FROM: usize = 16;

/// Something with a container name.
pub trait Named {
    /// The container name to look up by.
    fn name(&self) -> &str;
}

impl Named for ContainerStatus {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Named for Container {
    fn name(&self) -> &str {
        &self.name
    }
}

/// A list looked up by name: the first item of that name, as a scan finds it.
#[derive(Debug)]
pub struct ByName<'a, T> {
    items: &'a [T],
    index: Option<HashMap<&'a str, &'a T>>,
}

impl<'a, T: Named> ByName<'a, T> {
    /// Wraps `items`, building the index when the list has 16 items or more.
    pub fn new(items: &'a [T]) -> Self {
        let index = (items.len() >= INDEX_FROM).then(|| {
            let mut index = HashMap::with_capacity(items.len());
            for item in items {
                index.entry(item.name()).or_insert(item);
            }
            index
        });
        ByName { items, index }
    }

    /// The first item named `name`.
    pub fn get(&self, name: &str) -> Option<&'a T> {
        match &self.index {
            Some(index) => index.get(name).copied(),
            None => self.items.iter().find(|item| item.name() == name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(name: &str, restarts: i32) -> ContainerStatus {
        ContainerStatus { name: name.into(), restart_count: restarts, ..Default::default() }
    }

    #[test]
    fn the_first_of_a_name_wins_scanned_or_indexed() {
        for len in [3, INDEX_FROM, 1_000] {
            let mut list: Vec<ContainerStatus> = (0..len).map(|i| status(&format!("c{i}"), 0)).collect();
            list.push(status("c1", 7));
            let by_name = ByName::new(&list);
            assert_eq!(by_name.index.is_some(), len + 1 >= INDEX_FROM, "len {len}");
            assert_eq!(by_name.get("c1").map(|s| s.restart_count), Some(0), "len {len}: the first c1");
            assert_eq!(by_name.get("c2").map(|s| s.name.as_str()), Some("c2"), "len {len}");
            assert!(by_name.get("missing").is_none(), "len {len}");
        }
    }
}
