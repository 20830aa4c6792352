//! `TokenReview` and `SubjectAccessReview`, as a real kube-apiserver v1.36.2 answers them
//! (recorded in `tests/fixtures/apiserver/more-cases.json`, cases 20a and 20b): both are
//! created with 201 and never stored; the answer echoes the spec (empty fields dropped, as Go's
//! `omitempty` does) and adds a status.
//!
//! Tests say which tokens are valid ([`Reviews::add_token`]) and what a user may do
//! ([`Reviews::allow`], like binding a ClusterRole); everything else is unauthenticated or
//! denied. Gaps: the requester itself is not authorized (the recorded 403 for a token without
//! RBAC to create TokenReviews), no group-based grants, no validation of an empty SAR spec.

use std::collections::HashMap;

use http::Method;
use serde_json::{Map, Value, json};

use super::store::{Outcome, Reply, Req};
use super::validation::ApiError;

/// A token the fake authenticates.
#[derive(Clone, Debug)]
struct Token {
    /// `status.user`: username, uid, groups, extra.
    user: Value,
    /// The token's audiences.
    audiences: Vec<String>,
}

/// One thing a user may do, and the RBAC binding the allow names.
#[derive(Clone, Debug)]
struct Grant {
    user: String,
    verb: String,
    resource: String,
    subresource: String,
    reason: String,
}

/// What the fake authenticates and allows.
#[derive(Default)]
pub struct Reviews {
    tokens: HashMap<String, Token>,
    grants: Vec<Grant>,
}

/// The audience of tokens the API server issues by default.
pub const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc";

/// A ServiceAccount's `status.user`, as a TokenReview returns it.
pub fn service_account_user(namespace: &str, name: &str, uid: &str, credential_id: &str) -> Value {
    json!({
        "username": format!("system:serviceaccount:{namespace}:{name}"),
        "uid": uid,
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{namespace}"), "system:authenticated"],
        "extra": {"authentication.kubernetes.io/credential-id": [format!("JTI={credential_id}")]},
    })
}

impl Reviews {
    /// `token` authenticates as `user` (a `status.user` object) for `audiences`.
    pub fn add_token(&mut self, token: &str, user: Value, audiences: &[&str]) {
        let audiences = audiences.iter().map(|a| a.to_string()).collect();
        self.tokens.insert(token.to_owned(), Token { user, audiences });
    }

    /// `user` may `verb` `resource`/`subresource` (any name), through ClusterRoleBinding
    /// `binding` of ClusterRole `role`.
    pub fn allow(
        &mut self,
        user: &str,
        verb: &str,
        resource: &str,
        subresource: &str,
        binding: &str,
        role: &str,
    ) {
        let subject = match user.strip_prefix("system:serviceaccount:").and_then(|r| r.split_once(':')) {
            Some((ns, name)) => format!("ServiceAccount \"{name}/{ns}\""),
            None => format!("User \"{user}\""),
        };
        self.grants.push(Grant {
            user: user.to_owned(),
            verb: verb.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            reason: format!(
                "RBAC: allowed by ClusterRoleBinding \"{binding}\" of ClusterRole \"{role}\" to {subject}"
            ),
        });
    }

    fn token_review(&self, body: &Value) -> Outcome {
        let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        let token = spec.get("token").and_then(Value::as_str).unwrap_or("");
        if token.is_empty() {
            return ApiError::bad_request("token is required for TokenReview in authentication").into();
        }
        let wanted: Vec<String> = spec
            .get("audiences")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let status = match self.tokens.get(token) {
            None => json!({"user": {}, "error": "invalid bearer token"}),
            Some(t) if !wanted.is_empty() && !wanted.iter().any(|w| t.audiences.contains(w)) => json!({
                "user": {},
                "error": format!(
                    "[invalid bearer token, token audiences {} is invalid for the target audiences {}]",
                    go_quoted_list(&t.audiences),
                    go_quoted_list(&wanted)
                ),
            }),
            Some(t) => {
                let audiences = if wanted.is_empty() { t.audiences.clone() } else { wanted.clone() };
                json!({"authenticated": true, "user": t.user, "audiences": audiences})
            }
        };
        created(json!({
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {},
            "spec": omit_empty(&spec),
            "status": status,
        }))
    }

    fn subject_access_review(&self, body: &Value) -> Outcome {
        let spec = omit_empty(&body.get("spec").cloned().unwrap_or_else(|| json!({})));
        let user = spec.get("user").and_then(Value::as_str).unwrap_or("");
        let field = |name: &str| {
            spec.get("resourceAttributes").and_then(|a| a.get(name)).and_then(Value::as_str).unwrap_or("")
        };
        let grant = spec.get("resourceAttributes").and_then(|_| {
            self.grants.iter().find(|g| {
                g.user == user
                    && g.verb == field("verb")
                    && g.resource == field("resource")
                    && g.subresource == field("subresource")
                    && field("group").is_empty()
            })
        });
        let status = match grant {
            Some(g) => json!({"allowed": true, "reason": g.reason}),
            None => json!({"allowed": false}),
        };
        created(json!({
            "kind": "SubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {},
            "spec": spec,
            "status": status,
        }))
    }
}

/// Answers the two review APIs; `None` for any other path.
pub fn route(reviews: &Reviews, method: &Method, segs: &[&str], req: &Req) -> Option<Outcome> {
    let review: fn(&Reviews, &Value) -> Outcome = match segs {
        ["apis", "authentication.k8s.io", "v1", "tokenreviews"] => Reviews::token_review,
        ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] => Reviews::subject_access_review,
        _ => return None,
    };
    if *method != Method::POST {
        return Some(ApiError::method_not_allowed().into());
    }
    let Ok(body) = serde_json::from_slice::<Value>(req.body) else {
        return Some(ApiError::bad_request("the request body is not a JSON object").into());
    };
    Some(review(reviews, &body))
}

fn created(body: Value) -> Outcome {
    Outcome::Reply(Reply {
        code: 201,
        body: body.to_string().into_bytes(),
        warnings: Vec::new(),
        retry_after: None,
    })
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("{i:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// Drops empty strings, lists, objects and nulls, recursively (Go's `omitempty`).
fn omit_empty(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let v = omit_empty(v);
                let empty = match &v {
                    Value::Null => true,
                    Value::String(s) => s.is_empty(),
                    Value::Array(a) => a.is_empty(),
                    Value::Object(o) => o.is_empty(),
                    _ => false,
                };
                if !empty {
                    out.insert(k.clone(), v);
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(omit_empty).collect()),
        other => other.clone(),
    }
}
