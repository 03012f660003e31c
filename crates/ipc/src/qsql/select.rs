//! The `select` template: `select [cols] [by groups] from t [where conds]`.

use super::lex::{matching, split_top, Tok, Token};
use super::lit::{lit, Lit};
use super::plan::{Agg, Cond, Expr, Name, Select, Val};
use super::{nyi, QsqlError};

fn parse_err(at: usize, why: impl Into<String>) -> QsqlError {
    QsqlError::Parse {
        at,
        why: why.into(),
    }
}

fn name(t: &Token) -> Option<Name> {
    t.ident().map(|s| Name {
        text: s.to_string(),
        at: t.at,
    })
}

/// `toks[0]` is `select`; `end` is the offset just past the text, for
/// errors about something missing at the end.
pub(super) fn parse(toks: &[Token], end: usize) -> Result<Select, QsqlError> {
    if matches!(toks.get(1).map(|t| &t.tok), Some(Tok::Open('['))) {
        return Err(nyi()); // select[n], select[>x]
    }
    // The clause keywords outside brackets. A second `from` or `by`, or
    // one out of order, means a nested select or `exec`: outside the subset.
    let mut by = None;
    let mut from = None;
    let mut wher = None;
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate().skip(1) {
        match &t.tok {
            Tok::Open(_) => depth += 1,
            Tok::Close(_) => depth = depth.saturating_sub(1),
            Tok::Ident(s) if depth == 0 => {
                let slot = match s.as_str() {
                    "by" if from.is_none() => &mut by,
                    "from" => &mut from,
                    "where" if from.is_some() => &mut wher,
                    "by" | "where" | "select" | "exec" | "update" | "delete" => return Err(nyi()),
                    _ => continue,
                };
                if slot.replace(i).is_some() {
                    return Err(nyi());
                }
            }
            _ => {}
        }
    }
    let Some(from) = from else {
        return Err(parse_err(end, "select without from"));
    };
    let cols_end = by.unwrap_or(from);
    let cols = &toks[1..cols_end];
    let table_end = wher.unwrap_or(toks.len());
    let table = match &toks[from + 1..table_end] {
        [] => {
            return Err(parse_err(
                toks.get(from + 1).map_or(end, |t| t.at),
                "expected a table after from",
            ))
        }
        [t] => match &t.tok {
            Tok::Ident(s) => Name {
                text: s.clone(),
                at: t.at,
            },
            // q also takes the table's name as a symbol.
            Tok::Syms(v) if v.len() == 1 => super::q_name(&v[0], t.at)?,
            _ => return Err(nyi()),
        },
        _ => return Err(nyi()),
    };
    let cols = if cols.is_empty() {
        None
    } else {
        Some(
            items(cols, end, "column")?
                .into_iter()
                .map(column)
                .collect::<Result<Vec<_>, _>>()?,
        )
    };
    let by = match by {
        Some(b) => items(&toks[b + 1..from], toks[from].at, "by")?
            .into_iter()
            .map(group)
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let conds = match wher {
        Some(w) => items(&toks[w + 1..], end, "where")?
            .into_iter()
            .map(cond)
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    Ok(Select {
        table,
        cols,
        by,
        conds,
    })
}

/// Comma-separated items, none empty.
fn items<'a>(toks: &'a [Token], end: usize, what: &str) -> Result<Vec<&'a [Token]>, QsqlError> {
    let parts = split_top(toks, &Tok::Comma);
    for (i, p) in parts.iter().enumerate() {
        if p.is_empty() {
            // Point at the comma before or after the hole.
            let at = parts
                .get(i + 1)
                .and_then(|n| n.first())
                .map(|t| t.at.saturating_sub(1))
                .or_else(|| toks.last().map(|t| t.at))
                .unwrap_or(end);
            return Err(parse_err(at, format!("empty {what} expression")));
        }
    }
    Ok(parts)
}

/// `name:expr` or `expr`; an unnamed column is named as q names it.
fn column(toks: &[Token]) -> Result<(String, Expr), QsqlError> {
    let (named, body) = match toks {
        [n, c, rest @ ..] if matches!(c.tok, Tok::Colon) && n.ident().is_some() => {
            if rest.is_empty() {
                return Err(parse_err(c.at, "expected an expression after :"));
            }
            (n.ident().map(str::to_string), rest)
        }
        _ => (None, toks),
    };
    let e = expr(body)?;
    let derived = match &e {
        Expr::Col(n) => n.text.clone(),
        Expr::Agg(Agg::Count, n) if n.text == "i" => "x".to_string(),
        Expr::Agg(_, n) => n.text.clone(),
        Expr::Wavg { x, .. } => x.text.clone(),
    };
    Ok((named.unwrap_or(derived), e))
}

/// A column, `agg x`, `agg[x]`, `agg(x)`, `w wavg x` or `wavg[w;x]`.
fn expr(toks: &[Token]) -> Result<Expr, QsqlError> {
    match toks {
        [c] => name(c).map(Expr::Col).ok_or_else(nyi),
        [f, x] => {
            let agg = f.ident().and_then(Agg::from_name).ok_or_else(nyi)?;
            Ok(Expr::Agg(agg, name(x).ok_or_else(nyi)?))
        }
        [w, f, x] if f.is_ident("wavg") => Ok(Expr::Wavg {
            w: name(w).ok_or_else(nyi)?,
            x: name(x).ok_or_else(nyi)?,
        }),
        [f, open, rest @ ..] if matches!(open.tok, Tok::Open('[' | '(')) => {
            if matching(toks, 1) != Some(toks.len() - 1) {
                return Err(nyi());
            }
            let inner = &rest[..rest.len().saturating_sub(1)];
            let args: Vec<Option<Name>> = split_top(inner, &Tok::Semi)
                .into_iter()
                .map(|a| match a {
                    [t] => name(t),
                    _ => None,
                })
                .collect();
            match (f.ident(), open.tok == Tok::Open('['), args.as_slice()) {
                (Some("wavg"), true, [Some(w), Some(x)]) => Ok(Expr::Wavg {
                    w: w.clone(),
                    x: x.clone(),
                }),
                (Some(a), _, [Some(x)]) => {
                    let agg = Agg::from_name(a).ok_or_else(nyi)?;
                    Ok(Expr::Agg(agg, x.clone()))
                }
                _ => Err(nyi()),
            }
        }
        _ => Err(nyi()),
    }
}

/// `column` or `name:column`.
fn group(toks: &[Token]) -> Result<(String, Name), QsqlError> {
    match toks {
        [c] => name(c).map(|n| (n.text.clone(), n)).ok_or_else(nyi),
        [k, colon, c] if colon.tok == Tok::Colon => match (k.ident(), name(c)) {
            (Some(k), Some(c)) => Ok((k.to_string(), c)),
            _ => Err(nyi()),
        },
        _ => Err(nyi()),
    }
}

/// `c op v`, `c in v`, `c within (a;b)` / `c within a b`.
fn cond(toks: &[Token]) -> Result<Cond, QsqlError> {
    let [c, op, v @ ..] = toks else {
        return Err(nyi());
    };
    let col = name(c).ok_or_else(nyi)?;
    if v.is_empty() {
        return Err(parse_err(op.at, "expected a value after the operator"));
    }
    match &op.tok {
        Tok::Cmp(cmp) => match v {
            [t] => Ok(Cond::Cmp(col, *cmp, val(t)?)),
            _ => Err(nyi()),
        },
        Tok::Ident(s) if s == "in" => Ok(Cond::In(col, list(v)?)),
        Tok::Ident(s) if s == "within" => {
            let pair: Vec<Val> = match v {
                // `a b`: a vector of numbers or temporals.
                _ if v.iter().all(|t| matches!(t.tok, Tok::Num(_))) => {
                    v.iter().map(val).collect::<Result<_, _>>()?
                }
                [t] => match &t.tok {
                    Tok::Syms(s) => s.iter().map(|s| Val::Lit(Lit::Text(s.clone()))).collect(),
                    _ => return Err(nyi()),
                },
                [open, .., _]
                    if open.tok == Tok::Open('(') && matching(v, 0) == Some(v.len() - 1) =>
                {
                    split_top(&v[1..v.len() - 1], &Tok::Semi)
                        .into_iter()
                        .map(|a| match a {
                            [t] => val(t),
                            _ => Err(nyi()),
                        })
                        .collect::<Result<_, _>>()?
                }
                _ => return Err(nyi()),
            };
            match <[Val; 2]>::try_from(pair) {
                Ok([lo, hi]) => Ok(Cond::Within(col, lo, hi)),
                Err(_) => Err(parse_err(op.at, "within takes two bounds")),
            }
        }
        _ => Err(nyi()),
    }
}

/// One value: a literal atom or a column.
fn val(t: &Token) -> Result<Val, QsqlError> {
    match name(t) {
        Some(n) => Ok(Val::Col(n)),
        None => lit(t).map(Val::Lit),
    }
}

/// The right side of `in`: symbols `` `a`b ``, numbers `1 2 3`, or a
/// list of atoms `(a;b)` / `()`.
fn list(v: &[Token]) -> Result<Vec<Lit>, QsqlError> {
    match v {
        [t] if matches!(t.tok, Tok::Syms(_) | Tok::Num(_)) => match &t.tok {
            Tok::Syms(s) => Ok(s.iter().map(|s| Lit::Text(s.clone())).collect()),
            _ => Ok(vec![lit(t)?]),
        },
        _ if v.iter().all(|t| matches!(t.tok, Tok::Num(_))) => v.iter().map(lit).collect(),
        [open, .., _] if open.tok == Tok::Open('(') && matching(v, 0) == Some(v.len() - 1) => {
            let inner = &v[1..v.len() - 1];
            if inner.is_empty() {
                return Ok(Vec::new());
            }
            split_top(inner, &Tok::Semi)
                .into_iter()
                .map(|a| match a {
                    [t] if !matches!(t.tok, Tok::Ident(_)) => lit(t),
                    _ => Err(nyi()),
                })
                .collect()
        }
        _ => Err(nyi()),
    }
}
