//! Keeps a throttling or failing answer's `Retry-After` where kube's error can carry it.
//!
//! The API server's own throttling (API Priority and Fairness, the max-in-flight filter) answers
//! `429` with a plain-text body (`Too many requests, please try again later.`) and the wait in
//! a `Retry-After` header; a proxy in front of it answers `503` the same way. kube turns a body
//! that is no JSON `Status` into a `Status` of its own with the text as its message, and drops
//! the headers, so the wait is lost; only an answer whose `Status` names it in
//! `details.retryAfterSeconds` keeps it. This layer rewrites such an answer (`429` or any `5xx`
//! with a `Retry-After` of whole seconds) so that its `Status` does: the JSON `Status` the API
//! server sent, with `retryAfterSeconds` added if missing, or one made from the text. The status
//! syncer then waits at least that long before the pod's next write (docs/sync.md, "Queue,
//! budget, retries"), as client-go waits out `Retry-After`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Either, Full, Limited};
use serde_json::{Value, json};

/// The most of an error answer's body read to rewrite it; error bodies are a few hundred bytes.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// The most of a plain-text body kept as the message.
const MAX_MESSAGE: usize = 1024;

/// The wait an answer asks for, in whole seconds: a `429` or `5xx` with `Retry-After: N`, N > 0.
/// A wait past what a `Status` can name (`Retry-After: 1000000000000`) is the longest it can:
/// every waiter caps it (`RETRY_AFTER_MAX`), where it was read as no wait at all and the next
/// request went after half a second. A negative number, a date or anything else asks for
/// nothing, as client-go reads only an integer and waits no less than nothing.
pub fn asked_wait(status: StatusCode, headers: &HeaderMap) -> Option<u32> {
    if status != StatusCode::TOO_MANY_REQUESTS && !status.is_server_error() {
        return None;
    }
    let value = headers.get(header::RETRY_AFTER)?.to_str().ok()?.trim();
    let seconds = match value.parse::<u64>() {
        Ok(seconds) => u32::try_from(seconds).unwrap_or(u32::MAX),
        // Digits past u64 still ask for a long wait.
        Err(_) if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => u32::MAX,
        Err(_) => return None,
    };
    (seconds > 0).then_some(seconds)
}

/// The body of an answer that asked for a wait of `seconds`, as a `Status` that names it.
pub fn status_with_retry_after(body: &[u8], status: StatusCode, seconds: u32) -> Vec<u8> {
    let parsed =
        serde_json::from_slice::<Value>(body).ok().filter(|v| v.get("kind") == Some(&json!("Status")));
    let mut value = parsed.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(body);
        let mut message = text.trim().to_owned();
        if message.len() > MAX_MESSAGE {
            let cut = (0..=MAX_MESSAGE).rev().find(|&i| message.is_char_boundary(i)).unwrap_or(0);
            message.truncate(cut);
        }
        if message.is_empty() {
            message = status.canonical_reason().unwrap_or("").to_owned();
        }
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason(status),
            "code": status.as_u16(),
        })
    });
    let Some(object) = value.as_object_mut() else { return body.to_vec() };
    // kube reads a missing code as 0, which names no throttling.
    if object.get("code").and_then(Value::as_u64).is_none_or(|code| code == 0) {
        object.insert("code".to_owned(), json!(status.as_u16()));
    }
    let details = object.entry("details").or_insert_with(|| json!({}));
    if !details.is_object() {
        *details = json!({});
    }
    if let Some(details) = details.as_object_mut() {
        match details.get("retryAfterSeconds").and_then(Value::as_u64) {
            Some(named) if named > u64::from(u32::MAX) => {
                // kube reads the field as a u32: past it, the whole `Status` is unreadable and
                // the wait is lost with it.
                details.insert("retryAfterSeconds".to_owned(), json!(u32::MAX));
            }
            Some(named) if named > 0 => {}
            _ => {
                details.insert("retryAfterSeconds".to_owned(), json!(seconds));
            }
        }
    }
    serde_json::to_vec(&value).unwrap_or_else(|_| body.to_vec())
}

/// The `Status` reason the API server gives with a code (`metav1.StatusReason`).
fn reason(status: StatusCode) -> &'static str {
    match status.as_u16() {
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "",
    }
}

/// The layer for [`kube::client::ClientBuilder::with_layer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RetryAfterLayer;

impl<S> tower::Layer<S> for RetryAfterLayer {
    type Service = RetryAfterInStatus<S>;

    fn layer(&self, inner: S) -> RetryAfterInStatus<S> {
        RetryAfterInStatus { inner }
    }
}

/// The service of [`RetryAfterLayer`].
#[derive(Debug, Clone)]
pub struct RetryAfterInStatus<S> {
    inner: S,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B, RB> tower::Service<Request<B>> for RetryAfterInStatus<S>
where
    S: tower::Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    RB: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    RB::Error: Into<BoxError>,
{
    type Response = Response<Either<RB, Full<Bytes>>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            let Some(seconds) = asked_wait(response.status(), response.headers()) else {
                return Ok(response.map(Either::Left));
            };
            let (mut parts, body) = response.into_parts();
            // A body that cannot be read whole is an answer without a message; the wait stays.
            let body =
                Limited::new(body, MAX_ERROR_BODY).collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let rewritten = status_with_retry_after(&body, parts.status, seconds);
            parts.headers.remove(header::CONTENT_LENGTH);
            parts.headers.remove(header::CONTENT_ENCODING);
            parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            Ok(Response::from_parts(parts, Either::Right(Full::new(Bytes::from(rewritten)))))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(retry_after: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::RETRY_AFTER, retry_after.parse().expect("a header value"));
        headers
    }

    #[test]
    fn only_a_throttling_or_failing_answer_with_whole_seconds_asks_for_a_wait() {
        let wait =
            |code: u16, value: &str| asked_wait(StatusCode::from_u16(code).expect("a code"), &headers(value));
        assert_eq!(wait(429, "1"), Some(1));
        assert_eq!(wait(503, " 7 "), Some(7));
        assert_eq!(wait(500, "0"), None, "no wait asked");
        assert_eq!(wait(429, "Wed, 21 Oct 2015 07:28:00 GMT"), None, "a date (here in the past)");
        assert_eq!(wait(429, "1000000000000"), Some(u32::MAX), "a wait past u32: the longest");
        assert_eq!(wait(503, "99999999999999999999999"), Some(u32::MAX), "past u64 too");
        assert_eq!(wait(429, "-5"), None, "negative");
        assert_eq!(wait(429, "1e12"), None, "not an integer");
        assert_eq!(wait(429, "garbage"), None);
        assert_eq!(wait(429, ""), None);
        assert_eq!(wait(409, "1"), None);
        assert_eq!(wait(200, "1"), None);
        assert_eq!(asked_wait(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new()), None);
    }

    #[test]
    fn a_plain_text_answer_becomes_a_status_that_names_the_wait() {
        // What API Priority and Fairness answers.
        let body = b"Too many requests, please try again later.\n";
        let status: kube::core::Status =
            serde_json::from_slice(&status_with_retry_after(body, StatusCode::TOO_MANY_REQUESTS, 3))
                .expect("a Status");
        assert_eq!(status.code, 429);
        assert_eq!(status.reason, "TooManyRequests");
        assert_eq!(status.message, "Too many requests, please try again later.");
        assert_eq!(status.details.expect("details").retry_after_seconds, 3);
        let empty: Value =
            serde_json::from_slice(&status_with_retry_after(b"", StatusCode::SERVICE_UNAVAILABLE, 2))
                .expect("JSON");
        assert_eq!(empty["message"], "Service Unavailable");
    }

    #[test]
    fn a_status_keeps_its_fields_and_gains_the_wait_unless_it_names_one() {
        let sent = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "m",
                          "reason": "ServiceUnavailable", "code": 503, "details": {"name": "web"}});
        let out: Value = serde_json::from_slice(&status_with_retry_after(
            &serde_json::to_vec(&sent).expect("JSON"),
            StatusCode::SERVICE_UNAVAILABLE,
            5,
        ))
        .expect("JSON");
        assert_eq!(out["details"], json!({"name": "web", "retryAfterSeconds": 5}));
        assert_eq!(out["message"], "m");
        let named = json!({"kind": "Status", "code": 429, "details": {"retryAfterSeconds": 9}});
        let out: Value = serde_json::from_slice(&status_with_retry_after(
            &serde_json::to_vec(&named).expect("JSON"),
            StatusCode::TOO_MANY_REQUESTS,
            1,
        ))
        .expect("JSON");
        assert_eq!(out["details"]["retryAfterSeconds"], 9, "the server's own figure stays");
        let huge =
            json!({"kind": "Status", "code": 429, "details": {"retryAfterSeconds": 1_000_000_000_000_u64}});
        let status: kube::core::Status = serde_json::from_slice(&status_with_retry_after(
            &serde_json::to_vec(&huge).expect("JSON"),
            StatusCode::TOO_MANY_REQUESTS,
            1,
        ))
        .expect("still a Status kube reads");
        assert_eq!(status.details.expect("details").retry_after_seconds, u32::MAX);
        let bare = json!({"kind": "Status", "details": null});
        let out: Value = serde_json::from_slice(&status_with_retry_after(
            &serde_json::to_vec(&bare).expect("JSON"),
            StatusCode::TOO_MANY_REQUESTS,
            2,
        ))
        .expect("JSON");
        assert_eq!(
            (out["code"].clone(), out["details"].clone()),
            (json!(429), json!({"retryAfterSeconds": 2}))
        );
    }
}
