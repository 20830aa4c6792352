//! The reference host for standalone mode: pod manifests from a folder, a local process
//! runtime, and the kubelet-like sync loop that drives the engine.

pub mod console;
pub mod deadline;
pub mod events;
pub mod history;
pub mod kubelet;
pub mod manifests;
pub mod phase;
pub mod runtime;
pub mod transitions;

/// Whether `error` is the node running out of something (descriptors, memory, buffers): it says
/// nothing of the file or socket the agent was after.
pub(crate) fn is_shortage(error: &std::io::Error) -> bool {
    matches!(
        rustix::io::Errno::from_io_error(error),
        Some(
            rustix::io::Errno::MFILE
                | rustix::io::Errno::NFILE
                | rustix::io::Errno::NOMEM
                | rustix::io::Errno::NOBUFS
        )
    )
}
