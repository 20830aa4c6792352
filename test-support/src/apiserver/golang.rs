//! Text the way Go's standard library writes it, so the fake API server's error messages match
//! kube-apiserver byte for byte: `encoding/json` syntax errors, `fmt` `%v` of a decoded JSON value,
//! `strconv.Quote`, and the RFC 3339 forms of `metav1.Time` and `metav1.MicroTime`.

// A stand-in for the API server: its timestamps are the real wall clock, as a real server's.
#![allow(clippy::disallowed_methods)]

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

// === JSON syntax errors (encoding/json scanner) ===

/// The error `json.Unmarshal` gives for bytes that are not valid JSON, or `None` when they are.
pub fn json_syntax_error(input: &[u8]) -> Option<String> {
    let mut s = Scanner { b: input, i: 0 };
    s.ws();
    if s.i >= s.b.len() {
        return Some("unexpected end of JSON input".into());
    }
    if let Err(e) = s.value() {
        return Some(e);
    }
    s.ws();
    if s.i < s.b.len() {
        return Some(format!("invalid character {} after top-level value", quote_char(s.b[s.i])));
    }
    None
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Result<u8, String> {
        self.b.get(self.i).copied().ok_or_else(|| "unexpected end of JSON input".to_string())
    }

    fn value(&mut self) -> Result<(), String> {
        let c = self.peek()?;
        match c {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => self.string(),
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => Err(format!("invalid character {} looking for beginning of value", quote_char(c))),
        }
    }

    fn object(&mut self) -> Result<(), String> {
        self.i += 1;
        self.ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Ok(());
        }
        loop {
            let c = self.peek()?;
            if c != b'"' {
                return Err(format!(
                    "invalid character {} looking for beginning of object key string",
                    quote_char(c)
                ));
            }
            self.string()?;
            self.ws();
            let c = self.peek()?;
            if c != b':' {
                return Err(format!("invalid character {} after object key", quote_char(c)));
            }
            self.i += 1;
            self.ws();
            self.value()?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b'}' => {
                    self.i += 1;
                    return Ok(());
                }
                c => {
                    return Err(format!("invalid character {} after object key:value pair", quote_char(c)));
                }
            }
        }
    }

    fn array(&mut self) -> Result<(), String> {
        self.i += 1;
        self.ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.value()?;
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b']' => {
                    self.i += 1;
                    return Ok(());
                }
                c => return Err(format!("invalid character {} after array element", quote_char(c))),
            }
        }
    }

    fn string(&mut self) -> Result<(), String> {
        self.i += 1;
        loop {
            let c = self.peek()?;
            self.i += 1;
            match c {
                b'"' => return Ok(()),
                b'\\' => {
                    let e = self.peek()?;
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                        b'u' => {
                            for _ in 0..4 {
                                let h = self.peek()?;
                                if !h.is_ascii_hexdigit() {
                                    return Err(format!(
                                        "invalid character {} in \\u hexadecimal character escape",
                                        quote_char(h)
                                    ));
                                }
                                self.i += 1;
                            }
                        }
                        _ => {
                            return Err(format!("invalid character {} in string escape code", quote_char(e)));
                        }
                    }
                }
                c if c < 0x20 => {
                    return Err(format!("invalid character {} in string literal", quote_char(c)));
                }
                _ => {}
            }
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.i < self.b.len() && self.b[self.i].is_ascii_digit() {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<(), String> {
        if self.b[self.i] == b'-' {
            self.i += 1;
            let c = self.peek()?;
            if !c.is_ascii_digit() {
                return Err(format!("invalid character {} in numeric literal", quote_char(c)));
            }
        }
        if self.b[self.i] == b'0' {
            self.i += 1;
        } else {
            self.digits();
        }
        if self.i < self.b.len() && self.b[self.i] == b'.' {
            self.i += 1;
            let c = self.peek()?;
            if !c.is_ascii_digit() {
                return Err(format!(
                    "invalid character {} after decimal point in numeric literal",
                    quote_char(c)
                ));
            }
            self.digits();
        }
        if self.i < self.b.len() && matches!(self.b[self.i], b'e' | b'E') {
            self.i += 1;
            let mut c = self.peek()?;
            if c == b'+' || c == b'-' {
                self.i += 1;
                c = self.peek()?;
            }
            if !c.is_ascii_digit() {
                return Err(format!("invalid character {} in exponent of numeric literal", quote_char(c)));
            }
            self.digits();
        }
        Ok(())
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), String> {
        let name = std::str::from_utf8(word).unwrap_or("");
        self.i += 1;
        for &expected in &word[1..] {
            let c = self.peek()?;
            if c != expected {
                return Err(format!(
                    "invalid character {} in literal {name} (expecting {})",
                    quote_char(c),
                    quote_char(expected)
                ));
            }
            self.i += 1;
        }
        Ok(())
    }
}

/// `encoding/json`'s quoteChar: `'x'`, with `'\''` and `'"'` special-cased.
fn quote_char(c: u8) -> String {
    match c {
        b'\'' => r"'\''".into(),
        b'"' => "'\"'".into(),
        _ => {
            let q = quote(&(c as char).to_string());
            format!("'{}'", &q[1..q.len() - 1])
        }
    }
}

// === strconv.Quote and fmt %v ===

/// `strconv.Quote`: a double-quoted Go string literal.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `fmt.Sprintf("%v", v)` of a value decoded by `json.Unmarshal` into `interface{}` with integers
/// preserved as `int64` (what kube-apiserver does with a patch body).
pub fn fmt_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.to_string()
            } else if let Some(u) = n.as_u64() {
                // Go decodes integers beyond int64 as float64.
                format_float_g(u as f64)
            } else {
                format_float_g(n.as_f64().unwrap_or(0.0))
            }
        }
        Value::String(s) => s.clone(),
        Value::Array(a) => format!("[{}]", a.iter().map(fmt_v).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            // Go's fmt prints map keys sorted; serde_json's map is already sorted.
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{}", fmt_v(v))).collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// `fmt`'s `%v` of a float64: shortest digits, exponent form when the decimal exponent is below -4
/// or at least 6 (Go's rule for the shortest `%g`).
pub(crate) fn format_float_g(f: f64) -> String {
    if f == 0.0 {
        return "0".into();
    }
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    // Rust's `{:e}` gives the shortest round-trip digits as d.ddde±x.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        // Plain decimal with the shortest digits.
        let s = format!("{f}");
        s.trim_end_matches(".0").to_string()
    }
}

// === Time ===

/// A wall-clock instant, whole seconds since the Unix epoch plus nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Instant {
    pub secs: i64,
    pub nanos: u32,
}

impl Instant {
    pub fn now() -> Instant {
        let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Instant { secs: d.as_secs() as i64, nanos: d.subsec_nanos() }
    }

    pub(crate) fn plus_secs(self, secs: i64) -> Instant {
        Instant { secs: self.secs + secs, nanos: self.nanos }
    }

    /// `metav1.Time`'s JSON form: RFC 3339 in UTC, whole seconds.
    pub fn rfc3339(self) -> String {
        let (y, mo, d, h, mi, s) = civil(self.secs);
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    }

    /// `metav1.MicroTime`'s JSON form: RFC 3339 in UTC with six fractional digits.
    pub fn rfc3339_micro(self) -> String {
        let (y, mo, d, h, mi, s) = civil(self.secs);
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:06}Z", self.nanos / 1000)
    }
}

/// Parses an RFC 3339 timestamp as Go's `time.Parse(time.RFC3339, s)` does (fractional seconds
/// accepted, `Z` or a numeric offset). The error text follows Go's for a wrong layout.
pub fn parse_rfc3339(s: &str) -> Result<Instant, String> {
    let err = || {
        format!(
            "parsing time {} as \"2006-01-02T15:04:05Z07:00\": cannot parse {} as \"2006\"",
            quote(s),
            quote(s)
        )
    };
    let b = s.as_bytes();
    if b.len() < 20 {
        return Err(err());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let part = s.get(r).ok_or_else(err)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse::<i64>().map_err(|_| err())
        } else {
            Err(err())
        }
    };
    if b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return Err(err());
    }
    let (y, mo, d, h, mi, sec) =
        (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 59 {
        return Err(format!("parsing time {}: month, day or clock out of range", quote(s)));
    }
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b[i] == b'.' || b[i] == b',' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(err());
        }
        let frac = &s[start..i.min(start + 9)];
        nanos = format!("{frac:0<9}").parse().map_err(|_| err())?;
    }
    let offset_secs = match b.get(i) {
        Some(b'Z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            let off = oh * 3600 + om * 60;
            if sign == b'-' { -off } else { off }
        }
        _ => return Err(err()),
    };
    let days = days_from_civil(y, mo, d);
    Ok(Instant { secs: days * 86_400 + h * 3600 + mi * 60 + sec - offset_secs, nanos })
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day, hour, minute, second) in UTC of seconds since the epoch.
fn civil(secs: i64) -> (i64, i64, i64, i64, i64, i64) {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, (rem % 3600) / 60, rem % 60)
}
