//! What the q-sql subset knows of the tables, and the two answers that come
//! from the schema alone: `meta t` and `tables[]`.

use super::convert::q_kind;
use super::QError;
use tickdb_core::schema::{ColumnType, Schema};
use tickdb_ipc::{Table, Vector, K};

pub struct SchemaCatalog<'a>(pub &'a Schema);

impl tickdb_ipc::qsql::Catalog for SchemaCatalog<'_> {
    fn columns(&self, table: &str) -> Option<Vec<String>> {
        self.0
            .table(table)
            .map(|d| d.columns.iter().map(|c| c.name.clone()).collect())
    }

    fn time_column(&self, table: &str) -> Option<String> {
        self.0
            .table(table)
            .map(|d| d.columns[d.time_column].name.clone())
    }
}

/// `meta t`: a table keyed by `c` (column names) with `t` (q type
/// letters), `f` (foreign keys: none) and `a` (attributes: `g` on the
/// symbol column the index is built on, as kdb+'s `g#`).
pub fn meta(schema: &Schema, table: &str) -> Result<K, QError> {
    let Some(d) = schema.table(table) else {
        return Err(QError::new(table, format!("no table `{table}`")));
    };
    let names: Vec<String> = d.columns.iter().map(|c| c.name.clone()).collect();
    let letters: Vec<u8> = d
        .columns
        .iter()
        .map(|c| match (q_kind(c.ty), c.ty) {
            (Some(k), _) => k.letter(),
            (None, ColumnType::Str) => b'C',
            (None, _) => b'X',
        })
        .collect();
    let attrs: Vec<String> = (0..d.columns.len())
        .map(|i| {
            if d.sym_column == Some(i) {
                "g".to_string()
            } else {
                String::new()
            }
        })
        .collect();
    let n = names.len();
    Ok(K::dict(
        K::Table(Table {
            attr: 0,
            names: vec!["c".into()],
            columns: vec![K::vector(Vector::Symbol(names))],
        }),
        K::Table(Table {
            attr: 0,
            names: vec!["t".into(), "f".into(), "a".into()],
            columns: vec![
                K::vector(Vector::Char(letters)),
                K::vector(Vector::Symbol(vec![String::new(); n])),
                K::vector(Vector::Symbol(attrs)),
            ],
        }),
    ))
}

/// `tables[]`: the table names, sorted as q sorts them.
pub fn tables(schema: &Schema) -> K {
    let mut names: Vec<String> = schema.tables.iter().map(|t| t.name.clone()).collect();
    names.sort();
    K::vector(Vector::Symbol(names))
}
