//! A workload's `spec.selector` as the API server reads it: apimachinery's
//! `ValidateLabelSelector` (each `matchLabels` entry a label, each `matchExpressions` entry an
//! operator it knows with the values that operator takes and a qualified key) and
//! `LabelSelectorAsSelector` with its `Matches` (does it select a set of labels). Which rules
//! each kind applies, and in what order: `selector_errors` and `workload_errors` in
//! `rules.rs`; docs/lint.md says what is reported.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use probelet_actors::gofmt::go_quote;

use crate::host::manifests::{label_value, qualified_name};

/// `ValidateLabelSelector` (invalid label values not allowed, as on create) of the selector at
/// `path`, with the API server's messages: `matchLabels` (keys in order; Go walks the map in
/// no set order, so with several bad entries the API server's order may differ), then each
/// expression's operator and values, its key, then its values.
pub(super) fn validate_label_selector(selector: &LabelSelector, path: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let labels_path = format!("{path}.matchLabels");
    for (key, value) in selector.match_labels.iter().flatten() {
        for msg in qualified_name(key) {
            errs.push(format!("{labels_path}: Invalid value: {}: {msg}", go_quote(key)));
        }
        for msg in label_value(value) {
            errs.push(format!("{labels_path}: Invalid value: {}: {msg}", go_quote(value)));
        }
    }
    for (i, requirement) in selector.match_expressions.iter().flatten().enumerate() {
        let path = format!("{path}.matchExpressions[{i}]");
        let values = requirement.values.as_deref().unwrap_or_default();
        match requirement.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errs.push(format!(
                "{path}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(format!(
                "{path}.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.push(format!(
                "{path}.operator: Invalid value: {}: not a valid selector operator",
                go_quote(other)
            )),
        }
        for msg in qualified_name(&requirement.key) {
            errs.push(format!("{path}.key: Invalid value: {}: {msg}", go_quote(&requirement.key)));
        }
        for (j, value) in values.iter().enumerate() {
            for msg in label_value(value) {
                errs.push(format!("{path}.values[{j}]: Invalid value: {}: {msg}", go_quote(value)));
            }
        }
    }
    errs
}

/// Neither `matchLabels` nor `matchExpressions` has an entry: the selector selects everything.
pub(super) fn is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

/// Whether the selector selects `labels`, as `LabelSelectorAsSelector(s).Matches(labels)`;
/// `None` where it cannot be made a selector (whatever [`validate_label_selector`] refuses).
/// An empty selector selects everything.
pub(super) fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Option<bool> {
    if !validate_label_selector(selector, "").is_empty() {
        return None;
    }
    let by_labels = selector.match_labels.iter().flatten().all(|(key, value)| labels.get(key) == Some(value));
    let by_expressions = selector.match_expressions.iter().flatten().all(|requirement| {
        let values = requirement.values.as_deref().unwrap_or_default();
        let label = labels.get(&requirement.key);
        match requirement.operator.as_str() {
            "In" => label.is_some_and(|v| values.contains(v)),
            "NotIn" => label.is_none_or(|v| !values.contains(v)),
            "Exists" => label.is_some(),
            _ => label.is_none(),
        }
    });
    Some(by_labels && by_expressions)
}

/// The selector as the API server prints a bad one (Go's `%#v` of a `metav1.LabelSelector`):
/// `v1.LabelSelector{MatchLabels:map[string]string{"app":"web"},
/// MatchExpressions:[]v1.LabelSelectorRequirement(nil)}`.
pub(super) fn go_label_selector(selector: &LabelSelector) -> String {
    let labels = match &selector.match_labels {
        None => "map[string]string(nil)".to_owned(),
        Some(map) => {
            let entries: Vec<String> =
                map.iter().map(|(k, v)| format!("{}:{}", go_quote(k), go_quote(v))).collect();
            format!("map[string]string{{{}}}", entries.join(", "))
        }
    };
    let expressions = match &selector.match_expressions {
        None => "[]v1.LabelSelectorRequirement(nil)".to_owned(),
        Some(list) => {
            let entries: Vec<String> = list.iter().map(go_requirement).collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", entries.join(", "))
        }
    };
    format!("v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{expressions}}}")
}

fn go_requirement(requirement: &LabelSelectorRequirement) -> String {
    let values = match &requirement.values {
        None => "[]string(nil)".to_owned(),
        Some(values) => {
            let values: Vec<String> = values.iter().map(|v| go_quote(v)).collect();
            format!("[]string{{{}}}", values.join(", "))
        }
    };
    format!(
        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{values}}}",
        go_quote(&requirement.key),
        go_quote(&requirement.operator)
    )
}
