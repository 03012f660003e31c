//! q objects as this server holds them: atoms, typed vectors, general
//! lists, dictionaries, tables, keyed tables, errors and the generic null.
//!
//! Storage is grouped by width: a date, a month, a minute, a second and a
//! time are all 4-byte integers in q, so they share `Vector::Int` with their
//! `Kind` saying which. Temporal values keep q's own encoding (counts since
//! 2000.01.01); `temporal` converts to and from Unix time.

/// A q type, by its type number (vectors positive, atoms negative).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Bool,
    Guid,
    Byte,
    Short,
    Int,
    Long,
    Real,
    Float,
    Char,
    Symbol,
    Timestamp,
    Month,
    Date,
    Datetime,
    Timespan,
    Minute,
    Second,
    Time,
}

impl Kind {
    pub const ALL: [Kind; 18] = [
        Kind::Bool,
        Kind::Guid,
        Kind::Byte,
        Kind::Short,
        Kind::Int,
        Kind::Long,
        Kind::Real,
        Kind::Float,
        Kind::Char,
        Kind::Symbol,
        Kind::Timestamp,
        Kind::Month,
        Kind::Date,
        Kind::Datetime,
        Kind::Timespan,
        Kind::Minute,
        Kind::Second,
        Kind::Time,
    ];

    /// The vector type number (the atom's is its negation).
    pub fn code(self) -> i8 {
        match self {
            Kind::Bool => 1,
            Kind::Guid => 2,
            Kind::Byte => 4,
            Kind::Short => 5,
            Kind::Int => 6,
            Kind::Long => 7,
            Kind::Real => 8,
            Kind::Float => 9,
            Kind::Char => 10,
            Kind::Symbol => 11,
            Kind::Timestamp => 12,
            Kind::Month => 13,
            Kind::Date => 14,
            Kind::Datetime => 15,
            Kind::Timespan => 16,
            Kind::Minute => 17,
            Kind::Second => 18,
            Kind::Time => 19,
        }
    }

    pub fn from_code(code: i8) -> Option<Kind> {
        let c = code.checked_abs()?;
        Kind::ALL.into_iter().find(|k| k.code() == c)
    }

    /// q's name for the type (`meta`'s column `t` is `char`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bool => "boolean",
            Kind::Guid => "guid",
            Kind::Byte => "byte",
            Kind::Short => "short",
            Kind::Int => "int",
            Kind::Long => "long",
            Kind::Real => "real",
            Kind::Float => "float",
            Kind::Char => "char",
            Kind::Symbol => "symbol",
            Kind::Timestamp => "timestamp",
            Kind::Month => "month",
            Kind::Date => "date",
            Kind::Datetime => "datetime",
            Kind::Timespan => "timespan",
            Kind::Minute => "minute",
            Kind::Second => "second",
            Kind::Time => "time",
        }
    }

    /// q's type letter (`meta`'s `t` column).
    pub fn letter(self) -> u8 {
        match self {
            Kind::Bool => b'b',
            Kind::Guid => b'g',
            Kind::Byte => b'x',
            Kind::Short => b'h',
            Kind::Int => b'i',
            Kind::Long => b'j',
            Kind::Real => b'e',
            Kind::Float => b'f',
            Kind::Char => b'c',
            Kind::Symbol => b's',
            Kind::Timestamp => b'p',
            Kind::Month => b'm',
            Kind::Date => b'd',
            Kind::Datetime => b'z',
            Kind::Timespan => b'n',
            Kind::Minute => b'u',
            Kind::Second => b'v',
            Kind::Time => b't',
        }
    }

    /// Bytes per item on the wire (symbols: variable, 0).
    pub fn width(self) -> usize {
        match self {
            Kind::Bool | Kind::Byte | Kind::Char => 1,
            Kind::Guid => 16,
            Kind::Short => 2,
            Kind::Int
            | Kind::Real
            | Kind::Month
            | Kind::Date
            | Kind::Minute
            | Kind::Second
            | Kind::Time => 4,
            Kind::Long | Kind::Float | Kind::Timestamp | Kind::Datetime | Kind::Timespan => 8,
            Kind::Symbol => 0,
        }
    }
}

/// q's nulls and infinities for the integer types (the float types use NaN
/// and IEEE infinities; a symbol's null is the empty symbol; a char's, a
/// space; a guid's, sixteen zero bytes).
pub mod nulls {
    pub const SHORT_NULL: i16 = i16::MIN;
    pub const SHORT_INF: i16 = i16::MAX;
    pub const INT_NULL: i32 = i32::MIN;
    pub const INT_INF: i32 = i32::MAX;
    pub const LONG_NULL: i64 = i64::MIN;
    pub const LONG_INF: i64 = i64::MAX;
}

/// One value of any atom type.
#[derive(Clone, Debug, PartialEq)]
pub enum Atom {
    Bool(bool),
    Guid([u8; 16]),
    Byte(u8),
    Short(i16),
    /// Int, Month, Date, Minute, Second, Time.
    Int(Kind, i32),
    /// Long, Timestamp, Timespan.
    Long(Kind, i64),
    Real(f32),
    /// Float, Datetime.
    Float(Kind, f64),
    Char(u8),
    Symbol(String),
}

impl Atom {
    pub fn kind(&self) -> Kind {
        match self {
            Atom::Bool(_) => Kind::Bool,
            Atom::Guid(_) => Kind::Guid,
            Atom::Byte(_) => Kind::Byte,
            Atom::Short(_) => Kind::Short,
            Atom::Int(k, _) | Atom::Long(k, _) | Atom::Float(k, _) => *k,
            Atom::Real(_) => Kind::Real,
            Atom::Char(_) => Kind::Char,
            Atom::Symbol(_) => Kind::Symbol,
        }
    }
}

/// A typed vector.
#[derive(Clone, Debug, PartialEq)]
pub enum Vector {
    Bool(Vec<bool>),
    Guid(Vec<[u8; 16]>),
    Byte(Vec<u8>),
    Short(Vec<i16>),
    Int(Kind, Vec<i32>),
    Long(Kind, Vec<i64>),
    Real(Vec<f32>),
    Float(Kind, Vec<f64>),
    Char(Vec<u8>),
    Symbol(Vec<String>),
}

impl Vector {
    /// An empty vector of `kind`.
    pub fn empty(kind: Kind) -> Vector {
        match kind {
            Kind::Bool => Vector::Bool(Vec::new()),
            Kind::Guid => Vector::Guid(Vec::new()),
            Kind::Byte => Vector::Byte(Vec::new()),
            Kind::Short => Vector::Short(Vec::new()),
            Kind::Int | Kind::Month | Kind::Date | Kind::Minute | Kind::Second | Kind::Time => {
                Vector::Int(kind, Vec::new())
            }
            Kind::Long | Kind::Timestamp | Kind::Timespan => Vector::Long(kind, Vec::new()),
            Kind::Real => Vector::Real(Vec::new()),
            Kind::Float | Kind::Datetime => Vector::Float(kind, Vec::new()),
            Kind::Char => Vector::Char(Vec::new()),
            Kind::Symbol => Vector::Symbol(Vec::new()),
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Vector::Bool(_) => Kind::Bool,
            Vector::Guid(_) => Kind::Guid,
            Vector::Byte(_) => Kind::Byte,
            Vector::Short(_) => Kind::Short,
            Vector::Int(k, _) | Vector::Long(k, _) | Vector::Float(k, _) => *k,
            Vector::Real(_) => Kind::Real,
            Vector::Char(_) => Kind::Char,
            Vector::Symbol(_) => Kind::Symbol,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Vector::Bool(v) => v.len(),
            Vector::Guid(v) => v.len(),
            Vector::Byte(v) | Vector::Char(v) => v.len(),
            Vector::Short(v) => v.len(),
            Vector::Int(_, v) => v.len(),
            Vector::Long(_, v) => v.len(),
            Vector::Real(v) => v.len(),
            Vector::Float(_, v) => v.len(),
            Vector::Symbol(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Item `i` as an atom.
    pub fn get(&self, i: usize) -> Option<Atom> {
        Some(match self {
            Vector::Bool(v) => Atom::Bool(*v.get(i)?),
            Vector::Guid(v) => Atom::Guid(*v.get(i)?),
            Vector::Byte(v) => Atom::Byte(*v.get(i)?),
            Vector::Short(v) => Atom::Short(*v.get(i)?),
            Vector::Int(k, v) => Atom::Int(*k, *v.get(i)?),
            Vector::Long(k, v) => Atom::Long(*k, *v.get(i)?),
            Vector::Real(v) => Atom::Real(*v.get(i)?),
            Vector::Float(k, v) => Atom::Float(*k, *v.get(i)?),
            Vector::Char(v) => Atom::Char(*v.get(i)?),
            Vector::Symbol(v) => Atom::Symbol(v.get(i)?.clone()),
        })
    }

    /// Appends `a`; false (and nothing appended) when its type differs.
    pub fn push(&mut self, a: &Atom) -> bool {
        match (self, a) {
            (Vector::Bool(v), Atom::Bool(x)) => v.push(*x),
            (Vector::Guid(v), Atom::Guid(x)) => v.push(*x),
            (Vector::Byte(v), Atom::Byte(x)) => v.push(*x),
            (Vector::Short(v), Atom::Short(x)) => v.push(*x),
            (Vector::Int(k, v), Atom::Int(j, x)) if k == j => v.push(*x),
            (Vector::Long(k, v), Atom::Long(j, x)) if k == j => v.push(*x),
            (Vector::Real(v), Atom::Real(x)) => v.push(*x),
            (Vector::Float(k, v), Atom::Float(j, x)) if k == j => v.push(*x),
            (Vector::Char(v), Atom::Char(x)) => v.push(*x),
            (Vector::Symbol(v), Atom::Symbol(x)) => v.push(x.clone()),
            _ => return false,
        }
        true
    }
}

/// A q object.
#[derive(Clone, Debug, PartialEq)]
pub enum K {
    Atom(Atom),
    /// A typed vector and its attribute byte (0 none, 1 `s#`, 2 `u#`,
    /// 3 `p#`, 4 `g#`).
    Vector {
        attr: u8,
        v: Vector,
    },
    /// A general list (type 0).
    List(Vec<K>),
    /// A dictionary (type 99; 127 when sorted). A keyed table is a
    /// dictionary from a table to a table.
    Dict {
        sorted: bool,
        keys: Box<K>,
        values: Box<K>,
    },
    /// A table (type 98): column names and columns of equal length.
    Table(Table),
    /// The generic null `::` (type 101, value 0).
    Null,
    /// An error (type -128).
    Error(String),
    /// A function of any kind (types 100 to 112), kept only to be named in
    /// an error: this server evaluates none sent to it.
    Function {
        ty: i8,
        text: String,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Table {
    /// The attribute byte of the table itself (`s#` on a sorted table).
    pub attr: u8,
    pub names: Vec<String>,
    pub columns: Vec<K>,
}

impl Table {
    /// Rows: the length of the first column (0 without columns).
    pub fn rows(&self) -> usize {
        self.columns.first().map(K::count).unwrap_or(0)
    }
}

impl K {
    pub fn vector(v: Vector) -> K {
        K::Vector { attr: 0, v }
    }

    pub fn symbol(s: &str) -> K {
        K::Atom(Atom::Symbol(s.to_string()))
    }

    pub fn string(s: &str) -> K {
        K::vector(Vector::Char(s.as_bytes().to_vec()))
    }

    pub fn symbols<S: AsRef<str>>(items: &[S]) -> K {
        K::vector(Vector::Symbol(
            items.iter().map(|s| s.as_ref().to_string()).collect(),
        ))
    }

    pub fn table(names: Vec<String>, columns: Vec<K>) -> K {
        K::Table(Table {
            attr: 0,
            names,
            columns,
        })
    }

    pub fn dict(keys: K, values: K) -> K {
        K::Dict {
            sorted: false,
            keys: Box::new(keys),
            values: Box::new(values),
        }
    }

    /// q's `count`: items of a vector or list, rows of a table, keys of a
    /// dictionary; 1 for an atom.
    pub fn count(&self) -> usize {
        match self {
            K::Vector { v, .. } => v.len(),
            K::List(l) => l.len(),
            K::Table(t) => t.rows(),
            K::Dict { keys, .. } => keys.count(),
            _ => 1,
        }
    }

    /// The text of a char vector or a char atom; a symbol's name.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            K::Vector {
                v: Vector::Char(c), ..
            } => std::str::from_utf8(c).ok(),
            K::Atom(Atom::Symbol(s)) => Some(s),
            _ => None,
        }
    }

    /// The q type number.
    pub fn type_code(&self) -> i8 {
        match self {
            K::Atom(a) => -a.kind().code(),
            K::Vector { v, .. } => v.kind().code(),
            K::List(_) => 0,
            K::Dict { sorted: false, .. } => 99,
            K::Dict { sorted: true, .. } => 127,
            K::Table(_) => 98,
            K::Null => 101,
            K::Error(_) => -128,
            K::Function { ty, .. } => *ty,
        }
    }
}
