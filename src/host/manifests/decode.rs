//! A manifest's document decoded as the kubelet's file source decodes it: sigs.k8s.io/yaml turns
//! the YAML into JSON (go-yaml v2, YAML 1.1 scalars: `0644` is the octal 420, `08` the float 8,
//! `yes` and `on` booleans), Go's JSON encoder writes a whole float without a fraction (`8`,
//! `10`, `1000` for `08`, `10.0`, `1e3`), and the JSON is decoded into the Pod by type, strictly:
//! a number or a boolean in a string field (`value: 0644`, `value: yes`) and a string in a number
//! field (`periodSeconds: '10'`) refuse the file. docs/lint.md, "What it reads", says it in
//! full.
//!
//! This module owns that last step for the agent and for `probelet lint`: making the YAML
//! reader's value the kubelet's JSON ([`as_kubelet_json`]), decoding it ([`decode_value`]), and
//! saying a decoding error with the line and column of its value and that value as the file
//! writes it (`0644`, not the 420 it stands for), from a second read of the file that keeps
//! where each value is ([`spans`]), made only when a document does not decode.

use serde::de::{Deserialize, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_saphyr::Spanned;

use super::go_null::GoNull;
use super::{decode_noting_unknown, yaml_options};

/// Makes `value`, as the YAML reader typed it, the JSON the kubelet decodes: a float whose value
/// is whole becomes an integer, as Go's JSON encoder writes it (`08` and `10.0` are floats to
/// go-yaml v2, and reach the decoder as `8` and `10`, which an integer field takes). Go writes
/// a float of 1e21 or more with an exponent, and one past 64 bits cannot be an integer here:
/// those stay floats, which no integer field takes either.
pub(crate) fn as_kubelet_json(value: &mut Value) {
    match value {
        Value::Number(number) => {
            if let Some(float) = number.as_f64().filter(|_| number.is_f64())
                && let Some(whole) = whole_number(float)
            {
                *number = whole;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(as_kubelet_json),
        Value::Object(fields) => fields.values_mut().for_each(as_kubelet_json),
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

/// What go-yaml v2's `resolve` (resolve.go) makes of a plain scalar's text, untagged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum GoScalar {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    /// The text itself.
    Str,
}

/// go-yaml v2's reading of a plain scalar (resolve.go's `resolve` with no tag; docs/lint.md,
/// "What it reads"): the words of its table (`resolveMapList`: its booleans, nulls, `.inf` and
/// `.nan` in three cases each); then, for a word starting with a digit or a sign, the word
/// without its `_`s as Go's `strconv.ParseInt` with base 0 reads it (`0x`, `0o`, `0b` in
/// either case, a leading `0` octal), or `ParseUint`, or a float of `yamlStyleFloat`'s shape
/// that does not overflow, or `0b` binary; for a word starting with `.`, a float. Anything else
/// is a string. A word too large for 64 bits in hex, `0o` or binary is a string (go-yaml v2 has
/// no big integer), and a leading-`0` one a float read in base 10.
pub(crate) fn go_yaml_resolve(text: &str) -> GoScalar {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return GoScalar::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return GoScalar::Bool(false);
        }
        "" | "~" | "null" | "Null" | "NULL" => return GoScalar::Null,
        ".nan" | ".NaN" | ".NAN" => return GoScalar::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return GoScalar::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return GoScalar::Float(f64::NEG_INFINITY),
        _ => {}
    }
    match text.as_bytes().first() {
        Some(b'.') => go_float(text).map_or(GoScalar::Str, GoScalar::Float),
        Some(b'0'..=b'9' | b'+' | b'-') => {
            let plain = text.replace('_', "");
            if let Some(int) = go_parse_int(&plain) {
                return GoScalar::Int(int);
            }
            if let Some(uint) = go_parse_uint(&plain) {
                return GoScalar::Uint(uint);
            }
            if let Some(float) = go_float(&plain) {
                return GoScalar::Float(float);
            }
            // go-yaml's own `0b` reading, by `ParseInt(rest, 2)`, which takes a sign after the
            // `0b` (`0b-101` is -5) where base 0 does not.
            let binary = plain.strip_prefix("0b").map(|digits| match digits.strip_prefix('-') {
                Some(rest) => (true, rest),
                None => (false, digits.strip_prefix('+').unwrap_or(digits)),
            });
            let binary = binary.or_else(|| plain.strip_prefix("-0b").map(|digits| (true, digits)));
            match binary {
                Some((negative, digits)) => match go_digits(digits, 2, negative) {
                    Some(Ok(int)) => GoScalar::Int(int),
                    Some(Err(uint)) if !negative => GoScalar::Uint(uint),
                    _ => GoScalar::Str,
                },
                None => GoScalar::Str,
            }
        }
        _ => GoScalar::Str,
    }
}

/// `text` as a float if it has `yamlStyleFloat`'s shape (`[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)
/// ([eE][-+]?[0-9]+)?`) and is finite: Go's `ParseFloat` refuses one that overflows (`1e400`),
/// which go-yaml then reads as a string.
fn go_float(text: &str) -> Option<f64> {
    let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
    let unsigned = text.strip_prefix(['+', '-']).unwrap_or(text);
    let whole = digits(unsigned);
    let mut rest = &unsigned[whole..];
    if let Some(after) = rest.strip_prefix('.') {
        let fraction = digits(after);
        if whole == 0 && fraction == 0 {
            return None;
        }
        rest = &after[fraction..];
    } else if whole == 0 {
        return None;
    }
    if let Some(exponent) = rest.strip_prefix(['e', 'E']) {
        let exponent = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
        if digits(exponent) == 0 || digits(exponent) != exponent.len() {
            return None;
        }
    } else if !rest.is_empty() {
        return None;
    }
    text.parse::<f64>().ok().filter(|float| float.is_finite())
}

/// Go's `strconv.ParseInt(text, 0, 64)`: a sign, then `0x`, `0o`, `0b` (either case, digits
/// after it), a leading `0` (octal), or decimal.
fn go_parse_int(text: &str) -> Option<i64> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (base, digits) = go_base(unsigned)?;
    go_digits(digits, base, negative)?.ok()
}

/// Go's `strconv.ParseUint(text, 0, 64)`: as [`go_parse_int`], without a sign.
fn go_parse_uint(text: &str) -> Option<u64> {
    let (base, digits) = go_base(text)?;
    match go_digits(digits, base, false)? {
        Ok(int) => u64::try_from(int).ok(),
        Err(uint) => Some(uint),
    }
}

/// The base and digits of an unsigned number as Go's base 0 reads it.
fn go_base(text: &str) -> Option<(u32, &str)> {
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b'0') {
        return Some((10, text));
    }
    let base = match bytes.get(1).map(u8::to_ascii_lowercase) {
        Some(b'b') if bytes.len() >= 3 => 2,
        Some(b'o') if bytes.len() >= 3 => 8,
        Some(b'x') if bytes.len() >= 3 => 16,
        _ => return Some((8, &text[1..])),
    };
    Some((base, &text[2..]))
}

/// `digits` in `base`, negated if `negative`: `Ok` if it fits an i64, `Err` with the u64 if
/// only that holds it, `None` if neither or not a number. An empty rest after a leading `0` is
/// 0 (Go reads `0` as an octal `0`).
fn go_digits(digits: &str, base: u32, negative: bool) -> Option<Result<i64, u64>> {
    if digits.is_empty() && base != 8 {
        return None;
    }
    let mut magnitude: u64 = 0;
    for c in digits.chars() {
        let digit = c.to_digit(base)?;
        magnitude = magnitude.checked_mul(u64::from(base))?.checked_add(u64::from(digit))?;
    }
    if negative {
        let int = 0i128 - i128::from(magnitude);
        return i64::try_from(int).ok().map(Ok);
    }
    Some(i64::try_from(magnitude).map_err(|_| magnitude))
}

/// The JSON value of `scalar` (of the text `text`), as sigs.k8s.io/yaml writes it: `Err` for
/// a float JSON cannot hold, in Go's words (`json: unsupported value: +Inf`).
fn go_json(scalar: GoScalar, text: &str) -> Result<Value, String> {
    Ok(match scalar {
        GoScalar::Null => Value::Null,
        GoScalar::Bool(b) => Value::Bool(b),
        GoScalar::Int(int) => int.into(),
        GoScalar::Uint(uint) => uint.into(),
        GoScalar::Float(float) => match serde_json::Number::from_f64(float) {
            Some(number) => {
                let mut value = Value::Number(number);
                as_kubelet_json(&mut value);
                value
            }
            None => return Err(format!("json: unsupported value: {}", go_float_word(float))),
        },
        GoScalar::Str => Value::String(text.to_owned()),
    })
}

/// Go's `%v` of a float that is not finite.
fn go_float_word(float: f64) -> &'static str {
    if float.is_nan() {
        "NaN"
    } else if float > 0.0 {
        "+Inf"
    } else {
        "-Inf"
    }
}

/// The JSON key sigs.k8s.io/yaml makes of a plain key go-yaml resolved as `scalar`
/// (`convertToJSONableObject`): a boolean `true` or `false`, an integer in decimal, a float as
/// Go's `strconv.FormatFloat(f, 'g', -1, 32)` writes it (`.inf`, `-.inf`, `.nan` for those, and
/// for a float past 32 bits' range, `1e300`, an infinity once narrowed); a
/// null or a key only a u64 holds it refuses (`unsupported map key of type: …`).
fn go_json_key(scalar: GoScalar, text: &str) -> Result<String, String> {
    Ok(match scalar {
        GoScalar::Str => text.to_owned(),
        GoScalar::Bool(b) => b.to_string(),
        GoScalar::Int(int) => int.to_string(),
        GoScalar::Float(float) if float.is_nan() => ".nan".into(),
        // Go narrows the float to 32 bits first: `1e300` is an infinity there.
        #[allow(clippy::cast_possible_truncation)]
        GoScalar::Float(float) if (float as f32).is_infinite() => {
            if float > 0.0 {
                ".inf".into()
            } else {
                "-.inf".into()
            }
        }
        GoScalar::Float(float) => go_format_float32_g(float),
        GoScalar::Null => return Err("unsupported map key of type: %!s(<nil>), key: <nil>".into()),
        GoScalar::Uint(uint) => {
            return Err(format!("unsupported map key of type: uint64, key: {uint:#x}"));
        }
    })
}

/// Go's `strconv.FormatFloat(float, 'g', -1, 32)`: the shortest digits that read back as the
/// same 32-bit float, with an exponent (`1e+06`, `1e-05`) when it is below -4 or 6 and more.
fn go_format_float32_g(float: f64) -> String {
    // Narrowing to 32 bits is what Go's bitSize 32 does.
    #[allow(clippy::cast_possible_truncation)]
    let narrow = float as f32;
    // Rust writes the shortest digits that read back as the same f32: `1.2345e6`.
    let scientific = format!("{narrow:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if digits.bytes().all(|b| b == b'0') {
        return format!("{sign}0");
    }
    if !(-4..6).contains(&exponent) {
        let (first, rest) = digits.split_at(1);
        let point = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{first}{point}e{exp_sign}{:02}", exponent.unsigned_abs());
    }
    let count = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    if exponent < 0 {
        let zeros = "0".repeat(exponent.unsigned_abs() as usize - 1);
        return format!("{sign}0.{zeros}{digits}");
    }
    if exponent + 1 >= count {
        let zeros = "0".repeat(usize::try_from(exponent + 1 - count).unwrap_or(0));
        return format!("{sign}{digits}{zeros}");
    }
    let (whole, fraction) = digits.split_at(usize::try_from(exponent + 1).unwrap_or(0));
    format!("{sign}{whole}.{fraction}")
}

/// Whether `word`, as a file writes it, may be read otherwise by the YAML reader than by
/// go-yaml v2: a case of a boolean go-yaml does not spell (`oN`), a number with `_`s or a
/// capital radix letter (`1__0`, `0X1F`), an infinity or a NaN, a float that overflows
/// (`1e400`), or a key go-yaml resolves to other than a string (`yes:`, `1:`). A merge key
/// (`<<`) is found by the parser instead ([`has_merge_key`]): the word is also a shell's
/// heredoc (`cat << EOF`) in a script.
fn odd_word(word: &str, is_key: bool) -> bool {
    let resolved = go_yaml_resolve(word);
    let odd_boolean =
        ["y", "yes", "n", "no", "true", "false", "on", "off"].iter().any(|b| word.eq_ignore_ascii_case(b))
            && resolved == GoScalar::Str;
    let unsigned = word.strip_prefix(['+', '-']).unwrap_or(word);
    let capital_radix = matches!(unsigned.as_bytes(), [b'0', b'X' | b'O' | b'B', ..]);
    let signed_binary = matches!(unsigned.as_bytes(), [b'0', b'b', b'+' | b'-', ..]);
    let number = matches!(resolved, GoScalar::Int(_) | GoScalar::Uint(_) | GoScalar::Float(_));
    let not_finite = matches!(resolved, GoScalar::Float(float) if !float.is_finite());
    let overflows = word.contains(['e', 'E']) && word.parse::<f64>().is_ok_and(f64::is_infinite);
    odd_boolean
        || overflows
        || not_finite
        || (number && (word.contains('_') || capital_radix || signed_binary))
        || (is_key && resolved != GoScalar::Str)
}

/// Makes each scalar and key of `documents` (a YAML file's, as the reader typed them) what
/// go-yaml v2 and sigs.k8s.io/yaml make of it where the two readers differ ([`odd_word`], or a
/// tag: [`has_tag`]):
/// `oN` a string, `0X1F` 31, `1__0` 10, `1e400` the string `1e400`, the key `yes` `true`; and
/// each mapping rebuilt from its entries as go-yaml sets them, merge keys where they are
/// written ([`go_mapping`]).
/// Returns, for each document, why the kubelet refuses it where it does: an infinity or a NaN
/// (`json: unsupported value: +Inf`), a tag go-yaml cannot read its scalar as (`!!bool oN`),
/// a null key; and the keys of its mappings written twice as go-yaml compares keys
/// ([`KeyWrittenTwice`]). Only a file that writes such a word is read a second time for the
/// words of its values ([`spans`]), and only such a file or one the reader found a key twice
/// in (`written_twice`) is read for its keys.
pub(crate) fn go_yaml_scalars(documents: &mut [Value], contents: &str, written_twice: bool) -> GoYamlRead {
    let mut read =
        GoYamlRead { refused: vec![None; documents.len()], twice: vec![Vec::new(); documents.len()] };
    let odd = needs_go_yaml_pass(contents);
    if !odd && !written_twice {
        return read;
    }
    let (scalars, mut twice) = Scalars::read(contents);
    if twice.len() != documents.len() {
        // The parser's documents and the reader's do not line up (a root the reader passes
        // over that the walk counts): the keys are said, if not each with its own document.
        twice = vec![twice.concat()];
    }
    for (keys, found) in read.twice.iter_mut().zip(twice) {
        *keys = found;
    }
    if !odd {
        return read;
    }
    let Some(nodes) = spans(contents) else { return read };
    for ((value, node), refusal) in documents.iter_mut().zip(&nodes).zip(&mut read.refused) {
        let mut path = Vec::new();
        match go_value(node, contents, &scalars, &mut path) {
            Ok(go) => *value = go,
            Err(error) => *refusal = Some(error),
        }
    }
    read
}

/// Whether the YAML reader may read `contents` otherwise than go-yaml v2 does, so that
/// [`go_yaml_scalars`] reads it again: a word of [`odd_word`], a tag ([`has_tag`]), or a merge
/// key ([`has_merge_key`]).
fn needs_go_yaml_pass(contents: &str) -> bool {
    words(contents).any(|(word, is_key)| odd_word(word, is_key))
        || has_tag(contents)
        || has_merge_key(contents)
}

/// Whether the parser finds a merge key in `contents`: a key `<<` written plain and untagged
/// (`<<: *x`, `<< : *x`, `? <<`) or tagged `!!merge`, go-yaml v2's `isMerge`. go-yaml applies a
/// merge where it is written and the reader after the mapping's own keys ([`go_mapping`]), and
/// refuses a merge of no mapping (`<<: 1`) in its own words. A `<<` inside a scalar (a script's
/// heredoc, `cat << EOF`, in a block scalar or a quoted string) or a plain `<<` that is a value
/// is text to both: such a file was given every pass of [`go_yaml_scalars`] for it. An anchored
/// `<<` counts too, as an alias of it may be a key.
fn has_merge_key(contents: &str) -> bool {
    use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle};
    if !contents.contains("<<") {
        return false;
    }
    // The open collections, innermost last: a sequence (`None`), or a mapping and whether a key
    // comes next.
    let mut open: Vec<Option<bool>> = Vec::new();
    let is_key = |open: &mut Vec<Option<bool>>| match open.last_mut() {
        Some(Some(key_next)) => {
            let key = *key_next;
            *key_next = !key;
            key
        }
        _ => false,
    };
    for event in Parser::new_from_str(contents) {
        // The reader refuses the file, or reads what it can: a merge key before the error is
        // found, as `has_tag` finds a tag.
        let Ok((event, _)) = event else { return false };
        match event {
            Event::Scalar(value, style, anchor, tag) => {
                let key = is_key(&mut open);
                if value != "<<" {
                    continue;
                }
                let merge_tag = tag
                    .as_ref()
                    .is_some_and(|tag| tag.handle() == YAML_TAG_PREFIX && tag.suffix() == "merge");
                let plain = style == ScalarStyle::Plain && tag.is_none();
                if anchor != 0 || (key && (plain || merge_tag)) {
                    return true;
                }
            }
            Event::MappingStart(..) => {
                is_key(&mut open);
                open.push(Some(true));
            }
            Event::SequenceStart(..) => {
                is_key(&mut open);
                open.push(None);
            }
            Event::Alias(..) => {
                is_key(&mut open);
            }
            Event::MappingEnd | Event::SequenceEnd => {
                open.pop();
            }
            Event::DocumentStart(..) => open.clear(),
            _ => {}
        }
    }
    false
}

/// What [`go_yaml_scalars`] found of each document.
#[derive(Debug, Clone, Default)]
pub(crate) struct GoYamlRead {
    /// Why the kubelet refuses the document, where it does.
    pub(crate) refused: Vec<Option<String>>,
    /// The keys of the document's mappings written again, in the file's order.
    pub(crate) twice: Vec<Vec<KeyWrittenTwice>>,
}

/// A mapping's key written again (as go-yaml compares keys: `1` and `01` are the integer 1,
/// `yes` and `true` the boolean true), whose last value go-yaml v2 (not strict) keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyWrittenTwice {
    /// The key as the file writes it again (its value: `01`, `name`).
    pub(crate) written: String,
    pub(crate) line: usize,
    pub(crate) column: usize,
    /// The JSON key, where go-yaml keeps the two keys apart and only sigs.k8s.io/yaml's JSON
    /// makes them one (`1_0`, the int 10, and `10.0`, the float 10: the key `10`), taking
    /// either value as Go's map order falls.
    pub(crate) only_in_json: Option<String>,
}

/// How many keys written twice a document's warning names; the rest are counted.
const KEYS_TWICE_NAMED: usize = 5;

/// A document's keys written twice in words (`duplicate mapping key: image at line 8, column 5:
/// the last value is read, as the kubelet reads it`), the first [`KEYS_TWICE_NAMED`] named and
/// the rest counted; `None` for none.
pub(crate) fn keys_written_twice_text(keys: &[KeyWrittenTwice]) -> Option<String> {
    let named: Vec<String> = keys
        .iter()
        .take(KEYS_TWICE_NAMED)
        .map(|key| {
            let merged = match &key.only_in_json {
                Some(json) => format!(
                    " (the key {json} as a key before it only once made JSON: the kubelet reads either value, \
                     as Go's map order falls)"
                ),
                None => String::new(),
            };
            format!("{} at line {}, column {}{merged}", key.written, key.line, key.column)
        })
        .collect();
    let random = keys.iter().any(|key| key.only_in_json.is_some());
    let (start, end) = match (keys.len(), random) {
        (0, _) => return None,
        (1, false) => ("duplicate mapping key", super::DUPLICATE_KEY_READ),
        (_, false) => ("duplicate mapping keys", super::DUPLICATE_KEYS_READ),
        (1, true) => ("duplicate mapping key", "the last value is read"),
        (_, true) => ("duplicate mapping keys", "the last values are read"),
    };
    let more = keys.len().saturating_sub(KEYS_TWICE_NAMED);
    let more = if more > 0 { format!(" and {more} more") } else { String::new() };
    Some(format!("{start}: {}{more}: {end}", named.join(", ")))
}

/// The words of `contents` that could be plain scalars, each with whether a `:` follows it
/// (a key).
fn words(contents: &str) -> impl Iterator<Item = (&str, bool)> {
    let split =
        |c: char| c.is_whitespace() || matches!(c, ',' | '[' | ']' | '{' | '}' | '#' | '"' | '\'' | ':');
    let mut rest = contents;
    std::iter::from_fn(move || {
        let start = rest.find(|c: char| !split(c))?;
        rest = &rest[start..];
        let end = rest.find(split).unwrap_or(rest.len());
        let (word, after) = rest.split_at(end);
        rest = after;
        Some((word, after.starts_with(':')))
    })
}

/// The value go-yaml v2 and sigs.k8s.io/yaml make of `node` (read with every entry of each
/// mapping, merge keys as written: [`spans`]); `path` is where it is, for an error.
fn go_value(
    node: &Spanned<Node>,
    contents: &str,
    scalars: &Scalars,
    path: &mut Vec<Segment>,
) -> Result<Value, String> {
    match &node.value {
        Node::Scalar(read) => {
            // A scalar with a tag or an anchor is read from the parser's events (go-yaml reads a
            // tagged one by its tag, quoted or not); any other from its text, if plain.
            let (tag, text) = match scalars.at(node) {
                Some(ParsedScalar { tag: Some(tag), value, .. }) => (Some(tag.as_str()), value.as_str()),
                Some(ParsedScalar { tag: None, value, plain: true }) => (None, value.as_str()),
                Some(ParsedScalar { tag: None, plain: false, .. }) => return Ok(read.clone()),
                None => match plain_text(node, contents).filter(|text| !text.starts_with(['&', '!', '*'])) {
                    Some(text) => (None, text),
                    None => return Ok(read.clone()),
                },
            };
            let refused = |message: String| {
                let at = node.referenced;
                let message = format!("{message} at line {}, column {}", at.line(), at.column());
                super::with_path(&path_text(path), &message)
            };
            if tag.is_some_and(|tag| short_tag(tag) == "!!binary") {
                return Ok(Value::String(go_yaml_binary(text).map_err(refused)?));
            }
            let resolved = match tag {
                Some(tag) => go_yaml_tagged(tag, text).map_err(refused)?,
                None => go_yaml_resolve(text),
            };
            go_json(resolved, text)
                .map_err(|message| refused(format!("error converting YAML to JSON: {message} (`{text}`)")))
        }
        Node::Seq(nodes) => {
            let mut items = Vec::with_capacity(nodes.len());
            for (index, node) in nodes.iter().enumerate() {
                path.push(Segment::Index(index));
                let item = go_value(node, contents, scalars, path);
                path.pop();
                items.push(item?);
            }
            Ok(Value::Array(items))
        }
        Node::Map(entries) => {
            let mut map = GoMap::default();
            go_mapping(entries, &mut map, contents, scalars, path)?;
            Ok(Value::Object(map.into_json()))
        }
    }
}

/// go-yaml v2's `mapping` into `map` (decode.go, v2.4): the entries in the file's order, each
/// key set as Go sets a map's key (a key set again takes the later value), and a merge key
/// (`<<`, its `isMerge`) merging its mapping into `map` where it is written, so that it
/// overrides the keys before it and the keys after it override it; a sequence of mappings is
/// merged from its last to its first, the first taking precedence. docs/lint.md, "What it
/// reads".
fn go_mapping(
    entries: &[(Key, Spanned<Node>)],
    map: &mut GoMap<Value>,
    contents: &str,
    scalars: &Scalars,
    path: &mut Vec<Segment>,
) -> Result<(), String> {
    for (key, node) in entries {
        if key.is_merge(contents, scalars) {
            let merged: Vec<&Spanned<Node>> = match &node.value {
                Node::Map(_) => vec![node],
                Node::Seq(items) => items.iter().rev().collect(),
                Node::Scalar(_) => vec![node],
            };
            for merged in merged {
                let Node::Map(merged_entries) = &merged.value else {
                    let at = merged.referenced;
                    let message = format!(
                        "error converting YAML to JSON: yaml: map merge requires map or sequence of maps as the \
                         value at line {}, column {}",
                        at.line(),
                        at.column()
                    );
                    return Err(super::with_path(&path_text(path), &message));
                };
                go_mapping(merged_entries, map, contents, scalars, path)?;
            }
            continue;
        }
        let (go_key, json_key) = key.go(contents, scalars).map_err(|message| {
            let at = key.0.referenced;
            let message = format!("{message} at line {}, column {}", at.line(), at.column());
            super::with_path(&path_text(path), &message)
        })?;
        path.push(Segment::Key(json_key.clone()));
        let value = go_value(node, contents, scalars, path);
        path.pop();
        map.set(go_key, json_key, value?);
    }
    Ok(())
}

/// A Go `map[interface{}]interface{}` as go-yaml v2 fills it, in the order its keys were first
/// set, each with the JSON key sigs.k8s.io/yaml makes of it (`convertToJSONableObject`).
#[derive(Debug)]
struct GoMap<T> {
    /// Each key, its JSON key and its value, with when it was last set.
    entries: Vec<(GoKey, String, T, usize)>,
    /// The entries by JSON key: keys Go keeps apart may be one JSON key (`1_0` and `10.0`).
    by_json: std::collections::HashMap<String, Vec<usize>>,
    /// How many sets so far.
    sets: usize,
}

impl<T> Default for GoMap<T> {
    fn default() -> Self {
        Self { entries: Vec::new(), by_json: std::collections::HashMap::new(), sets: 0 }
    }
}

/// What setting a key in a [`GoMap`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoSet {
    /// The key was in the map (Go's `==`): its value is replaced.
    Again,
    /// A new key, whose JSON key another key already has (`true` after `!!str true`).
    SameJson,
    /// A new key.
    New,
}

impl<T> GoMap<T> {
    /// Sets `key` (of JSON key `json`) to `value`, as Go's map assignment does: an equal key
    /// takes the value, and the key itself too where the two differ (Go updates a float key
    /// in place: `0.0` then `-0.0` is the key -0, whose JSON key is `-0`).
    fn set(&mut self, key: GoKey, json: String, value: T) -> GoSet {
        self.sets += 1;
        let zero = matches!(key, GoKey::Float(float) if float == 0.0);
        let mut buckets = vec![json.as_str()];
        if zero {
            buckets.extend(["0", "-0"]);
        }
        let found = buckets
            .iter()
            .filter_map(|bucket| self.by_json.get(*bucket))
            .flatten()
            .copied()
            .find(|&index| self.entries[index].0 == key);
        if let Some(index) = found {
            let entry = &mut self.entries[index];
            let old_json = std::mem::replace(&mut entry.1, json.clone());
            entry.0 = key;
            entry.2 = value;
            entry.3 = self.sets;
            if old_json != json {
                if let Some(bucket) = self.by_json.get_mut(&old_json) {
                    bucket.retain(|&other| other != index);
                }
                self.by_json.entry(json).or_default().push(index);
            }
            return GoSet::Again;
        }
        let bucket = self.by_json.entry(json.clone()).or_default();
        let taken = !bucket.is_empty();
        bucket.push(self.entries.len());
        self.entries.push((key, json, value, self.sets));
        if taken { GoSet::SameJson } else { GoSet::New }
    }
}

impl GoMap<Value> {
    /// The JSON object sigs.k8s.io/yaml makes of the map: keys that are one JSON key take
    /// either value as Go's map order falls; here the one set last.
    fn into_json(self) -> serde_json::Map<String, Value> {
        let mut entries = self.entries;
        entries.sort_by_key(|entry| entry.3);
        entries.into_iter().map(|(_, json, value, _)| (json, value)).collect()
    }
}

/// go-yaml v2's `resolve` of `text` under `tag` (`!!bool oN`): the tags it resolves (`!!str`,
/// `!!bool`, `!!int`, `!!float`, `!!null`, `!!timestamp`) take the text if it resolves to their
/// type (an integer under `!!float` is made a float, a timestamp is its text), else the file is
/// refused in go-yaml's words
/// (`yaml: cannot decode !!str `oN` as a !!bool`); any other tag leaves the text a string.
fn go_yaml_tagged(tag: &str, text: &str) -> Result<GoScalar, String> {
    let short = short_tag(tag);
    let resolved = go_yaml_resolve(text);
    let (wanted, got) = match (short.as_str(), resolved) {
        ("!!str" | "!!binary", _) => return Ok(GoScalar::Str),
        ("!!bool", GoScalar::Bool(_))
        | ("!!null", GoScalar::Null)
        | ("!!int", GoScalar::Int(_) | GoScalar::Uint(_))
        | ("!!float", GoScalar::Float(_)) => return Ok(resolved),
        #[allow(clippy::cast_precision_loss)]
        ("!!float", GoScalar::Int(int)) => return Ok(GoScalar::Float(int as f64)),
        // A timestamp is the text as written: go-yaml gives `interface{}` its `n.value`.
        ("!!timestamp", _) if go_yaml_timestamp(text) => return Ok(GoScalar::Str),
        ("!!bool" | "!!null" | "!!int" | "!!float" | "!!timestamp", got) => (short.as_str(), got),
        _ => return Ok(GoScalar::Str),
    };
    let got = match got {
        GoScalar::Null => "!!null",
        GoScalar::Bool(_) => "!!bool",
        GoScalar::Int(_) | GoScalar::Uint(_) => "!!int",
        GoScalar::Float(_) => "!!float",
        GoScalar::Str => "!!str",
    };
    Err(format!("error converting YAML to JSON: yaml: cannot decode {got} `{text}` as a {wanted}"))
}

/// `tag` as go-yaml's `shortTag` writes it: `!!int` for `!<tag:yaml.org,2002:int>` too.
fn short_tag(tag: &str) -> String {
    let short = tag.strip_prefix("!<tag:yaml.org,2002:").and_then(|t| t.strip_suffix('>'));
    short.map(|t| format!("!!{t}")).unwrap_or_else(|| tag.to_owned())
}

/// The string go-yaml v2 makes of a `!!binary` scalar's `text` (decode.go's `scalar`): Go's
/// `base64.StdEncoding.DecodeString` of it (the standard alphabet, `=` padding required, a
/// line break `\r` or `\n` anywhere passed over, any other character refused: a space too,
/// which a plain scalar folded over lines has), the bytes then a Go string, which Go's JSON
/// encoder writes with each byte that does not start valid UTF-8 as U+FFFD. Base64 it cannot
/// read refuses the document, in go-yaml's words.
fn go_yaml_binary(text: &str) -> Result<String, String> {
    const INVALID: &str = "error converting YAML to JSON: yaml: !!binary value contains invalid base64 data";
    let sextet = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut chars = text.bytes().filter(|c| !matches!(c, b'\r' | b'\n'));
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    let (mut quantum, mut filled, mut padded) = ([0u8; 4], 0, false);
    while let Some(c) = chars.next() {
        if c == b'=' {
            // Padding ends the data: `xx==` or `xxx=`, and nothing after it.
            padded = match filled {
                2 => chars.next() == Some(b'='),
                3 => true,
                _ => false,
            };
            if !padded || chars.next().is_some() {
                return Err(INVALID.to_owned());
            }
            break;
        }
        quantum[filled] = sextet(c).ok_or(INVALID)?;
        filled += 1;
        if filled == 4 {
            let [a, b, c, d] = quantum;
            bytes.extend([a << 2 | b >> 4, b << 4 | c >> 2, c << 6 | d]);
            filled = 0;
        }
    }
    let [a, b, c, _] = quantum;
    match (filled, padded) {
        (0, false) => {}
        (2, true) => bytes.push(a << 2 | b >> 4),
        (3, true) => bytes.extend([a << 2 | b >> 4, b << 4 | c >> 2]),
        // A quantum cut short without its padding: Go's decoder refuses it.
        _ => return Err(INVALID.to_owned()),
    }
    Ok(go_json_string(&bytes))
}

/// `bytes` as Go's JSON encoder writes a Go string of them: each byte where no valid UTF-8
/// starts is U+FFFD, one per byte (where Rust's lossy reading makes one of a cut sequence).
fn go_json_string(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    let mut rest = bytes;
    loop {
        match std::str::from_utf8(rest) {
            Ok(valid) => {
                text.push_str(valid);
                return text;
            }
            Err(error) => {
                let (valid, after) = rest.split_at(error.valid_up_to());
                text.push_str(std::str::from_utf8(valid).unwrap_or_default());
                text.push('\u{FFFD}');
                rest = after.get(1..).unwrap_or_default();
            }
        }
    }
}

/// Whether go-yaml v2 reads `text` as a timestamp (its `parseTimestamp`): four digits and a
/// `-`, then one of its layouts as Go's `time.Parse` reads them: `2006-1-2`, `2006-1-2
/// 15:4:5.999999999` (one space or more), `2006-1-2T15:4:5.999999999Z07:00` (or a small `t`).
/// A month or day, hour, minute and second is one digit or two, in range (the day in its month:
/// `2001-02-29` is not); a fraction of a second is `.` or `,` and digits, and may be left out;
/// a zone is `Z` or `±hh:mm` (at most 24 hours and 60 minutes). Nothing may follow.
fn go_yaml_timestamp(text: &str) -> bool {
    go_timestamp(text).is_some()
}

fn go_timestamp(text: &str) -> Option<()> {
    /// Go's `getnum(s, false)`: one digit, or two.
    fn number(s: &str) -> Option<(u32, &str)> {
        let digits = s.bytes().take(2).take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        Some((s[..digits].parse().ok()?, &s[digits..]))
    }
    let bytes = text.as_bytes();
    if bytes.iter().take_while(|b| b.is_ascii_digit()).count() != 4 || bytes.get(4) != Some(&b'-') {
        return None;
    }
    let year: u32 = text[..4].parse().ok()?;
    let (month, rest) = number(&text[5..])?;
    let (day, rest) = number(rest.strip_prefix('-')?)?;
    let leap = year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400));
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if !(1..=days).contains(&day) {
        return None;
    }
    if rest.is_empty() {
        return Some(());
    }
    let (zoned, rest) = match rest.as_bytes()[0] {
        b'T' | b't' => (true, &rest[1..]),
        b' ' => (false, rest.trim_start_matches(' ')),
        _ => return None,
    };
    let (hour, rest) = number(rest)?;
    let (minute, rest) = number(rest.strip_prefix(':')?)?;
    let (second, mut rest) = number(rest.strip_prefix(':')?)?;
    if hour >= 24 || minute >= 60 || second >= 60 {
        return None;
    }
    if let Some(fraction) = rest.strip_prefix(['.', ',']) {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            rest = &fraction[digits..];
        }
    }
    if zoned {
        if let Some(after) = rest.strip_prefix('Z') {
            rest = after;
        } else {
            let zone = rest.as_bytes();
            let two = |at: usize| zone.get(at..at + 2).filter(|d| d.iter().all(u8::is_ascii_digit));
            let (hours, minutes) = (two(1)?, two(4)?);
            if !matches!(zone[0], b'+' | b'-') || zone[3] != b':' {
                return None;
            }
            let value = |d: &[u8]| u32::from(d[0] - b'0') * 10 + u32::from(d[1] - b'0');
            if value(hours) > 24 || value(minutes) > 60 {
                return None;
            }
            rest = &rest[6..];
        }
    }
    rest.is_empty().then_some(())
}

/// The file's scalars as the YAML parser's events give them (go-yaml's nodes), keyed by where
/// each ends in the file (a byte offset, which a tag or an anchor before the scalar does not
/// move): their tag as go-yaml spells it (`!!bool`, `!foo`), if any, and their value (escapes
/// and folding done: go-yaml's `n.value`).
#[derive(Debug, Default)]
pub(crate) struct Scalars(std::collections::HashMap<usize, ParsedScalar>);

#[derive(Debug)]
struct ParsedScalar {
    tag: Option<String>,
    value: String,
    /// Written plain (not quoted, not a block): go-yaml resolves an untagged one by its text.
    plain: bool,
}

/// The core schema's tag prefix (`!!` is its shorthand).
const YAML_TAG_PREFIX: &str = "tag:yaml.org,2002:";

impl Scalars {
    /// `contents`' scalars that have a tag or an anchor (go-yaml reads the rest from their
    /// text), and the keys written twice in each of its documents (as the reader counts
    /// documents: an empty one is none): empty for a file the parser gives up on, which the
    /// reader refuses anyway.
    fn read(contents: &str) -> (Self, Vec<Vec<KeyWrittenTwice>>) {
        use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle};
        let mut scalars = std::collections::HashMap::new();
        let mut keys = KeyWalk::default();
        for event in Parser::new_from_str(contents) {
            let Ok((event, span)) = event else { break };
            let Event::Scalar(value, style, anchor, tag) = event else {
                keys.structure(&event);
                continue;
            };
            let tag = tag.map(|tag| match tag.handle() {
                YAML_TAG_PREFIX => format!("!!{}", tag.suffix()),
                handle => format!("{handle}{}", tag.suffix()),
            });
            let plain = style == ScalarStyle::Plain;
            keys.scalar(tag.as_deref(), &value, plain, &span);
            if tag.is_none() && anchor == 0 {
                continue;
            }
            let Some(end) = span.end.byte_offset() else { continue };
            scalars.insert(end, ParsedScalar { tag, value: value.into_owned(), plain });
        }
        (Self(scalars), keys.documents)
    }

    /// The scalar `node` stands for (an alias's is its anchor's).
    fn at(&self, node: &Spanned<Node>) -> Option<&ParsedScalar> {
        self.at_location(&node.defined)
    }

    /// The scalar that ends where `at` does.
    fn at_location(&self, at: &serde_saphyr::Location) -> Option<&ParsedScalar> {
        let span = at.span();
        let end = span.byte_offset()?.checked_add(span.byte_len()?)?;
        self.0.get(&usize::try_from(end).ok()?)
    }
}

/// A mapping's key as go-yaml v2 holds it (a key of a `map[interface{}]interface{}`): keys are
/// one when Go's `==` says so, a type and a value (`1` and `01` the int 1, `yes` and `true` the
/// bool true; a NaN is never one with another, `0.0` and `-0.0` are one).
#[derive(Debug, Clone, PartialEq)]
enum GoKey {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(String),
}

impl GoKey {
    /// The key go-yaml makes of a scalar of `value` under `tag` (written plain or not), with
    /// the JSON key sigs.k8s.io/yaml makes of it; `Err` where the kubelet refuses it, in its
    /// words.
    fn of(tag: Option<&str>, value: &str, plain: bool) -> Result<(Self, String), String> {
        let scalar = match tag {
            Some(tag) if short_tag(tag) == "!!binary" => {
                let text = go_yaml_binary(value)?;
                return Ok((Self::Str(text.clone()), text));
            }
            Some(tag) => go_yaml_tagged(tag, value)?,
            None if plain => go_yaml_resolve(value),
            None => GoScalar::Str,
        };
        let json = go_json_key(scalar, value)
            .map_err(|message| format!("error converting YAML to JSON: {message}"))?;
        let key = match scalar {
            GoScalar::Null => Self::Null,
            GoScalar::Bool(b) => Self::Bool(b),
            GoScalar::Int(int) => Self::Int(int),
            GoScalar::Uint(uint) => Self::Uint(uint),
            GoScalar::Float(float) => Self::Float(float),
            GoScalar::Str => Self::Str(value.to_owned()),
        };
        Ok((key, json))
    }
}

/// The parser's events walked for the keys of each mapping written twice ([`Scalars::read`]).
#[derive(Debug, Default)]
struct KeyWalk {
    /// The open sequences (`None`) and mappings (the keys read so far by their JSON key, and
    /// whether a key comes next), innermost last.
    open: Vec<Option<(GoMap<()>, bool)>>,
    /// Each document's keys written twice, as the reader counts documents.
    documents: Vec<Vec<KeyWrittenTwice>>,
    /// Whether the next node is a document's root.
    root: bool,
}

impl KeyWalk {
    /// A node starts: whether it is a mapping's key. A root opens a document (the reader's
    /// count passes over a null one: empty, `~`, `null`).
    fn node(&mut self, null: bool) -> bool {
        if std::mem::take(&mut self.root) && !null {
            self.documents.push(Vec::new());
        }
        match self.open.last_mut() {
            Some(Some((_, key_next))) => {
                let key = *key_next;
                *key_next = !key;
                key
            }
            _ => false,
        }
    }

    fn structure(&mut self, event: &serde_saphyr::granit_parser::Event) {
        use serde_saphyr::granit_parser::Event;
        match event {
            Event::DocumentStart(..) => {
                self.open.clear();
                self.root = true;
            }
            Event::MappingStart(..) => {
                self.node(false);
                self.open.push(Some((GoMap::default(), true)));
            }
            Event::SequenceStart(..) => {
                self.node(false);
                self.open.push(None);
            }
            Event::Alias(..) => {
                self.node(false);
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.open.pop();
            }
            _ => {}
        }
    }

    fn scalar(
        &mut self,
        tag: Option<&str>,
        value: &str,
        plain: bool,
        span: &serde_saphyr::granit_parser::Span,
    ) {
        let null = plain && tag.is_none() && go_yaml_resolve(value) == GoScalar::Null;
        if !self.node(null) {
            return;
        }
        // A plain `<<` merges its mapping into this one (go-yaml v2's `isMerge`), each `<<` of
        // a mapping in turn: not a key whose last value is read.
        let merge_tag = tag.is_some_and(|tag| short_tag(tag) == "!!merge");
        if value == "<<" && ((plain && tag.is_none()) || merge_tag) {
            return;
        }
        let Ok((key, json)) = GoKey::of(tag, value, plain) else { return };
        let Some(Some((keys, _))) = self.open.last_mut() else { return };
        let twice = match keys.set(key, json.clone(), ()) {
            GoSet::Again => Some(None),
            GoSet::SameJson => Some(Some(json)),
            GoSet::New => None,
        };
        if let Some(only_in_json) = twice
            && let Some(document) = self.documents.last_mut()
        {
            let (line, column) = (span.start.line(), span.start.col() + 1);
            document.push(KeyWrittenTwice { written: value.to_owned(), line, column, only_in_json });
        }
    }
}

/// Whether a `!` in `contents` may start a tag: where a node's properties may start, at the
/// start of a line or after a space, a tab or a flow indicator (`[`, `{`, `,`, `:`). A `!`
/// elsewhere (`#!/bin/sh` in a script, `a!=b`) is text, for which the parser is not run: a file
/// with a shell script's first line was read through every pass of [`go_yaml_scalars`].
fn may_have_tag(contents: &str) -> bool {
    let bytes = contents.as_bytes();
    bytes.iter().enumerate().any(|(at, &byte)| {
        byte == b'!'
            && (at == 0 || matches!(bytes[at - 1], b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b',' | b':'))
    })
}

/// Whether the parser finds a tag in `contents` (a scalar's or a collection's, `!` alone too):
/// go-yaml reads a tagged node by its tag, so such a file has [`go_yaml_scalars`]' passes.
fn has_tag(contents: &str) -> bool {
    use serde_saphyr::granit_parser::{Event, Parser};
    if !may_have_tag(contents) {
        return false;
    }
    for event in Parser::new_from_str(contents) {
        match event {
            Ok((
                Event::Scalar(_, _, _, Some(_))
                | Event::MappingStart(_, _, Some(_))
                | Event::SequenceStart(_, _, Some(_)),
                _,
            )) => return true,
            Ok(_) => {}
            // The reader refuses the file, or reads what it can: its tags before the error are
            // found, as `reader_text` finds them.
            Err(_) => return false,
        }
    }
    false
}

/// `contents` as the YAML reader is given it: each scalar's tag (`!!int`, `!!timestamp`) made a
/// local tag of the same length that the reader gives no type (`!xxxx`), so that it reads every
/// scalar as it reads an untagged one, where it refused some (`!!int 1.5`: `invalid u64`;
/// `!!timestamp 2001-12-14`: `cannot deserialize tagged scalar into string`). The values are
/// then made what go-yaml makes of them under their tags by [`go_yaml_scalars`], from the tags
/// as written ([`Scalars`]). Positions are those of `contents`: a line and column in an error
/// are the file's.
pub(crate) fn reader_text(contents: &str) -> std::borrow::Cow<'_, str> {
    use serde_saphyr::granit_parser::{Event, Parser};
    if !may_have_tag(contents) {
        return contents.into();
    }
    let mut tags = Vec::new();
    for event in Parser::new_from_str(contents) {
        match event {
            Ok((Event::Scalar(..), span)) => tags.extend(span.tag_span().and_then(|tag| tag.byte_range())),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let tags: Vec<_> = tags.into_iter().filter(|tag| tag.len() > 1).collect();
    if tags.is_empty() {
        return contents.into();
    }
    let mut text = contents.to_owned();
    for tag in tags {
        // A tag token is ASCII: the range is whole characters.
        if text.is_char_boundary(tag.start) && text.is_char_boundary(tag.end) {
            let local = format!("!{}", "x".repeat(tag.len() - 1));
            text.replace_range(tag, &local);
        }
    }
    text.into()
}

/// `float` as an integer if it is one and fits 64 bits.
fn whole_number(float: f64) -> Option<serde_json::Number> {
    // 2^63 and 2^64: the first floats past i64 and u64.
    const I64_END: f64 = 9_223_372_036_854_775_808.0;
    const U64_END: f64 = 18_446_744_073_709_551_616.0;
    if !float.is_finite() || float.fract() != 0.0 {
        return None;
    }
    if (-I64_END..I64_END).contains(&float) {
        // Whole and in range: the cast is exact.
        #[allow(clippy::cast_possible_truncation)]
        return Some((float as i64).into());
    }
    if (0.0..U64_END).contains(&float) {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        return Some((float as u64).into());
    }
    None
}

/// Why a document's value did not decode into its type, with the path of the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError {
    /// Where the value is, from the document's root.
    pub(crate) path: Vec<Segment>,
    /// The decoder's words (`invalid type: integer `420`, expected a string`).
    pub(crate) message: String,
}

/// One step of a path into a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

impl DecodeError {
    /// The error of a value found at `segment` of the value decoded (an item of a `List`).
    pub(crate) fn under(mut self, segment: Segment) -> Self {
        self.path.insert(0, segment);
        self
    }

    /// The error in words, its path from `skip` segments on (those are said apart: a `List`'s
    /// `items[0]`), with the line and column of its value in `document` when that is known,
    /// and the value as the file writes it where the decoder names it by what it stands for
    /// (`invalid type: integer `0644`, expected a string`, where the decoder says 420).
    pub(crate) fn text(&self, skip: usize, document: Option<&Spanned<Node>>, contents: &str) -> String {
        let path = path_text(self.path.get(skip..).unwrap_or_default());
        let node = document.and_then(|root| find(root, &self.path, contents));
        let mut message = self.message.clone();
        if let Some(written) = node.and_then(|node| plain_text(node, contents)) {
            message = naming_written(&message, written);
        }
        if let Some(node) = node {
            let at = node.referenced;
            message = format!("{message} at line {}, column {}", at.line(), at.column());
        }
        super::with_path(&path, &message)
    }
}

/// The path as the API server writes it (`spec.containers[0].env[0].value`).
fn path_text(path: &[Segment]) -> String {
    let mut text = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) if text.is_empty() => text.push_str(key),
            Segment::Key(key) => {
                text.push('.');
                text.push_str(key);
            }
            Segment::Index(index) => text.push_str(&format!("[{index}]")),
        }
    }
    text
}

/// Decodes `value` (a document made the kubelet's JSON, [`as_kubelet_json`]) into `T`, with
/// the paths of the fields it holds that `T` does not have, strictly by type as the kubelet
/// decodes it, a `null` as Go's decoder reads it ([`GoNull`]: the zero of a type that is not
/// optional).
pub(crate) fn decode_value<T: DeserializeOwned>(value: Value) -> Result<(T, Vec<String>), DecodeError> {
    decode_noting_unknown::<T, _>(GoNull(&value)).map_err(|error| {
        let path = error
            .path()
            .iter()
            .filter_map(|segment| match segment {
                serde_path_to_error::Segment::Seq { index } => Some(Segment::Index(*index)),
                serde_path_to_error::Segment::Map { key } => Some(Segment::Key(key.clone())),
                serde_path_to_error::Segment::Enum { variant } => Some(Segment::Key(variant.clone())),
                serde_path_to_error::Segment::Unknown => None,
            })
            .collect();
        DecodeError { path, message: error.inner().to_string() }
    })
}

/// A file's YAML documents read again with where each value is, as [`decode_value`]'s errors
/// need them: `None` if the file does not read so (it read the first time; this is only for
/// the words of an error).
pub(crate) fn spans(contents: &str) -> Option<Vec<Spanned<Node>>> {
    let mut options = yaml_options();
    // Every entry of a mapping as written, a key written twice and a merge key (`<<`) too:
    // go-yaml v2 sets each in turn ([`go_mapping`]), which the reader's own policies do not.
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::PassThrough;
    options.merge_keys = serde_saphyr::MergeKeyPolicy::AsOrdinary;
    serde_saphyr::from_multiple_with_options(&reader_text(contents), options).ok()
}

/// A YAML value with where each of its values is.
#[derive(Debug)]
pub(crate) enum Node {
    Map(Vec<(Key, Spanned<Node>)>),
    Seq(Vec<Spanned<Node>>),
    /// A scalar as the YAML reader typed it; whether its text is what it stands for is read
    /// from the file.
    Scalar(Value),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some((key, value)) = map.next_entry::<Spanned<Value>, Spanned<Node>>()? {
            entries.push((Key(key), value));
        }
        Ok(Node::Map(entries))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Node>>()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Scalar(v.into()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Scalar(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Scalar(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        // As serde_json reads a float: one JSON cannot hold is null.
        Ok(Node::Scalar(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Scalar(v.into()))
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Null))
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar(Value::Null))
    }
}

/// A mapping's key as the second read typed it, with where it is.
#[derive(Debug)]
pub(crate) struct Key(Spanned<Value>);

impl Key {
    /// The key's text where the file writes it plain (`yes`, `0644`), which go-yaml resolves.
    fn plain<'a>(&self, contents: &'a str) -> Option<&'a str> {
        plain_at(&self.0.defined, contents)
    }

    /// The key as the first read keyed its mapping: a plain key's text, a quoted one's string.
    fn read(&self, contents: &str) -> String {
        match (self.plain(contents), &self.0.value) {
            (Some(text), _) => text.to_owned(),
            (None, Value::String(key)) => key.clone(),
            (None, other) => other.to_string(),
        }
    }

    /// The key go-yaml v2 holds (a key of its `map[interface{}]interface{}`) and the key
    /// sigs.k8s.io/yaml writes in the JSON (`true` for `yes`), go-yaml having read it as it
    /// reads a value: by its own tag where it has one (`!!str 1` is the string `1`, `!!binary
    /// aGk=` the string `hi`; `!!int abc` refuses the document, in go-yaml's words), else
    /// resolved if plain. `Err` where the kubelet refuses it (a null key too).
    fn go(&self, contents: &str, scalars: &Scalars) -> Result<(GoKey, String), String> {
        match scalars.at_location(&self.0.defined) {
            Some(ParsedScalar { tag, value, plain }) => GoKey::of(tag.as_deref(), value, *plain),
            None => match self.plain(contents) {
                Some(text) => GoKey::of(None, text, true),
                None => {
                    let read = self.read(contents);
                    Ok((GoKey::Str(read.clone()), read))
                }
            },
        }
    }

    /// Whether the key is a merge key to go-yaml v2 (its `isMerge`): `<<` written plain and
    /// untagged, or tagged `!!merge`; a quoted `'<<'` is a plain key.
    fn is_merge(&self, contents: &str, scalars: &Scalars) -> bool {
        match scalars.at_location(&self.0.defined) {
            Some(ParsedScalar { tag: Some(tag), value, .. }) => value == "<<" && short_tag(tag) == "!!merge",
            Some(ParsedScalar { tag: None, value, plain }) => *plain && value == "<<",
            None => self.plain(contents) == Some("<<"),
        }
    }

    /// The key as the JSON the kubelet decodes has it (`true` for `yes`), the read key where
    /// go-yaml refuses it (a null key: that error is said apart).
    fn json(&self, contents: &str) -> String {
        match self.plain(contents) {
            Some(text) => go_json_key(go_yaml_resolve(text), text).unwrap_or_else(|_| text.to_owned()),
            None => self.read(contents),
        }
    }
}

/// The node at `path` under `root`.
fn find<'a>(root: &'a Spanned<Node>, path: &[Segment], contents: &str) -> Option<&'a Spanned<Node>> {
    let mut node = root;
    for segment in path {
        node = match (&node.value, segment) {
            // The last of a key written twice is the one read. A tagged key is the kubelet's
            // under its tag (`!!str yes` is `yes`), which `json` does not read: its text then.
            (Node::Map(entries), Segment::Key(key)) => {
                let by = |name: &dyn Fn(&Key) -> String| go_set_last(entries, contents, &|k| name(k) == *key);
                by(&|k| k.json(contents)).or_else(|| by(&|k| k.read(contents)))?
            }
            (Node::Seq(items), Segment::Index(index)) => items.get(*index)?,
            _ => return None,
        };
    }
    Some(node)
}

/// The value of the entry of `entries` that go-yaml v2 sets last among those whose key
/// `matches` ([`go_mapping`]): a merged mapping's entries where its merge key is written, a
/// sequence of them from its last to its first.
fn go_set_last<'a>(
    entries: &'a [(Key, Spanned<Node>)],
    contents: &str,
    matches: &dyn Fn(&Key) -> bool,
) -> Option<&'a Spanned<Node>> {
    let mut found = None;
    for (key, node) in entries {
        if key.plain(contents) == Some("<<") {
            let merged: Vec<&Spanned<Node>> = match &node.value {
                Node::Seq(items) => items.iter().rev().collect(),
                _ => vec![node],
            };
            for merged in merged {
                if let Node::Map(merged) = &merged.value
                    && let Some(node) = go_set_last(merged, contents, matches)
                {
                    found = Some(node);
                }
            }
        } else if matches(key) {
            found = Some(node);
        }
    }
    found
}

/// The file's text of a plain scalar (`0644`, `yes`: what a YAML 1.1 reader types), `None`
/// for a quoted or block scalar, whose text is a string's, or where the file's bytes are not
/// known.
fn plain_text<'a>(node: &Spanned<Node>, contents: &'a str) -> Option<&'a str> {
    if !matches!(node.value, Node::Scalar(_)) {
        return None;
    }
    // An alias stands for its anchor's value: the text is there.
    plain_at(&node.defined, contents)
}

/// The file's text at `at` if it is a plain scalar's.
fn plain_at<'a>(at: &serde_saphyr::Location, contents: &'a str) -> Option<&'a str> {
    let span = at.span();
    let start = usize::try_from(span.byte_offset()?).ok()?;
    let len = usize::try_from(span.byte_len()?).ok()?;
    let text = contents.get(start..start.checked_add(len)?)?;
    let quoted = text.starts_with(['"', '\'', '|', '>']);
    (!quoted && !text.is_empty() && !text.contains('\n')).then_some(text)
}

/// `message` with the value it names in backquotes (`invalid type: integer `420`, …`) written
/// as the file writes it, where the two differ; any other message as it is.
fn naming_written(message: &str, written: &str) -> String {
    if !(message.starts_with("invalid type: ") || message.starts_with("invalid value: ")) {
        return message.to_owned();
    }
    let Some(open) = message.find('`') else { return message.to_owned() };
    let Some(close) = message[open + 1..].find('`').map(|at| open + 1 + at) else {
        return message.to_owned();
    };
    if &message[open + 1..close] == written {
        return message.to_owned();
    }
    format!("{}{written}{}", &message[..=open], &message[close..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A YAML file's documents as the kubelet's JSON, with each document's refusal.
    fn read(yaml: &str) -> (Vec<Value>, Vec<Option<String>>) {
        let mut values: Vec<Value> =
            serde_saphyr::from_multiple_with_options(&reader_text(yaml), yaml_options()).expect("YAML");
        let refused = go_yaml_scalars(&mut values, yaml, true).refused;
        values.iter_mut().for_each(as_kubelet_json);
        (values, refused)
    }

    /// A mapping of many keys, one of which go-yaml resolves (`yes:`), is read whole and right.
    /// Its keys were once walked against every key before them, a time by the square of their
    /// count (16 s for 50,000 in a debug build: a stall of the agent's scan and of lint on a
    /// 1 MiB file); they are now looked up in a set. Speed is not asserted here (no timed
    /// tests): this pins what the walk gives on such a mapping.
    #[test]
    fn a_mapping_of_many_keys_is_read_whole() {
        let keys = 20_000;
        let mut yaml = String::from("a:\n");
        for i in 0..keys {
            yaml.push_str(&format!("  k{i}: v\n"));
        }
        yaml.push_str("  yes: v\n");
        let (values, refused) = read(&yaml);
        assert_eq!(refused, [None]);
        assert_eq!(values[0]["a"].as_object().map(|a| a.len()), Some(keys + 1));
        assert_eq!(values[0]["a"]["true"], "v");
        assert_eq!(values[0]["a"]["k19999"], "v");
    }

    /// go-yaml v2's `resolve` for the spellings of an integer (`strconv.ParseInt` with base 0
    /// after the `_`s are dropped, capital radix letters too; else a float by
    /// `yamlStyleFloat`), then Go's JSON encoder: what the kubelet's decoder reads for each.
    #[test]
    fn numbers_are_what_the_kubelet_reads() {
        let cases = [
            ("0644", "420"),
            ("+0644", "420"),
            ("-010", "-8"),
            ("0o17", "15"),
            ("0O17", "15"),
            ("0x1F", "31"),
            ("0X1F", "31"),
            ("-0X1F", "-31"),
            ("+0x1f", "31"),
            ("0b101", "5"),
            ("0B101", "5"),
            ("-0B101", "-5"),
            ("1_000", "1000"),
            ("1__0", "10"),
            ("0_8", "8"),
            ("0755_", "493"),
            ("0x_1F", "31"),
            ("1_e3", "1000"),
            ("_1", r#""_1""#),
            ("0x", r#""0x""#),
            ("0X", r#""0X""#),
            ("0b102", r#""0b102""#),
            ("0b-101", "-5"),
            ("0x-1F", r#""0x-1F""#),
            ("-0b-1", r#""-0b-1""#),
            ("08", "8"),
            ("09", "9"),
            ("-09", "-9"),
            ("+08", "8"),
            ("08080", "8080"),
            ("10.0", "10"),
            ("1e3", "1000"),
            ("08.5", "8.5"),
            (".5", "0.5"),
            ("1.", "1"),
            ("0", "0"),
            ("00", "0"),
            ("99999999999999999999", "1e+20"),
            ("18446744073709551615", "18446744073709551615"),
            ("1e400", r#""1e400""#),
            // Past 64 bits: go-yaml v2 has no big integer (ParseInt and ParseUint fail), so a
            // hex, `0o` or binary word is a string, and a leading-0 one is a decimal float
            // (`yamlStyleFloat` takes it, and Go's ParseFloat reads it in base 10).
            ("0x1FFFFFFFFFFFFFFFFF", r#""0x1FFFFFFFFFFFFFFFFF""#),
            ("0o7777777777777777777777", r#""0o7777777777777777777777""#),
            (
                "0b11111111111111111111111111111111111111111111111111111111111111111",
                r#""0b11111111111111111111111111111111111111111111111111111111111111111""#,
            ),
            ("07777777777777777777777", "7.777777777777777e+21"),
            ("-1e400", r#""-1e400""#),
            ("1_e400", r#""1_e400""#),
            (".Nan", r#"".Nan""#),
            ("'0X1F'", r#""0X1F""#),
            ("\"1__0\"", r#""1__0""#),
        ];
        for (written, want) in cases {
            let (values, refused) = read(&format!("v: {written}\n"));
            assert_eq!(refused, [None], "{written}");
            assert_eq!(values[0]["v"].to_string(), want, "{written}");
        }
    }

    /// go-yaml v2 reads `.inf`, `-.Inf`, `.NaN` (its table's spellings) as floats that Go's JSON
    /// encoder refuses: the kubelet refuses the document, in those words.
    #[test]
    fn an_infinity_or_a_nan_refuses_the_document() {
        let cases = [(".inf", "+Inf"), ("+.INF", "+Inf"), ("-.Inf", "-Inf"), (".NaN", "NaN")];
        for (written, go) in cases {
            let yaml = format!("kind: Pod\nspec:\n  containers:\n  - name: a\n    x: [1, {written}]\n");
            let (_, refused) = read(&yaml);
            let want = format!(
                "spec.containers[0].x[1]: error converting YAML to JSON: json: unsupported value: \
                 {go} (`{written}`) at line 5, column 12"
            );
            assert_eq!(refused, [Some(want)], "{written}");
        }
        // Quoted, it is a string; as a key, sigs.k8s.io/yaml writes it `.inf`.
        let (values, refused) = read("a: '.inf'\n.Inf: b\n---\nc: .nan\n");
        assert_eq!(refused[0], None);
        assert_eq!(values[0].to_string(), r#"{".inf":"b","a":".inf"}"#);
        assert!(refused[1].as_deref().is_some_and(|r| r.starts_with("c: error converting YAML to JSON")));
    }

    /// go-yaml v2's spellings of a boolean stay booleans; another case of those words is a
    /// string.
    #[test]
    fn booleans_are_go_yaml_spellings() {
        let yaml = "a: oN\nb: On\nc: [yEs, YES, n, nO]\ne: &x oFF\nf: *x\ng: 'oN'\n";
        let (values, refused) = read(yaml);
        assert_eq!(refused, [None]);
        assert_eq!(
            values[0].to_string(),
            r#"{"a":"oN","b":true,"c":["yEs",true,false,"nO"],"e":"oFF","f":"oFF","g":"oN"}"#
        );
    }

    /// A tag go-yaml resolves takes a scalar of its type; any other scalar refuses the
    /// document in go-yaml's words (`!!bool tRUE`: `tRUE` is not a boolean to go-yaml).
    #[test]
    fn a_tag_go_yaml_cannot_read_refuses_the_document() {
        let (values, refused) = read("a: !!bool On\nb: !!float 1\nc: !!str 0644\nd: !!int 0X1F\n");
        assert_eq!(refused, [None]);
        assert_eq!(values[0].to_string(), r#"{"a":true,"b":1,"c":"0644","d":31}"#);
        let cases = [
            ("!!bool tRUE", "cannot decode !!str `tRUE` as a !!bool", 13),
            ("!!bool oN", "cannot decode !!str `oN` as a !!bool", 13),
            ("!!null yes", "cannot decode !!bool `yes` as a !!null", 13),
        ];
        for (written, go, column) in cases {
            let (_, refused) = read(&format!("metadata:\n  x: {written}\n"));
            let want =
                format!("metadata.x: error converting YAML to JSON: yaml: {go} at line 2, column {column}");
            assert_eq!(refused, [Some(want)], "{written}");
        }
    }

    /// go-yaml v2 reads a `!!timestamp` it can parse as its text (it gives `interface{}` the
    /// scalar's text, not a time): the reader refused the file (`cannot deserialize tagged
    /// scalar into string`). One go-yaml cannot parse refuses the document in go-yaml's words.
    #[test]
    fn a_timestamp_tag_is_its_text() {
        let yaml = "a: !!timestamp 2001-12-14\nb: !!timestamp 2001-12-14t21:59:43.10-05:00\n\
                    c: !!timestamp 2001-12-14 21:59:43.10\nd: [!!timestamp 2002-1-2T3:04:05Z]\n\
                    e: !!timestamp '2001-12-14'\nf: 2001-12-14\n";
        let (values, refused) = read(yaml);
        assert_eq!(refused, [None]);
        assert_eq!(
            values[0].to_string(),
            r#"{"a":"2001-12-14","b":"2001-12-14t21:59:43.10-05:00","c":"2001-12-14 21:59:43.10","d":["2002-1-2T3:04:05Z"],"e":"2001-12-14","f":"2001-12-14"}"#
        );
        let cases = [
            ("!!timestamp 2001-02-29", "cannot decode !!str `2001-02-29` as a !!timestamp"),
            ("!!timestamp 5", "cannot decode !!int `5` as a !!timestamp"),
            (
                "!!timestamp 2001-12-14 21:59:43.10 -5",
                "cannot decode !!str `2001-12-14 21:59:43.10 -5` as a !!timestamp",
            ),
        ];
        for (written, go) in cases {
            let (_, refused) = read(&format!("metadata:\n  x: {written}\n"));
            let want = format!("metadata.x: error converting YAML to JSON: yaml: {go} at line 2, column 18");
            assert_eq!(refused, [Some(want)], "{written}");
        }
    }

    /// go-yaml v2 decodes a `!!binary` scalar's base64 (Go's `StdEncoding`, line breaks passed
    /// over), and the bytes are the JSON string, each byte where no UTF-8 starts written U+FFFD
    /// by Go's encoder (one per byte: `F0 9F 98`, a cut emoji, is three). It was kept as its
    /// base64 text. Base64 Go cannot read refuses the document, in go-yaml's words.
    #[test]
    fn a_binary_tag_is_its_decoded_bytes() {
        let yaml = "a: !!binary aGVsbG8=\nb: !!binary |\n  aGVs\n  bG8=\nc: !!binary ''\nd: !!binary \"/w==\"\n\
                    e: !!binary 4oKs8J+Y\nf: [!!binary 4oI=]\n";
        let (values, refused) = read(yaml);
        assert_eq!(refused, [None]);
        let want = serde_json::json!({
            "a": "hello", "b": "hello", "c": "", "d": "\u{FFFD}", "e": "\u{20AC}\u{FFFD}\u{FFFD}\u{FFFD}",
            "f": ["\u{FFFD}\u{FFFD}"],
        });
        assert_eq!(values[0], want);
        for written in ["aGk", "aGVs bG8=", "a===", "aGk=x", "aGk=\"", "=", "aGVsbG8"] {
            let (_, refused) = read(&format!("metadata:\n  x: !!binary '{written}'\n"));
            let want = "metadata.x: error converting YAML to JSON: yaml: !!binary value contains invalid base64 \
                        data at line 2, column 15";
            assert_eq!(refused, [Some(want.to_owned())], "{written}");
        }
    }

    /// go-yaml v2 decodes a key as it decodes a value, by its own tag where it has one:
    /// `!!str 1:` is the key `1`, `!!int 0x10:` `16`, `!!binary aGk=:` `hi`, `!!str yes:` `yes`;
    /// a key its tag does not fit (`!!int abc:`) refuses the document in go-yaml's words. A
    /// key's tag was not read (`!!str yes:` was the key `true`, `!!int abc:` the key `abc`).
    #[test]
    fn a_keys_tag_is_read_as_a_values() {
        let (values, refused) = read(
            "m: {!!str 1: a, !!int 0x10: b, !!binary aGk=: c, !!str yes: d, !!bool On: e, !!float 2: f}\n",
        );
        assert_eq!(refused, [None]);
        let want =
            serde_json::json!({"m": {"1": "a", "16": "b", "hi": "c", "yes": "d", "true": "e", "2": "f"}});
        assert_eq!(values[0], want);
        let (_, refused) = read("metadata:\n  labels:\n    !!int abc: x\n");
        let want = "metadata.labels: error converting YAML to JSON: yaml: cannot decode !!str `abc` as a !!int \
                    at line 3, column 11";
        assert_eq!(refused, [Some(want.to_owned())]);
    }

    /// Keys that are one once go-yaml resolves them take the last value: `yes:` then `true:`
    /// (the bool true to go-yaml, which keeps the last), `0x10:` then `16:` (the int 16). Keys
    /// go-yaml keeps apart that sigs.k8s.io/yaml's JSON makes one (`1_0:`, the int 10, and
    /// `10.0:`, the float 10: the key `10`) are taken in Go's map order, either value: the last
    /// is read here. Both are said as keys written twice, the second with what the kubelet
    /// does. The first written was read for some (`yes` over `true`), and the second kind was
    /// not said.
    #[test]
    fn keys_one_only_once_resolved_take_the_last_value_and_are_said() {
        let yaml = "m: {yes: a, true: b, 1_0: c, 10.0: d, 0x10: e, 16: f}\n";
        let mut values: Vec<Value> =
            serde_saphyr::from_multiple_with_options(&reader_text(yaml), yaml_options()).expect("YAML");
        let found = go_yaml_scalars(&mut values, yaml, false);
        assert_eq!(found.refused, [None]);
        assert_eq!(values[0], serde_json::json!({"m": {"true": "b", "10": "d", "16": "f"}}));
        let said = keys_written_twice_text(&found.twice[0]);
        let want = "duplicate mapping keys: true at line 1, column 13, 10.0 at line 1, column 30 (the key 10 as a \
                    key before it only once made JSON: the kubelet reads either value, as Go's map order falls), \
                    16 at line 1, column 48: the last values are read";
        assert_eq!(said.as_deref(), Some(want));
        let (values, _) = read("m: {true: b, yes: a, 10.0: d, 1_0: c}\n");
        assert_eq!(values[0], serde_json::json!({"m": {"true": "a", "10": "c"}}));
    }

    /// A merge key (`<<`) written twice in a mapping merges both mappings, as go-yaml v2 merges
    /// each (its `isMerge`) and the reader does: no key written twice whose last value is read,
    /// which it was said to be. A quoted `'<<'` is a plain key, and written twice is said.
    #[test]
    fn merge_keys_are_not_keys_written_twice() {
        let yaml = "x: &x {a: 1}\ny: &y {b: 2}\nz:\n  <<: *x\n  <<: *y\n";
        let mut values: Vec<Value> =
            serde_saphyr::from_multiple_with_options(&reader_text(yaml), yaml_options()).expect("YAML");
        let found = go_yaml_scalars(&mut values, yaml, true);
        assert_eq!(found.twice, [Vec::<KeyWrittenTwice>::new()]);
        assert_eq!(values[0]["z"], serde_json::json!({"a": 1, "b": 2}));
        let yaml = "'<<': 1\n'<<': 2\n";
        let mut values: Vec<Value> =
            serde_saphyr::from_multiple_with_options(&reader_text(yaml), yaml_options()).expect("YAML");
        let found = go_yaml_scalars(&mut values, yaml, true);
        let said = keys_written_twice_text(&found.twice[0]);
        assert_eq!(
            said.as_deref(),
            Some(
                "duplicate mapping key: << at line 2, column 1: the last value is read, as the kubelet reads it"
            )
        );
    }

    /// A quoted key and the plain word go-yaml v2 resolves otherwise (`'yes'` and `yes`, `!!str
    /// yes` and `yes`) are two keys to go-yaml (the string `yes` and the boolean true), and two
    /// JSON keys once sigs.k8s.io/yaml writes them (`yes` and `true`): each keeps its own value,
    /// and neither is a key written twice. The reader keyed its mapping by the key's text, so the
    /// two were one, whose last value both JSON keys took (`{"true":2,"yes":2}`).
    #[test]
    fn a_quoted_key_and_a_resolved_word_are_two_keys() {
        let cases = [
            ("m: {'yes': 1, yes: 2}\n", r#"{"m":{"true":2,"yes":1}}"#),
            ("m: {yes: 2, 'yes': 1}\n", r#"{"m":{"true":2,"yes":1}}"#),
            ("m: {!!str yes: 1, yes: 2}\n", r#"{"m":{"true":2,"yes":1}}"#),
            (
                "m:\n  '0x10': c\n  0x10: d\n  \"on\": e\n  on: f\n",
                r#"{"m":{"0x10":"c","16":"d","on":"e","true":"f"}}"#,
            ),
        ];
        for (yaml, want) in cases {
            let mut values: Vec<Value> =
                serde_saphyr::from_multiple_with_options(&reader_text(yaml), yaml_options()).expect("YAML");
            let found = go_yaml_scalars(&mut values, yaml, true);
            assert_eq!(found.refused, [None], "{yaml}");
            assert_eq!(found.twice, [Vec::<KeyWrittenTwice>::new()], "{yaml}");
            values.iter_mut().for_each(as_kubelet_json);
            assert_eq!(values[0].to_string(), want, "{yaml}");
        }
        // Two go-yaml keys that are one JSON key (the string `true`, the boolean true):
        // sigs.k8s.io/yaml writes the one its map's order gives last, either; the last written
        // is read here, and the key is said with what the kubelet does.
        let yaml = "m: {!!str true: 1, true: 2}\n";
        let mut values: Vec<Value> =
            serde_saphyr::from_multiple_with_options(&reader_text(yaml), yaml_options()).expect("YAML");
        let found = go_yaml_scalars(&mut values, yaml, true);
        assert_eq!(values[0].to_string(), r#"{"m":{"true":2}}"#);
        let said = keys_written_twice_text(&found.twice[0]);
        let want = "duplicate mapping key: true at line 1, column 20 (the key true as a key before it only once \
                    made JSON: the kubelet reads either value, as Go's map order falls): the last value is read";
        assert_eq!(said.as_deref(), Some(want));
    }

    /// go-yaml v2 (decode.go's `mapping`, v2.4, which sigs.k8s.io/yaml's goyaml.v2 fork keeps)
    /// sets a mapping's entries in the file's order, and a merge key (`<<`) merges its mapping
    /// where it is written: a key before the merge is overridden by it, a later merge overrides
    /// an earlier one, a key after the merge overrides it; of a sequence of mappings the first
    /// wins (merged from the last). The reader kept a key written in the mapping itself over
    /// any merge, and the first merge over a later one.
    #[test]
    fn merge_keys_are_applied_where_they_are_written() {
        let anchors = "x: &x {a: one, b: one}\ny: &y {a: two, c: two}\n";
        let cases = [
            ("m:\n  a: own\n  <<: *x\n", r#"{"a":"one","b":"one"}"#),
            ("m:\n  <<: *x\n  a: own\n", r#"{"a":"own","b":"one"}"#),
            ("m:\n  <<: *x\n  <<: *y\n", r#"{"a":"two","b":"one","c":"two"}"#),
            ("m:\n  <<: *y\n  <<: *x\n", r#"{"a":"one","b":"one","c":"two"}"#),
            ("m:\n  <<: [*x, *y]\n", r#"{"a":"one","b":"one","c":"two"}"#),
            ("m:\n  <<: [*y, *x]\n", r#"{"a":"two","b":"one","c":"two"}"#),
            ("m:\n  a: own\n  <<: [*x, *y]\n  c: own\n", r#"{"a":"one","b":"one","c":"own"}"#),
            ("m:\n  <<: {a: inline}\n  '<<': quoted\n", r#"{"<<":"quoted","a":"inline"}"#),
            // A merged mapping's own merges are applied in it, in turn.
            ("z: &z {<<: *x, a: z}\nm:\n  a: own\n  <<: *z\n", r#"{"a":"z","b":"one"}"#),
        ];
        for (body, want) in cases {
            let yaml = format!("{anchors}{body}");
            let (values, refused) = read(&yaml);
            assert_eq!(refused, [None], "{body}");
            assert_eq!(values[0]["m"].to_string(), want, "{body}");
        }
    }

    /// `0.0` and `-0.0` are the floats 0 and -0, one key to Go's map (`0.0 == -0.0`), which
    /// takes the later value and, a float key being updated in place, the later key's sign too:
    /// sigs.k8s.io/yaml then writes it `0` or `-0` (`FormatFloat(f, 'g', -1, 32)`). The second is
    /// a key written twice. The integer 0 is another key. The reader kept both, as `0` and `-0`,
    /// unsaid.
    #[test]
    fn a_float_zero_and_its_negative_are_one_key() {
        let cases = [
            ("m: {0.0: a, -0.0: b}\n", r#"{"-0":"b"}"#, Some("-0.0 at line 1, column 13")),
            ("m: {-0.0: a, 0.0: b}\n", r#"{"0":"b"}"#, Some("0.0 at line 1, column 14")),
            ("m: {0: a, -0.0: b}\n", r#"{"-0":"b","0":"a"}"#, None),
            ("m: {0.0: a, -0.0: b, 0.0: c}\n", r#"{"0":"c"}"#, Some("")),
        ];
        for (yaml, want, twice) in cases {
            let mut values: Vec<Value> =
                serde_saphyr::from_multiple_with_options(&reader_text(yaml), yaml_options()).expect("YAML");
            let found = go_yaml_scalars(&mut values, yaml, true);
            assert_eq!(found.refused, [None], "{yaml}");
            assert_eq!(values[0]["m"].to_string(), want, "{yaml}");
            let said = keys_written_twice_text(&found.twice[0]);
            match twice {
                Some("") => assert_eq!(found.twice[0].len(), 2, "{yaml}"),
                Some(key) => assert_eq!(
                    said,
                    Some(format!(
                        "duplicate mapping key: {key}: the last value is read, as the kubelet reads it"
                    )),
                    "{yaml}"
                ),
                None => assert_eq!(said, None, "{yaml}"),
            }
        }
    }

    /// A `!` where no tag can start (`#!/bin/sh` heading a script in a block scalar, `a!=b`) is
    /// text: the file is not parsed for tags, and is not given the go-yaml passes for it (a
    /// manifest with a shell script was read through all of them). A `!` where one can start
    /// is a tag only if the parser finds one (`[ "$x" != y ]` in a script is not), wherever it
    /// is: a scalar's, a key's, a collection's, `!` alone.
    #[test]
    fn a_bang_is_a_tag_only_where_the_parser_finds_one() {
        for text in ["a: |\n  #!/bin/sh\n  [ a!=b ]\n", "a: x!y\n", "a: 'b'!\n"] {
            assert!(!may_have_tag(text), "{text}");
            assert!(!has_tag(text), "{text}");
        }
        let text = "a: |\n  [ \"$x\" != y ]\n# ! not a tag\n";
        assert!(may_have_tag(text));
        assert!(!has_tag(text));
        let tagged = [
            "a: !!str 1\n",
            "a: [!x 1]\n",
            "{\"b\":!!int 1}\n",
            "!!map {a: 1}\n",
            "a: ! 1\n",
            "!!str k: v\n",
        ];
        for text in tagged {
            assert!(has_tag(text), "{text}");
        }
        // Read with and without its script's first line, the pod is the same.
        let script = "a: |\n  #!/bin/sh\n  exec x\nb: 0644\nc: yes\n";
        let (values, refused) = read(script);
        assert_eq!(refused, [None]);
        assert_eq!(values[0].to_string(), r##"{"a":"#!/bin/sh\nexec x\n","b":420,"c":true}"##);
    }

    /// A `<<` inside a scalar (a script's heredoc in a block scalar or a quoted string, a word
    /// of a plain scalar, a plain `<<` that is a value) is text to go-yaml and to the reader:
    /// the file has none of the go-yaml passes for it, which any `<<` gave it. A merge key
    /// (`<<:`, `<< :`, `? <<`, `!!merge <<`, in a block or a flow mapping) still has them.
    #[test]
    fn only_a_merge_key_sends_a_file_through_the_go_yaml_passes() {
        let text = [
            "args:\n- |\n  cat << EOF > /tmp/x\n  a: b\n  EOF\n",
            "args: [\"cat << EOF\\nx\\nEOF\"]\n",
            "args: ['cat << EOF']\n",
            "a: \"<<\"\n'<<': quoted\n",
            "a: x << y\nb: <<\nc: [<<, <<]\n",
            "a: |\n  <<: *x\n",
        ];
        for yaml in text {
            assert!(!has_merge_key(yaml), "{yaml}");
            assert!(!needs_go_yaml_pass(yaml), "{yaml}");
        }
        let merges = [
            "x: &x {a: 1}\nm:\n  <<: *x\n",
            "x: &x {a: 1}\nm:\n  << : *x\n",
            "x: &x {a: 1}\nm: {<<: *x}\n",
            "m:\n  ? <<\n  : {a: 1}\n",
            "m:\n  !!merge << : {a: 1}\n",
            "m:\n  <<: 1\n",
            "a: &m <<\nb: {*m : {a: 1}}\n",
        ];
        for yaml in merges {
            assert!(has_merge_key(yaml) || has_tag(yaml), "{yaml}");
            assert!(needs_go_yaml_pass(yaml), "{yaml}");
        }
        // Read whole, a heredoc's script is its text.
        let (values, refused) = read(text[0]);
        assert_eq!(refused, [None]);
        assert_eq!(values[0].to_string(), r#"{"args":["cat << EOF > /tmp/x\na: b\nEOF\n"]}"#);
        // Without the passes, a quoted `'<<'` key and a `<<` value are read as go-yaml reads them:
        // the reader takes neither for a merge.
        let (values, refused) = read(text[3]);
        assert_eq!(refused, [None]);
        assert_eq!(values[0].to_string(), r#"{"<<":"quoted","a":"<<"}"#);
        let (values, _) = read(text[4]);
        assert_eq!(values[0].to_string(), r#"{"a":"x << y","b":"<<","c":["<<","<<"]}"#);
    }

    /// go-yaml v2's `parseTimestamp`: its four layouts as Go's `time.Parse` reads them.
    #[test]
    fn timestamps_are_what_go_yaml_parses() {
        let parsed = [
            "2001-12-14",
            "2001-1-2",
            "2000-02-29",
            "2001-12-14T21:59:43Z",
            "2001-12-14t21:59:43.123456789+05:30",
            "2001-12-14T1:2:3,5-24:00",
            "2001-12-14 21:59:43",
            "2001-12-14   21:59:43.10",
        ];
        for text in parsed {
            assert!(go_yaml_timestamp(text), "{text}");
        }
        let refused = [
            "2001-12-1x",
            "01-12-14",
            "2001-13-01",
            "2001-02-29",
            "1900-02-29",
            "2001-12-14T21:59:43",
            "2001-12-14 21:59:43Z",
            "2001-12-14T24:00:00Z",
            "2001-12-14T21:59:43+25:00",
            "2001-12-14T21:59:43.Z",
            "2001-123-4",
            "2001-12-14x",
        ];
        for text in refused {
            assert!(!go_yaml_timestamp(text), "{text}");
        }
    }

    /// A tag is checked as go-yaml checks it wherever it is written: before a quoted scalar
    /// (go-yaml resolves a tagged scalar quoted or not), in a flow list, after an anchor or
    /// before one. These were read as the YAML reader read them (`!!bool "oN"` true, `[!!bool
    /// oN]` the string `oN`).
    #[test]
    fn a_tag_is_checked_wherever_it_is_written() {
        let yaml = "a: !!int \"5\"\nb: [!!str 0644, !!float 1]\nc: &x !!bool On\nd: !!bool &y off\ne: *y\n\
                    f: {g: !!null ''}\n";
        let (values, refused) = read(yaml);
        assert_eq!(refused, [None]);
        assert_eq!(
            values[0].to_string(),
            r#"{"a":5,"b":["0644",1],"c":true,"d":false,"e":false,"f":{"g":null}}"#
        );
        let cases = [
            ("!!bool \"oN\"", 13),
            ("!!bool 'oN'", 13),
            ("[a, !!bool oN]", 17),
            ("{k: !!bool oN}", 17),
            ("&a !!bool oN", 16),
            ("!!bool &a oN", 16),
        ];
        for (written, column) in cases {
            let (_, refused) = read(&format!("metadata:\n  x: {written}\n"));
            let at = match written.as_bytes()[0] {
                b'[' => "metadata.x[1]",
                b'{' => "metadata.x.k",
                _ => "metadata.x",
            };
            let want = format!(
                "{at}: error converting YAML to JSON: yaml: cannot decode !!str `oN` as a !!bool at line 2, \
                 column {column}"
            );
            assert_eq!(refused, [Some(want)], "{written}");
        }
    }

    /// A word the YAML reader itself refused under its tag (`!!int 1.5`: `invalid u64`, the
    /// whole file refused as invalid YAML, with no field) is refused as go-yaml refuses it,
    /// with its field, line and column, as the other refusals are.
    #[test]
    fn a_word_the_reader_refused_under_its_tag_is_refused_in_go_yamls_words() {
        let cases = [
            ("!!int 1.5", "cannot decode !!float `1.5` as a !!int"),
            ("!!int -1.5", "cannot decode !!float `-1.5` as a !!int"),
            ("!!float x", "cannot decode !!str `x` as a !!float"),
            ("!!null 0", "cannot decode !!int `0` as a !!null"),
            ("!!bool 1", "cannot decode !!int `1` as a !!bool"),
        ];
        for (written, go) in cases {
            let yaml = format!("kind: Pod\nspec:\n  containers:\n  - name: a\n    x: {written}\n");
            let (_, refused) = read(&yaml);
            let column = 9 + written.find(' ').unwrap_or(0);
            let want = format!(
                "spec.containers[0].x: error converting YAML to JSON: yaml: {go} at line 5, column {column}"
            );
            assert_eq!(refused, [Some(want)], "{written}");
        }
    }

    /// go-yaml v2 resolves a plain key as it resolves a value, and sigs.k8s.io/yaml writes a
    /// key that is not a string as Go formats it: `yes` is `true`, `0644` `420`, a float with
    /// 32 bits' shortest digits (`1e+06`).
    #[test]
    fn keys_are_resolved_as_go_yaml_resolves_them() {
        let yaml = "labels: {yes: a, off: b, 0644: c, 1.5: d, 1e6: e, '0x1F': f, 0X10: g, \
                    3.14159265358979: h, 0.00001: i, 1_0: j, oN: k, 'no': l, 10.0: m}\n";
        let (values, refused) = read(yaml);
        assert_eq!(refused, [None]);
        assert_eq!(
            values[0]["labels"].to_string(),
            r#"{"0x1F":"f","1.5":"d","10":"m","16":"g","1e+06":"e","1e-05":"i","3.1415927":"h","420":"c","false":"b","no":"l","oN":"k","true":"a"}"#
        );
        // `1_0` and `10.0` are both the key `10`: the last written is read. A file whose only
        // such word is a key is read so too.
        let (values, _) = read("labels: {yes: a, 1: b}\n");
        assert_eq!(values[0]["labels"].to_string(), r#"{"1":"b","true":"a"}"#);
    }

    /// A key whose float is finite in 64 bits but past 32 bits' range is an infinity to Go's
    /// `FormatFloat(f, 'g', -1, 32)`, which sigs.k8s.io/yaml writes `.inf` or `-.inf`.
    #[test]
    fn a_key_past_32_bits_float_range_is_an_infinity() {
        let (values, refused) = read("labels: {1e300: a, -1e300: b, 1e-300: c}\n");
        assert_eq!(refused, [None]);
        assert_eq!(values[0]["labels"].to_string(), r#"{"-.inf":"b",".inf":"a","0":"c"}"#);
    }

    #[test]
    fn floats_are_formatted_as_go_formats_a_32_bit_float() {
        let cases = [
            (1000.0, "1000"),
            (1e6, "1e+06"),
            (123_456.0, "123456"),
            (1_234_567.0, "1.234567e+06"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e20, "1e+20"),
            (-2.5, "-2.5"),
            (0.0, "0"),
            (1.234_567_891_23, "1.2345679"),
        ];
        for (float, want) in cases {
            assert_eq!(go_format_float32_g(float), want, "{float}");
        }
    }

    /// apimachinery's `Quantity.UnmarshalJSON` reads a JSON null as the zero quantity: a
    /// limit left empty (`cpu:`, `memory: ~`) is 0, in every container.
    #[test]
    fn a_null_quantity_is_zero() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  \
                    - name: a\n    image: i\n    resources: {limits: {cpu:, memory: 1Gi}, requests: {memory: ~}}\n  \
                    - name: b\n    image: i\n    resources: {limits: {cpu: ~}}\n  overhead: {cpu: null}\n";
        let (values, _) = read(yaml);
        let (pod, _) = decode_value::<k8s_openapi::api::core::v1::Pod>(values[0].clone()).expect("decodes");
        let spec = pod.spec.expect("spec");
        let limits = |i: usize| spec.containers[i].resources.as_ref().and_then(|r| r.limits.clone());
        let quantity = |s: &str| k8s_openapi::apimachinery::pkg::api::resource::Quantity(s.into());
        assert_eq!(limits(0).and_then(|l| l.get("cpu").cloned()), Some(quantity("0")));
        assert_eq!(limits(0).and_then(|l| l.get("memory").cloned()), Some(quantity("1Gi")));
        assert_eq!(limits(1).and_then(|l| l.get("cpu").cloned()), Some(quantity("0")));
        let requests = spec.containers[0].resources.as_ref().and_then(|r| r.requests.clone());
        assert_eq!(requests.and_then(|r| r.get("memory").cloned()), Some(quantity("0")));
        assert_eq!(spec.overhead.and_then(|o| o.get("cpu").cloned()), Some(quantity("0")));
    }

    /// A pod of `yaml` decoded as the kubelet's decoder reads it.
    fn pod(yaml: &str) -> Result<k8s_openapi::api::core::v1::Pod, DecodeError> {
        let (values, refused) = read(yaml);
        assert_eq!(refused, [None]);
        let value = values.into_iter().next().expect("a document");
        decode_value::<k8s_openapi::api::core::v1::Pod>(value).map(|(pod, _)| pod)
    }

    const POD: &str =
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: a\n    image: i\n";

    /// Go's decoder leaves a `null` string its zero: a label, an annotation, an item of `args`
    /// or `command` left empty (as an empty Helm value renders) is `""`.
    #[test]
    fn a_null_string_is_empty() {
        let yaml = format!("{POD}    args: [a, ~, null]\n    command: [~]\n    workingDir:\n").replace(
            "metadata: {name: p}",
            "metadata: {name: p, labels: {app: ~, b: c}, annotations: {note: null}}",
        );
        let pod = pod(&yaml).expect("decodes");
        let labels = pod.metadata.labels.expect("labels");
        assert_eq!(labels.get("app").map(String::as_str), Some(""));
        assert_eq!(labels.get("b").map(String::as_str), Some("c"));
        let annotations = pod.metadata.annotations.expect("annotations");
        assert_eq!(annotations.get("note").map(String::as_str), Some(""));
        let container = &pod.spec.expect("spec").containers[0];
        assert_eq!(container.args.as_deref(), Some(&["a".to_owned(), String::new(), String::new()][..]));
        assert_eq!(container.command.as_deref(), Some(&[String::new()][..]));
        // An optional field written `null` is unset, Go's nil pointer.
        assert_eq!(container.working_dir, None);
    }

    /// An optional field written `null` is unset (Go's nil pointer), and a required one its
    /// zero: an env value, a probe, a list of ports.
    #[test]
    fn a_null_in_an_option_field_is_none() {
        let yaml = format!(
            "{POD}    env: [{{name: A, value: ~}}, {{name: B, value: null, valueFrom: null}}]\n    \
             livenessProbe: ~\n    ports: null\n"
        );
        let pod = pod(&yaml).expect("decodes");
        let container = &pod.spec.expect("spec").containers[0];
        let env = container.env.as_ref().expect("env");
        assert_eq!((env[0].name.as_str(), env[0].value.as_deref()), ("A", None));
        assert_eq!(
            (env[1].name.as_str(), env[1].value.as_deref(), env[1].value_from.is_none()),
            ("B", None, true)
        );
        assert!(container.liveness_probe.is_none());
        assert!(container.ports.is_none());
    }

    /// apimachinery's `IntOrString.UnmarshalJSON` reads what is not a string as its integer,
    /// which Go leaves 0 for a `null`: a TCP probe's `port: ~` is the port 0, for validation to
    /// judge. (k8s-openapi reads a required field through an `Option` and defaults it, so this
    /// held before `GoNull` too; a list of int-or-strings is `GoNull`'s, go_null.rs's tests.)
    #[test]
    fn a_null_int_or_string_is_the_integer_zero() {
        use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
        let yaml = format!("{POD}    readinessProbe: {{tcpSocket: {{port: ~}}}}\n");
        let pod = pod(&yaml).expect("decodes");
        let probe = pod.spec.expect("spec").containers[0].readiness_probe.clone().expect("probe");
        assert_eq!(probe.tcp_socket.map(|tcp| tcp.port), Some(IntOrString::Int(0)));
    }

    /// A `null` container is Go's zero Container, not a decoding error: its name and image are
    /// empty, which validation refuses in its own words.
    #[test]
    fn a_null_container_is_a_container_of_zeros() {
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [~]\n";
        let pod = pod(yaml).expect("decodes");
        let container = &pod.spec.expect("spec").containers[0];
        assert_eq!((container.name.as_str(), container.image.as_deref()), ("", None));
        assert!(container.liveness_probe.is_none());
    }

    /// A type error that is not about a `null` is said in serde_json's words, with its path.
    #[test]
    fn other_type_errors_keep_their_words_and_paths() {
        let yaml = format!("{POD}    args: [a, 1]\n");
        let error = pod(&yaml).expect_err("refused");
        assert_eq!(error.message, "invalid type: integer `1`, expected a string");
        let path = [
            Segment::Key("spec".into()),
            Segment::Key("containers".into()),
            Segment::Index(0),
            Segment::Key("args".into()),
            Segment::Index(1),
        ];
        assert_eq!(error.path, path);
        let yaml = format!("{POD}    livenessProbe: {{periodSeconds: '10'}}\n");
        let error = pod(&yaml).expect_err("refused");
        assert_eq!(error.message, "invalid type: string \"10\", expected i32");
        // An unknown field is still noted, under a null-read struct's sibling too.
        let (values, _) = read(&format!("{POD}    readinesProbe: ~\n    lifecycle: ~\n"));
        let (_, unknown) =
            decode_value::<k8s_openapi::api::core::v1::Pod>(values[0].clone()).expect("decodes");
        assert_eq!(unknown, ["spec.containers[0].readinesProbe"]);
    }

    #[test]
    fn the_value_is_named_as_the_file_writes_it() {
        let message = "invalid type: integer `420`, expected a string";
        assert_eq!(naming_written(message, "0644"), "invalid type: integer `0644`, expected a string");
        assert_eq!(naming_written(message, "420"), message);
        assert_eq!(naming_written("missing field `name`", "x"), "missing field `name`");
    }
}
