//! Reading a q object from a message body, in either byte order.
//!
//! Every read is bounds-checked, and every allocation is bounded by the
//! bytes that remain: a vector that claims more items than its message can
//! hold is refused before anything is allocated for it. Nesting is bounded
//! too, so no message can exhaust the stack.

use crate::error::{IpcError, Result};
use crate::value::{Atom, Kind, Table, Vector, K};
use crate::HEADER_BYTES;

/// Reads one object from `body` (the message after its 8-byte header),
/// which must hold exactly that object. Offsets in errors count from the
/// start of the message (the header included).
pub fn decode(body: &[u8], big_endian: bool, depth_max: usize) -> Result<K> {
    let mut r = Reader {
        buf: body,
        pos: 0,
        big: big_endian,
        depth_max,
    };
    let k = r.object(0)?;
    if r.pos != body.len() {
        return Err(IpcError::Malformed {
            at: r.at(),
            why: format!("{} byte(s) after the end of the object", body.len() - r.pos),
        });
    }
    Ok(k)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    big: bool,
    depth_max: usize,
}

impl<'a> Reader<'a> {
    /// The current offset in the whole message.
    fn at(&self) -> usize {
        self.pos + HEADER_BYTES
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(IpcError::Truncated {
                what,
                need: n,
                at: self.at(),
                len: self.buf.len() + HEADER_BYTES,
            }),
        }
    }

    fn u8(&mut self, what: &'static str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn i16(&mut self) -> Result<i16> {
        let a = self.array::<2>("a short")?;
        Ok(if self.big {
            i16::from_be_bytes(a)
        } else {
            i16::from_le_bytes(a)
        })
    }

    fn i32(&mut self, what: &'static str) -> Result<i32> {
        let a = self.array::<4>(what)?;
        Ok(if self.big {
            i32::from_be_bytes(a)
        } else {
            i32::from_le_bytes(a)
        })
    }

    fn i64(&mut self) -> Result<i64> {
        let a = self.array::<8>("a long")?;
        Ok(if self.big {
            i64::from_be_bytes(a)
        } else {
            i64::from_le_bytes(a)
        })
    }

    fn f32(&mut self) -> Result<f32> {
        let a = self.array::<4>("a real")?;
        Ok(if self.big {
            f32::from_be_bytes(a)
        } else {
            f32::from_le_bytes(a)
        })
    }

    fn f64(&mut self) -> Result<f64> {
        let a = self.array::<8>("a float")?;
        Ok(if self.big {
            f64::from_be_bytes(a)
        } else {
            f64::from_le_bytes(a)
        })
    }

    /// A NUL-terminated symbol, which must be UTF-8.
    fn symbol(&mut self) -> Result<String> {
        let start = self.at();
        let rest = &self.buf[self.pos..];
        let Some(n) = rest.iter().position(|b| *b == 0) else {
            return Err(IpcError::Truncated {
                what: "a symbol's terminating NUL",
                need: 1,
                at: self.buf.len() + HEADER_BYTES,
                len: self.buf.len() + HEADER_BYTES,
            });
        };
        let bytes = &rest[..n];
        self.pos += n + 1;
        String::from_utf8(bytes.to_vec()).map_err(|_| IpcError::Malformed {
            at: start,
            why: "a symbol that is not UTF-8".into(),
        })
    }

    /// A vector's length, checked against the bytes left (each item takes
    /// at least `min_item_bytes`).
    fn length(&mut self, min_item_bytes: usize) -> Result<usize> {
        let at = self.at();
        let n = self.i32("a length")?;
        if n < 0 {
            return Err(IpcError::Malformed {
                at,
                why: format!("negative length {n}"),
            });
        }
        let n = n as usize;
        let left = self.buf.len() - self.pos;
        if n.saturating_mul(min_item_bytes.max(1)) > left {
            return Err(IpcError::Truncated {
                what: "the items of a vector or list",
                need: n.saturating_mul(min_item_bytes.max(1)),
                at: self.at(),
                len: self.buf.len() + HEADER_BYTES,
            });
        }
        Ok(n)
    }

    fn deeper(&self, depth: usize) -> Result<usize> {
        if depth >= self.depth_max {
            return Err(IpcError::TooDeep {
                max: self.depth_max,
                at: self.at(),
            });
        }
        Ok(depth + 1)
    }

    fn object(&mut self, depth: usize) -> Result<K> {
        let at = self.at();
        let ty = self.u8("a type byte")? as i8;
        match ty {
            -19..=-1 => {
                let kind = Kind::from_code(ty).ok_or(IpcError::UnknownType { ty, at })?;
                Ok(K::Atom(self.atom(kind)?))
            }
            1..=19 => {
                let kind = Kind::from_code(ty).ok_or(IpcError::UnknownType { ty, at })?;
                let attr = self.u8("an attribute byte")?;
                let v = self.vector(kind)?;
                Ok(K::Vector { attr, v })
            }
            0 => {
                let d = self.deeper(depth)?;
                let _attr = self.u8("an attribute byte")?;
                let n = self.length(2)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.object(d)?);
                }
                Ok(K::List(items))
            }
            98 => {
                let d = self.deeper(depth)?;
                let attr = self.u8("an attribute byte")?;
                let dict_at = self.at();
                let inner = self.object(d)?;
                table_from_dict(inner, attr, dict_at)
            }
            99 | 127 => {
                let d = self.deeper(depth)?;
                let keys = self.object(d)?;
                let values = self.object(d)?;
                if keys.count() != values.count() {
                    return Err(IpcError::Malformed {
                        at,
                        why: format!(
                            "a dictionary with {} key(s) and {} value(s)",
                            keys.count(),
                            values.count()
                        ),
                    });
                }
                Ok(K::Dict {
                    sorted: ty == 127,
                    keys: Box::new(keys),
                    values: Box::new(values),
                })
            }
            -128 => Ok(K::Error(self.symbol()?)),
            100 => {
                let d = self.deeper(depth)?;
                let ctx = self.symbol()?;
                let body = self.object(d)?;
                let text = body.as_text().unwrap_or("(a lambda)").to_string();
                Ok(K::Function {
                    ty,
                    text: if ctx.is_empty() {
                        text
                    } else {
                        format!("(in .{ctx}) {text}")
                    },
                })
            }
            101 => {
                let b = self.u8("a primitive")?;
                if b == 0 {
                    Ok(K::Null)
                } else {
                    Ok(K::Function {
                        ty,
                        text: format!("(unary primitive {b})"),
                    })
                }
            }
            102 | 103 => {
                let b = self.u8("a primitive")?;
                Ok(K::Function {
                    ty,
                    text: format!("(primitive {b})"),
                })
            }
            104 | 105 => {
                let d = self.deeper(depth)?;
                let n = self.length(2)?;
                for _ in 0..n {
                    self.object(d)?;
                }
                Ok(K::Function {
                    ty,
                    text: if ty == 104 {
                        "(a projection)".into()
                    } else {
                        "(a composition)".into()
                    },
                })
            }
            106..=111 => {
                let d = self.deeper(depth)?;
                self.object(d)?;
                Ok(K::Function {
                    ty,
                    text: "(a derived function)".into(),
                })
            }
            _ => Err(IpcError::UnknownType { ty, at }),
        }
    }

    fn atom(&mut self, kind: Kind) -> Result<Atom> {
        Ok(match kind {
            Kind::Bool => Atom::Bool(self.u8("a boolean")? != 0),
            Kind::Guid => Atom::Guid(self.array::<16>("a guid")?),
            Kind::Byte => Atom::Byte(self.u8("a byte")?),
            Kind::Short => Atom::Short(self.i16()?),
            Kind::Int | Kind::Month | Kind::Date | Kind::Minute | Kind::Second | Kind::Time => {
                Atom::Int(kind, self.i32("an int")?)
            }
            Kind::Long | Kind::Timestamp | Kind::Timespan => Atom::Long(kind, self.i64()?),
            Kind::Real => Atom::Real(self.f32()?),
            Kind::Float | Kind::Datetime => Atom::Float(kind, self.f64()?),
            Kind::Char => Atom::Char(self.u8("a char")?),
            Kind::Symbol => Atom::Symbol(self.symbol()?),
        })
    }

    fn vector(&mut self, kind: Kind) -> Result<Vector> {
        let n = self.length(kind.width().max(1))?;
        Ok(match kind {
            Kind::Bool => Vector::Bool(self.take(n, "booleans")?.iter().map(|b| *b != 0).collect()),
            Kind::Byte => Vector::Byte(self.take(n, "bytes")?.to_vec()),
            Kind::Char => Vector::Char(self.take(n, "chars")?.to_vec()),
            Kind::Guid => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array::<16>("a guid")?);
                }
                Vector::Guid(v)
            }
            Kind::Short => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.i16()?);
                }
                Vector::Short(v)
            }
            Kind::Int | Kind::Month | Kind::Date | Kind::Minute | Kind::Second | Kind::Time => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.i32("an int")?);
                }
                Vector::Int(kind, v)
            }
            Kind::Long | Kind::Timestamp | Kind::Timespan => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.i64()?);
                }
                Vector::Long(kind, v)
            }
            Kind::Real => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.f32()?);
                }
                Vector::Real(v)
            }
            Kind::Float | Kind::Datetime => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.f64()?);
                }
                Vector::Float(kind, v)
            }
            Kind::Symbol => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.symbol()?);
                }
                Vector::Symbol(v)
            }
        })
    }
}

/// A table's body is a dictionary from a symbol vector (the column names)
/// to a general list of columns, all of one length.
fn table_from_dict(inner: K, attr: u8, at: usize) -> Result<K> {
    let bad = |why: String| IpcError::Malformed { at, why };
    let K::Dict { keys, values, .. } = inner else {
        return Err(bad("a table whose body is not a dictionary".into()));
    };
    let names = match *keys {
        K::Vector {
            v: Vector::Symbol(s),
            ..
        } => s,
        _ => return Err(bad("a table whose column names are not symbols".into())),
    };
    let columns = match *values {
        K::List(c) => c,
        _ => return Err(bad("a table whose columns are not a general list".into())),
    };
    if let Some(first) = columns.first() {
        let rows = first.count();
        for (name, c) in names.iter().zip(&columns) {
            if matches!(c, K::Atom(_)) || c.count() != rows {
                return Err(bad(format!(
                    "column `{name}` has {} item(s), the first column {rows}",
                    c.count()
                )));
            }
        }
    }
    Ok(K::Table(Table {
        attr,
        names,
        columns,
    }))
}
