//! Request decoding: bodies into the API's type, patch types by content type, patch
//! application, unknown-field handling (`fieldValidation`) and delete options.

use serde_json::{Value, json};

use super::*;
use crate::apiserver::golang::{self, fmt_v, quote};
use crate::apiserver::patch::{self, SmpError};
use crate::apiserver::schema::{self, schemas};
use crate::apiserver::validation::{ApiError, BadValue, FieldError};

impl Req<'_> {
    pub(super) fn dry_run(&self) -> bool {
        self.query.iter().any(|(k, v)| k == "dryRun" && v == "All")
    }

    pub(super) fn field_validation(&self) -> &str {
        self.param("fieldValidation").unwrap_or("Warn")
    }
}

/// The patch types, by content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

pub(super) fn patch_type(content_type: &str) -> Option<PatchType> {
    match content_type {
        "application/json-patch+json" => Some(PatchType::Json),
        "application/merge-patch+json" => Some(PatchType::Merge),
        "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => Some(PatchType::Apply),
        _ => None,
    }
}

/// Decodes a POST/PUT body into the API's type.
pub(super) fn decode_body(api: Api, req: &Req) -> Result<(Value, Vec<String>), ApiError> {
    let kind = api.kind_name();
    let version = api.api_version();
    let body: Value = serde_json::from_slice(req.body).map_err(|_| {
        let msg = golang::json_syntax_error(req.body).unwrap_or_else(|| "invalid body".into());
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {msg}"))
    })?;
    if !body.is_object() {
        return Err(ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}",
            json_kind(&body)
        )));
    }
    let decoded = schema::decode(&body, api.ty()).map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version {} cannot be handled as a {kind}: {}",
            quote(version),
            e.json_message()
        ))
    })?;
    let warnings = unknown_field_handling(&decoded.unknown, req.field_validation(), |msg| {
        ApiError::bad_request(format!(
            "{kind} in version {} cannot be handled as a {kind}: {msg}",
            quote(version)
        ))
    })?;
    Ok((decoded.value, warnings))
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Warn (default), Strict or Ignore for unknown fields.
fn unknown_field_handling(
    unknown: &[String],
    directive: &str,
    strict_err: impl Fn(String) -> ApiError,
) -> Result<Vec<String>, ApiError> {
    if unknown.is_empty() || directive == "Ignore" {
        return Ok(Vec::new());
    }
    let msgs: Vec<String> = unknown.iter().map(|u| format!("unknown field {}", quote(u))).collect();
    if directive == "Strict" {
        return Err(strict_err(format!("strict decoding error: {}", msgs.join(", "))));
    }
    Ok(msgs)
}

pub(super) enum PatchResult {
    Patched(Value, Vec<String>),
    Drop,
}

/// Parses and applies a patch to the versioned object and decodes the result.
pub(super) fn apply_patch(
    api: Api,
    pt: PatchType,
    versioned: &Value,
    req: &Req,
    validation: &str,
) -> Result<PatchResult, ApiError> {
    let ty = api.ty();
    let parse_json = || -> Result<Value, ApiError> {
        serde_json::from_slice::<Value>(req.body).map_err(|_| {
            ApiError::bad_request(
                golang::json_syntax_error(req.body).unwrap_or_else(|| "unexpected end of JSON input".into()),
            )
        })
    };
    let invalid_patch = |value: String, msg: String| {
        ApiError::invalid("", "", "", &[FieldError::invalid("patch", BadValue::Str(value), msg)])
    };
    match pt {
        PatchType::Strategic => {
            let patch = parse_json()?;
            let Value::Object(patch_map) = patch else {
                return Err(ApiError::bad_request(format!(
                    "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                    json_kind(&patch)
                )));
            };
            let patched = match patch::strategic_merge(versioned, &patch_map, ty) {
                Ok(p) => p,
                Err(SmpError::Panic(_)) => return Ok(PatchResult::Drop),
                Err(SmpError::Failed { message, code }) => {
                    return Err(match code {
                        400 => ApiError::bad_request(message),
                        _ => ApiError::internal(message),
                    });
                }
            };
            let shown = fmt_v(&Value::Object(patch_map));
            let decoded = schema::decode(&patched, ty)
                .map_err(|e| invalid_patch(shown.clone(), e.converter_message()))?;
            let warnings =
                unknown_field_handling(&decoded.unknown, validation, |m| invalid_patch(shown.clone(), m))?;
            Ok(PatchResult::Patched(decoded.value, warnings))
        }
        PatchType::Merge | PatchType::Json => {
            let patch = parse_json()?;
            let patched = if pt == PatchType::Merge {
                if !patch.is_object() {
                    return Err(ApiError::bad_request(format!(
                        "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                        json_kind(&patch)
                    )));
                }
                patch::merge_patch(versioned, &patch)
            } else {
                let Value::Array(ops) = &patch else {
                    return Err(ApiError::bad_request(format!(
                        "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                        json_kind(&patch)
                    )));
                };
                patch::json_patch(versioned, ops).map_err(|_| ApiError::unprocessable_generic())?
            };
            let shown = serde_json::to_string(&patched).unwrap_or_default();
            let decoded =
                schema::decode(&patched, ty).map_err(|e| invalid_patch(shown.clone(), e.json_message()))?;
            let warnings =
                unknown_field_handling(&decoded.unknown, validation, |m| invalid_patch(shown.clone(), m))?;
            Ok(PatchResult::Patched(decoded.value, warnings))
        }
        PatchType::Apply => {
            if req.param("fieldManager").is_none_or(str::is_empty) {
                return Err(ApiError::bad_request("PATCH /apply requires fieldManager to be set"));
            }
            let text = std::str::from_utf8(req.body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            let config: Value = serde_saphyr::from_str(text)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            if !config.is_object() {
                return Err(ApiError::bad_request("error decoding YAML: the object is not a map"));
            }
            let name = config.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() {
                return Err(ApiError::bad_request("metadata.name is required in an applied configuration"));
            }
            let patched = patch::apply(versioned, &config, ty);
            let shown = serde_json::to_string(&patched).unwrap_or_default();
            let decoded =
                schema::decode(&patched, ty).map_err(|e| invalid_patch(shown.clone(), e.json_message()))?;
            let warnings =
                unknown_field_handling(&decoded.unknown, validation, |m| invalid_patch(shown.clone(), m))?;
            Ok(PatchResult::Patched(decoded.value, warnings))
        }
    }
}

/// DeleteOptions from the body and the query.
pub(super) fn delete_options(req: &Req) -> Result<Value, ApiError> {
    let mut opts = json!({});
    if let Some(g) = req.param("gracePeriodSeconds") {
        let g: i64 = g
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {}", quote(g))))?;
        opts["gracePeriodSeconds"] = json!(g);
    }
    if let Some(p) = req.param("propagationPolicy") {
        opts["propagationPolicy"] = json!(p);
    }
    if req.body.iter().all(u8::is_ascii_whitespace) {
        return Ok(opts);
    }
    let body: Value = serde_json::from_slice(req.body).map_err(|_| {
        ApiError::bad_request(golang::json_syntax_error(req.body).unwrap_or_else(|| "invalid body".into()))
    })?;
    let decoded = schema::decode(&body, &schemas().delete_options)
        .map_err(|e| ApiError::bad_request(e.json_message()))?;
    if let (Value::Object(o), Value::Object(b)) = (&mut opts, decoded.value) {
        o.extend(b);
    }
    Ok(opts)
}
