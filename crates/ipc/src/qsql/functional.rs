//! Functional select `?[t;c;b;a]`: the q objects of its arguments (lists,
//! symbols, `enlist`, dictionaries) are parsed into a small tree first,
//! then read as a where list, a group dictionary and an aggregate
//! dictionary.

use super::lex::{bracket_args, matching, split_top, sym_offsets, Cmp, Tok, Token, DEPTH_MAX};
use super::lit::{num, Lit};
use super::plan::{Agg, Cond, Expr, Name, Select, Val};
use super::{nyi, q_name, QsqlError};

/// A q object as written in a functional form.
#[derive(Debug, Clone, PartialEq)]
enum F {
    /// `(a;b;...)` or `()`.
    List(Vec<F>),
    /// `` `a `` (an atom: a column name in a parse tree) or `` `a`b ``.
    Syms(Vec<String>, usize),
    /// A number-like atom or a vector of them (`1 2`).
    Nums(Vec<(String, usize)>),
    Str(String),
    Ident(String),
    Cmp(Cmp),
    Enlist(Box<F>),
    Dict(Box<F>, Box<F>, usize),
}

fn parse_err(at: usize, why: impl Into<String>) -> QsqlError {
    QsqlError::Parse {
        at,
        why: why.into(),
    }
}

/// q reads right to left: `enlist x`, `k!v` take everything to their right.
fn fexpr(ts: &[Token], depth: usize) -> Result<F, QsqlError> {
    if depth > DEPTH_MAX {
        return Err(nyi());
    }
    let Some(first) = ts.first() else {
        return Err(nyi());
    };
    if first.is_ident("enlist") {
        let rest = &ts[1..];
        let bracketed = matches!(rest.first().map(|t| &t.tok), Some(Tok::Open('[')))
            && matching(rest, 0) == Some(rest.len() - 1);
        return if bracketed {
            match split_top(&rest[1..rest.len() - 1], &Tok::Semi).as_slice() {
                [one] => Ok(F::Enlist(Box::new(fexpr(one, depth + 1)?))),
                _ => Err(nyi()),
            }
        } else {
            Ok(F::Enlist(Box::new(fexpr(rest, depth + 1)?)))
        };
    }
    let (prim, used) = primary(ts, depth)?;
    match ts.get(used) {
        None => Ok(prim),
        Some(t) if t.tok == Tok::Bang => Ok(F::Dict(
            Box::new(prim),
            Box::new(fexpr(&ts[used + 1..], depth + 1)?),
            t.at,
        )),
        Some(_) => Err(nyi()),
    }
}

fn primary(ts: &[Token], depth: usize) -> Result<(F, usize), QsqlError> {
    let Some(t) = ts.first() else {
        return Err(nyi());
    };
    Ok(match &t.tok {
        Tok::Open('(') => {
            let close = matching(ts, 0).ok_or_else(nyi)?;
            let inner = &ts[1..close];
            let f = if inner.is_empty() {
                F::List(Vec::new())
            } else {
                let parts = split_top(inner, &Tok::Semi);
                if parts.len() == 1 {
                    fexpr(inner, depth + 1)? // parentheses only group
                } else {
                    F::List(
                        parts
                            .into_iter()
                            .map(|p| fexpr(p, depth + 1))
                            .collect::<Result<_, _>>()?,
                    )
                }
            };
            (f, close + 1)
        }
        Tok::Syms(v) => (F::Syms(v.clone(), t.at), 1),
        Tok::Num(_) => {
            let v: Vec<(String, usize)> = ts
                .iter()
                .map_while(|t| match &t.tok {
                    Tok::Num(s) => Some((s.clone(), t.at)),
                    _ => None,
                })
                .collect();
            let n = v.len();
            (F::Nums(v), n)
        }
        Tok::Str(s) => (F::Str(s.clone()), 1),
        Tok::Ident(s) => (F::Ident(s.clone()), 1),
        Tok::Cmp(c) => (F::Cmp(*c), 1),
        _ => return Err(nyi()),
    })
}

/// `toks` is `? [ t ; c ; b ; a ]`.
pub(super) fn parse(toks: &[Token]) -> Result<Select, QsqlError> {
    let args = bracket_args(toks, 1).ok_or_else(nyi)?;
    // Three arguments is exec, five or six a select with a limit or order.
    let [t, c, b, a] = args.as_slice() else {
        return Err(nyi());
    };
    let table = match t {
        [t] => match &t.tok {
            Tok::Ident(s) => Name {
                text: s.clone(),
                at: t.at,
            },
            Tok::Syms(v) if v.len() == 1 => q_name(&v[0], t.at)?,
            _ => return Err(nyi()),
        },
        _ => return Err(nyi()),
    };
    let conds = where_list(&fexpr(c, 0)?)?;
    let by = groups(&fexpr(b, 0)?)?;
    let cols = aggregates(&fexpr(a, 0)?)?;
    Ok(Select {
        table,
        cols,
        by,
        conds,
    })
}

/// A symbol atom: in a parse tree, a column name.
fn col(f: &F) -> Result<Name, QsqlError> {
    match f {
        F::Syms(v, at) if v.len() == 1 => q_name(&v[0], *at),
        _ => Err(nyi()),
    }
}

fn where_list(f: &F) -> Result<Vec<Cond>, QsqlError> {
    match f {
        F::List(items) => items.iter().map(cond).collect(),
        F::Enlist(one) => Ok(vec![cond(one)?]),
        _ => Err(nyi()),
    }
}

/// `(op;`col;value)`.
fn cond(f: &F) -> Result<Cond, QsqlError> {
    let F::List(parts) = f else {
        return Err(nyi());
    };
    let [op, c, v] = parts.as_slice() else {
        return Err(nyi());
    };
    let c = col(c)?;
    match op {
        F::Cmp(op) => Ok(Cond::Cmp(c, *op, val(v)?)),
        F::Ident(s) if s == "in" => Ok(Cond::In(c, list(v)?)),
        F::Ident(s) if s == "within" => {
            let at = c.at;
            match <[Lit; 2]>::try_from(list(v)?) {
                Ok([lo, hi]) => Ok(Cond::Within(c, Val::Lit(lo), Val::Lit(hi))),
                Err(_) => Err(parse_err(at, "within takes two bounds")),
            }
        }
        _ => Err(nyi()),
    }
}

/// An atom value: a literal, `enlist` of one (q's quoting of a constant
/// in a parse tree), or a symbol atom, which a parse tree reads as a column.
fn val(f: &F) -> Result<Val, QsqlError> {
    match f {
        F::Syms(..) => col(f).map(Val::Col),
        F::Enlist(x) => match x.as_ref() {
            F::Syms(v, _) if v.len() == 1 => Ok(Val::Lit(Lit::Text(v.concat()))),
            other => atom_lit(other).map(Val::Lit),
        },
        other => atom_lit(other).map(Val::Lit),
    }
}

fn atom_lit(f: &F) -> Result<Lit, QsqlError> {
    match f {
        F::Nums(v) => match v.as_slice() {
            [(s, at)] => num(s, *at),
            _ => Err(nyi()),
        },
        F::Str(s) => Ok(Lit::Text(s.clone())),
        _ => Err(nyi()),
    }
}

/// The right side of `in` / `within`: a symbol or number vector, `enlist`
/// of one, or a list of atoms.
fn list(f: &F) -> Result<Vec<Lit>, QsqlError> {
    match f {
        F::Enlist(x) => match x.as_ref() {
            F::Syms(v, _) => Ok(v.iter().map(|s| Lit::Text(s.clone())).collect()),
            F::Nums(v) => v.iter().map(|(s, at)| num(s, *at)).collect(),
            other => Ok(vec![atom_lit(other)?]),
        },
        // A symbol atom would be a column: only vectors are constants.
        F::Syms(v, _) if v.len() > 1 => Ok(v.iter().map(|s| Lit::Text(s.clone())).collect()),
        F::Nums(v) => v.iter().map(|(s, at)| num(s, *at)).collect(),
        F::List(items) => items
            .iter()
            .map(|i| match i {
                F::Syms(v, _) if v.len() == 1 => Ok(Lit::Text(v.concat())),
                F::Enlist(x) => match x.as_ref() {
                    F::Syms(v, _) if v.len() == 1 => Ok(Lit::Text(v.concat())),
                    other => atom_lit(other),
                },
                other => atom_lit(other),
            })
            .collect(),
        _ => Err(nyi()),
    }
}

/// Dictionary keys: `` `a`b ``, `` enlist`a `` or `` (`a;`b) ``.
fn keys(f: &F) -> Result<Vec<Name>, QsqlError> {
    match f {
        F::Syms(v, at) => sym_offsets(v, *at).map(|(s, at)| q_name(s, at)).collect(),
        F::Enlist(x) => Ok(vec![col(x)?]),
        F::List(items) => items.iter().map(col).collect(),
        _ => Err(nyi()),
    }
}

/// Dictionary values: `` `c`d `` (each a column), `enlist x` or `(x;y)`.
fn values(f: &F) -> Vec<F> {
    match f {
        F::Syms(v, at) => sym_offsets(v, *at)
            .map(|(s, at)| F::Syms(vec![s.clone()], at))
            .collect(),
        F::Enlist(x) => vec![x.as_ref().clone()],
        F::List(items) => items.clone(),
        other => vec![other.clone()],
    }
}

/// A dictionary's keys and values, in order.
type Entries = (Vec<Name>, Vec<F>);

fn dict(f: &F) -> Result<Option<Entries>, QsqlError> {
    let F::Dict(k, v, at) = f else {
        return Ok(None);
    };
    let k = keys(k)?;
    let v = values(v);
    if k.len() != v.len() {
        return Err(parse_err(
            *at,
            "dictionary keys and values differ in length",
        ));
    }
    if k.is_empty() {
        return Err(nyi());
    }
    Ok(Some((k, v)))
}

/// `0b` or `()`: no grouping; a dictionary of key names to columns.
fn groups(f: &F) -> Result<Vec<(String, Name)>, QsqlError> {
    match f {
        F::List(v) if v.is_empty() => Ok(Vec::new()),
        F::Nums(v) if matches!(v.as_slice(), [(s, _)] if s == "0b") => Ok(Vec::new()),
        _ => match dict(f)? {
            Some((k, v)) => k
                .into_iter()
                .zip(&v)
                .map(|(k, v)| Ok((k.text, col(v)?)))
                .collect(),
            None => Err(nyi()),
        },
    }
}

/// `()`: all columns; a dictionary of names to columns or aggregates.
fn aggregates(f: &F) -> Result<Option<Vec<(String, Expr)>>, QsqlError> {
    if matches!(f, F::List(v) if v.is_empty()) {
        return Ok(None);
    }
    let (k, v) = dict(f)?.ok_or_else(nyi)?;
    k.into_iter()
        .zip(&v)
        .map(|(k, v)| Ok((k.text, agg_expr(v)?)))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// `` `c ``, `(agg;`c)`, `(count;`i)`, `(wavg;`w;`x)`.
fn agg_expr(f: &F) -> Result<Expr, QsqlError> {
    match f {
        F::Syms(..) => col(f).map(Expr::Col),
        F::List(parts) => match parts.as_slice() {
            [F::Ident(a), x] => {
                let a = Agg::from_name(a).ok_or_else(nyi)?;
                Ok(Expr::Agg(a, col(x)?))
            }
            [F::Ident(a), w, x] if a == "wavg" => Ok(Expr::Wavg {
                w: col(w)?,
                x: col(x)?,
            }),
            _ => Err(nyi()),
        },
        _ => Err(nyi()),
    }
}
