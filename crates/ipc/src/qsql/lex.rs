//! The tokenizer: q text to tokens, each with its byte offset. It is
//! lenient on purpose: number-like runs are kept as text and only read as
//! literals where the subset uses them, and any character it does not know
//! becomes `Other`, so that q outside the subset (lambdas, `+`, `#`, ...)
//! ends as `Nyi` in the parser instead of a lexing error. Only text that is
//! malformed for q itself (an unterminated string, a bad escape, unbalanced
//! brackets) is a `Parse` error here.

use super::QsqlError;

/// The comparison operators q and SQL share (`<>` is q's not-equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cmp {
    Eq,
    Lt,
    Gt,
    Le,
    Ge,
    Ne,
}

impl Cmp {
    pub(super) fn sql(self) -> &'static str {
        match self {
            Cmp::Eq => "=",
            Cmp::Lt => "<",
            Cmp::Gt => ">",
            Cmp::Le => "<=",
            Cmp::Ge => ">=",
            Cmp::Ne => "<>",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    /// A q name: a letter, then letters, digits and `_`.
    Ident(String),
    /// One symbol or adjacent ones (`` `a`b ``, no space between): q reads
    /// them as one symbol vector.
    Syms(Vec<String>),
    /// A number-like run (`5`, `-1.5e3`, `2024.01.02D09:30:00`, `0b`),
    /// read by `lit` where a literal is expected.
    Num(String),
    /// A string literal, escapes resolved.
    Str(String),
    Open(char),
    Close(char),
    Semi,
    Comma,
    Colon,
    Bang,
    Quest,
    Cmp(Cmp),
    Other(char),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token {
    pub tok: Tok,
    /// Byte offset in the text.
    pub at: usize,
}

impl Token {
    pub(super) fn ident(&self) -> Option<&str> {
        match &self.tok {
            Tok::Ident(s) => Some(s),
            _ => None,
        }
    }

    pub(super) fn is_ident(&self, name: &str) -> bool {
        self.ident() == Some(name)
    }
}

/// Nesting deeper than this is outside the subset (its deepest form, a
/// functional select's aggregate dictionary, nests 4): refusing it early
/// keeps the recursive descent's stack bounded whatever the input.
pub(super) const DEPTH_MAX: usize = 32;

fn parse_err(at: usize, why: impl Into<String>) -> QsqlError {
    QsqlError::Parse {
        at,
        why: why.into(),
    }
}

/// Characters that end a value: a `-` right after one is q's minus, not
/// the sign of a number (`x-1` subtracts, `x>-1` compares with -1).
fn ends_value(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ')' | ']' | '}' | '"' | '`')
}

fn sym_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.')
}

pub(super) fn lex(text: &str) -> Result<Vec<Token>, QsqlError> {
    let cs: Vec<(usize, char)> = text.char_indices().collect();
    let ch = |i: usize| cs.get(i).map(|&(_, c)| c);
    let digit = |i: usize| ch(i).is_some_and(|c| c.is_ascii_digit());
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&(at, c)) = cs.get(i) {
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let prev = i.checked_sub(1).and_then(ch);
        let number_start = c.is_ascii_digit()
            || (c == '.' && digit(i + 1))
            || (c == '-'
                && !prev.is_some_and(ends_value)
                && (digit(i + 1) || (ch(i + 1) == Some('.') && digit(i + 2))));
        let tok = if number_start {
            let mut s = String::from(c);
            i += 1;
            while let Some(c) = ch(i) {
                let exp_sign = c == '-'
                    && matches!(s.chars().last(), Some('e' | 'E'))
                    && !s.contains(['D', ':'])
                    && digit(i + 1);
                if c.is_ascii_alphanumeric() || c == '.' || (c == ':' && digit(i + 1)) || exp_sign {
                    s.push(c);
                    i += 1;
                } else {
                    break;
                }
            }
            Tok::Num(s)
        } else if c.is_ascii_alphabetic() {
            let mut s = String::new();
            while let Some(c) = ch(i).filter(|c| c.is_ascii_alphanumeric() || *c == '_') {
                s.push(c);
                i += 1;
            }
            Tok::Ident(s)
        } else if c == '`' {
            let mut v = Vec::new();
            while ch(i) == Some('`') {
                i += 1;
                let mut s = String::new();
                while let Some(c) = ch(i).filter(|c| sym_char(*c)) {
                    s.push(c);
                    i += 1;
                }
                v.push(s);
            }
            Tok::Syms(v)
        } else if c == '"' {
            i += 1;
            let mut s = String::new();
            loop {
                match ch(i) {
                    None => return Err(parse_err(at, "unterminated string")),
                    Some('"') => {
                        i += 1;
                        break;
                    }
                    Some('\\') => {
                        let esc_at = cs.get(i).map_or(at, |x| x.0);
                        let (c, n) = match ch(i + 1) {
                            Some('"') => ('"', 2),
                            Some('\\') => ('\\', 2),
                            Some('n') => ('\n', 2),
                            Some('t') => ('\t', 2),
                            Some('r') => ('\r', 2),
                            Some(d) if d.is_digit(8) => {
                                // \ddd: three octal digits, one byte.
                                let oct: Option<u32> = (1..4)
                                    .map(|k| ch(i + k).and_then(|c| c.to_digit(8)))
                                    .try_fold(0u32, |acc, d| d.map(|d| acc * 8 + d));
                                match oct.filter(|v| *v < 256).and_then(char::from_u32) {
                                    Some(c) => (c, 4),
                                    None => {
                                        return Err(parse_err(esc_at, "bad octal escape in string"))
                                    }
                                }
                            }
                            _ => return Err(parse_err(esc_at, "bad escape in string")),
                        };
                        s.push(c);
                        i += n;
                    }
                    Some(c) => {
                        s.push(c);
                        i += 1;
                    }
                }
            }
            Tok::Str(s)
        } else {
            i += 1;
            let next = ch(i);
            match c {
                '(' | '[' | '{' => Tok::Open(c),
                ')' | ']' | '}' => Tok::Close(c),
                ';' => Tok::Semi,
                ',' => Tok::Comma,
                ':' => Tok::Colon,
                '!' => Tok::Bang,
                '?' => Tok::Quest,
                '=' => Tok::Cmp(Cmp::Eq),
                '<' | '>' => {
                    let two = match (c, next) {
                        ('<', Some('=')) => Some(Cmp::Le),
                        ('<', Some('>')) => Some(Cmp::Ne),
                        ('>', Some('=')) => Some(Cmp::Ge),
                        _ => None,
                    };
                    match two {
                        Some(op) => {
                            i += 1;
                            Tok::Cmp(op)
                        }
                        None if c == '<' => Tok::Cmp(Cmp::Lt),
                        None => Tok::Cmp(Cmp::Gt),
                    }
                }
                _ => Tok::Other(c),
            }
        };
        out.push(Token { tok, at });
    }
    Ok(out)
}

/// The byte offset of each symbol's backtick in a `Syms` token at `at`
/// (symbol characters are ASCII, one byte each).
pub(super) fn sym_offsets(v: &[String], at: usize) -> impl Iterator<Item = (&String, usize)> {
    v.iter().scan(at, |next, s| {
        let here = *next;
        *next += 1 + s.len();
        Some((s, here))
    })
}

/// Brackets must balance (a `Parse` error otherwise, as in q); nesting past
/// `DEPTH_MAX` is `Nyi`.
pub(super) fn check_brackets(toks: &[Token]) -> Result<(), QsqlError> {
    let mut stack: Vec<(char, usize)> = Vec::new();
    let mut deepest = 0;
    for t in toks {
        match t.tok {
            Tok::Open(c) => {
                stack.push((c, t.at));
                deepest = deepest.max(stack.len());
            }
            Tok::Close(c) => {
                let want = match c {
                    ')' => '(',
                    ']' => '[',
                    _ => '{',
                };
                match stack.pop() {
                    Some((open, _)) if open == want => {}
                    Some((open, at)) => {
                        return Err(parse_err(
                            t.at,
                            format!("`{c}` closes the `{open}` at {at}"),
                        ))
                    }
                    None => return Err(parse_err(t.at, format!("unbalanced `{c}`"))),
                }
            }
            _ => {}
        }
    }
    if let Some((open, at)) = stack.pop() {
        return Err(parse_err(at, format!("unclosed `{open}`")));
    }
    if deepest > DEPTH_MAX {
        return Err(QsqlError::Nyi(String::new()));
    }
    Ok(())
}

/// The index of the bracket closing the one at `open` (brackets balance).
pub(super) fn matching(toks: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate().skip(open) {
        match t.tok {
            Tok::Open(_) => depth += 1,
            Tok::Close(_) => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Splits at `sep` outside brackets.
pub(super) fn split_top<'a>(toks: &'a [Token], sep: &Tok) -> Vec<&'a [Token]> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, t) in toks.iter().enumerate() {
        match &t.tok {
            Tok::Open(_) => depth += 1,
            Tok::Close(_) => depth = depth.saturating_sub(1),
            x if depth == 0 && x == sep => {
                parts.push(&toks[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&toks[start..]);
    parts
}

/// `f[a;b;...]` from `toks[open]` to the end: the arguments, or None when
/// something follows the closing bracket.
pub(super) fn bracket_args(toks: &[Token], open: usize) -> Option<Vec<&[Token]>> {
    if !matches!(toks.get(open)?.tok, Tok::Open('[')) {
        return None;
    }
    let close = matching(toks, open)?;
    if close + 1 != toks.len() {
        return None;
    }
    Some(split_top(&toks[open + 1..close], &Tok::Semi))
}
