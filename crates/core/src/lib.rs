//! tickdb-core owns the data model shared by every role: the schema (tables,
//! column types, memory-domain placement), the columnar `Batch` that travels
//! from ingest to journal to subscribers, its byte codec, and the in-memory
//! column store the RDB answers queries from.

pub mod batch;
pub mod codec;
pub mod domain;
pub mod error;
pub mod from_arrow;
pub mod schema;
pub mod schema_change;
pub mod schema_diff;
mod schema_file;
pub mod store;
pub mod testing;

pub use batch::{Batch, BatchBuilder, Column, ColumnData};
pub use error::CoreError;
pub use schema::{ColumnDef, ColumnType, Schema, TableDef, TableKind};
