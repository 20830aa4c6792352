//! The number a person reading a multi-document YAML file gives each document: its place among
//! the file's `---` sections, empty ones included. The YAML decoder passes over empty documents
//! (`---` followed by nothing, or by comments only), so its own count would call the third
//! section "document 2" when the second is empty; errors name documents by these numbers instead.
//!
//! Written by hand because no decoder we use reports where each document starts. It looks at
//! lines only, as YAML's document markers are lines: `---` or `...` at column 0, alone or
//! followed by a space (a marker may not appear inside a scalar either). The numbers are used
//! only when the count of non-empty sections it finds equals the decoder's count of documents;
//! otherwise the decoder's own count stands.

/// The section number (1-based) of each non-empty document of `contents`, in order.
///
/// A `---` opens a new section, except the file's first when nothing but comments or directives
/// came before it; a `...` ends the section it closes, and what follows belongs to the next.
/// A section is non-empty when it holds a line that is not blank, not a comment and not a
/// directive (`%YAML`), or text after its `---` on the same line.
pub fn document_sections(contents: &str) -> Vec<usize> {
    let mut found = Vec::new();
    let mut section = 1;
    // Whether the current section was opened by a `---` (an empty one is a document of its own).
    let mut opened = false;
    let mut has_content = false;
    for line in contents.lines() {
        if let Some(rest) = marker(line, "---") {
            if has_content || opened {
                section += 1;
            }
            (opened, has_content) = (true, false);
            if is_content(rest) {
                has_content = true;
                found.push(section);
            }
        } else if marker(line, "...").is_some() {
            if has_content || opened {
                section += 1;
            }
            (opened, has_content) = (false, false);
        } else if !line.starts_with('%') && is_content(line) && !has_content {
            has_content = true;
            found.push(section);
        }
    }
    found
}

/// What follows `marker` on `line` when the line is that document marker.
fn marker<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(marker)?;
    (rest.is_empty() || rest.starts_with([' ', '\t', '\r'])).then_some(rest)
}

fn is_content(text: &str) -> bool {
    let text = text.trim();
    !text.is_empty() && !text.starts_with('#')
}

/// The number to print for the decoder's `index`-th document (0-based): its section where
/// `sections` lines up with the decoder's `total` documents, else `index + 1`.
pub fn document_number(sections: &[usize], total: usize, index: usize) -> usize {
    if sections.len() == total { sections.get(index).copied().unwrap_or(index + 1) } else { index + 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_sections_keep_their_numbers() {
        assert_eq!(document_sections("a: 1\n---\n# nothing\n---\nb: 2\n"), [1, 3]);
        assert_eq!(document_sections("a: 1\n---\n---\nb: 2\n"), [1, 3]);
        assert_eq!(document_sections("---\na: 1\n---\nb: 2\n"), [1, 2], "a leading --- opens the first");
        assert_eq!(document_sections("# header\n%YAML 1.2\n---\na: 1\n"), [1]);
        assert_eq!(document_sections("---\n---\na: 1\n"), [2]);
    }

    #[test]
    fn markers_only_at_column_zero_and_alone() {
        assert_eq!(document_sections("a: |\n  ---\n  text\n---x: 1\n"), [1], "indented or glued: no marker");
        assert_eq!(
            document_sections("--- {a: 1}\n--- ~\n---\t# c\n"),
            [1, 2],
            "content on the marker's line"
        );
        assert_eq!(document_sections("a: 1\n...\nb: 2\n"), [1, 2], "a document after `...`");
        assert_eq!(document_sections("a: 1\n...\n---\nb: 2\n"), [1, 2], "`...` then `---` is one boundary");
        assert_eq!(document_sections("a: 1\r\n---\r\nb: 2\r\n"), [1, 2]);
    }

    #[test]
    fn a_mismatch_falls_back_to_the_decoders_count() {
        assert_eq!(document_number(&[1, 3], 2, 1), 3);
        assert_eq!(document_number(&[1, 3], 3, 1), 2);
    }
}
