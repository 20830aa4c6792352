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

/// go-yaml v2's booleans, each spelling it knows (resolve.go's `resolveMapList`): the YAML
/// reader takes these words in any case (`yEs`, `oN`, `tRUE`), which go-yaml reads as strings.
const GO_YAML_BOOLEANS: [&str; 22] = [
    "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false", "False",
    "FALSE", "on", "On", "ON", "off", "Off", "OFF",
];

/// Makes each boolean of `documents` (a YAML file's, as the reader typed them) that go-yaml v2
/// reads as a string that string: a plain `oN` or `yEs` is a string to the kubelet, which an
/// env value takes and a boolean field refuses. Only a file that writes such a word is read a
/// second time for the words of its values ([`spans`]).
pub(crate) fn go_yaml_booleans(documents: &mut [Value], contents: &str) {
    let odd_boolean = |word: &str| {
        ["y", "yes", "n", "no", "true", "false", "on", "off"].iter().any(|b| word.eq_ignore_ascii_case(b))
            && !GO_YAML_BOOLEANS.contains(&word)
    };
    if !contents.split(|c: char| !c.is_ascii_alphabetic()).any(odd_boolean) {
        return;
    }
    let Some(nodes) = spans(contents) else { return };
    for (value, node) in documents.iter_mut().zip(&nodes) {
        strings_of_odd_booleans(value, node, contents);
    }
}

fn strings_of_odd_booleans(value: &mut Value, node: &Spanned<Node>, contents: &str) {
    match (value, &node.value) {
        (value @ Value::Bool(_), Node::Scalar) => {
            // An anchor's or a tag's text is not the word alone: such a value is left as read.
            // So is a word tagged a boolean (`!!bool oN`), which go-yaml refuses.
            if let Some(text) = plain_text(node, contents)
                && !text.starts_with(['&', '!', '*'])
                && !GO_YAML_BOOLEANS.contains(&text)
                && !tagged(node, contents)
            {
                *value = Value::String(text.to_owned());
            }
        }
        (Value::Array(items), Node::Seq(nodes)) => {
            for (item, node) in items.iter_mut().zip(nodes) {
                strings_of_odd_booleans(item, node, contents);
            }
        }
        (Value::Object(fields), Node::Map(entries)) => {
            // The last of a key written twice is the one read.
            let by_key: std::collections::HashMap<&str, &Spanned<Node>> =
                entries.iter().map(|(key, node)| (key.as_str(), node)).collect();
            for (key, field) in fields.iter_mut() {
                if let Some(node) = by_key.get(key.as_str()) {
                    strings_of_odd_booleans(field, node, contents);
                }
            }
        }
        _ => {}
    }
}

/// Whether the word before `node`'s text is a tag (`!!bool oN`): the text's span holds the
/// scalar alone.
fn tagged(node: &Spanned<Node>, contents: &str) -> bool {
    let start = node.defined.span().byte_offset().and_then(|at| usize::try_from(at).ok());
    let before = start.and_then(|start| contents.get(..start)).unwrap_or_default();
    before.trim_end().rsplit(char::is_whitespace).next().is_some_and(|word| word.starts_with('!'))
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

    /// `path: message` (the message alone for the document itself), the path as the API server
    /// writes it (`spec.containers[0].env[0].value`), from `skip` segments on.
    fn path_text(&self, skip: usize) -> String {
        let mut text = String::new();
        for segment in self.path.iter().skip(skip) {
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

    /// The error in words, its path from `skip` segments on (those are said apart: a `List`'s
    /// `items[0]`), with the line and column of its value in `document` when that is known,
    /// and the value as the file writes it where the decoder names it by what it stands for
    /// (`invalid type: integer `0644`, expected a string`, where the decoder says 420).
    pub(crate) fn text(&self, skip: usize, document: Option<&Spanned<Node>>, contents: &str) -> String {
        let path = self.path_text(skip);
        let node = document.and_then(|root| find(root, &self.path));
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

/// Decodes `value` (a document made the kubelet's JSON, [`as_kubelet_json`]) into `T`, with
/// the paths of the fields it holds that `T` does not have, strictly by type as the kubelet
/// decodes it.
pub(crate) fn decode_value<T: DeserializeOwned>(value: Value) -> Result<(T, Vec<String>), DecodeError> {
    decode_noting_unknown::<T, _>(value).map_err(|error| {
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
    serde_saphyr::from_multiple_with_options(contents, yaml_options()).ok()
}

/// A YAML value with where each of its values is.
#[derive(Debug)]
pub(crate) enum Node {
    Map(Vec<(String, Spanned<Node>)>),
    Seq(Vec<Spanned<Node>>),
    /// A scalar; whether its text is what it stands for is read from the file.
    Scalar,
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
        while let Some((key, value)) = map.next_entry::<Value, Spanned<Node>>()? {
            // A key as the JSON conversion writes it: a string as is, any other scalar in words.
            let key = match key {
                Value::String(key) => key,
                other => other.to_string(),
            };
            entries.push((key, value));
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

    fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_str<E>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }

    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Scalar)
    }
}

/// The node at `path` under `root`.
fn find<'a>(root: &'a Spanned<Node>, path: &[Segment]) -> Option<&'a Spanned<Node>> {
    let mut node = root;
    for segment in path {
        node = match (&node.value, segment) {
            // The last of a key written twice is the one read.
            (Node::Map(entries), Segment::Key(key)) => {
                entries.iter().rev().find(|(k, _)| k == key).map(|(_, value)| value)?
            }
            (Node::Seq(items), Segment::Index(index)) => items.get(*index)?,
            _ => return None,
        };
    }
    Some(node)
}

/// The file's text of a plain scalar (`0644`, `yes`: what a YAML 1.1 reader types), `None`
/// for a quoted or block scalar, whose text is a string's, or where the file's bytes are not
/// known.
fn plain_text<'a>(node: &Spanned<Node>, contents: &'a str) -> Option<&'a str> {
    if !matches!(node.value, Node::Scalar) {
        return None;
    }
    // An alias stands for its anchor's value: the text is there.
    let span = node.defined.span();
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

    /// go-yaml v2's `resolve` for the spellings of an integer (`strconv.ParseInt` with base 0
    /// after the `_`s are dropped; else a float by `yamlStyleFloat`), then Go's JSON encoder:
    /// what the kubelet's decoder reads for each.
    #[test]
    fn numbers_are_what_the_kubelet_reads() {
        let cases = [
            ("0644", "420"),
            ("+0644", "420"),
            ("-010", "-8"),
            ("0o17", "15"),
            ("0x1F", "31"),
            ("0b101", "5"),
            ("1_000", "1000"),
            ("08", "8"),
            ("09", "9"),
            ("-09", "-9"),
            ("+08", "8"),
            ("08080", "8080"),
            ("10.0", "10"),
            ("1e3", "1000"),
            ("08.5", "8.5"),
            ("0", "0"),
            ("00", "0"),
            ("99999999999999999999", "1e+20"),
        ];
        for (written, want) in cases {
            let mut value: Value =
                serde_saphyr::from_str_with_options(&format!("v: {written}\n"), yaml_options())
                    .expect("YAML");
            as_kubelet_json(&mut value);
            assert_eq!(value["v"].to_string(), want, "{written}");
        }
    }

    /// go-yaml v2's spellings of a boolean stay booleans; another case of those words is a
    /// string, but not under a `!!bool` tag (go-yaml refuses that).
    #[test]
    fn booleans_are_go_yaml_spellings() {
        let yaml = "a: oN\nb: On\nc: [yEs, YES, n, nO]\nd: !!bool tRUE\ne: &x oFF\nf: *x\ng: 'oN'\n";
        let mut values: Vec<Value> =
            serde_saphyr::from_multiple_with_options(yaml, yaml_options()).expect("YAML");
        go_yaml_booleans(&mut values, yaml);
        assert_eq!(
            values[0].to_string(),
            r#"{"a":"oN","b":true,"c":["yEs",true,false,"nO"],"d":true,"e":"oFF","f":"oFF","g":"oN"}"#
        );
    }

    #[test]
    fn the_value_is_named_as_the_file_writes_it() {
        let message = "invalid type: integer `420`, expected a string";
        assert_eq!(naming_written(message, "0644"), "invalid type: integer `0644`, expected a string");
        assert_eq!(naming_written(message, "420"), message);
        assert_eq!(naming_written("missing field `name`", "x"), "missing field `name`");
    }
}
