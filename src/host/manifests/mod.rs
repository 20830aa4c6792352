//! Pod manifests from a folder: the standalone agent's pod source, the counterpart of the kubelet's
//! static pods (`pkg/kubelet/config/file.go` and `common.go`). It owns reading the folder, decoding
//! YAML and JSON, the API server's defaulting (`pkg/apis/core/v1/defaults.go`) and validation
//! (`pkg/apis/core/validation/validation.go`) of the fields the agent relies on, the static pod UID,
//! and what changed between two scans of the folder. This file reads and decodes; `snapshot.rs`
//! holds the scans, which pod of a namespace/name runs, their diff and the UID; `validate.rs`
//! the defaulting and validation; `sections.rs` the numbers by which errors name the documents
//! of a file; `unknown.rs` the fields a manifest holds that a Pod does not have, which a pod runs
//! without, as the kubelet runs it, and which the agent says once while they last.
//!
//! What a loaded pod looks like:
//! * defaults applied ([`apply_defaults`]) and validated ([`validate`]), as the kubelet does for
//!   static pods through `ValidatePodCreate`;
//! * `metadata.uid` is [`static_pod_uid`], a hash of the node name, the file path and the manifest.
//!   Unlike the kubelet, a `uid` written in the manifest is ignored: the UID must change with the
//!   content so that a changed manifest replaces the pod;
//! * annotations `kubernetes.io/config.source: file` and `kubernetes.io/config.hash: <uid>`;
//! * `spec.nodeName` is the agent's node name;
//! * `status` is cleared except `status.conditions`: conditions written in the manifest are kept so
//!   a user can declare the value of a readiness-gate condition (nothing else would set it in
//!   standalone mode). The kubelet also sets `status.phase: Pending`; here the phase is left to the
//!   status machinery.
//!
//! Unlike the kubelet, a file may hold several YAML documents (`---`), each one pod; a bad document
//! is reported and the file's other documents still load. A file that does not parse at all loads
//! nothing, so while it is broken its pods are gone (as with the kubelet). A document is decoded
//! as the kubelet decodes it (`decode.rs`: YAML 1.1 scalars made JSON, then strictly by type);
//! type errors name the field path as well as the line and column, and the value as the file
//! writes it (`spec.containers[0].env[0].value: invalid type: integer `0644`, expected a string
//! at line 14, column 31`), like the validation errors.
//!
//! A folder or file that cannot be *read* is not a folder without pods: when listing the folder
//! fails for any reason but "does not exist" (say `EMFILE` while the node is short of file
//! descriptors), [`Snapshot::keeping_unreadable`] keeps the last good pod set, as the kubelet's
//! file source does (it sends no update when the listing fails). A single file that cannot be
//! read because the agent is short of descriptors or memory keeps the pods it last gave for as
//! long as that lasts; the kubelet drops those, which would restart every container of a pod
//! whose file could not be opened for a moment. A running file that cannot be read for any other
//! reason (`EACCES` after a `chmod`, `EIO`) is held as a half-written one is, for
//! [`HELD_SCANS_MAX`] scans ([`UNREADABLE_FOR_NOW`]), then its pods stop, as the kubelet drops
//! such a file at its next full read of the folder; a file readable again within the hold keeps
//! its pods untouched. A folder that does not exist means no pods, as upstream.
//!
//! Of the pods that share a namespace/name, one runs and the others are reported
//! (`metadata.name: Duplicate value`, with both files): the one already running, or at start the
//! first in file-name order. A new file therefore never displaces a running pod, where upstream's
//! file source lets it (`snapshot.rs`, [`rescan`]; docs/reliability.md, "A new manifest never
//! displaces a running pod").
//!
//! Manifests should be written atomically (write a temporary file beside them, then rename it
//! over the manifest): a scan that catches a running manifest empty or half written keeps its
//! pods for that scan, and for the next ones while the file goes on changing (up to
//! [`HELD_SCANS_MAX`]), then reports what it reads and stops the pods it no longer gives. Hidden files (`.name.yaml`) are skipped, so a temporary file
//! whose name starts with a dot is never read.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use probelet_actors::FeatureGates;
use probelet_actors::gofmt::go_quote;
use serde_json::Value;

/// The largest manifest file read, in bytes (1 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// Upstream `kubetypes.ConfigSourceAnnotationKey`.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Upstream `kubetypes.ConfigHashAnnotationKey`.
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";
/// Upstream `kubetypes.FileSource`: the value of [`CONFIG_SOURCE_ANNOTATION`].
pub const FILE_SOURCE: &str = "file";
/// File extensions read from the folder (compared case-insensitively).
pub const MANIFEST_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

const NOT_A_FILE: &str = "not a regular file";
/// How an error opening or reading a manifest starts (followed by the OS error).
const CANNOT_READ: &str = "cannot read file";
/// A folder named like a manifest: the kubelet's file source does not read subfolders either
/// (its words).
const NOT_RECURSING: &str = "not recursing into manifest path";

/// A pod loaded from a manifest: defaults applied, validated, UID and source annotations set.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedPod {
    /// The manifest file it came from.
    pub file: PathBuf,
    /// Its document in a file of several (1-based, its `---` section); `None` in a file of one.
    pub document: Option<usize>,
    /// The pod, ready to hand to the engine.
    pub pod: Pod,
}

impl LoadedPod {
    /// The static pod UID (`metadata.uid`).
    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    /// `metadata.namespace` (always set after defaulting).
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE)
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }
}

/// A pod's namespace and name as [`LoadedPod::namespace`] and [`LoadedPod::name`] read them.
fn pod_full_name(pod: &Pod) -> (String, String) {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE);
    (namespace.to_owned(), pod.metadata.name.clone().unwrap_or_default())
}

/// Why a file, or one document in it, gave no pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", file.display())]
pub struct ManifestError {
    /// The manifest file (or the folder, when the folder itself cannot be read).
    pub file: PathBuf,
    /// What is wrong, for a person to read.
    pub reason: String,
}

impl ManifestError {
    fn new(file: &Path, reason: impl Into<String>) -> Self {
        Self { file: file.to_path_buf(), reason: reason.into() }
    }

    /// The document this error is about in a file of several (1-based; its reason starts
    /// `document <n>: `), whose other documents are read as they are; `None` when it is
    /// about the whole file.
    pub fn document(&self) -> Option<usize> {
        let (number, _) = self.reason.strip_prefix("document ")?.split_once(": ")?;
        number.parse().ok()
    }

    /// `<file>: <reason>`, the reason's quotes of the file's text bounded ([`bounded_quotes`]),
    /// for a line of the console.
    pub fn for_a_line(&self) -> String {
        format!("{}: {}", self.file.display(), bounded_quotes(&self.reason))
    }
}

/// The most characters of one word a console line quotes of a manifest's text (a field path,
/// a key, a value): a 900 KB key made a 900 KB line, as one per file and scan.
pub const QUOTED_CHARS_MAX: usize = 256;

/// The most characters of a manifest's text one console line quotes in all: a key of short
/// words (`a b c …`, 900 KB of them) is no long word, and a hundred long field paths make a
/// line of 25,000 characters. `probelet lint` names them all.
pub const LINE_QUOTES_MAX: usize = 4_096;

/// `text` with each word longer than [`QUOTED_CHARS_MAX`] characters cut there and ended with
/// `…` (and the quote or colon it ended with), and the whole cut at [`LINE_QUOTES_MAX`]
/// characters with `…`, as the API server shortens a long value it quotes in an error. A
/// manifest's words are its field paths, keys and values: the agent's own words are short.
pub fn bounded_quotes(text: &str) -> std::borrow::Cow<'_, str> {
    let long_word = text.split(' ').any(|word| word.chars().nth(QUOTED_CHARS_MAX).is_some());
    if !long_word && text.chars().nth(LINE_QUOTES_MAX).is_none() {
        return text.into();
    }
    let words: Vec<String> = text
        .split(' ')
        .map(|word| match word.char_indices().nth(QUOTED_CHARS_MAX) {
            None => word.to_owned(),
            Some((cut, _)) => {
                let end = word.chars().last().filter(|c| matches!(c, '"' | '`' | ':' | ',' | ']'));
                let mut bounded = format!("{}…", &word[..cut]);
                bounded.extend(end);
                bounded
            }
        })
        .collect();
    let mut bounded = words.join(" ");
    if let Some((cut, _)) = bounded.char_indices().nth(LINE_QUOTES_MAX) {
        bounded.truncate(cut);
        bounded.push('…');
    }
    bounded.into()
}

// === parsing ===

/// Parses one file's contents: YAML (a `.json` file is YAML too, as for the kubelet), several YAML documents per
/// file (`---`), empty documents skipped. Each document must be `kind: Pod`, `apiVersion: v1`;
/// anything else is an error for that document while the file's other documents still load. When
/// the file holds more than one document, errors name the document by its `---` section
/// (1-based, empty sections counted, as `sections.rs` finds them). Returned pods are ready:
/// defaults, validation, UID, annotations, node name. Validated under the kubelet's default feature gates; [`parse_manifest_with`] takes others.
pub fn parse_manifest(file: &Path, contents: &str, node_name: &str) -> (Vec<Pod>, Vec<ManifestError>) {
    parse_manifest_with(file, contents, node_name, &FeatureGates::default())
}

/// [`parse_manifest`], validated under `gates` ([`validate_with`]).
pub fn parse_manifest_with(
    file: &Path,
    contents: &str,
    node_name: &str,
    gates: &FeatureGates,
) -> (Vec<Pod>, Vec<ManifestError>) {
    let parsed = parse_documents(file, contents, node_name, gates);
    (parsed.pods.into_iter().map(|(_, pod)| pod).collect(), parsed.errors)
}

/// [`parse_manifest_with`], with the fields of each document that a Pod does not have
/// ([`UnknownFields`]): a pod runs without them, as the kubelet runs it.
pub fn parse_manifest_noting_unknown(
    file: &Path,
    contents: &str,
    node_name: &str,
    gates: &FeatureGates,
) -> (Vec<Pod>, Vec<ManifestError>, Vec<UnknownFields>) {
    let parsed = parse_documents(file, contents, node_name, gates);
    (parsed.pods.into_iter().map(|(_, pod)| pod).collect(), parsed.errors, parsed.unknown)
}

/// What one file's contents gave.
#[derive(Debug, Clone, Default)]
struct Parsed {
    /// Each pod with its document's number (its `---` section, 1-based) where the file holds
    /// several documents.
    pods: Vec<NumberedPod>,
    errors: Vec<ManifestError>,
    /// The fields of each document whose pod loads that a Pod does not have.
    unknown: Vec<UnknownFields>,
    /// The file holds no document but empty or null ones: it is blank, only comments, `~`,
    /// `null` or `---` lines ([`EMPTY`]).
    empty: bool,
    /// The keys written twice in a mapping of the file, whose last value is read: one
    /// [`DuplicateKey`] per document that has some.
    duplicate_keys: Vec<DuplicateKey>,
}

/// A key written twice in a mapping of a manifest: the last value is read, as the kubelet's
/// file source reads it (`read_documents`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateKey {
    pub file: PathBuf,
    /// The keys of one document written again, with where, and what is read (`duplicate mapping
    /// key: name at line 5, column 3: the last value is read, as the kubelet reads it`; several
    /// keys, the first few named and the rest counted; `document 2: ` before them in a file of
    /// several documents).
    pub text: String,
}

/// What `probelet run` prints of a manifest with a key written twice (once per file contents):
/// the file and [`DuplicateKey::text`], its quote of the key bounded ([`bounded_quotes`]).
pub fn duplicate_key_line(duplicate: &DuplicateKey) -> String {
    format!("manifest key written twice: {}: {}", duplicate.file.display(), bounded_quotes(&duplicate.text))
}

/// [`parse_manifest_with`], with each pod's document number and the unknown fields.
fn parse_documents(file: &Path, contents: &str, node_name: &str, gates: &FeatureGates) -> Parsed {
    let failed =
        |reason: String| Parsed { errors: vec![ManifestError::new(file, reason)], ..Parsed::default() };
    if contents.len() as u64 > MAX_MANIFEST_BYTES {
        return failed(ReadError::TooLarge { max_bytes: MAX_MANIFEST_BYTES }.to_string());
    }
    let contents = contents.strip_prefix('\u{feff}').unwrap_or(contents);
    let (documents, twice) = match decode_documents(contents) {
        Ok(read) => read,
        Err(reason) => return failed(reason),
    };
    let several = documents.len() > 1;
    let sections = if several { sections::document_sections(contents) } else { Vec::new() };
    let total = documents.len();
    // Said of every document, its pod refused or not: the value read may be why it is
    // refused, which the file, read top down, does not show (docs/lint.md, "unknown-field").
    let duplicate_keys = twice
        .into_iter()
        .enumerate()
        .filter_map(|(index, text)| {
            let number = sections::document_number(&sections, total, index);
            let text = if several { format!("document {number}: {}", text?) } else { text? };
            Some(DuplicateKey { file: file.to_path_buf(), text })
        })
        .collect();
    if documents.is_empty() {
        return Parsed { empty: true, duplicate_keys, ..Parsed::default() };
    }
    let mut parsed = Parsed { duplicate_keys, ..Parsed::default() };
    for (index, document) in documents.into_iter().enumerate() {
        let number = sections::document_number(&sections, total, index);
        let decoded = document.and_then(|(pod, paths)| Ok((prepare(file, pod, node_name, gates)?, paths)));
        match decoded {
            // The fields a pod runs without are said of a pod that runs: of one refused, its
            // refusal alone is said (it did not run with or without them).
            Ok((pod, paths)) => {
                if !paths.is_empty() {
                    let document = several.then_some(number);
                    parsed.unknown.push(UnknownFields { file: file.to_path_buf(), document, paths });
                }
                parsed.pods.push((several.then_some(number), pod))
            }
            Err(reason) if several => {
                parsed.errors.push(ManifestError::new(file, format!("document {number}: {reason}")))
            }
            Err(reason) => parsed.errors.push(ManifestError::new(file, reason)),
        }
    }
    parsed
}

/// A decoded pod with the paths of the fields it holds that a Pod does not have.
type DecodedPod = (Pod, Vec<String>);

/// The file's documents, each a pod (with its unknown fields) or why not; `Err` when the file
/// does not parse at all. Each document is decoded as the kubelet decodes it (`decode.rs`):
/// made JSON by YAML 1.1's rules, then decoded strictly by type. A `.json` file is read so too:
/// the kubelet's `tryDecodeSinglePod` runs every file through sigs.k8s.io/yaml ("JSON is valid
/// YAML"), so `1e400` in a JSON manifest is the string `1e400` to it, not an error.
fn decode_documents(contents: &str) -> Result<ReadDocuments<DecodedPod>, String> {
    let ReadFile { values, refused, twice } = read_documents(contents)?;
    // Where each value is, read only if a document does not decode: its error names the line.
    let mut spans = None;
    let documents = values
        .into_iter()
        .zip(refused)
        .enumerate()
        .map(|(index, (mut value, refused))| {
            if let Some(reason) = refused {
                return Err(reason);
            }
            check_kind(&value)?;
            decode::as_kubelet_json(&mut value);
            decode::decode_value::<Pod>(value).map_err(|error| {
                let documents = spans.get_or_insert_with(|| decode::spans(contents));
                let document = documents.as_ref().and_then(|documents| documents.get(index));
                format!("invalid Pod: {}", error.text(0, document, contents))
            })
        })
        .collect();
    Ok((documents, twice))
}

/// A file's documents, each read or why not, with the keys of each written twice in its
/// mappings in words, if any (`read_documents`).
pub type ReadDocuments<T> = (Vec<Result<T, String>>, Vec<Option<String>>);

/// What is said of a manifest with a key written twice in a mapping, after the YAML reader's
/// words for the key and where it is written the second time.
pub const DUPLICATE_KEY_READ: &str = "the last value is read, as the kubelet reads it";

/// [`DUPLICATE_KEY_READ`] for several keys.
pub const DUPLICATE_KEYS_READ: &str = "the last values are read, as the kubelet reads them";

/// The file's YAML documents (`contents`, its BOM stripped) as the kubelet's file source reads
/// them: a key written twice in a mapping takes its last value, as sigs.k8s.io/yaml (go-yaml v2,
/// not strict) takes it, where the YAML reader's default refuses the file; each scalar as
/// go-yaml reads it (`decode::go_yaml_scalars`). With each document's refusal, if the kubelet
/// refuses it, and its keys written twice in words (`duplicate mapping key: name at line 5,
/// column 3: the last value is read, as the kubelet reads it`), said as a warning (docs/lint.md,
/// "What it reads"). The first read refuses a duplicate, to find it: only a file that has one
/// is read a second time. Keys the same only to go-yaml (`1` and `01`, `yes` and `true`) are
/// found by the go-yaml pass, which a file with such a key gets anyway.
pub(crate) fn read_documents(contents: &str) -> Result<ReadFile, String> {
    let text = decode::reader_text(contents);
    let mut strict = yaml_options();
    strict.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::Error;
    let (mut values, twice) = match serde_saphyr::from_multiple_with_options(&text, strict) {
        Ok(values) => (values, false),
        Err(error) if is_duplicate_key(&error) => {
            let values = serde_saphyr::from_multiple_with_options(&text, yaml_options())
                .map_err(|e| yaml_syntax_error(&e, contents))?;
            (values, true)
        }
        // A merge of no mapping (`<<: 1`): go-yaml refuses the document, in its own words,
        // which `decode::go_yaml_scalars` gives it (a file with a merge key has its passes).
        // The reader refused the whole file in its words; read with `<<` a key as any other,
        // the file's other documents load.
        Err(error) if is_merge_of_no_mapping(&error) => {
            let mut options = yaml_options();
            options.merge_keys = serde_saphyr::MergeKeyPolicy::AsOrdinary;
            let values = serde_saphyr::from_multiple_with_options(&text, options)
                .map_err(|e| yaml_syntax_error(&e, contents))?;
            (values, true)
        }
        Err(error) => return Err(yaml_syntax_error(&error, contents)),
    };
    let read = decode::go_yaml_scalars(&mut values, contents, twice);
    let twice = read.twice.iter().map(|keys| decode::keys_written_twice_text(keys)).collect();
    Ok(ReadFile { values, refused: read.refused, twice })
}

/// A file's documents as [`read_documents`] reads them.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReadFile {
    /// Each document's value, made what go-yaml makes of its scalars.
    pub(crate) values: Vec<Value>,
    /// Why the kubelet refuses each document, where it does.
    pub(crate) refused: Vec<Option<String>>,
    /// Each document's keys written twice in words, where it has some.
    pub(crate) twice: Vec<Option<String>>,
}

/// Whether the YAML reader refused a file for a key written twice (behind an alias's error, if
/// the mapping is an anchor's).
fn is_duplicate_key(mut error: &serde_saphyr::Error) -> bool {
    use serde_saphyr::Error;
    while let Error::AliasError { error: inner, .. } | Error::WithSnippet { error: inner, .. } = error {
        error = inner;
    }
    matches!(error, Error::DuplicateMappingKey { .. })
}

/// Whether the YAML reader refused a file for a merge key whose value is no mapping nor a
/// sequence of mappings (behind an alias's error, if the mapping is an anchor's).
fn is_merge_of_no_mapping(mut error: &serde_saphyr::Error) -> bool {
    use serde_saphyr::Error;
    while let Error::AliasError { error: inner, .. } | Error::WithSnippet { error: inner, .. } = error {
        error = inner;
    }
    matches!(error, Error::MergeValueNotMapOrSeqOfMaps { .. })
}

/// `path: error`, or only the error when it is about the document itself (path `.`).
pub(crate) fn with_path(path: &str, error: &dyn std::fmt::Display) -> String {
    if path.is_empty() || path == "." { error.to_string() } else { format!("{path}: {error}") }
}

pub(crate) fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    // The snippet is a multi-line rendering; the one-line message already has line and column.
    options.with_snippet = false;
    // The kubelet's file source and kubectl read YAML 1.1 (sigs.k8s.io/yaml's go-yaml v2):
    // `defaultMode: 0644` is the octal 420, as manifests everywhere write it. YAML 1.2 has no
    // such octal, and under it the reader refused the field (`invalid i32`; docs/lint.md,
    // "What it reads").
    options.legacy_octal_numbers = true;
    // An infinity or a NaN (`.inf`, and `1e400`, which overflows) is read as a word, which
    // `decode::go_yaml_scalars` then makes what go-yaml makes of it: a refusal of the document
    // for `.inf`, the string `1e400` (docs/lint.md, "What it reads").
    options.non_finite_float_policy = serde_saphyr::NonFiniteFloatPolicy::AsString;
    // A key written twice takes its last value, as the kubelet's reader takes it
    // ([`read_documents`], which finds and says it).
    options.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::LastWins;
    options
}

/// `invalid YAML: …` for `contents` the YAML reader gave up on, in one line ([`yaml_error_text`]),
/// with a tab that breaks a block's indentation placed where it is: the reader places that error
/// at the start of the value the line before continues (`name: app` above a `\timage: x` line
/// reads "found a tab at line 7, column 11", where there is no tab), the kubelet's reader at the
/// tab itself (`line 8: found a tab character that violates indentation`).
pub(crate) fn yaml_syntax_error(error: &serde_saphyr::Error, contents: &str) -> String {
    use serde_saphyr::MessageFormatter as _;
    let tab_in_scalar = serde_saphyr::granit_parser::ErrorKind::TabInPlainScalar.to_string();
    let tab = error
        .location()
        .filter(|_| serde_saphyr::DefaultMessageFormatter.format_message(error) == tab_in_scalar)
        .and_then(|scalar| indenting_tab(contents, scalar.line(), scalar.column()));
    match tab {
        Some((line, column)) => {
            format!(
                "invalid YAML: found a tab character that violates indentation at line {line}, column {column}"
            )
        }
        None => format!("invalid YAML: {}", yaml_error_text(error)),
    }
}

/// The line and column (1-based) of the tab that broke the indentation of the plain scalar that
/// begins at `line`, `column` (1-based, the YAML reader's place for the error): the first tab met
/// in the leading blanks of a line after it at a column left of the scalar's block indentation,
/// on a line that holds more than blanks and a comment (the reader lets those through). A tab
/// further right is the scalar's own whitespace, not the error. Lines are counted as the reader
/// counts them (`\r\n`, `\n` or a lone `\r` ends one). `None` when the block's indentation cannot
/// be told from the text: the reader's own words are given then.
fn indenting_tab(contents: &str, line: u64, column: u64) -> Option<(u64, usize)> {
    let lines: Vec<&str> = yaml_lines(contents).collect();
    let start = usize::try_from(line).ok()?.checked_sub(1)?;
    let column = usize::try_from(column).ok()?.checked_sub(1)?;
    let required = scalar_block_indent(&lines, start, column)? + 1;
    for (index, text) in lines.iter().enumerate().skip(start + 1) {
        let blanks = text.len() - text.trim_start_matches([' ', '\t']).len();
        let rest = &text[blanks..];
        if rest.is_empty() || rest.starts_with('#') {
            continue;
        }
        match text[..blanks].find('\t') {
            Some(tab) if tab < required => return Some((u64::try_from(index).ok()? + 1, tab + 1)),
            // Indented less with spaces alone: the scalar would have ended here, so the
            // indentation read above is not the reader's; its own words then.
            None if blanks < required => return None,
            _ => {}
        }
    }
    None
}

/// The lines of `contents` as the YAML reader counts them.
fn yaml_lines(contents: &str) -> impl Iterator<Item = &str> {
    contents.split('\n').flat_map(|line| line.strip_suffix('\r').unwrap_or(line).split('\r'))
}

/// The column (0-based) of the block collection a plain scalar at `lines[start]`, `column`
/// belongs to, which its continuation lines must be indented past: the mapping whose key
/// starts that line (`key: value`, `- key: value`), or else the sequence of the line's last
/// `- ` (`- value`); for a scalar that begins its line (after its anchor or tag, if any), the
/// mapping or sequence of the nearest line above indented less (`key:` or `-` above it).
fn scalar_block_indent(lines: &[&str], start: usize, column: usize) -> Option<usize> {
    let text = lines.get(start)?;
    let (dash, content) = block_start(text);
    // What stands between the line's start and the scalar: a key (`key: `), or only the
    // scalar's anchor or tag (`- &a value`), which open no block.
    let at = text.char_indices().nth(column).map_or(text.len(), |(at, _)| at);
    let before = text.get(content..at).unwrap_or_default();
    let keyed = before.contains(": ") || before.contains(":\t") || before.trim_end().ends_with(':');
    if content < column && keyed {
        return Some(content);
    }
    if dash.is_some() {
        return dash;
    }
    let parent = lines[..start].iter().rev().find(|text| {
        let trimmed = text.trim_start_matches(' ');
        !trimmed.trim().is_empty() && !trimmed.starts_with('#') && text.len() - trimmed.len() < content
    })?;
    let (dash, content) = block_start(parent);
    if parent.get(content..).is_some_and(|rest| !rest.trim().is_empty()) { Some(content) } else { dash }
}

/// In one line: the column of its last sequence entry's `-` (after the leading spaces, entries
/// nested on one line: `- - x`), and the column where what follows them starts.
fn block_start(text: &str) -> (Option<usize>, usize) {
    let bytes = text.as_bytes();
    let mut at = bytes.iter().take_while(|&&b| b == b' ').count();
    let mut dash = None;
    while bytes.get(at) == Some(&b'-') && bytes.get(at + 1).is_none_or(|b| matches!(b, b' ' | b'\t')) {
        dash = Some(at);
        at += 1;
        at += bytes[at..].iter().take_while(|&&b| matches!(b, b' ' | b'\t')).count();
    }
    (dash, at)
}

/// A YAML error in one line, worded for whoever wrote the manifest: the YAML library's own
/// wording of a duplicate key ends with advice for programs that use it ("set
/// DuplicateKeyPolicy in Options if acceptable"), which a manifest's author can do nothing with.
pub(crate) fn yaml_error_text(error: &serde_saphyr::Error) -> String {
    one_line(&error.render_with_formatter(&ManifestMessages))
}

/// [`serde_saphyr::DefaultMessageFormatter`], but for the duplicate key.
struct ManifestMessages;

impl serde_saphyr::MessageFormatter for ManifestMessages {
    fn format_message<'a>(&self, error: &'a serde_saphyr::Error) -> std::borrow::Cow<'a, str> {
        match error {
            serde_saphyr::Error::DuplicateMappingKey { key: Some(key), .. } => {
                format!("duplicate mapping key: {key}").into()
            }
            serde_saphyr::Error::DuplicateMappingKey { key: None, .. } => "duplicate mapping key".into(),
            serde_saphyr::Error::Budget { breach, .. } => budget_text(breach).into(),
            other => serde_saphyr::DefaultMessageFormatter.format_message(other),
        }
    }
}

/// A limit of the YAML reader that a file passed, in words with the limit: the library's own
/// text is its Rust debug form (`budget breached: Depth { depth: 65 }`).
fn budget_text(breach: &serde_saphyr::budget::BudgetBreach) -> String {
    use serde_saphyr::budget::BudgetBreach as Breach;
    let limits = yaml_options().budget.unwrap_or_default();
    match breach {
        Breach::Depth { .. } => format!("nested deeper than {} levels", limits.max_depth),
        Breach::Nodes { .. } => {
            format!("more than {} nodes (scalars, sequences and mappings)", limits.max_nodes)
        }
        Breach::Documents { .. } => format!("more than {} documents", limits.max_documents),
        Breach::Events { .. } => format!("more than {} YAML events", limits.max_events),
        Breach::Aliases { .. } => format!("more than {} aliases", limits.max_aliases),
        Breach::Anchors { .. } => format!("more than {} anchors", limits.max_anchors),
        Breach::ScalarBytes { .. } => {
            format!("more than {} bytes of scalar text", limits.max_total_scalar_bytes)
        }
        Breach::MergeKeys { .. } => format!("more than {} merge keys", limits.max_merge_keys),
        Breach::AliasAnchorRatio { aliases, anchors } => format!(
            "{aliases} aliases of {anchors} anchors: more than {} per anchor",
            limits.alias_anchor_ratio_multiplier
        ),
        Breach::SequenceUnbalanced => "unbalanced structure".into(),
        // The type is non-exhaustive: a limit added later is still said in words.
        _ => "a limit of the YAML reader passed".into(),
    }
}

pub(crate) fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Only `kind: Pod` in `apiVersion: v1` is a pod, as for the kubelet's file source.
fn check_kind(document: &Value) -> Result<(), String> {
    let Value::Object(fields) = document else {
        return Err(format!("expected a Pod object, found {}", json_type(document)));
    };
    match fields.get("kind") {
        Some(Value::String(kind)) if kind == "Pod" => {}
        None | Some(Value::Null) => return Err("kind is missing: expected \"Pod\"".into()),
        Some(other) => return Err(format!("kind {other} is not supported: expected \"Pod\"")),
    }
    match fields.get("apiVersion") {
        Some(Value::String(version)) if version == "v1" => Ok(()),
        None | Some(Value::Null) => Err("apiVersion is missing: expected \"v1\"".into()),
        Some(other) => Err(format!("apiVersion {other} is not supported for kind Pod: expected \"v1\"")),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

/// Turns a decoded pod into a loaded one, or says why it is invalid.
fn prepare(file: &Path, mut pod: Pod, node_name: &str, gates: &FeatureGates) -> Result<Pod, String> {
    pod.status = only_conditions(pod.status.take());
    apply_defaults(&mut pod);
    if let Err(errors) = validate_with(&pod, gates) {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        return Err(format!("Pod {} is invalid: {}", go_quote(name), aggregate(&errors)));
    }
    let uid = static_pod_uid(node_name, file, &pod);
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_SOURCE_ANNOTATION.into(), FILE_SOURCE.into());
    annotations.insert(CONFIG_HASH_ANNOTATION.into(), uid.clone());
    pod.metadata.uid = Some(uid);
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node_name.into());
    }
    Ok(pod)
}

fn only_conditions(status: Option<PodStatus>) -> Option<PodStatus> {
    let conditions = status?.conditions?;
    Some(PodStatus { conditions: Some(conditions), ..Default::default() })
}

/// Upstream `utilerrors.Aggregate` formatting: one message as is, several as `[a, b]`.
fn aggregate(messages: &[String]) -> String {
    let mut seen = BTreeSet::new();
    let unique: Vec<&str> = messages.iter().filter(|m| seen.insert(m.as_str())).map(String::as_str).collect();
    match unique.as_slice() {
        [one] => (*one).to_owned(),
        many => format!("[{}]", many.join(", ")),
    }
}

// === folder ===

/// Every `*.yaml`, `*.yml`, `*.json` file directly in `dir` (hidden files skipped, symlinks
/// followed), in file-name order. Unreadable files, bad documents and a second pod with a
/// namespace/name already seen (in file-name order: nothing runs yet) are reported; everything
/// else is returned.
pub fn load_dir(dir: &Path, node_name: &str) -> (Vec<LoadedPod>, Vec<ManifestError>) {
    let mut loaded = load(dir, node_name, &FeatureGates::default());
    let (pods, duplicates) =
        snapshot::one_per_name(loaded.candidates, &Snapshot::default(), &loaded.unreadable_files);
    loaded.errors.extend(duplicates);
    (pods, loaded.errors)
}

/// What one read of the folder gave, with what could not be read told apart from what is wrong.
struct Loaded {
    /// Every pod the files give, in file-name order and each file's in document order, before
    /// one per namespace/name is chosen ([`one_per_name`](snapshot::one_per_name)).
    candidates: Vec<LoadedPod>,
    errors: Vec<ManifestError>,
    /// Listing the folder failed (other than "not found"): nothing here says which pods exist.
    folder_unreadable: Option<io::ErrorKind>,
    /// Files whose pods are kept although this scan took none from them, with why: they could
    /// not be read (the agent short of descriptors or memory, or held, [`UNREADABLE_FOR_NOW`]),
    /// or are held caught empty or half written. Their pods are unknown, not gone.
    unreadable_files: BTreeMap<PathBuf, io::ErrorKind>,
    /// The fields of the files read that a Pod does not have (not those of a held file).
    unknown_fields: Vec<UnknownFields>,
    /// The files read with a key written twice, whose last value is read.
    duplicate_keys: Vec<DuplicateKey>,
    /// The files this scan parsed afresh: read with contents other than their last parse's
    /// ([`ParseCache::parse`]), or read for the first time.
    changed_files: BTreeSet<PathBuf>,
}

/// What each manifest file last parsed to, kept with the contents it parsed, so that a rescan
/// parses only the files whose contents changed. A scan reads every file again (cheap); parsing
/// and validating them all every 2 s cost a third of a core with 1,000 manifests. The results
/// depend on the node name and the feature gates too: one cache serves one pod source.
#[derive(Debug, Default)]
pub struct ParseCache {
    files: HashMap<PathBuf, (String, Parsed)>,
    /// Running manifests caught empty or failing to load, whose pods are kept while the file
    /// is still being written ([`EMPTY_FOR_NOW`], [`FAILS_FOR_NOW`]), or that cannot be read,
    /// whose pods are kept for a while ([`UNREADABLE_FOR_NOW`]).
    held: HashMap<PathBuf, Held>,
    /// Running manifests that could not be read for [`HELD_SCANS_MAX`] scans: their pods
    /// stopped, and their parse is forgotten. Until read again they give no pods, and are not
    /// told as files whose pods are kept.
    given_up: HashSet<PathBuf>,
    /// The namespace/name of each pod the previous agent ran from a file this agent has not
    /// parsed yet ([`Snapshot::ran_before`]): a running manifest caught empty or half written
    /// as the agent starts is held as it would have been had the agent not restarted.
    given_before: HashMap<PathBuf, Vec<(String, String)>>,
}

/// A running manifest caught empty or failing to load, its pods kept.
#[derive(Debug)]
struct Held {
    /// The namespace/name of each pod the file gave before it was caught.
    names: Vec<(String, String)>,
    /// What the last scan read: the same contents at the next scan mean the writer is done.
    /// `None` while the file cannot be read.
    seen: Option<String>,
    /// The scans in a row that kept its pods.
    scans: usize,
}

/// The most scans in a row a running manifest that still changes keeps its pods while it reads
/// empty or does not load: 10 scans, 20 s, the kubelet's full read of the folder
/// (`--file-check-frequency`), which drops a file that does not load.
pub const HELD_SCANS_MAX: usize = 10;

/// Why a manifest that gave pods and now reads empty keeps them for one more scan, and for as
/// long as it changes between scans (up to [`HELD_SCANS_MAX`]): a file written in place
/// (truncated, then written) reads empty in between, and a scan that caught it stopped the pod,
/// started it again a scan later, and gave its name to a refused newcomer meanwhile (a hostile
/// test; docs/reliability.md).
pub const EMPTY_FOR_NOW: &str = "the file is empty (written in place?); keeping its pods until the next scan";

/// Why a manifest gives no pod: it is empty (for a second scan, or it never gave one), with no
/// document but empty or null ones (blank, only comments, `~`, `null`, `---` lines).
pub const EMPTY: &str = "the file is empty: no pod";

/// Why a manifest that gave pods and now fails to load, losing one of them, keeps them for one
/// more scan (followed by the first reason it fails): a file written in place can be caught
/// half written, and a half-written file does not parse, or parses short of a field. A scan
/// that reads the same contents again (the writer is done), or the [`HELD_SCANS_MAX`]th in a
/// row, reports what is wrong and stops the pods: a file written slowly (`dd` in small blocks)
/// changes at every scan, and stopping its pods at the second scan restarted them. docs/reliability.md, "A new manifest never
/// displaces a running pod".
pub const FAILS_FOR_NOW: &str =
    "the file does not load (written in place?); keeping its pods until the next scan";

/// Why a manifest that gave pods and now cannot be read keeps them (followed by the error),
/// for [`HELD_SCANS_MAX`] scans in a row at most: the kubelet drops such a file at its next
/// full read of the folder (20 s). A file chmodded away and back, or on a disk that failed for
/// a moment, keeps its pods untouched; one that stays unreadable stops them (`file
/// unreadable`), where they ran on for good before. A shortage of descriptors or memory is the
/// agent's, not the file's: such a file keeps its pods for as long as it lasts.
pub const UNREADABLE_FOR_NOW: &str = "the file cannot be read; keeping its pods for up to 10 scans (20 s)";

/// Whether `reason` says a manifest's pods are kept for this scan although it reads empty, does
/// not load or cannot be read ([`EMPTY_FOR_NOW`], [`FAILS_FOR_NOW`], [`UNREADABLE_FOR_NOW`]):
/// held, not one of the files whose pods are kept for as long as they cannot be read.
pub fn kept_for_now(reason: &str) -> bool {
    reason == EMPTY_FOR_NOW || reason.starts_with(FAILS_FOR_NOW) || reason.starts_with(UNREADABLE_FOR_NOW)
}

/// A pod with the number of its document in a file of several (1-based).
type NumberedPod = (Option<usize>, Pod);

impl ParseCache {
    /// `file`'s pods and errors for `contents`: the last parse's when the contents are the same.
    /// With whether `contents` were parsed afresh (they differ from the last parse's).
    fn parse(
        &mut self,
        file: &Path,
        contents: String,
        node_name: &str,
        gates: &FeatureGates,
    ) -> (Parsed, bool) {
        if let Some((parsed_from, parsed)) = self.files.get(file)
            && *parsed_from == contents
        {
            return (parsed.clone(), false);
        }
        let parsed = parse_documents(file, &contents, node_name, gates);
        self.files.insert(file.to_owned(), (contents, parsed.clone()));
        (parsed, true)
    }

    /// Forgets the files not in `listed`.
    fn keep_only(&mut self, listed: &HashSet<&Path>) {
        self.files.retain(|file, _| listed.contains(file.as_path()));
        self.held.retain(|file, _| listed.contains(file.as_path()));
        self.given_before.retain(|file, _| listed.contains(file.as_path()));
        self.given_up.retain(|file| listed.contains(file.as_path()));
    }

    /// The namespace/name of each pod `file` gave: before it was caught empty or failing, if its
    /// pods are held, else when it was last parsed.
    fn names_given(&self, file: &Path) -> Vec<(String, String)> {
        if let Some(held) = self.held.get(file) {
            return held.names.clone();
        }
        let Some((_, parsed)) = self.files.get(file) else {
            return self.given_before.get(file).cloned().unwrap_or_default();
        };
        parsed.pods.iter().map(|(_, pod)| pod_full_name(pod)).collect()
    }

    /// Takes what the previous agent ran from each file ([`RanBefore::files`]), for the files
    /// not parsed yet.
    pub(crate) fn remember_ran_before(&mut self, ran_before: &RanBefore) {
        for ((namespace, name), file) in &ran_before.files {
            let name = (namespace.clone(), name.clone());
            if !self.files.contains_key(file) {
                // Told again at each scan while the file cannot be read: once is enough.
                let names = self.given_before.entry(file.clone()).or_default();
                if !names.contains(&name) {
                    names.push(name);
                }
            }
        }
    }

    /// `file`, which gave the pods `given`, was just parsed ([`ParseCache::parse`]) from
    /// contents that lose one of them: whether its pods are kept for this scan. They are at the
    /// first scan that catches it, and at each next one that reads other contents (it is still
    /// being written), up to [`HELD_SCANS_MAX`].
    fn hold(&mut self, file: &Path, given: Vec<(String, String)>) -> bool {
        let contents = self.files.get(file).map(|(contents, _)| contents.as_str()).unwrap_or_default();
        hold_while_it_changes(&mut self.held, file, given, contents)
    }

    /// `file`, which gave the pods `given`, cannot be read (and not for a shortage of the
    /// agent's): whether its pods are kept for this scan. They are for [`HELD_SCANS_MAX`] scans
    /// in a row (counting those it was held caught half written); then the file is given up:
    /// what it gave and what ran from it before are forgotten, so that it is not held again
    /// until it is read.
    fn hold_unreadable(&mut self, file: &Path, given: Vec<(String, String)>) -> bool {
        let held =
            self.held.entry(file.to_owned()).or_insert_with(|| Held { names: given, seen: None, scans: 0 });
        if held.scans < HELD_SCANS_MAX {
            held.seen = None;
            held.scans += 1;
            return true;
        }
        self.held.remove(file);
        self.files.remove(file);
        self.given_before.remove(file);
        self.given_up.insert(file.to_owned());
        false
    }
}

/// `ParseCache::hold` of `file`, which this scan read as `seen`: its pods are kept at the
/// first scan that catches it, and at each next one that reads something else, up to
/// [`HELD_SCANS_MAX`]; the same twice in a row (the writer is done), the hold ends.
fn hold_while_it_changes(
    held: &mut HashMap<PathBuf, Held>,
    file: &Path,
    given: Vec<(String, String)>,
    seen: &str,
) -> bool {
    match held.get_mut(file) {
        None => {
            held.insert(file.to_owned(), Held { names: given, seen: Some(seen.to_owned()), scans: 1 });
            true
        }
        Some(kept) if kept.seen.as_deref() != Some(seen) && kept.scans < HELD_SCANS_MAX => {
            kept.seen = Some(seen.to_owned());
            kept.scans += 1;
            true
        }
        Some(_) => {
            held.remove(file);
            false
        }
    }
}

fn load(dir: &Path, node_name: &str, gates: &FeatureGates) -> Loaded {
    load_cached(dir, node_name, gates, &mut ParseCache::default())
}

fn load_cached(dir: &Path, node_name: &str, gates: &FeatureGates, cache: &mut ParseCache) -> Loaded {
    let mut loaded = Loaded {
        candidates: Vec::new(),
        errors: Vec::new(),
        folder_unreadable: None,
        unreadable_files: BTreeMap::new(),
        unknown_fields: Vec::new(),
        duplicate_keys: Vec::new(),
        changed_files: BTreeSet::new(),
    };
    let files = match manifest_files(dir, &mut loaded) {
        Ok(files) => files,
        Err(e) => {
            if e.kind() != io::ErrorKind::NotFound {
                loaded.folder_unreadable = Some(e.kind());
            }
            loaded.errors.push(ManifestError::new(dir, format!("cannot read directory: {e}")));
            return loaded;
        }
    };
    cache.keep_only(&files.iter().map(PathBuf::as_path).collect());
    for file in files {
        let contents = match read_manifest(&file) {
            Ok(contents) => contents,
            Err(ReadError::Io(e)) => {
                let (kind, gone, shortage) = (e.kind(), leads_nowhere(&e), crate::host::is_shortage(&e));
                let mut reason = ReadError::Io(e).to_string();
                let given = cache.names_given(&file);
                // Its pods are unknown, not gone: kept for as long as the agent is short of
                // descriptors or memory; else held a while, as the kubelet keeps them until
                // its next full read of the folder. A file that gave none is told as one that
                // cannot be read; one given up after its hold, as what is wrong with it.
                let kept = if gone || cache.given_up.contains(&file) {
                    false
                } else if shortage || given.is_empty() {
                    true
                } else if cache.hold_unreadable(&file, given) {
                    reason = format!("{UNREADABLE_FOR_NOW}: {reason}");
                    true
                } else {
                    false
                };
                if kept {
                    loaded.unreadable_files.insert(file.clone(), kind);
                }
                loaded.errors.push(ManifestError::new(&file, reason));
                continue;
            }
            // Read, but cut inside a character: a file written in place whose writer's last
            // block ended mid-character fails here before it could fail to parse. Held as a
            // half-written file is, the place of the cut standing for what this scan read
            // (the same place twice, the writer is done).
            Err(error @ ReadError::Utf8(_)) => {
                let reason = error.to_string();
                let given = cache.names_given(&file);
                cache.given_before.remove(&file);
                cache.given_up.remove(&file);
                // Its last parse is not what it holds now: a hold that ends must not find its
                // pods there again.
                cache.files.remove(&file);
                if !given.is_empty() && hold_while_it_changes(&mut cache.held, &file, given, &reason) {
                    loaded.unreadable_files.insert(file.clone(), io::ErrorKind::InvalidData);
                    loaded.errors.push(ManifestError::new(&file, format!("{FAILS_FOR_NOW}: {reason}")));
                } else {
                    loaded.errors.push(ManifestError::new(&file, reason));
                }
                continue;
            }
            Err(content) => {
                loaded.errors.push(ManifestError::new(&file, content.to_string()));
                continue;
            }
        };
        let given = cache.names_given(&file);
        cache.given_before.remove(&file);
        cache.given_up.remove(&file);
        let (Parsed { pods: parsed, errors: bad, unknown, empty, duplicate_keys }, changed) =
            cache.parse(&file, contents, node_name, gates);
        if changed {
            loaded.changed_files.insert(file.clone());
        }
        // A pod lost to an empty file or an error, where the file gave it: the file may be
        // caught half written. Its pods are kept for this scan as an unreadable file's are, and
        // for as long as the file changes from scan to scan (`ParseCache::hold`); then what it
        // reads is reported as what it is.
        let lost = (empty || !bad.is_empty())
            && given.iter().any(|name| !parsed.iter().any(|(_, pod)| pod_full_name(pod) == *name));
        if !lost {
            cache.held.remove(&file);
        } else if cache.hold(&file, given) {
            let (kind, reason) = match bad.first() {
                Some(first) if !empty => {
                    (io::ErrorKind::InvalidData, format!("{FAILS_FOR_NOW}: {}", first.reason))
                }
                _ => (io::ErrorKind::UnexpectedEof, EMPTY_FOR_NOW.to_owned()),
            };
            loaded.unreadable_files.insert(file.clone(), kind);
            loaded.errors.push(ManifestError::new(&file, reason));
            continue;
        }
        if empty {
            loaded.errors.push(ManifestError::new(&file, EMPTY));
        }
        loaded.errors.extend(bad);
        loaded.unknown_fields.extend(unknown);
        loaded.duplicate_keys.extend(duplicate_keys);
        loaded.candidates.extend(parsed.into_iter().map(|(document, pod)| LoadedPod {
            file: file.clone(),
            document,
            pod,
        }));
    }
    loaded
}

/// The manifest files of `dir`; `Err` when the folder cannot be listed completely (a partial
/// listing would look like removed files).
fn manifest_files(dir: &Path, loaded: &mut Loaded) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        // Editors leave hidden swap and backup files beside the manifests; the kubelet skips them.
        let hidden = entry.file_name().as_encoded_bytes().starts_with(b".");
        let wanted = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| MANIFEST_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)));
        if hidden || !wanted {
            continue;
        }
        match fs::metadata(&path) {
            Ok(meta) if meta.is_file() => files.push(path),
            // Named like a manifest, so meant as one: said, where the kubelet logs it too.
            Ok(meta) if meta.is_dir() => loaded.errors.push(ManifestError::new(&path, NOT_RECURSING)),
            Ok(_) => loaded.errors.push(ManifestError::new(&path, NOT_A_FILE)),
            Err(e) if leads_nowhere(&e) => {
                loaded.errors.push(ManifestError::new(&path, format!("{CANNOT_READ}: {e}")));
            }
            // Its pods are unknown: reading it says why, and keeps or holds them as for a file
            // that cannot be opened (`load_cached`).
            Err(_) => files.push(path),
        }
    }
    files.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    Ok(files)
}

/// Whether `file` leads to a file still, through its symlinks: a removed file does not, nor does
/// a dangling link (the target of a ConfigMap's projected `..data` link swapped away), a link
/// loop or a link through a file. A pod stopped for such a file says `file deleted`
/// ([`Removal::Deleted`]).
pub fn leads_to_a_file(file: &Path) -> bool {
    !matches!(fs::metadata(file), Err(e) if leads_nowhere(&e))
}

/// Whether `e`, opening a listed file, says its path leads to no file, as a removed file's
/// does: a dangling symlink (not found), a symlink loop, a symlink through a file
/// (`ENOTDIR`), a target path too long. Such a file's pods go, as the kubelet drops it. Any
/// other error (out of descriptors or memory, permission, I/O) leaves its pods unknown, not
/// gone: they are kept while the agent is short of descriptors or memory (docs/reliability.md,
/// "File-descriptor budget"), and held a while for any other error ([`UNREADABLE_FOR_NOW`]).
fn leads_nowhere(e: &io::Error) -> bool {
    use rustix::io::Errno;
    e.kind() == io::ErrorKind::NotFound
        || e.raw_os_error().is_some_and(|code| {
            [Errno::LOOP, Errno::NOTDIR, Errno::NAMETOOLONG].contains(&Errno::from_raw_os_error(code))
        })
}

/// Why a file gave no text to parse ([`read_regular_file`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The file could not be read: its pods are unknown.
    #[error("{CANNOT_READ}: {0}")]
    Io(#[source] io::Error),
    /// A FIFO, a device, a folder: what is there is not a manifest.
    #[error("{NOT_A_FILE}")]
    NotAFile,
    /// Over the cap the caller gave, in MiB.
    #[error("file larger than {} MiB", max_bytes >> 20)]
    TooLarge { max_bytes: u64 },
    #[error("invalid UTF-8: {0}")]
    Utf8(std::str::Utf8Error),
}

fn read_manifest(file: &Path) -> Result<String, ReadError> {
    read_regular_file(file, MAX_MANIFEST_BYTES)
}

/// The text of `file` if it is a regular file (symlinks followed) of at most `max_bytes`: the
/// agent's manifest folder and `probelet lint` both read through this, so that neither can be
/// held up by what a path names.
pub(crate) fn read_regular_file(file: &Path, max_bytes: u64) -> Result<String, ReadError> {
    // Listed as a regular file, but it may have been replaced since (a rename over it), or
    // named on a command line. Looked at before it is opened, as the kubelet's file source
    // stats a file before it reads it: opening a device or a FIFO is itself an act (a
    // watchdog starts its count, a FIFO's waiting writer is let through, a terminal can
    // become the controlling one of an agent that leads its session, as under systemd).
    if !fs::metadata(file).map_err(ReadError::Io)?.is_file() {
        return Err(ReadError::NotAFile);
    }
    // Swapped in the instant since: a FIFO would block a plain open, and with it the thread,
    // until a writer came, so it is opened without blocking and never as a controlling
    // terminal, and what was opened is what is checked, so a device such as /dev/zero is
    // refused before a byte of it is read.
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY).bits() as i32)
        .open(file)
        .map_err(ReadError::Io)?;
    if !opened.metadata().map_err(ReadError::Io)?.is_file() {
        return Err(ReadError::NotAFile);
    }
    let mut bytes = Vec::new();
    // Reading one byte past the cap tells a file at the cap from a larger one without reading
    // the rest of a huge file.
    opened.take(max_bytes + 1).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(ReadError::TooLarge { max_bytes });
    }
    String::from_utf8(bytes).map_err(|e| ReadError::Utf8(e.utf8_error()))
}

pub(crate) mod decode;
mod go_null;
pub(crate) mod sections;
mod snapshot;
mod unknown;
mod validate;

pub use snapshot::*;
pub use unknown::*;
pub use validate::*;

#[cfg(test)]
mod tests {
    use super::validate::{DNS1123_LABEL, DNS1123_SUBDOMAIN, dns1123_label, dns1123_subdomain, port_name};
    use super::*;

    /// What the previous agent ran from a file is told at every scan while the file cannot be
    /// read (carried in the snapshot): remembered once, not once a scan.
    #[test]
    fn what_ran_before_is_remembered_once() {
        let mut cache = ParseCache::default();
        let file = PathBuf::from("/m/b.yaml");
        let ran_before = RanBefore {
            files: [(("default".to_owned(), "web".to_owned()), file.clone())].into(),
            ..RanBefore::default()
        };
        for _ in 0..3 {
            cache.remember_ran_before(&ran_before);
        }
        assert_eq!(cache.names_given(&file), [("default".to_owned(), "web".to_owned())]);
        cache.keep_only(&HashSet::new());
        assert!(cache.given_before.is_empty(), "a file gone is forgotten");
    }

    /// A FIFO named `pod.yaml` in a fresh folder of the temp dir (`<prefix>-<pid>`), and the
    /// folder.
    fn fifo_named_pod_yaml(prefix: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("a temp dir");
        let fifo = dir.join("pod.yaml");
        let _ = fs::remove_file(&fifo);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .expect("a FIFO");
        (dir, fifo)
    }

    /// A manifest swapped for a FIFO after the listing is refused at once: a plain open
    /// waited for a writer, and held up the agent's thread with it.
    #[test]
    fn a_fifo_in_place_of_a_manifest_does_not_block() {
        let (dir, fifo) = fifo_named_pod_yaml("probelet-fifo");
        let (done, read) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let _ = done.send(read_manifest(&path).map_err(|e| e.to_string()));
        });
        let got = read.recv_timeout(std::time::Duration::from_secs(10));
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(got, Ok(Err(NOT_A_FILE.to_owned())));
    }

    /// A FIFO is refused without being opened: a writer waiting for a reader on it stays
    /// waiting (an open for reading, even one closed at once, let it through to write into a
    /// pipe nobody reads).
    #[test]
    fn a_fifo_is_refused_without_being_opened() {
        let (dir, fifo) = fifo_named_pod_yaml("probelet-fifo-open");
        let (opened, writer) = std::sync::mpsc::channel();
        let (task_sender, task) = std::sync::mpsc::channel();
        let path = fifo.clone();
        // Blocks in open(2) until a reader opens the FIFO.
        std::thread::spawn(move || {
            let _ = task_sender.send(fs::read_link("/proc/thread-self"));
            let _ = opened.send(fs::OpenOptions::new().write(true).open(&path).is_ok());
        });
        let task = task.recv().expect("the writer's thread").expect("its /proc entry");
        let wchan = Path::new("/proc").join(task).join("wchan");
        let waiting = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            fs::read_to_string(&wchan).is_ok_and(|w| w.contains("wait_for_partner"))
        });
        assert!(waiting, "the writer waits in open(2) for a reader");
        assert_eq!(read_manifest(&fifo).map_err(|e| e.to_string()), Err(NOT_A_FILE.to_owned()));
        let let_through = writer.recv_timeout(std::time::Duration::from_millis(300));
        // Lets the writer go, so that its thread ends.
        let reader = fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(&fifo);
        let _ = writer.recv_timeout(std::time::Duration::from_secs(10));
        drop(reader);
        let _ = fs::remove_dir_all(&dir);
        assert!(let_through.is_err(), "the FIFO's writer was let through: the agent opened it");
    }

    /// The YAML reader's limits are said in words, for the agent and for `probelet lint` (the
    /// same function words both): they were the library's debug form, `budget breached: Depth
    /// { depth: 65 }`.
    #[test]
    fn yaml_limits_are_said_in_words() {
        let deep: String = (0..70).map(|level| format!("{}a:\n", "  ".repeat(level))).collect();
        let nodes = format!("[{}]\n", vec!["0"; 250_001].join(","));
        let documents = "---\na: 1\n".repeat(1_025);
        let cases = [
            (deep, "invalid YAML: nested deeper than 64 levels at line "),
            (nodes, "invalid YAML: more than 250000 nodes (scalars, sequences and mappings) at line "),
            (documents, "invalid YAML: more than 1024 documents at line "),
        ];
        for (yaml, want) in cases {
            let (_, errors) = parse_manifest(Path::new("p.yaml"), &yaml, "node");
            let agent: Vec<&str> = errors.iter().map(|e| e.reason.as_str()).collect();
            assert!(agent.len() == 1 && agent[0].starts_with(want), "{agent:?} / {want}");
            let lint = crate::lint::load::documents(&yaml).map(|_| ());
            assert!(lint.as_ref().is_err_and(|e| e.starts_with(want)), "{lint:?} / {want}");
        }
    }

    #[test]
    fn go_quote_matches_strconv_quote() {
        let cases = [
            ("plain", "abc", r#""abc""#),
            ("quote and backslash", r#"a"b\c"#, r#""a\"b\\c""#),
            ("escapes", "\n\t\r\u{7}\u{8}\u{c}\u{b}", r#""\n\t\r\a\b\f\v""#),
            ("control", "\u{1}\u{7f}", r#""\x01\x7f""#),
            ("c1 control", "\u{85}", r#""\u0085""#),
            ("unicode kept", "héllo ✓", "\"héllo ✓\""),
            ("empty", "", r#""""#),
        ];
        for (name, input, want) in cases {
            assert_eq!(go_quote(input), want, "case {name}");
        }
    }

    #[test]
    fn dns_names() {
        let long_label = "a".repeat(64);
        let cases: Vec<(&str, &str, Vec<&str>)> = vec![
            ("label ok", "web-1", vec![]),
            ("digits first", "1abc", vec![]),
            ("upper", "Web", vec![DNS1123_LABEL]),
            ("dots", "a.b", vec!["must not contain dots"]),
            ("trailing hyphen", "web-", vec![DNS1123_LABEL]),
            ("too long", &long_label, vec!["must be no more than 63 characters"]),
        ];
        for (name, value, want) in cases {
            assert_eq!(dns1123_label(value), want, "case {name}");
        }
        assert!(dns1123_subdomain("a.b-c.d").is_empty());
        assert_eq!(dns1123_subdomain("a..b"), vec![DNS1123_SUBDOMAIN]);
        assert_eq!(dns1123_subdomain("_x"), vec![DNS1123_SUBDOMAIN]);
    }

    #[test]
    fn port_names() {
        let cases: Vec<(&str, Vec<&str>)> = vec![
            ("http", vec![]),
            ("http-2", vec![]),
            ("8080", vec!["must contain at least one letter (a-z)"]),
            ("a--b", vec!["must not contain consecutive hyphens"]),
            ("-a", vec!["must not begin or end with a hyphen"]),
            (
                "HTTP",
                vec![
                    "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
                    "must contain at least one letter (a-z)",
                ],
            ),
            ("abcdefghijklmnop", vec!["must be no more than 15 characters"]),
        ];
        for (value, want) in cases {
            assert_eq!(port_name(value), want, "case {value}");
        }
    }

    #[test]
    fn aggregate_formats_like_go() {
        assert_eq!(aggregate(&["a".into()]), "a");
        assert_eq!(aggregate(&["a".into(), "b".into(), "a".into()]), "[a, b]");
    }

    #[test]
    fn uid_is_uuid_shaped() {
        let uid = static_pod_uid("node", Path::new("/m/a.yaml"), &Pod::default());
        let parts: Vec<usize> = uid.split('-').map(str::len).collect();
        assert_eq!(parts, vec![8, 4, 4, 4, 12], "{uid}");
        assert_eq!(&uid[14..15], "8", "version nibble in {uid}");
        assert!(matches!(&uid[19..20], "8" | "9" | "a" | "b"), "variant in {uid}");
    }
}
