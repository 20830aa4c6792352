//! `--pod-selector` read as the API server reads a `labelSelector`: apimachinery's
//! `labels.Parse`, its lexer, its parser and `NewRequirement`'s checks, with its error texts
//! (docs/sync.md §7.8, "The pod selector").
//!
//! By hand because no crate the agent has parses the string form: kube-core 5's `Selector`
//! builds selectors and prints them, and kube sends the flag's text as it is. The API server
//! answers a selector it cannot parse with 400 to every list and watch, which the pod watch
//! retries for as long as the agent runs, seeing no pod and saying only that the list failed; a
//! typo is found here, at start, and is a usage error instead.
//!
//! The port keeps upstream's quirks, since whatever parses here must parse there and nothing
//! else: `in` and `notin` are values inside a value list, values are a set (sorted, each once),
//! `>` and `<` take a value that must be a 64-bit integer and a label value (so never a negative
//! one). The lexer reads bytes as upstream's does (a 0 byte reads as the end of the text where
//! upstream's would; a command line cannot hold one).

use std::collections::BTreeSet;
use std::fmt;

use probelet_actors::gofmt::go_quote;

use crate::host::manifests::{label_value, qualified_name};

/// A parsed, valid label selector, with the text it was read from (what the API server is sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector {
    text: String,
    requirements: Vec<Requirement>,
}

/// One requirement of a selector: `key`, `!key`, `key=value`, `key in (a,b)`, `key>1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    /// Sorted, each once (upstream's `sets.String`); empty for `Exists` and `DoesNotExist`.
    pub values: Vec<String>,
}

/// Upstream's `selection.Operator`s a selector's text can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    Exists,
    DoesNotExist,
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    GreaterThan,
    LessThan,
}

/// Why a selector cannot be parsed, in `labels.Parse`'s words (what the API server's 400 says
/// after `Unable to find "/v1, Resource=pods" that match label selector …: `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

impl LabelSelector {
    /// Parses `text` as `labels.Parse` does.
    pub fn parse(text: &str) -> Result<LabelSelector, ParseError> {
        let mut parser = Parser { items: scan(text), position: 0 };
        let mut requirements = parser.parse().map_err(ParseError)?;
        // Upstream sorts by key (not stably; only the printed form depends on it).
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { text: text.to_owned(), requirements })
    }

    /// The text as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// No requirement (`""`, blanks): every pod.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// What the pod watch asks the API server for: the text as given, or nothing when the
    /// selector selects every pod.
    pub fn query(&self) -> Option<&str> {
        (!self.is_empty()).then_some(self.text.as_str())
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

/// The canonical form, as upstream's `String()`: requirements by key, joined by `,`, blanks
/// gone.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let operator = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in (",
            Operator::NotIn => " notin (",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        };
        f.write_str(operator)?;
        f.write_str(&self.values.join(","))?;
        if matches!(self.operator, Operator::In | Operator::NotIn) {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// The binary operators, as `found 'x', expected: …` lists them (upstream's
/// `selection.Operator` strings: `gt` and `lt`, not the symbols).
const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

/// Upstream's `string2token`: the literals that are tokens of their own.
fn literal_token(literal: &[u8]) -> Option<Token> {
    Some(match literal {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(byte: u8) -> bool {
    matches!(byte, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Upstream's `Lexer`, byte by byte: a read past the end (or of a NUL byte) gives 0.
struct Lexer<'a> {
    text: &'a [u8],
    position: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.text.get(self.position) {
            Some(&byte) => {
                self.position += 1;
                byte
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.position = self.position.saturating_sub(1);
    }

    fn lex(&mut self) -> (Token, String) {
        let mut byte = self.read();
        while is_whitespace(byte) {
            byte = self.read();
        }
        match byte {
            0 => (Token::EndOfString, String::new()),
            byte if is_special_symbol(byte) => {
                self.unread();
                self.scan_special_symbol()
            }
            _ => {
                self.unread();
                self.scan_id_or_keyword()
            }
        }
    }

    fn scan_id_or_keyword(&mut self) -> (Token, String) {
        let mut buffer = Vec::new();
        loop {
            match self.read() {
                0 => break,
                byte if is_special_symbol(byte) || is_whitespace(byte) => {
                    self.unread();
                    break;
                }
                byte => buffer.push(byte),
            }
        }
        let token = literal_token(&buffer).unwrap_or(Token::Identifier);
        (token, String::from_utf8_lossy(&buffer).into_owned())
    }

    /// The longest run of special symbols that is a token (`!=`, `==`), as upstream scans it.
    fn scan_special_symbol(&mut self) -> (Token, String) {
        let mut last: Option<(Token, String)> = None;
        let mut buffer = Vec::new();
        loop {
            match self.read() {
                0 => break,
                byte if is_special_symbol(byte) => {
                    buffer.push(byte);
                    if let Some(token) = literal_token(&buffer) {
                        last = Some((token, String::from_utf8_lossy(&buffer).into_owned()));
                    } else if last.is_some() {
                        self.unread();
                        break;
                    }
                }
                _ => {
                    self.unread();
                    break;
                }
            }
        }
        last.unwrap_or_else(|| {
            (Token::Error, format!("error expected: keyword found '{}'", String::from_utf8_lossy(&buffer)))
        })
    }
}

/// Every token up to and with the end of the text, as upstream's `Parser.scan`.
fn scan(text: &str) -> Vec<(Token, String)> {
    let mut lexer = Lexer { text: text.as_bytes(), position: 0 };
    let mut items = Vec::new();
    loop {
        let (token, literal) = lexer.lex();
        let end = token == Token::EndOfString;
        items.push((token, literal));
        if end {
            return items;
        }
    }
}

/// Where the parser is: `in` and `notin` are values inside a value list (`a in (in)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn lookahead(&self, context: Context) -> (Token, String) {
        let (token, literal) =
            self.items.get(self.position).cloned().unwrap_or((Token::EndOfString, String::new()));
        match token {
            Token::In | Token::NotIn if context == Context::Values => (Token::Identifier, literal),
            _ => (token, literal),
        }
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        let item = self.lookahead(context);
        self.position += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (token, literal) = self.lookahead(Context::Values);
            match token {
                Token::Identifier | Token::DoesNotExist => {
                    let requirement =
                        self.parse_requirement().map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(requirement);
                    let (token, literal) = self.consume(Context::Values);
                    match token {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (next, literal) = self.lookahead(Context::Values);
                            if next != Token::Identifier && next != Token::DoesNotExist {
                                return Err(format!("found '{literal}', expected: identifier after ','"));
                            }
                        }
                        _ => return Err(format!("found '{literal}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => return Err(format!("found '{literal}', expected: !, identifier, or 'end of string'")),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, inferred) = self.parse_key_and_infer_operator()?;
        if let Some(operator) = inferred {
            return new_requirement(key, operator, BTreeSet::new());
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        new_requirement(key, operator, values)
    }

    /// The key, and `Exists` or `DoesNotExist` where no operator follows it (or `!` came
    /// first, whatever follows).
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut operator = None;
        let (mut token, mut literal) = self.consume(Context::Values);
        if token == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (token, literal) = self.consume(Context::Values);
        }
        if token != Token::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        let msgs = qualified_name(&literal);
        if !msgs.is_empty() {
            // Upstream's field error with no path: `<nil>` is what it prints for one.
            return Err(format!("<nil>: Invalid value: {}: {}", go_quote(&literal), msgs.join("; ")));
        }
        let (next, _) = self.lookahead(Context::Values);
        if matches!(next, Token::EndOfString | Token::Comma) && operator.is_none() {
            operator = Some(Operator::Exists);
        }
        Ok((literal, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (token, literal) = self.consume(Context::KeyAndOperator);
        Ok(match token {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{literal}', expected: {BINARY_OPERATORS}")),
        })
    }

    /// `(a,b,c)`; `()` is the one empty value.
    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let (token, literal) = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(format!("found '{literal}' expected: '('"));
        }
        let (token, literal) = self.lookahead(Context::Values);
        match token {
            Token::Identifier | Token::Comma => {
                let values = self.parse_identifiers_list()?;
                // Upstream names the list's first literal here, not the one found.
                if self.consume(Context::Values).0 != Token::ClosedPar {
                    return Err(format!("found '{literal}', expected: ')'"));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{literal}', expected: ',', ')' or identifier")),
        }
    }

    /// Values separated by commas, any of them empty (`(,a)`, `(a,)`, `(a,,b)`).
    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut values = BTreeSet::new();
        loop {
            let (token, literal) = self.consume(Context::Values);
            match token {
                Token::Identifier => {
                    values.insert(literal);
                    let (next, literal) = self.lookahead(Context::Values);
                    match next {
                        Token::Comma => {}
                        Token::ClosedPar => return Ok(values),
                        _ => return Err(format!("found '{literal}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.insert(String::new());
                    }
                    match self.lookahead(Context::Values).0 {
                        Token::ClosedPar => {
                            values.insert(String::new());
                            return Ok(values);
                        }
                        // Upstream consumes the second comma here, so a `)` right after it is
                        // refused: `(a,,)` and `(,,)` are errors, `(a,,b)` is not.
                        Token::Comma => {
                            self.consume(Context::Values);
                            values.insert(String::new());
                        }
                        _ => {}
                    }
                }
                _ => return Err(format!("found '{literal}', expected: ',', or identifier")),
            }
        }
    }

    /// The one value after `=`, `==`, `!=`, `>` or `<`; none is the empty value.
    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        if matches!(self.lookahead(Context::Values).0, Token::EndOfString | Token::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (token, literal) = self.consume(Context::Values);
        if token == Token::Identifier {
            return Ok(BTreeSet::from([literal]));
        }
        Err(format!("found '{literal}', expected: identifier"))
    }
}

/// Upstream's `NewRequirement` checks of a parsed requirement (the key was checked when read):
/// every problem, each once, one alone as it is and several as `[a, b]` (an `Aggregate`).
fn new_requirement(key: String, operator: Operator, values: BTreeSet<String>) -> Result<Requirement, String> {
    let values: Vec<String> = values.into_iter().collect();
    let mut errors: Vec<String> = Vec::new();
    match operator {
        Operator::In | Operator::NotIn if values.is_empty() => errors.push(
            "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty"
                .into(),
        ),
        Operator::GreaterThan | Operator::LessThan => {
            for (i, value) in values.iter().enumerate() {
                if value.parse::<i64>().is_err() {
                    errors.push(format!(
                        "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                        go_quote(value)
                    ));
                }
            }
        }
        _ => {}
    }
    for (i, value) in values.iter().enumerate() {
        let msgs = label_value(value);
        if !msgs.is_empty() {
            errors.push(format!(
                "values[{i}][{key}]: Invalid value: {}: {}",
                go_quote(value),
                msgs.join("; ")
            ));
        }
    }
    let mut seen = BTreeSet::new();
    errors.retain(|error| seen.insert(error.clone()));
    match errors.as_slice() {
        [] => Ok(Requirement { key, operator, values }),
        [one] => Err(one.clone()),
        several => Err(format!("[{}]", several.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Vec<Token> {
        scan(text).into_iter().map(|(token, _)| token).collect()
    }

    fn error(text: &str) -> String {
        LabelSelector::parse(text).expect_err(text).to_string()
    }

    fn requirement(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement { key: key.into(), operator, values: values.iter().map(|v| (*v).to_owned()).collect() }
    }

    /// Upstream's TestLexer: each text alone is one token, whose literal is the text.
    #[test]
    fn lexer() {
        use Token::*;
        let cases = [
            ("", EndOfString),
            (",", Comma),
            ("notin", NotIn),
            ("in", In),
            ("=", Equals),
            ("==", DoubleEquals),
            (">", GreaterThan),
            ("<", LessThan),
            ("!", DoesNotExist),
            ("!=", NotEquals),
            ("(", OpenPar),
            (")", ClosedPar),
            ("~", Identifier),
            ("||", Identifier),
        ];
        for (text, token) in cases {
            let mut lexer = Lexer { text: text.as_bytes(), position: 0 };
            assert_eq!(lexer.lex(), (token, text.to_owned()), "{text:?}");
        }
    }

    /// Upstream's TestLexerSequence and TestParserLookahead: what `scan` keeps, the end of the
    /// text last, and lookahead and consume agree.
    #[test]
    fn lexer_sequence_and_parser_lookahead() {
        use Token::*;
        let cases: [(&str, &[Token]); 11] = [
            ("key in ( value )", &[Identifier, In, OpenPar, Identifier, ClosedPar]),
            ("key notin ( value )", &[Identifier, NotIn, OpenPar, Identifier, ClosedPar]),
            (
                "key in ( value1, value2 )",
                &[Identifier, In, OpenPar, Identifier, Comma, Identifier, ClosedPar],
            ),
            ("key", &[Identifier]),
            ("!key", &[DoesNotExist, Identifier]),
            ("()", &[OpenPar, ClosedPar]),
            ("", &[]),
            ("x in (),y", &[Identifier, In, OpenPar, ClosedPar, Comma, Identifier]),
            ("== != (), = notin", &[DoubleEquals, NotEquals, OpenPar, ClosedPar, Comma, Equals, NotIn]),
            ("key>2", &[Identifier, GreaterThan, Identifier]),
            ("key<1", &[Identifier, LessThan, Identifier]),
        ];
        for (text, expected) in cases {
            let mut expected = expected.to_vec();
            expected.push(EndOfString);
            assert_eq!(tokens(text), expected, "{text:?}");
            let mut parser = Parser { items: scan(text), position: 0 };
            loop {
                let ahead = parser.lookahead(Context::KeyAndOperator);
                let consumed = parser.consume(Context::KeyAndOperator);
                assert_eq!(ahead, consumed, "{text:?}");
                if ahead.0 == EndOfString {
                    break;
                }
            }
        }
    }

    /// Upstream's TestSelectorParse: the good ones parse and print as given, blanks gone; the
    /// bad ones do not parse.
    #[test]
    fn selector_parse() {
        for good in ["x=a,y=b,z=c", "", "x!=a,y=b", "x=", "x= ", "x=,z= ", "x= ,z= ", "!x", "x>1", "x>1,z<5"]
        {
            let selector = LabelSelector::parse(good).unwrap_or_else(|e| panic!("{good:?}: {e}"));
            assert_eq!(selector.to_string(), good.replace(' ', ""), "{good:?}");
        }
        for bad in ["x=a||y=b", "x==a==b", "!x=a", "x<a"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?}");
        }
        // TestDeterministicParse
        assert_eq!(
            LabelSelector::parse("x=a,a=x").unwrap().to_string(),
            LabelSelector::parse("a=x,x=a").unwrap().to_string()
        );
    }

    /// Upstream's TestSetSelectorParser: what each text parses to, or that it does not.
    #[test]
    fn set_selector_parser() {
        use Operator::*;
        let valid: Vec<(&str, Vec<Requirement>)> = vec![
            ("", vec![]),
            ("\rx", vec![requirement("x", Exists, &[])]),
            (
                "this-is-a-dns.domain.com/key-with-dash",
                vec![requirement("this-is-a-dns.domain.com/key-with-dash", Exists, &[])],
            ),
            (
                "this-is-another-dns.domain.com/key-with-dash in (so,what)",
                vec![requirement("this-is-another-dns.domain.com/key-with-dash", In, &["so", "what"])],
            ),
            (
                "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
                vec![requirement("0.1.2.domain/99", NotIn, &["10.10.100.1", "tick.tack.clock"])],
            ),
            ("foo  in\t (abc)", vec![requirement("foo", In, &["abc"])]),
            ("x notin\n (abc)", vec![requirement("x", NotIn, &["abc"])]),
            ("x  notin\t\t\t(abc,def)", vec![requirement("x", NotIn, &["abc", "def"])]),
            ("x in (abc,def)", vec![requirement("x", In, &["abc", "def"])]),
            ("x in (abc,)", vec![requirement("x", In, &["", "abc"])]),
            ("x in ()", vec![requirement("x", In, &[""])]),
            (
                "x notin (abc,,def),bar,z in (),w",
                vec![
                    requirement("bar", Exists, &[]),
                    requirement("w", Exists, &[]),
                    requirement("x", NotIn, &["", "abc", "def"]),
                    requirement("z", In, &[""]),
                ],
            ),
            ("x,y in (a)", vec![requirement("x", Exists, &[]), requirement("y", In, &["a"])]),
            ("x=a", vec![requirement("x", Equals, &["a"])]),
            ("x>1", vec![requirement("x", GreaterThan, &["1"])]),
            ("x<7", vec![requirement("x", LessThan, &["7"])]),
            ("x=a,y!=b", vec![requirement("x", Equals, &["a"]), requirement("y", NotEquals, &["b"])]),
            (
                "x=a,y!=b,z in (h,i,j)",
                vec![
                    requirement("x", Equals, &["a"]),
                    requirement("y", NotEquals, &["b"]),
                    requirement("z", In, &["h", "i", "j"]),
                ],
            ),
            ("x notin ( )", vec![requirement("x", NotIn, &[""])]),
            ("x notin (, a)", vec![requirement("x", NotIn, &["", "a"])]),
            ("a ", vec![requirement("a", Exists, &[])]),
            ("a in (x,y,notin, z,in)", vec![requirement("a", In, &["in", "notin", "x", "y", "z"])]),
            ("x==a", vec![requirement("x", DoubleEquals, &["a"])]),
        ];
        for (text, expected) in valid {
            let selector = LabelSelector::parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(selector.requirements(), expected, "{text:?}");
        }
        for invalid in [
            "x=a||y=b",
            "x,,y",
            ",x,y",
            "x nott in (y)",
            "a in (xyz),",
            "a in (xyz)b notin ()",
            "a in (xyz abc)",
            "a notin(",
            "a (",
            "(",
        ] {
            assert!(LabelSelector::parse(invalid).is_err(), "{invalid:?}");
        }
    }

    /// Upstream's parseIdentifiersList consumes the second of two commas, so a list ending in
    /// `,,)` reaches `)` where it expects a value and is refused; the API server answers such a
    /// selector 400, so it must be a usage error here too.
    #[test]
    fn a_doubled_comma_before_the_closing_parenthesis_is_refused_as_upstream_refuses_it() {
        for text in ["x in (a,,)", "x in (,,)", "x notin (a,,b,,)"] {
            assert_eq!(
                error(text),
                "unable to parse requirement: found ')', expected: ',', or identifier",
                "{text:?}"
            );
        }
        assert_eq!(
            LabelSelector::parse("x in (a,,,b)").map(|s| s.requirements().to_vec()),
            Ok(vec![requirement("x", Operator::In, &["", "a", "b"])])
        );
    }

    /// Upstream's TestRequirementConstructor, the cases a text can express.
    #[test]
    fn requirement_constructor() {
        for good in ["x in (foo)", "x notin (foo)", "x", "!x", "1foo in (bar)", "1234 in (bar)", "y>1", "z<6"]
        {
            assert!(LabelSelector::parse(good).is_ok(), "{good:?}");
        }
        for bad in ["foo>bar", "barz<blah", &"a".repeat(254)] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?}");
        }
    }

    /// The texts `labels.Parse` gives, so that the usage error says what the API server would
    /// have answered (`unable to parse requirement: …` from upstream's parser; the field errors
    /// of `NewRequirement` and `validateLabelKey`, the key's path `<nil>` as Go prints it).
    #[test]
    fn upstream_error_texts() {
        let name_part = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and \
                         end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex \
                         used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        let label_value = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' \
                           or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or \
                           'my_value',  or '12345', regex used for validation is \
                           '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
        assert_eq!(error("app=web,,"), "found ',', expected: identifier after ','");
        assert_eq!(error("app in (a"), "unable to parse requirement: found '', expected: ',' or ')'");
        assert_eq!(error("!"), "unable to parse requirement: found '', expected: identifier");
        assert_eq!(
            error("a b"),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(error("x==a==b"), "found '==', expected: ',' or 'end of string'");
        assert_eq!(error("!x=a"), "found '=', expected: ',' or 'end of string'");
        assert_eq!(error(")"), "found ')', expected: !, identifier, or 'end of string'");
        assert_eq!(error("a notin x"), "unable to parse requirement: found 'x' expected: '('");
        assert_eq!(
            error("a in (=)"),
            "unable to parse requirement: found '=', expected: ',', ')' or identifier"
        );
        assert_eq!(error("a in (b c)"), "unable to parse requirement: found 'c', expected: ',' or ')'");
        assert_eq!(
            error("a in (,=)"),
            "unable to parse requirement: found '=', expected: ',', or identifier"
        );
        assert_eq!(error("a=("), "unable to parse requirement: found '(', expected: identifier");
        assert_eq!(
            error("app:monolith"),
            format!("unable to parse requirement: <nil>: Invalid value: \"app:monolith\": {name_part}")
        );
        let long = "k".repeat(64);
        assert_eq!(
            error(&long),
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"{long}\": name part must be no more than 63 characters"
            )
        );
        assert_eq!(
            error("app=a/b"),
            format!("unable to parse requirement: values[0][app]: Invalid value: \"a/b\": {label_value}")
        );
        assert_eq!(
            error("x<a"),
            "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value \
             must be an integer"
        );
        // Two problems of one value: an aggregate.
        assert_eq!(
            error("x>-a"),
            format!(
                "unable to parse requirement: [values[0]: Invalid value: \"-a\": for 'Gt', 'Lt' operators, the \
                 value must be an integer, values[0][x]: Invalid value: \"-a\": {label_value}]"
            )
        );
    }

    /// An empty selector, or one of blanks, selects every pod: the watch asks for no selector.
    #[test]
    fn an_empty_selector_selects_everything() {
        for empty in ["", " ", "\t\r\n"] {
            let selector = LabelSelector::parse(empty).unwrap();
            assert!(selector.is_empty());
            assert_eq!(selector.query(), None);
        }
        let selector = LabelSelector::parse(" app = web ").unwrap();
        assert_eq!(selector.query(), Some(" app = web "));
        assert_eq!(selector.to_string(), "app=web");
    }
}
