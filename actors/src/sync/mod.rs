//! Status sync to the API server: the kubelet's status patch ([`patch`]), the request budget
//! ([`rate`]) and the syncer actor ([`syncer`]).

pub mod patch;
pub mod rate;
pub mod syncer;
