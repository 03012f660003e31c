//! What a kdb+ client's message asks for. tickdb evaluates no q: it
//! recognizes the calls a tick system makes (`.u.upd`, `insert`, `.u.sub`,
//! the empty chaser, `s)` SQL, `.s.e`, the q-sql subset) and answers
//! anything else with `'nyi` and the text it was sent.

use tickdb_ipc::{Atom, Vector, K};

#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    /// `.u.upd[`t; data]`, `upd`, or `` `t insert data ``.
    Upd { table: String, data: K },
    /// `.u.sub[t; syms]`: None for `` ` `` (every table / every symbol).
    Sub {
        table: Option<String>,
        syms: Option<Vec<String>>,
    },
    /// SQL: `s)…` or `.s.e"…"`.
    Sql(String),
    /// Other q text, for the q-sql subset.
    Q(String),
    /// The empty message kdb+ clients send after async messages.
    Chaser,
    /// `.z.i`: the process id, which tells a client which member of a
    /// query group (`rp,PORT`) it reached, as in the KX socket sharding
    /// whitepaper.
    Pid,
    /// Anything else: its text, for `'nyi`.
    Nyi(String),
}

pub fn interpret(k: &K) -> Call {
    match k {
        K::Vector {
            v: Vector::Char(_), ..
        }
        | K::Atom(Atom::Char(_)) => text_call(&text_of(k)),
        K::List(items) if !items.is_empty() => list_call(items),
        other => Call::Nyi(describe(other)),
    }
}

fn text_of(k: &K) -> String {
    match k {
        K::Vector {
            v: Vector::Char(c), ..
        } => String::from_utf8_lossy(c).into_owned(),
        K::Atom(Atom::Char(c)) => (*c as char).to_string(),
        _ => String::new(),
    }
}

fn text_call(text: &str) -> Call {
    let t = text.trim();
    if t.is_empty() {
        return Call::Chaser;
    }
    if t == ".z.i" {
        return Call::Pid;
    }
    if let Some(sql) = t.strip_prefix("s)") {
        return Call::Sql(sql.trim().to_string());
    }
    if let Some(rest) = t.strip_prefix(".s.e") {
        let rest = rest.trim();
        let rest = rest
            .strip_prefix('[')
            .and_then(|r| r.strip_suffix(']'))
            .unwrap_or(rest)
            .trim();
        if let Some(s) = q_string_literal(rest) {
            return Call::Sql(s);
        }
        return Call::Nyi(t.to_string());
    }
    Call::Q(t.to_string())
}

/// The text of a q string literal `"…"` (with `\"`, `\\`, `\n`, `\t`
/// escapes), None when `s` is not exactly one.
fn q_string_literal(s: &str) -> Option<String> {
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                other => out.push(other),
            },
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// A function call as a list: the function (a symbol or a string naming
/// it), then its arguments.
fn list_call(items: &[K]) -> Call {
    let name = match &items[0] {
        K::Atom(Atom::Symbol(s)) => s.clone(),
        k @ K::Vector {
            v: Vector::Char(_), ..
        } => text_of(k),
        K::Function { text, .. } => return Call::Nyi(text.clone()),
        other => return Call::Nyi(describe(other)),
    };
    let args = &items[1..];
    match name.trim() {
        ".u.upd" | "upd" | "insert" if args.len() == 2 => match name_arg(&args[0]) {
            Some(table) => Call::Upd {
                table,
                data: args[1].clone(),
            },
            None => Call::Nyi(format!("{name}: the first argument must name a table")),
        },
        ".u.sub" if args.len() == 2 => {
            let table = match &args[0] {
                K::Atom(Atom::Symbol(s)) if s.is_empty() => None,
                k => match name_arg(k) {
                    Some(t) => Some(t),
                    None => {
                        return Call::Nyi(
                            ".u.sub: the first argument must be a table name or `".into(),
                        )
                    }
                },
            };
            let syms = match &args[1] {
                K::Atom(Atom::Symbol(s)) if s.is_empty() => None,
                K::Atom(Atom::Symbol(s)) => Some(vec![s.clone()]),
                K::Vector {
                    v: Vector::Symbol(s),
                    ..
                } => Some(s.clone()),
                _ => return Call::Nyi(".u.sub: the second argument must be symbols or `".into()),
            };
            Call::Sub { table, syms }
        }
        ".s.e" if args.len() == 1 => match args[0].as_text() {
            Some(s) => Call::Sql(s.to_string()),
            None => Call::Nyi(".s.e: the argument must be a string".into()),
        },
        // A one-item list holding a string: the string.
        _ if args.is_empty() => text_call(&name),
        other => Call::Nyi(other.to_string()),
    }
}

fn name_arg(k: &K) -> Option<String> {
    match k {
        K::Atom(Atom::Symbol(s)) if !s.is_empty() => Some(s.clone()),
        K::Vector {
            v: Vector::Char(c), ..
        } if !c.is_empty() => String::from_utf8(c.clone()).ok(),
        _ => None,
    }
}

fn describe(k: &K) -> String {
    match k {
        K::Function { text, .. } => text.clone(),
        K::Atom(Atom::Symbol(s)) => format!("`{s}"),
        other => format!("an object of type {}", other.type_code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognizes_the_calls_of_a_tick_system() {
        let upd = K::List(vec![
            K::string(".u.upd"),
            K::symbol("trade"),
            K::List(vec![]),
        ]);
        assert!(matches!(interpret(&upd), Call::Upd { ref table, .. } if table == "trade"));
        let ins = K::List(vec![
            K::symbol("insert"),
            K::symbol("quote"),
            K::List(vec![]),
        ]);
        assert!(matches!(interpret(&ins), Call::Upd { ref table, .. } if table == "quote"));
        let sub = K::List(vec![K::symbol(".u.sub"), K::symbol(""), K::symbol("")]);
        assert_eq!(
            interpret(&sub),
            Call::Sub {
                table: None,
                syms: None
            }
        );
        let sub = K::List(vec![
            K::symbol(".u.sub"),
            K::symbol("trade"),
            K::symbols(&["A", "B"]),
        ]);
        assert_eq!(
            interpret(&sub),
            Call::Sub {
                table: Some("trade".into()),
                syms: Some(vec!["A".into(), "B".into()])
            }
        );
        assert_eq!(interpret(&K::string("")), Call::Chaser);
        assert_eq!(
            interpret(&K::string("s) SELECT 1")),
            Call::Sql("SELECT 1".into())
        );
        assert_eq!(interpret(&K::string(" .z.i")), Call::Pid);
        assert_eq!(
            interpret(&K::string(r#".s.e"SELECT \"x\" FROM t""#)),
            Call::Sql(r#"SELECT "x" FROM t"#.into())
        );
        assert_eq!(
            interpret(&K::string("count trade")),
            Call::Q("count trade".into())
        );
        assert!(matches!(
            interpret(&K::List(vec![K::symbol("hopen"), K::Null])),
            Call::Nyi(_)
        ));
    }
}
