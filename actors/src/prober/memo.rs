//! What one worker's probes keep from one run to the next: [`ProbeMemo`] holds the HTTP probe's
//! built first request (its URL's scheme, host and text, and the request as one block of bytes,
//! about 300 bytes), so a probe that runs every second does not rebuild the same URL and headers
//! every second (upstream builds the request anew for each probe; what goes on the wire is the
//! same either way). A request depends only on the probe spec, the container's ports and the
//! pod IP, and the memo is keyed by the pod IP alone: so a memo belongs to one probe of one
//! container. The worker's prepared probe keeps it ([`super::prepared`]), so a worker starts a
//! fresh one with each new publish of its pod's status and each new probe spec (a probe still
//! in flight keeps the old one). docs/benchmarks.md, "The HTTP request built once per worker", has
//! what the rebuilding cost.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Probe;

use super::ProbeError;
use super::http::{FirstRequest, HttpProbeRequest};

/// One worker's memo, shared with the probe it is running (a clone shares it). It belongs to
/// one probe of one container: it is keyed by the pod IP only, so a memo shared by two probes
/// would send one's request for the other. Empty until the first HTTP probe; never holds a request that failed to build. [`ProbeMemo::for_probe`] makes
/// one that keeps nothing (and costs nothing) for a probe that is not an HTTP GET.
#[derive(Debug, Clone)]
pub struct ProbeMemo {
    /// `None`: a memo that keeps nothing.
    http: Option<Arc<Mutex<Option<HttpMemo>>>>,
}

/// A built request's first round trip and the pod IP it was built for.
#[derive(Debug)]
struct HttpMemo {
    pod_ip: Box<str>,
    first: FirstRequest,
}

impl ProbeMemo {
    /// A memo for a worker running `probe`: one that keeps the HTTP request for an HTTP GET
    /// probe, one that keeps nothing for the others.
    pub fn for_probe(probe: Option<&Probe>) -> Self {
        let http = probe.is_some_and(|p| p.http_get.is_some() && p.exec.is_none());
        ProbeMemo { http: http.then(Arc::default) }
    }

    /// A memo that keeps nothing and costs nothing: what a worker passes to a runner that
    /// prepares no probe ([`crate::prober::ProbeRunner::prepare`]).
    pub const fn unset() -> Self {
        ProbeMemo { http: None }
    }
}

impl Default for ProbeMemo {
    /// A memo that keeps the HTTP request (a host that does not know the probe's handler).
    fn default() -> Self {
        ProbeMemo { http: Some(Arc::default()) }
    }
}

impl ProbeMemo {
    /// The first round trip of the request built for `pod_ip`, built with `build` when the
    /// memo holds none for it (the pod IP changed, or this is the first probe). A build error
    /// is returned and not kept, and so is a request that cannot be written (`None`: the probe
    /// sends the whole request instead). The copy shares its bytes with the one kept.
    pub(crate) fn http_request(
        &self,
        pod_ip: &str,
        build: impl FnOnce() -> Result<HttpProbeRequest, ProbeError>,
    ) -> Result<Option<FirstRequest>, ProbeError> {
        let Some(http) = &self.http else { return Ok(build()?.first().cloned()) };
        // A worker runs one probe at a time, so the lock is never contended; a poisoned one
        // (a panic while building) is only a lost memo.
        let mut memo = http.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(kept) = memo.as_ref()
            && *kept.pod_ip == *pod_ip
        {
            return Ok(Some(kept.first.clone()));
        }
        *memo = None;
        let Some(first) = build()?.first().cloned() else { return Ok(None) };
        *memo = Some(HttpMemo { pod_ip: pod_ip.into(), first: first.clone() });
        Ok(Some(first))
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, HTTPGetAction};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;

    fn build(pod_ip: &str, builds: &mut u32) -> Result<HttpProbeRequest, ProbeError> {
        *builds += 1;
        let action =
            HTTPGetAction { port: IntOrString::Int(8080), path: Some("/ready".into()), ..Default::default() };
        HttpProbeRequest::new(&action, &Container::default(), pod_ip)
    }

    #[test]
    fn a_request_is_built_once_per_pod_ip() {
        let memo = ProbeMemo::default();
        let mut builds = 0;
        let first = memo.http_request("10.0.0.1", || build("10.0.0.1", &mut builds)).unwrap().expect("kept");
        let again = memo.http_request("10.0.0.1", || build("10.0.0.1", &mut builds)).unwrap().expect("kept");
        assert_eq!(first, again);
        assert_eq!(builds, 1);

        let moved = memo.http_request("10.0.0.2", || build("10.0.0.2", &mut builds)).unwrap().expect("kept");
        assert_eq!(builds, 2);
        assert_eq!(moved.url(), "http://10.0.0.2:8080/ready");
        assert_eq!((moved.scheme(), moved.host()), ("http", "10.0.0.2:8080"));
    }

    #[test]
    fn a_clone_shares_the_memo() {
        let memo = ProbeMemo::default();
        let mut builds = 0;
        memo.http_request("10.0.0.1", || build("10.0.0.1", &mut builds)).unwrap();
        memo.clone().http_request("10.0.0.1", || build("10.0.0.1", &mut builds)).unwrap();
        assert_eq!(builds, 1);
        ProbeMemo::default().http_request("10.0.0.1", || build("10.0.0.1", &mut builds)).unwrap();
        assert_eq!(builds, 2);
    }

    #[test]
    fn a_memo_for_a_probe_that_is_not_http_keeps_nothing() {
        let tcp = Probe { tcp_socket: Some(Default::default()), ..Default::default() };
        let memo = ProbeMemo::for_probe(Some(&tcp));
        assert!(memo.http.is_none());
        let mut builds = 0;
        memo.http_request("10.0.0.1", || build("10.0.0.1", &mut builds)).unwrap();
        memo.http_request("10.0.0.1", || build("10.0.0.1", &mut builds)).unwrap();
        assert_eq!(builds, 2);
        let http = Probe { http_get: Some(Default::default()), ..Default::default() };
        assert!(ProbeMemo::for_probe(Some(&http)).http.is_some());
        assert!(ProbeMemo::for_probe(None).http.is_none());
    }

    #[test]
    fn a_failed_build_is_not_kept() {
        let memo = ProbeMemo::default();
        let mut builds = 0;
        assert!(memo.http_request("", || build("", &mut builds)).is_err());
        assert!(memo.http_request("", || build("", &mut builds)).is_err());
        assert_eq!(builds, 2);
    }
}
