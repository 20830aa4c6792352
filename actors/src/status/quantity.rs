//! Resource quantities compared by value, as upstream's status equality compares them
//! (`apiequality.Semantic` compares `resource.Quantity` with `Cmp`): `1000m` and `1`, or
//! `1Ki` and `1024`, are the same status. The API server stores every quantity in its canonical
//! text, so a host that reports `allocatedResources: {cpu: 1000m}` gets back `cpu: "1"`;
//! compared by text, the status manager would see drift at every reconcile and write the same
//! status again every 10 s (docs/status-manager.md §5.9).
//!
//! Hand-written: the Kubernetes crates in Rust carry `Quantity` as its text only. What it owns:
//! reading a quantity's value exactly (the grammar of upstream `resource.ParseQuantity`, with
//! its quirks and its rounding up to 1n) into a text that is equal exactly when the values are, and
//! putting a status's quantities in that form for a comparison.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerStatus, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The value of quantity `text` as `[-]<digits>e<exponent>` with no leading or trailing zero
/// digit (`0` for zero): equal for equal values. `None` when `text` is not a quantity.
///
/// Upstream's reading, quirks included: a number with no digits is 0 (`-`, `.`, `Mi`); an
/// exponent is read as a 64-bit number and cut to 32 bits; a value with a binary suffix is
/// capped at 2^63-1; a value finer than 1n is rounded up, away from zero, to the next 1n.
pub fn value_key(text: &str) -> Option<String> {
    if text.is_empty() {
        return None;
    }
    let (negative, rest) = match text.as_bytes()[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let number_end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') {
        return None;
    }
    let (exponent, binary) = suffix_scale(suffix)?;
    let mut digits: Vec<u8> = whole.bytes().chain(fraction.bytes()).map(|b| b - b'0').collect();
    let mut exponent = i64::from(exponent) - i64::try_from(fraction.len()).ok()?;
    for _ in 0..binary {
        multiply(&mut digits, 1024);
    }
    let first = digits.iter().position(|&d| d != 0);
    let Some(first) = first else { return Some("0".to_owned()) };
    digits.drain(..first);
    if exponent < -9 {
        let dropped = usize::try_from(-9 - exponent).ok()?;
        if dropped >= digits.len() {
            digits = vec![1];
        } else {
            let inexact = digits[digits.len() - dropped..].iter().any(|&d| d != 0);
            digits.truncate(digits.len() - dropped);
            if inexact {
                add_one(&mut digits);
            }
        }
        exponent = -9;
    }
    while digits.len() > 1 && digits.last() == Some(&0) {
        digits.pop();
        exponent += 1;
    }
    let mut digits: String = digits.iter().map(|d| char::from(b'0' + d)).collect();
    if binary > 0 && above_int64_max(&digits, exponent) {
        digits = i64::MAX.to_string();
        exponent = 0;
    }
    let sign = if negative { "-" } else { "" };
    Some(format!("{sign}{digits}e{exponent}"))
}

/// Whether `digits`·10^`exponent` (no leading or trailing zero) is above 2^63-1.
fn above_int64_max(digits: &str, exponent: i64) -> bool {
    const MAX: &str = "9223372036854775807";
    let Some(whole_digits) = i64::try_from(digits.len()).ok().and_then(|n| n.checked_add(exponent)) else {
        return exponent > 0;
    };
    match whole_digits.cmp(&19) {
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Equal => {
            // 19 whole digits: the whole part, then whether a fraction is left over.
            let whole: String = digits.chars().chain(std::iter::repeat('0')).take(19).collect();
            whole.as_str() > MAX || (whole == MAX && digits.len() > 19)
        }
    }
}

/// The power of ten and of 1024 a suffix stands for: `m` is (-3, 0), `Ki` (0, 1), `e3` (3, 0).
fn suffix_scale(suffix: &str) -> Option<(i32, u32)> {
    let scale = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 1),
        "Mi" => (0, 2),
        "Gi" => (0, 3),
        "Ti" => (0, 4),
        "Pi" => (0, 5),
        "Ei" => (0, 6),
        _ => {
            let exponent = suffix.strip_prefix(['e', 'E'])?;
            let unsigned = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Go: `strconv.ParseInt(…, 10, 64)`, then `int32(…)`, which keeps the low 32 bits.
            let parsed: i64 = exponent.parse().ok()?;
            let low = parsed.rem_euclid(1 << 32);
            (i32::try_from(if low >= 1 << 31 { low - (1 << 32) } else { low }).ok()?, 0)
        }
    };
    Some(scale)
}

/// `digits` (most significant first) times `factor`.
fn multiply(digits: &mut Vec<u8>, factor: u32) {
    let mut carry = 0u32;
    for digit in digits.iter_mut().rev() {
        let product = u32::from(*digit) * factor + carry;
        *digit = u8::try_from(product % 10).unwrap_or(0);
        carry = product / 10;
    }
    while carry > 0 {
        digits.insert(0, u8::try_from(carry % 10).unwrap_or(0));
        carry /= 10;
    }
}

/// `digits` (most significant first) plus one.
fn add_one(digits: &mut Vec<u8>) {
    for digit in digits.iter_mut().rev() {
        if *digit == 9 {
            *digit = 0;
        } else {
            *digit += 1;
            return;
        }
    }
    digits.insert(0, 1);
}

/// `status` as the status equality compares it: every quantity in its [`value_key`] form (one
/// that is not a quantity keeps its text), and an empty quantity map as an absent one (Go's
/// semantic equality holds a nil map equal to an empty one).
pub fn compared_by_value(status: &mut PodStatus) {
    by_value(&mut status.allocated_resources);
    requirements_by_value(status.resources.as_mut());
    for statuses in [
        &mut status.init_container_statuses,
        &mut status.container_statuses,
        &mut status.ephemeral_container_statuses,
    ] {
        statuses.iter_mut().flatten().for_each(container_by_value);
    }
}

fn container_by_value(status: &mut ContainerStatus) {
    by_value(&mut status.allocated_resources);
    requirements_by_value(status.resources.as_mut());
}

fn requirements_by_value(requirements: Option<&mut ResourceRequirements>) {
    if let Some(requirements) = requirements {
        by_value(&mut requirements.limits);
        by_value(&mut requirements.requests);
    }
}

fn by_value(quantities: &mut Option<BTreeMap<String, Quantity>>) {
    if quantities.as_ref().is_some_and(BTreeMap::is_empty) {
        *quantities = None;
    }
    for quantity in quantities.iter_mut().flat_map(BTreeMap::values_mut) {
        if let Some(key) = value_key(&quantity.0) {
            quantity.0 = key;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_have_equal_keys() {
        let same = [
            ("1000m", "1"),
            ("1", "1.0"),
            ("0.5", "500m"),
            (".5", "500m"),
            ("5.", "5"),
            ("+2", "2"),
            ("1Ki", "1024"),
            ("1.5Gi", "1536Mi"),
            ("1k", "1000"),
            ("1e3", "1k"),
            ("1E3", "1000"),
            ("100e-2", "1"),
            ("1500000u", "1500m"),
            ("0", "0m"),
            ("0Gi", "-0"),
            ("129e6", "129M"),
        ];
        for (a, b) in same {
            assert_eq!(value_key(a), value_key(b), "{a} = {b}");
            assert!(value_key(a).is_some(), "{a} is a quantity");
        }
        let differ = [("1", "1001m"), ("1Ki", "1k"), ("1M", "1Mi"), ("-1", "1"), ("128974848", "129e6")];
        for (a, b) in differ {
            assert_ne!(value_key(a), value_key(b), "{a} ≠ {b}");
        }
    }

    #[test]
    fn values_finer_than_a_nano_round_up_as_upstream_parses_them() {
        assert_eq!(value_key("0.1n"), value_key("1n"));
        assert_eq!(value_key("1.0000000001"), value_key("1000000001n"));
        assert_eq!(value_key("1.00000000000"), value_key("1"), "zeros are not inexact");
        assert_eq!(value_key("-0.5n"), value_key("-1n"), "away from zero");
        assert_eq!(value_key("9.9999999999"), value_key("10"), "the carry ripples");
    }

    #[test]
    fn a_text_that_is_not_a_quantity_has_no_key() {
        for text in
            ["", "1..2", "1.2.3", "1x", "1e", "1e+", "1Kii", "one", "1 ", " 1", "1e999999999999999999999"]
        {
            assert_eq!(value_key(text), None, "{text:?}");
        }
    }

    #[test]
    fn upstreams_quirks_are_kept() {
        for zero in ["-", "+", ".", "-.", ".G", "Mi", "-Gi", "000"] {
            assert_eq!(value_key(zero).as_deref(), Some("0"), "{zero:?} reads as 0");
        }
        // The exponent is cut to 32 bits: 2^32 is 0, 99999999999 is 1215752191.
        assert_eq!(value_key("1e4294967296"), value_key("1"));
        assert_eq!(value_key("1e99999999999"), value_key("1e1215752191"));
        // A binary value is capped at 2^63-1; a decimal one is not.
        let max = value_key("9223372036854775807");
        for capped in ["8Ei", "16Ei", "9007199254740992Ki"] {
            assert_eq!(value_key(capped), max, "{capped}");
        }
        assert_eq!(value_key("-16Ei"), value_key("-9223372036854775807"));
        assert_ne!(value_key("9223372036854775808"), max, "no cap without a binary suffix");
        assert_ne!(value_key("7Ei"), max, "below the cap");
        assert_eq!(value_key("8191Pi"), value_key("9222246136947933184"), "only above the cap");
    }

    #[test]
    fn a_status_compares_its_quantities_by_value_and_empty_maps_as_absent() {
        let quantities = |pairs: &[(&str, &str)]| {
            Some(pairs.iter().map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned()))).collect())
        };
        let status = |cpu: &str, empty: Option<BTreeMap<String, Quantity>>| PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                allocated_resources: quantities(&[("cpu", cpu), ("memory", "1Gi")]),
                resources: Some(ResourceRequirements {
                    limits: quantities(&[("cpu", cpu)]),
                    requests: empty.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            allocated_resources: empty,
            ..Default::default()
        };
        let mut ours = status("1000m", Some(BTreeMap::new()));
        let mut api = status("1", None);
        assert_ne!(ours, api);
        compared_by_value(&mut ours);
        compared_by_value(&mut api);
        assert_eq!(ours, api);
        let mut other = status("2", None);
        compared_by_value(&mut other);
        assert_ne!(other, api);
    }
}
