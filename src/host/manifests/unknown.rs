//! Fields a manifest holds that the API's type for it does not have: a misspelled
//! `readinesProbe`, or a field of a Kubernetes newer than the v1.35 API the agent is built
//! against. The kubelet's file source decodes leniently and ignores them, and so does the agent;
//! the API server's strict field validation (kubectl's default) refuses the object instead,
//! naming each one (`strict decoding error: unknown field "spec.containers[0].readinesProbe"`).
//! This module owns finding them, in the decode that reads the object (no second pass), their
//! paths, written as the API server writes them, and which of a scan's are news to `probelet run`. docs/lint.md, "`unknown-field`", says
//! what `probelet lint` and `probelet run` make of them.

use serde::{Deserialize, Deserializer};

/// The most unknown fields noted per object: the API server stops at 100 too.
pub const UNKNOWN_FIELDS_MAX: usize = 100;

/// Decodes a `T` from `deserializer`, with the path of each field it holds that `T` does not
/// have (once each, in the order met, at most [`UNKNOWN_FIELDS_MAX`]). A type error names the
/// path of its field, as [`serde_path_to_error`] does.
///
/// `apiVersion`, `kind` and `status` are fields of every object type read here, and a field
/// written as `null` (`creationTimestamp: null`) is a field the type has: none is unknown.
pub fn decode_noting_unknown<'de, T, D>(
    deserializer: D,
) -> Result<(T, Vec<String>), serde_path_to_error::Error<D::Error>>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    let mut unknown = Vec::new();
    let value = {
        let mut note = |path: serde_ignored::Path<'_>| {
            let path = api_path(&path);
            if unknown.len() < UNKNOWN_FIELDS_MAX && !unknown.contains(&path) {
                unknown.push(path);
            }
        };
        serde_path_to_error::deserialize(serde_ignored::Deserializer::new(deserializer, &mut note))?
    };
    Ok((value, unknown))
}

/// A field's path as the API server writes it: fields joined by dots, list items by their
/// index in brackets (`spec.containers[0].readinesProbe`). An optional value or a newtype adds
/// nothing.
fn api_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", api_path(parent)),
        Path::Map { parent, key } => match api_path(parent) {
            parent if parent.is_empty() => key.clone(),
            parent => format!("{parent}.{key}"),
        },
        Path::Some { parent } | Path::NewtypeStruct { parent } | Path::NewtypeVariant { parent } => {
            api_path(parent)
        }
    }
}

/// The API server's words for `paths` (`unknown field "spec.containers[0].readinesProbe"`,
/// several joined by `, `), the paths quoted as Go quotes them.
pub fn unknown_fields_text(paths: &[String]) -> String {
    paths
        .iter()
        .map(|path| format!("unknown field {}", probelet_actors::gofmt::go_quote(path)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The fields of one document of a manifest that a Pod does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFields {
    pub file: std::path::PathBuf,
    /// Its document in a file of several (1-based, its `---` section); `None` in a file of one.
    pub document: Option<usize>,
    /// The fields' paths, as the API server writes them (`spec.containers[0].readinesProbe`).
    pub paths: Vec<String>,
}

impl std::fmt::Display for UnknownFields {
    /// `<file>: [document <n>: ]unknown field "…", unknown field "…"`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if let Some(n) = self.document {
            write!(f, "document {n}: ")?;
        }
        f.write_str(&unknown_fields_text(&self.paths))
    }
}

/// What `probelet run` prints of a manifest's unknown fields (once while they last): that they
/// are ignored, as the kubelet ignores them, with the file, the document and the fields in the
/// API server's words.
pub fn ignored_fields_line(unknown: &UnknownFields) -> String {
    let start = match unknown.paths.len() {
        1 => "manifest field ignored, as the kubelet ignores it",
        _ => "manifest fields ignored, as the kubelet ignores them",
    };
    let document = unknown.document.map(|n| format!("document {n}: ")).unwrap_or_default();
    // The paths are the file's keys: a long one is cut (`super::bounded_quotes`).
    let fields = unknown_fields_text(&unknown.paths);
    format!("{start}: {}: {document}{}", unknown.file.display(), super::bounded_quotes(&fields))
}
