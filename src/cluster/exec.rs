//! Exec probes through the API server's `pods/exec`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams};
use probelet_actors::capacity::ShrinkAfterRemoval;
use probelet_actors::container::ContainerId;
use probelet_actors::contracts::{CommandRunner, ExecError, ExecOutput, MAX_EXEC_OUTPUT};
use probelet_actors::gofmt::go_quote;
use probelet_actors::sync::rate::RateLimiter;
use tokio::io::AsyncReadExt;

/// Namespace, pod name and container name.
type ContainerPlace = (String, String, String);

/// A pod's status lists a container ID: the pod (by UID) and the container it says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Claim {
    uid: String,
    place: ContainerPlace,
}

/// Which pods claim each container ID: what their statuses list.
#[derive(Debug, Default)]
struct Claims {
    by_id: HashMap<String, Vec<Claim>>,
}

impl Claims {
    /// Records the container IDs of a pod's status, replacing what an earlier status of the
    /// same pod said (a restarted container's old ID would otherwise stay for the pod's life).
    fn learn(&mut self, pod: &Pod) {
        let uid = claimant(pod);
        self.forget(&uid);
        let (ns, name) = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            pod.metadata.name.clone().unwrap_or_default(),
        );
        let Some(status) = pod.status.as_ref() else { return };
        for cs in
            status.container_statuses.iter().flatten().chain(status.init_container_statuses.iter().flatten())
        {
            if let Some(id) = cs.container_id.clone().filter(|id| !id.is_empty()) {
                let claim = Claim { uid: uid.clone(), place: (ns.clone(), name.clone(), cs.name.clone()) };
                let claims = self.by_id.entry(id).or_default();
                if !claims.contains(&claim) {
                    claims.push(claim);
                }
            }
        }
    }

    /// Drops the claims of the pod with this UID ([`claimant`]).
    fn forget(&mut self, uid: &str) {
        self.by_id.retain(|_, claims| {
            claims.retain(|c| c.uid != uid);
            !claims.is_empty()
        });
    }

    /// Where `id` runs: the one pod that claims it.
    fn target(&self, id: &str) -> Result<ContainerPlace, String> {
        match self.by_id.get(id).map(Vec::as_slice).unwrap_or_default() {
            [] => Err(format!("container {id} is not in the status of any pod the agent watches")),
            [claim, rest @ ..] if rest.iter().all(|c| c.uid == claim.uid) => Ok(claim.place.clone()),
            several => {
                let mut pods: Vec<String> =
                    several.iter().map(|c| format!("{}/{}", c.place.0, c.place.1)).collect();
                pods.dedup();
                Err(format!(
                    "container {id} is in the status of more than one pod ({}): running the probe in none",
                    pods.join(", ")
                ))
            }
        }
    }
}

/// Runs exec probes through the API server's `pods/exec` (websocket, kube's `v5`/`v4`
/// channel protocols). The kubelet runs them with the CRI's `ExecSync`, which hands back
/// stdout, stderr and the exit code; here the same come from the stream's channels and its
/// final `Status`.
///
/// The kubelet hands `ExecSync` a container ID that its runtime owns. Here an ID is only what
/// pods' statuses say, and whoever writes a pod's status can write any ID in it. So an ID is
/// followed only while exactly one pod claims it: another pod naming the same ID (to have its
/// probe command run in someone else's container, with the agent's `pods/exec`) makes the ID
/// run nowhere. Claims are kept per pod UID, so that a pod deleted and made again under its
/// name keeps the new pod's claims when the old one is forgotten.
#[derive(Clone)]
pub struct ExecRunner {
    client: kube::Client,
    limiter: RateLimiter,
    containers: Arc<RwLock<Claims>>,
}

impl ExecRunner {
    pub fn new(client: kube::Client, limiter: RateLimiter) -> Self {
        ExecRunner { client, limiter, containers: Arc::default() }
    }

    /// Records the container IDs of a pod's status, replacing what an earlier status of the
    /// same pod said.
    pub fn learn(&self, pod: &Pod) {
        if let Ok(mut claims) = self.containers.write() {
            claims.learn(pod);
        }
    }

    /// Drops this pod's claims (by UID: a pod of the same name made since keeps its own).
    pub fn forget(&self, pod: &Pod) {
        if let Ok(mut claims) = self.containers.write() {
            claims.forget(&claimant(pod));
            claims.by_id.shrink_after_removal();
        }
    }

    fn target(&self, id: &str) -> Result<ContainerPlace, String> {
        let claims =
            self.containers.read().map_err(|_| "the agent's container table is unusable".to_owned())?;
        claims.target(id)
    }
}

/// Who claims IDs for `pod`: its UID, or its namespace and name where it has none.
fn claimant(pod: &Pod) -> String {
    pod.metadata.uid.clone().filter(|uid| !uid.is_empty()).unwrap_or_else(|| {
        format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        )
    })
}

impl CommandRunner for ExecRunner {
    fn run_in_container(
        &self,
        container_id: &ContainerId,
        cmd: &[String],
        timeout: Duration,
    ) -> BoxFuture<'static, Result<ExecOutput, ExecError>> {
        let target = self.target(&container_id.to_string());
        let (client, limiter, cmd) = (self.client.clone(), self.limiter.clone(), cmd.to_vec());
        Box::pin(async move {
            let (namespace, pod, container) = target.map_err(ExecError::Runtime)?;
            limiter.acquire().await;
            let api: Api<Pod> = Api::namespaced(client, &namespace);
            let params =
                AttachParams::default().container(container.clone()).stdout(true).stderr(true).stdin(false);
            let (mut stdout, mut stderr) = (Capture::default(), Capture::default());
            let run = exec_stream(&api, &pod, cmd, &params, &mut stdout, &mut stderr);
            let result = tokio::time::timeout(timeout, run).await;
            // Upstream `RunInContainer`: stdout, then stderr, then the prober's 10 KiB cap.
            let mut output = stdout.bytes;
            output.extend_from_slice(&stderr.bytes);
            output.truncate(MAX_EXEC_OUTPUT);
            let failed = |why: String| {
                ExecError::Runtime(format!(
                    "exec in container {container} of pod {namespace}/{pod} failed: {why}"
                ))
            };
            match result {
                Err(_) => Err(ExecError::Timeout { output }),
                Ok(Err(why)) => Err(failed(why)),
                Ok(Ok(status)) => match exit_code(&status) {
                    Ok(exit_code) => Ok(ExecOutput { output, exit_code }),
                    Err(why) => Err(failed(why)),
                },
            }
        })
    }
}

/// Up to [`MAX_EXEC_OUTPUT`] bytes of one stream; the rest is read and dropped, so a chatty
/// command neither grows memory nor stalls the stream.
#[derive(Default)]
struct Capture {
    bytes: Vec<u8>,
}

impl Capture {
    fn push(&mut self, data: &[u8]) {
        let room = MAX_EXEC_OUTPUT.saturating_sub(self.bytes.len());
        self.bytes.extend_from_slice(&data[..data.len().min(room)]);
    }
}

async fn drain(reader: Option<&mut (impl tokio::io::AsyncRead + Unpin)>, capture: &mut Capture) {
    let Some(reader) = reader else { return };
    let mut chunk = vec![0u8; 8 * 1024];
    while let Ok(n) = reader.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        capture.push(&chunk[..n]);
    }
}

/// Opens the exec stream, reads stdout and stderr into the captures (they keep what came
/// before a timeout) and returns the final `Status`.
async fn exec_stream(
    api: &Api<Pod>,
    pod: &str,
    cmd: Vec<String>,
    params: &AttachParams,
    stdout: &mut Capture,
    stderr: &mut Capture,
) -> Result<Status, String> {
    let mut process = api.exec(pod, cmd, params).await.map_err(|e| connect_error(&e))?;
    let Some(status) = process.take_status() else {
        return Err("the exec stream has no status channel".to_owned());
    };
    let (mut out, mut err) = (process.stdout(), process.stderr());
    let status = {
        // Both streams at once: kube's buffers hold 1 KiB each, and a stream left unread
        // stalls the other. A stream only ends once the status came or the connection
        // ended; the latter may leave the pipes open, so the status future decides.
        let drained = async {
            tokio::join!(drain(out.as_mut(), stdout), drain(err.as_mut(), stderr));
        };
        tokio::pin!(drained, status);
        tokio::select! {
            () = &mut drained => status.await,
            status = &mut status => match status {
                Some(status) => {
                    drained.await;
                    Some(status)
                }
                None => None,
            },
        }
    };
    match status {
        Some(status) => Ok(status),
        None => Err(match process.join().await {
            Err(e) => e.to_string(),
            Ok(()) => "the stream ended without the command's exit status".to_owned(),
        }),
    }
}

/// An API error's message (`pods "web" not found`) rather than kube's debug dump of it.
fn connect_error(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        kube::Error::Api(status) => match http::StatusCode::from_u16(status.code) {
            Ok(code) => format!("the API server answered {code}"),
            Err(_) => format!("the API server answered {}", status.code),
        },
        other => other.to_string(),
    }
}

/// The command's exit code from the stream's final `Status`, decoded as client-go's
/// `errorDecoderV4` does (its error texts too): `Success` is 0, a `NonZeroExitCode` failure
/// carries the code in its `ExitCode` cause, and any other failure means the command did not
/// run (the runtime's message).
fn exit_code(status: &Status) -> Result<i32, String> {
    match status.status.as_deref() {
        Some("Success") => Ok(0),
        Some("Failure") if status.reason.as_deref() == Some("NonZeroExitCode") => {
            let Some(details) = &status.details else {
                return Err("error stream protocol error: details must be set".to_owned());
            };
            let cause = details
                .causes
                .iter()
                .flatten()
                .find(|c| c.reason.as_deref() == Some("ExitCode"))
                .ok_or_else(|| "error stream protocol error: no ExitCode cause given".to_owned())?;
            let message = cause.message.as_deref().unwrap_or_default();
            message
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| message.parse::<u8>().ok())
                .flatten()
                .map(i32::from)
                .ok_or_else(|| {
                    format!("error stream protocol error: invalid exit code value {}", go_quote(message))
                })
        }
        Some("Failure") => Err(match status.message.as_deref() {
            Some(m) if !m.is_empty() => m.to_owned(),
            _ => status.reason.clone().unwrap_or_else(|| "unknown error".to_owned()),
        }),
        _ => Err("error stream protocol error: unknown error".to_owned()),
    }
}

#[cfg(test)]
mod exec_tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};

    fn failure(reason: &str, causes: Option<Vec<(&str, &str)>>, message: &str) -> Status {
        Status {
            status: Some("Failure".into()),
            reason: Some(reason.into()),
            message: Some(message.into()),
            details: causes.map(|cs| StatusDetails {
                causes: Some(
                    cs.into_iter()
                        .map(|(r, m)| StatusCause {
                            reason: Some(r.into()),
                            message: Some(m.into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn exit_codes_from_status() {
        let success = Status { status: Some("Success".into()), ..Default::default() };
        assert_eq!(exit_code(&success), Ok(0));
        let cases: &[(Status, Result<i32, &str>)] = &[
            (failure("NonZeroExitCode", Some(vec![("ExitCode", "3")]), ""), Ok(3)),
            (failure("NonZeroExitCode", Some(vec![("Other", "9"), ("ExitCode", "255")]), ""), Ok(255)),
            (
                failure("NonZeroExitCode", Some(vec![("ExitCode", "256")]), ""),
                Err("error stream protocol error: invalid exit code value \"256\""),
            ),
            (
                failure("NonZeroExitCode", Some(vec![("ExitCode", "+1")]), ""),
                Err("error stream protocol error: invalid exit code value \"+1\""),
            ),
            (
                failure("NonZeroExitCode", Some(vec![]), ""),
                Err("error stream protocol error: no ExitCode cause given"),
            ),
            (failure("NonZeroExitCode", None, ""), Err("error stream protocol error: details must be set")),
            (
                failure("InternalError", None, "Internal error occurred: no such file"),
                Err("Internal error occurred: no such file"),
            ),
            (failure("InternalError", None, ""), Err("InternalError")),
            (Status::default(), Err("error stream protocol error: unknown error")),
        ];
        for (status, want) in cases {
            assert_eq!(exit_code(status), want.map_err(str::to_owned), "{status:?}");
        }
    }

    #[test]
    fn capture_keeps_the_first_bytes() {
        let mut c = Capture::default();
        c.push(&[b'a'; 6000]);
        c.push(&[b'b'; 6000]);
        c.push(b"c");
        assert_eq!(c.bytes.len(), MAX_EXEC_OUTPUT);
        assert_eq!(c.bytes[MAX_EXEC_OUTPUT - 1], b'b');
    }
}

#[cfg(test)]
mod claims_tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus};
    use kube::api::ObjectMeta;

    fn pod(namespace: &str, name: &str, uid: &str, containers: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                container_statuses: Some(
                    containers
                        .iter()
                        .map(|(name, id)| ContainerStatus {
                            name: (*name).into(),
                            container_id: Some((*id).into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
        }
    }

    fn place(namespace: &str, pod: &str, container: &str) -> Result<ContainerPlace, String> {
        Ok((namespace.into(), pod.into(), container.into()))
    }

    /// Found by a hostile test: a pod whose status named another pod's container ID had its
    /// probe command run in that container, with the agent's `pods/exec`. An ID two pods claim
    /// now runs nowhere, until one of them lets go.
    #[test]
    fn an_id_two_pods_claim_runs_in_neither() {
        let mut claims = Claims::default();
        let victim = pod("kube-system", "victim", "u-victim", &[("db", "containerd://shared")]);
        claims.learn(&victim);
        assert_eq!(claims.target("containerd://shared"), place("kube-system", "victim", "db"));
        let evil = pod("default", "evil", "u-evil", &[("app", "containerd://shared")]);
        claims.learn(&evil);
        assert_eq!(
            claims.target("containerd://shared"),
            Err("container containerd://shared is in the status of more than one pod (kube-system/victim, \
                 default/evil): running the probe in none"
                .into())
        );
        claims.forget(&claimant(&evil));
        assert_eq!(claims.target("containerd://shared"), place("kube-system", "victim", "db"));
    }

    /// Found by a hostile test: a pod deleted and made again under its name while the watch
    /// re-listed. The new pod was learnt first, and forgetting the old one by its name dropped
    /// the new one's containers: its exec probes errored until another watch event came.
    #[test]
    fn forgetting_a_pod_keeps_the_containers_of_a_new_pod_of_its_name() {
        let mut claims = Claims::default();
        let old = pod("default", "web", "u-old", &[("app", "containerd://old")]);
        let new = pod("default", "web", "u-new", &[("app", "containerd://new")]);
        claims.learn(&old);
        claims.learn(&new);
        claims.forget(&claimant(&old));
        assert_eq!(claims.target("containerd://new"), place("default", "web", "app"));
        assert_eq!(
            claims.target("containerd://old"),
            Err("container containerd://old is not in the status of any pod the agent watches".into())
        );
    }

    /// A new status of the same pod replaces what the last one said.
    #[test]
    fn a_pods_new_status_replaces_its_old_ids() {
        let mut claims = Claims::default();
        claims.learn(&pod("default", "web", "u", &[("app", "containerd://1")]));
        claims.learn(&pod("default", "web", "u", &[("app", "containerd://2")]));
        assert!(claims.target("containerd://1").is_err());
        assert_eq!(claims.target("containerd://2"), place("default", "web", "app"));
        assert_eq!(claims.by_id.len(), 1);
    }
}
