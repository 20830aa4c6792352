//! Go's formatting, where users see text the kubelet prints with Go verbs: `%q` of a string.

use std::fmt::Write as _;
use std::io;

/// An OS error as Go's `syscall.Errno` prints it: `resource temporarily unavailable`, where
/// Rust prints `Resource temporarily unavailable (os error 11)`. Go's table is the C library's
/// text with a lower-case first letter. An error without an OS code is printed as it is.
pub fn go_errno_text(error: &io::Error) -> String {
    let Some(code) = error.raw_os_error() else { return error.to_string() };
    let text = error.to_string();
    let text = text.strip_suffix(&format!(" (os error {code})")).unwrap_or(&text);
    let mut chars = text.chars();
    chars.next().map(|first| first.to_lowercase().chain(chars).collect()).unwrap_or_default()
}

/// Go's `strconv.Quote` (`%q` of a string): a double-quoted literal with Go escapes.
///
/// Printability outside Latin-1 follows Go's rule (letters, marks, numbers, punctuation,
/// symbols and the ASCII space) as far as std can tell: whitespace, format and private-use
/// characters are escaped; unassigned code points are kept.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{07}' => out.push_str("\\a"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0C}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{0B}' => out.push_str("\\v"),
            c if go_is_print(c) => out.push(c),
            c if c < ' ' || c == '\u{7F}' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if u32::from(c) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\U{:08x}", u32::from(c));
            }
        }
    }
    out.push('"');
    out
}

/// Go's `strconv.IsPrint`, exact for Latin-1 and approximated beyond (see [`go_quote`]).
pub fn go_is_print(c: char) -> bool {
    let code = u32::from(c);
    if code <= 0xFF {
        return (0x20..=0x7E).contains(&code) || (0xA1..=0xFF).contains(&code) && code != 0xAD;
    }
    let format = matches!(
        code,
        0x0600..=0x0605
            | 0x061C
            | 0x06DD
            | 0x070F
            | 0x0890..=0x0891
            | 0x08E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    );
    let private_or_nonchar =
        matches!(code, 0xE000..=0xF8FF | 0xF0000.. | 0xFDD0..=0xFDEF) || code & 0xFFFE == 0xFFFE;
    !(c.is_whitespace() || c.is_control() || format || private_or_nonchar)
}
