//! One pod's write (upstream: the status manager's `syncPod`): the merge base (the copy held, or
//! a GET), `mergePodStatus` or the readiness-only merge, the two-way strategic merge patch with
//! the UID (and, for a container status list, the resourceVersion) as a precondition, and the
//! DELETE of a finished pod; the kube errors mapped to what the syncer does next (a 422 on
//! `metadata.uid` confirmed with a GET before the pod counts as recreated). After a few
//! conflicts in a row, the owned conditions go alone first (docs/sync.md §7.5).
//!
//! Requests go through `Api<ApiPod>`, so the copy a GET or a PATCH returns is the server's JSON:
//! a readiness-only write resends the container status items as the server has them, with only
//! `ready` and `started` changed, and fields the typed structs lack survive it.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};

use super::api_pod::ApiPod;
use super::patch::{conditions_only, pod_status_patch, pod_status_patch_json};
use super::rate::{RateLimiter, SpareToken};
use super::rules::{
    can_be_deleted, could_have_running_containers, go_zero_values, readiness_only_sides,
    replaces_container_statuses, resource_version, retry_after, source_uid, with_resource_version,
};
use super::syncer::OwnedFields;
use crate::contracts::PodLookup;
use crate::format::pod_key;
use crate::metrics as names;
use crate::status::equality::ConditionOwnership;
use crate::status::manager::{VersionedPodStatus, observed_generation};
use crate::status::merge::{merge_pod_status_for, merge_readiness_only};
use crate::vocabulary::PodUid;

/// Everything one write needs, taken from the syncer when it starts.
pub(crate) struct SyncJob {
    pub uid: PodUid,
    pub status: VersionedPodStatus,
    pub base: Option<Arc<ApiPod>>,
    pub client: kube::Client,
    pub limiter: RateLimiter,
    pub field_manager: String,
    pub ownership: ConditionOwnership,
    pub owned_fields: OwnedFields,
    pub pods: Arc<dyn PodLookup>,
    pub now: Time,
    /// How long one request may go without its answer.
    pub request_timeout: std::time::Duration,
    /// Send the owned conditions alone first, without the resourceVersion precondition, when
    /// the write carries container statuses too (after a few conflicts in a row:
    /// `pod_sync::CONDITIONS_ALONE_AFTER`).
    pub conditions_alone: bool,
}

/// The request, or an error once `timeout` has passed without its answer: a server that never
/// answers, or kube's own retry sleeping out a 429's `Retry-After` (an hour, if the server says
/// so), would otherwise hold one of the syncer's write slots for good, and a few of them every
/// write. The write then fails and is retried with the syncer's back-off.
async fn bounded<T>(
    timeout: std::time::Duration,
    request: impl std::future::Future<Output = kube::Result<T>>,
) -> kube::Result<T> {
    tokio::time::timeout(timeout, request).await.unwrap_or_else(|_| {
        // kube's default client retries a 429, 503 or 504 on its own inside the request, so
        // with it a server that keeps answering those looks like one that never answers (the
        // agent's syncer has a client without that retry, and sees the answers).
        Err(kube::Error::Service(
            format!(
                "no answer within {}s (or, from a client with kube's default retry, only 429, 503 or 504 answers)",
                timeout.as_secs()
            )
            .into(),
        ))
    })
}

/// How a write ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    Updated,
    Unchanged,
    NotFound,
    Recreated,
    Invalid(String),
    /// The pod changed after the merge base was read (ReadinessOnly's resourceVersion
    /// precondition).
    Conflict,
    Deleted,
    Failed(String),
    DeleteFailed(String),
}

impl WriteOutcome {
    /// The `outcome` label of the sync counter.
    pub fn label(&self) -> &'static str {
        match self {
            WriteOutcome::Updated => "updated",
            WriteOutcome::Unchanged => "unchanged",
            WriteOutcome::NotFound => "not_found",
            WriteOutcome::Recreated => "recreated",
            WriteOutcome::Invalid(_) => "invalid",
            WriteOutcome::Conflict => "conflict",
            WriteOutcome::Deleted => "deleted",
            WriteOutcome::Failed(_) | WriteOutcome::DeleteFailed(_) => "error",
        }
    }

    /// The line upstream's `syncPod` logs (at info) for a write that failed, by the request that
    /// failed: its GET, its DELETE, or else its PATCH. A failed GET's message starts with `get: `.
    pub fn failure_line(&self) -> &'static str {
        match self {
            WriteOutcome::Failed(message) if message.starts_with("get: ") => FAILED_GET_LINE,
            WriteOutcome::DeleteFailed(_) => "Failed to delete status for pod",
            _ => "Failed to update status for pod",
        }
    }
}

/// Upstream's line for a write whose GET failed.
pub const FAILED_GET_LINE: &str = "Failed to get status for pod";

/// What a write reports back to the syncer.
pub(crate) struct JobResult {
    pub uid: PodUid,
    pub namespace: String,
    pub name: String,
    pub version: u64,
    pub outcome: WriteOutcome,
    /// The API pod UID the status belongs to, once known.
    pub api_uid: Option<String>,
    /// The API's copy after this write, the next merge base.
    pub fresh: Option<Arc<ApiPod>>,
    /// The resourceVersion of the copy the status was merged into (for a conflict's floor).
    pub base_version: Option<u64>,
    /// How long the server asked the agent to wait before trying again, with a failure
    /// ([`retry_after`]).
    pub retry_after: Option<std::time::Duration>,
    /// The owned conditions were written alone before the rest (`outcome` is the rest's).
    pub conditions_written: bool,
    /// With [`WriteOutcome::Recreated`] found by the GET, the UID of the pod now under the
    /// name (as the pod source knows it), for upstream's line.
    pub recreated_as: Option<PodUid>,
}

impl SyncJob {
    pub async fn run(self) -> JobResult {
        let mut result = JobResult {
            uid: self.uid.clone(),
            namespace: self.status.pod_namespace.clone(),
            name: self.status.pod_name.clone(),
            version: self.status.version,
            outcome: WriteOutcome::Unchanged,
            api_uid: None,
            fresh: None,
            base_version: None,
            retry_after: None,
            conditions_written: false,
            recreated_as: None,
        };
        let api: Api<ApiPod> = Api::namespaced(self.client.clone(), &result.namespace);
        // The token of the request after the GET (the PATCH, or a DELETE), taken with the GET's:
        // the limiter is shared by every request the agent sends, and queueing behind them
        // between the two would let the copy go stale. Given back when not needed.
        let mut spare: Option<SpareToken> = None;
        // A cached copy of another pod under this name is a watch that has not caught up with
        // a recreation yet: only the server can say whether our pod is gone.
        let base = match self.base.clone() {
            Some(base) if self.source_uid(&base) == self.uid => base,
            _ => {
                spare = Some(self.limiter.acquire_with_spare().await);
                match self.pod_request("get", api.get(&result.name)).await {
                    Ok(pod) => Arc::new(pod),
                    Err(NoPod::Failed(err)) if is_code(&err, 404) => {
                        result.outcome = WriteOutcome::NotFound;
                        return result;
                    }
                    Err(failed) => {
                        result.outcome = WriteOutcome::Failed(format!("get: {failed}"));
                        result.retry_after = failed.retry_after();
                        return result;
                    }
                }
            }
        };
        let source_uid = self.source_uid(&base);
        if source_uid != self.uid {
            result.outcome = WriteOutcome::Recreated;
            result.recreated_as = Some(source_uid);
            return result;
        }
        // Nothing to merge into: a pod the structs cannot read is not written (docs/sync.md,
        // "A pod that cannot be read"); the failure back-off retries. (After the UID check: a
        // pod recreated under the name is recreated, whatever its new copy holds.)
        if let Some(why) = base.undecodable() {
            result.outcome = WriteOutcome::Failed(format!("get: cannot read the pod: {why}"));
            return result;
        }
        let api_uid = base.pod.metadata.uid.clone().unwrap_or_default();
        result.api_uid = Some(api_uid.clone());
        result.base_version = resource_version(&base.pod);

        let mut base = base;
        let mut patch = match self.prepared_patch(&base, &api_uid) {
            Ok(patch) => patch,
            Err(message) => {
                result.outcome = WriteOutcome::Invalid(message);
                return result;
            }
        };
        // The conflicts go on: the owned conditions go alone first (they merge by type and need
        // no precondition), computed from the freshest copy there is, this write's merge base;
        // the container statuses follow under the precondition, merged into the copy that
        // write returned (docs/sync.md §7.5).
        //
        // At most twice: the copy the first write returned may still want other conditions
        // (the runtime finished the pod between the merge base and that write, so Ready must go
        // False, kubernetes#108594), and the rest, under the precondition, would likely conflict
        // again and leave Ready=True on a finished pod until a later write.
        let alone_first = self.conditions_alone && self.owned_fields == OwnedFields::ReadinessOnly;
        for _ in 0..2 {
            let Some(alone) = patch.as_ref().filter(|_| alone_first).and_then(conditions_alone) else {
                break;
            };
            self.take_token(spare.take()).await;
            let written = match self.send_patch(&api, &result.name, alone).await {
                Ok(pod) => pod,
                Err(failed) => {
                    (result.outcome, result.retry_after) = failed;
                    return result;
                }
            };
            result.conditions_written = true;
            if let Some(why) = written.undecodable() {
                // Written, but no merge base for the rest: the next write GETs.
                result.outcome = WriteOutcome::Failed(format!("patch: cannot read the pod: {why}"));
                return result;
            }
            tracing::debug!(pod_uid = %self.uid, pod = %pod_key(&result.namespace, &result.name), "The pod's conditions written alone; the container statuses follow under the precondition");
            base = Arc::new(written);
            result.base_version = resource_version(&base.pod);
            patch = match self.prepared_patch(&base, &api_uid) {
                Ok(patch) => patch,
                Err(message) => {
                    result.outcome = WriteOutcome::Invalid(message);
                    return result;
                }
            };
            if patch.is_none() {
                // The rest was as wanted already: the conditions were the write.
                result.conditions_written = false;
                result.outcome = WriteOutcome::Updated;
            }
        }
        let fresh = match patch {
            None => {
                tracing::debug!(
                    pod = pod_key(&result.namespace, &result.name),
                    statusVersion = result.version,
                    "Status for pod is up-to-date"
                );
                base
            }
            Some(body) => {
                self.take_token(spare.take()).await;
                match self.send_patch(&api, &result.name, body).await {
                    Ok(pod) => {
                        result.outcome = WriteOutcome::Updated;
                        Arc::new(pod)
                    }
                    Err(failed) => {
                        (result.outcome, result.retry_after) = failed;
                        return result;
                    }
                }
            }
        };
        if fresh.undecodable().is_some() {
            // Written, but the copy returned is no merge base (the syncer drops the one it
            // held: `fresh` is `None`), and says nothing of whether the pod may be deleted: the
            // next write GETs.
            return result;
        }
        result.fresh = Some(fresh.clone());

        if can_be_deleted(&fresh.pod, &self.status) {
            self.take_token(spare.take()).await;
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions { uid: Some(api_uid), resource_version: None }),
                ..Default::default()
            };
            let deleted = bounded(self.request_timeout, api.delete(&result.name, &params)).await;
            record_request("delete", &deleted);
            result.outcome = match deleted {
                Ok(_) => WriteOutcome::Deleted,
                Err(err) if is_code(&err, 404) => WriteOutcome::Deleted,
                Err(err) if is_code(&err, 409) => WriteOutcome::Recreated,
                Err(err) => {
                    result.retry_after = retry_after(&err);
                    WriteOutcome::DeleteFailed(format!("delete: {}", GoText(&err)))
                }
            };
        }
        result
    }

    /// The PATCH body, with the merge base's resourceVersion as a precondition when a
    /// readiness-only write replaces a container status list (docs/sync.md §7.3); `None` when
    /// nothing differs.
    fn prepared_patch(&self, base: &ApiPod, api_uid: &str) -> Result<Option<serde_json::Value>, String> {
        Ok(self.patch(base, api_uid)?.map(|body| {
            if self.owned_fields == OwnedFields::ReadinessOnly && replaces_container_statuses(&body) {
                with_resource_version(body, base.pod.metadata.resource_version.as_deref())
            } else {
                body
            }
        }))
    }

    /// Sends one status PATCH: the pod the server answered, or how the write ended and the wait
    /// the server asked for.
    async fn send_patch(
        &self,
        api: &Api<ApiPod>,
        name: &str,
        body: serde_json::Value,
    ) -> Result<ApiPod, (WriteOutcome, Option<std::time::Duration>)> {
        let params = PatchParams { field_manager: Some(self.field_manager.clone()), ..Default::default() };
        let body_uid = body.pointer("/metadata/uid").and_then(serde_json::Value::as_str).map(str::to_owned);
        match self.pod_request("patch", api.patch_status(name, &params, &Patch::Strategic(body))).await {
            Ok(pod) => Ok(pod),
            Err(NoPod::Failed(err)) => {
                let sent_uid = body_uid.as_deref();
                Err(self.patch_failure_confirmed(api, name, sent_uid, &err).await)
            }
            // Says nothing of the write: it failed, and is sent again.
            Err(not_a_pod) => Err((WriteOutcome::Failed(format!("patch: {not_a_pod}")), None)),
        }
    }

    /// What a failed PATCH means for the write, a 422 on `metadata.uid` or a 404 confirmed with
    /// a GET: a webhook or a mis-stated cause can name that field too, and the pod's status is
    /// dropped only when the server's pod of that name really is another (docs/sync.md §7.5); a
    /// 404 for a pod the GET still finds (a proxy's answer) is a failed write, sent again, as
    /// upstream's next sync sends any failed patch again, not a pod gone. A mirror
    /// pod recreated for the same static pod (`sent_uid`, the UID the PATCH carried, is not
    /// the server's, but the pod is still ours) is a failure: the next write GETs the new copy
    /// and writes it, on the failure back-off, not a whole reconcile later as an invalid write.
    async fn patch_failure_confirmed(
        &self,
        api: &Api<ApiPod>,
        name: &str,
        sent_uid: Option<&str>,
        err: &kube::Error,
    ) -> (WriteOutcome, Option<std::time::Duration>) {
        let first = patch_failure(err);
        if first != WriteOutcome::Recreated && first != WriteOutcome::NotFound {
            return (first, retry_after(err));
        }
        self.limiter.acquire().await;
        let got = self.pod_request("get", api.get(name)).await;
        let outcome = match &got {
            Ok(pod) if self.source_uid(pod) != self.uid => WriteOutcome::Recreated,
            Ok(pod) if sent_uid.is_some_and(|sent| pod.pod.metadata.uid.as_deref() != Some(sent)) => {
                WriteOutcome::Failed(format!("patch: {}; the mirror pod was recreated", GoText(err)))
            }
            // The same pod: an ordinary 422, or a 404 that was not the pod's.
            Ok(_) if first == WriteOutcome::NotFound => {
                WriteOutcome::Failed(format!("patch: {}", GoText(err)))
            }
            Ok(_) => WriteOutcome::Invalid(GoText(err).to_string()),
            Err(NoPod::Failed(got)) if is_code(got, 404) => WriteOutcome::NotFound,
            Err(got) => WriteOutcome::Failed(format!("patch: {}; get to confirm: {got}", GoText(err))),
        };
        (outcome, got.err().and_then(|got| got.retry_after()))
    }

    /// One request for the pod (a GET, or the status PATCH), bounded by the request timeout
    /// and counted; its answer read as a pod, or why there is none.
    async fn pod_request(
        &self,
        verb: &'static str,
        request: impl std::future::Future<Output = kube::Result<ApiPod>>,
    ) -> Result<ApiPod, NoPod> {
        let answered = bounded(self.request_timeout, request).await;
        record_request(verb, &answered);
        pod_answer(answered)
    }

    /// The PATCH body from the merge base to the merged status, `None` when nothing differs.
    fn patch(&self, base: &ApiPod, api_uid: &str) -> Result<Option<serde_json::Value>, String> {
        let api_status = go_zero_values(base.pod.status.clone().unwrap_or_default());
        let ours = self.status.status.decode().map_err(|err| err.to_string())?;
        match self.owned_fields {
            OwnedFields::Kubelet => {
                let merged = go_zero_values(merge_pod_status_for(
                    &api_status,
                    &ours,
                    could_have_running_containers(&ours, self.status.pod_is_finished),
                    self.now.clone(),
                    observed_generation(&base.pod),
                    &self.ownership,
                ));
                pod_status_patch(api_uid, &api_status, &merged).map_err(|err| err.to_string())
            }
            OwnedFields::ReadinessOnly => {
                let merged = go_zero_values(merge_readiness_only(
                    &api_status,
                    &ours,
                    self.now.clone(),
                    observed_generation(&base.pod),
                    &self.ownership,
                ));
                let (api_side, merged_side) =
                    readiness_only_sides(base, &api_status, &merged).map_err(|err| err.to_string())?;
                pod_status_patch_json(api_uid, &api_side, &merged_side).map_err(|err| err.to_string())
            }
        }
    }

    fn source_uid(&self, pod: &ApiPod) -> PodUid {
        source_uid(self.pods.as_ref(), &pod.pod)
    }

    /// Spends the token taken ahead with the GET, or waits for one.
    async fn take_token(&self, spare: Option<SpareToken>) {
        match spare {
            Some(token) => token.spend(),
            None => self.limiter.acquire().await,
        }
    }
}

/// The conditions of a readiness-only patch that carries container statuses too, to send
/// alone ([`conditions_only`]); `None` for any other patch.
fn conditions_alone(patch: &serde_json::Value) -> Option<serde_json::Value> {
    replaces_container_statuses(patch).then(|| conditions_only(patch)).flatten()
}

/// What a failed PATCH means for the write (a `Recreated` is confirmed by
/// `SyncJob::patch_failure_confirmed`).
fn patch_failure(err: &kube::Error) -> WriteOutcome {
    if is_uid_mismatch(err) {
        WriteOutcome::Recreated
    } else if is_code(err, 404) {
        WriteOutcome::NotFound
    } else if is_code(err, 409) {
        WriteOutcome::Conflict
    } else if is_code(err, 422) {
        WriteOutcome::Invalid(GoText(err).to_string())
    } else {
        WriteOutcome::Failed(format!("patch: {}", GoText(err)))
    }
}

/// A request's error as client-go says it in the kubelet's lines: an API server's refusal is its
/// `Status` message alone (`StatusError.Error()`), where kube's text adds the whole `Status` in
/// Rust's debug form (`ApiError: … (Status { status: Some(Failure), code: 422, … })`). Other
/// errors (no answer, an answer that cannot be read) keep kube's text.
struct GoText<'a>(&'a kube::Error);

impl std::fmt::Display for GoText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            kube::Error::Api(status) if !status.message.is_empty() => f.write_str(&status.message),
            err => write!(f, "{err}"),
        }
    }
}

fn is_code(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

/// A PATCH whose `metadata.uid` does not match: the real server answers 422 Invalid with the
/// cause on field `metadata.uid` (the pod was deleted and recreated under the same name).
fn is_uid_mismatch(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) if status.code == 422 => {
            status.details.as_ref().is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid"))
        }
        _ => false,
    }
}

fn record_request<T>(verb: &'static str, result: &Result<T, kube::Error>) {
    let code = match result {
        Ok(_) => "200".to_owned(),
        Err(kube::Error::Api(status)) => status.code.to_string(),
        Err(_) => "0".to_owned(),
    };
    metrics::counter!(names::PROBELET_API_REQUESTS_TOTAL, "verb" => verb, "code" => code).increment(1);
}

/// Why a request for the pod brought no pod back.
#[derive(Debug)]
enum NoPod {
    /// The request failed: the server refused it, or no answer came.
    Failed(kube::Error),
    /// A 200 whose body is no pod (a `Status`, another kind, an empty object): it says nothing
    /// of the pod or of a write. Read as a pod without a UID, a GET's was taken for a pod
    /// recreated under the name, and the pod's status was dropped.
    NotAPod,
}

impl NoPod {
    /// The wait the server asked for ([`retry_after`]).
    fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            NoPod::Failed(err) => retry_after(err),
            NoPod::NotAPod => None,
        }
    }
}

impl std::fmt::Display for NoPod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoPod::Failed(err) => write!(f, "{}", GoText(err)),
            NoPod::NotAPod => f.write_str("the answer is not a pod"),
        }
    }
}

/// The pod an answer is, if it is one: a pod's kind (or none given) and a UID. A `Status` or
/// another kind reads as an [`ApiPod`] that cannot be read, with neither.
fn pod_answer(answered: kube::Result<ApiPod>) -> Result<ApiPod, NoPod> {
    let pod = answered.map_err(NoPod::Failed)?;
    let is_a_pod = pod.pod.metadata.uid.is_some()
        && pod.json().get("kind").and_then(serde_json::Value::as_str).is_none_or(|kind| kind == "Pod");
    if is_a_pod { Ok(pod) } else { Err(NoPod::NotAPod) }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the failure report
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16, cause_field: Option<&str>) -> kube::Error {
        let causes: Vec<serde_json::Value> =
            cause_field.map(|field| serde_json::json!({"field": field})).into_iter().collect();
        let status: Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": "m", "reason": "r", "code": code,
            "details": {"causes": causes},
        }))
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    /// The wait asked for is read from the `Status` the API server sends with a 429 or 5xx:
    /// `details.retryAfterSeconds`, which it sets beside the `Retry-After` header.
    #[test]
    fn the_wait_a_throttling_server_asked_for_is_read_from_its_status() {
        let error = |code: u16, retry_after: u32| {
            let status: Status = serde_json::from_value(serde_json::json!({
                "status": "Failure", "message": "m", "reason": "TooManyRequests", "code": code,
                "details": {"retryAfterSeconds": retry_after},
            }))
            .unwrap();
            kube::Error::Api(Box::new(status))
        };
        let secs = |s: u64| Some(std::time::Duration::from_secs(s));
        assert_eq!(retry_after(&error(429, 7)), secs(7));
        assert_eq!(retry_after(&error(503, 2)), secs(2));
        assert_eq!(retry_after(&error(429, 0)), None, "none asked");
        assert_eq!(retry_after(&error(409, 1)), None, "a conflict has its own back-off");
        assert_eq!(retry_after(&api_error(500, None)), None, "no details");
        assert_eq!(retry_after(&kube::Error::Service("no answer".into())), None);
    }

    #[test]
    fn patch_errors_map_to_what_the_syncer_does_next() {
        assert_eq!(patch_failure(&api_error(422, Some("metadata.uid"))), WriteOutcome::Recreated);
        assert_eq!(patch_failure(&api_error(404, None)), WriteOutcome::NotFound);
        assert_eq!(patch_failure(&api_error(409, None)), WriteOutcome::Conflict);
        assert!(matches!(patch_failure(&api_error(422, Some("status.phase"))), WriteOutcome::Invalid(_)));
        assert!(
            matches!(patch_failure(&api_error(500, None)), WriteOutcome::Failed(m) if m.starts_with("patch: "))
        );
    }

    /// A refusal is said as client-go says it, by its `Status` message, not with kube's debug
    /// dump of the whole `Status` after it; an error with no answer keeps kube's words.
    #[test]
    fn a_refusal_is_said_by_its_status_message() {
        assert_eq!(patch_failure(&api_error(422, Some("status.phase"))), WriteOutcome::Invalid("m".into()));
        assert_eq!(patch_failure(&api_error(500, None)), WriteOutcome::Failed("patch: m".into()));
        let unanswered = kube::Error::Service("connection refused".into());
        assert_eq!(GoText(&unanswered).to_string(), unanswered.to_string());
        let silent: Status =
            serde_json::from_value(serde_json::json!({"status": "Failure", "code": 500})).unwrap();
        let silent = kube::Error::Api(Box::new(silent));
        assert_eq!(GoText(&silent).to_string(), silent.to_string(), "no message: kube's text");
    }

    /// An answer read as a pod is one only with a UID and a pod's kind (or none): a `Status`, an
    /// empty object or another kind is no pod, said so, and asks for no wait; a refusal is said
    /// by its message.
    #[test]
    fn an_answer_that_is_no_pod_is_told_apart() {
        let read = |json: serde_json::Value| pod_answer(Ok(ApiPod::from_json_lenient(json)));
        let status =
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
        let other = serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "web", "uid": "u"}});
        for answer in [status, serde_json::json!({}), other] {
            let no_pod = read(answer.clone()).expect_err("no pod");
            assert_eq!(no_pod.to_string(), "the answer is not a pod", "{answer}");
            assert_eq!(no_pod.retry_after(), None);
        }
        for pod in [
            serde_json::json!({"kind": "Pod", "metadata": {"name": "web", "uid": "u"}}),
            serde_json::json!({"metadata": {"name": "web", "uid": "u"}}),
        ] {
            assert!(read(pod.clone()).is_ok(), "{pod}");
        }
        let refused = pod_answer(Err(api_error(500, None))).expect_err("refused");
        assert_eq!(refused.to_string(), "m");
    }

    /// Upstream's `syncPod` names the request that failed: "Failed to get status for pod" for its
    /// GET, "Failed to delete status for pod" for its DELETE, "Failed to update status for pod"
    /// for its PATCH. Before, every failure read "Failed to update status for pod".
    #[test]
    fn a_failed_write_is_logged_with_the_line_of_the_request_that_failed() {
        let cases = [
            ("get", WriteOutcome::Failed("get: 500".into()), "Failed to get status for pod"),
            (
                "unreadable get",
                WriteOutcome::Failed("get: cannot read the pod: x".into()),
                "Failed to get status for pod",
            ),
            ("patch", WriteOutcome::Failed("patch: 500".into()), "Failed to update status for pod"),
            ("delete", WriteOutcome::DeleteFailed("delete: 500".into()), "Failed to delete status for pod"),
            ("invalid", WriteOutcome::Invalid("422".into()), "Failed to update status for pod"),
        ];
        for (name, outcome, want) in cases {
            assert_eq!(outcome.failure_line(), want, "case {name}");
        }
    }
}
