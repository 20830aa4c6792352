//! The status manager: its actor ([`manager::StatusManager`]) and its pure logic — condition
//! generators, normalisation, kubelet-owned equality, state-transition checks, TerminatePod's
//! rewrite and the API merge. Upstream: `pkg/kubelet/status`.

pub mod api_status;
pub mod by_name;
pub mod equality;
pub mod generate;
pub mod manager;
pub mod merge;
pub mod normalize;
pub mod resize;
pub mod terminate;
pub mod transition;
pub mod views;

pub use api_status::{generate_kubelet_conditions, generate_kubelet_conditions_with_resize};
pub use generate::*;
