//! Writing q objects. This server sends little-endian (byte 0 of the
//! header is 1), which every kdb+ client reads; big-endian output exists
//! for tests that check the decoder against both orders.

use crate::value::{Atom, Vector, K};

/// Appends the little-endian serialization of `k` to `out`.
pub fn encode_into(k: &K, out: &mut Vec<u8>) {
    encode_ordered(k, false, out)
}

/// Appends the serialization of `k` in the given byte order.
pub fn encode_ordered(k: &K, big: bool, out: &mut Vec<u8>) {
    let mut o = Out {
        buf: std::mem::take(out),
        big,
    };
    o.object(k);
    *out = o.buf;
}

struct Out {
    buf: Vec<u8>,
    big: bool,
}

macro_rules! put {
    ($self:ident, $x:expr) => {
        if $self.big {
            $self.buf.extend_from_slice(&$x.to_be_bytes())
        } else {
            $self.buf.extend_from_slice(&$x.to_le_bytes())
        }
    };
}

/// The serialization of `k` on its own (no message header).
pub fn encode(k: &K) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(k, &mut out);
    out
}

impl Out {
    fn object(&mut self, k: &K) {
        let out = self;
        match k {
            K::Atom(a) => {
                out.buf.push((-a.kind().code()) as u8);
                out.atom(a);
            }
            K::Vector { attr, v } => {
                out.buf.push(v.kind().code() as u8);
                out.buf.push(*attr);
                out.vector(v);
            }
            K::List(items) => {
                out.buf.push(0);
                out.buf.push(0);
                out.len(items.len());
                for i in items {
                    out.object(i);
                }
            }
            K::Dict {
                sorted,
                keys,
                values,
            } => {
                out.buf.push(if *sorted { 127 } else { 99 });
                out.object(keys);
                out.object(values);
            }
            K::Table(t) => {
                out.buf.extend_from_slice(&[98, t.attr, 99, 11, 0]);
                out.len(t.names.len());
                for n in &t.names {
                    out.symbol(n);
                }
                out.buf.extend_from_slice(&[0, 0]);
                out.len(t.columns.len());
                for c in &t.columns {
                    out.object(c);
                }
            }
            K::Null => out.buf.extend_from_slice(&[101, 0]),
            K::Error(e) => {
                out.buf.push(0x80);
                out.symbol(e);
            }
            // Functions are never sent by this server; should one be, it goes as
            // its text (a char vector), which every client can show.
            K::Function { text, .. } => out.object(&K::string(text)),
        }
    }

    fn len(&mut self, n: usize) {
        // Messages are bounded far below 2^31 bytes (the frame checks), so a
        // count fits.
        put!(self, (n.min(i32::MAX as usize) as i32));
    }

    /// A symbol: its bytes up to any NUL (q symbols hold none), then a NUL.
    fn symbol(&mut self, s: &str) {
        let b = s.as_bytes();
        let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
        self.buf.extend_from_slice(&b[..end]);
        self.buf.push(0);
    }

    fn atom(&mut self, a: &Atom) {
        match a {
            Atom::Bool(b) => self.buf.push(*b as u8),
            Atom::Guid(g) => self.buf.extend_from_slice(g),
            Atom::Byte(b) | Atom::Char(b) => self.buf.push(*b),
            Atom::Short(x) => put!(self, x),
            Atom::Int(_, x) => put!(self, x),
            Atom::Long(_, x) => put!(self, x),
            Atom::Real(x) => put!(self, x),
            Atom::Float(_, x) => put!(self, x),
            Atom::Symbol(s) => self.symbol(s),
        }
    }

    fn vector(&mut self, v: &Vector) {
        self.len(v.len());
        match v {
            Vector::Bool(x) => self.buf.extend(x.iter().map(|b| *b as u8)),
            Vector::Guid(x) => x.iter().for_each(|g| self.buf.extend_from_slice(g)),
            Vector::Byte(x) | Vector::Char(x) => self.buf.extend_from_slice(x),
            Vector::Short(x) => x.iter().for_each(|i| put!(self, i)),
            Vector::Int(_, x) => x.iter().for_each(|i| put!(self, i)),
            Vector::Long(_, x) => x.iter().for_each(|i| put!(self, i)),
            Vector::Real(x) => x.iter().for_each(|i| put!(self, i)),
            Vector::Float(_, x) => x.iter().for_each(|i| put!(self, i)),
            Vector::Symbol(x) => x.iter().for_each(|s| self.symbol(s)),
        }
    }
}
