//! A table's symbol dictionary (kdb+ `sym`): each distinct symbol gets a
//! dense u32 id once, forever, so symbol columns store 4-byte ids and chunks
//! and the symbol index agree on ids across the whole table.

use arrow_array::StringArray;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Default)]
pub struct SymbolDict {
    names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u32>,
    /// The names as an Arrow array, rebuilt only when a symbol was added
    /// since the last call: readers share it as the dictionary values.
    values: Option<Arc<StringArray>>,
}

impl SymbolDict {
    pub fn intern(&mut self, s: &str) -> u32 {
        if let Some(id) = self.ids.get(s) {
            return *id;
        }
        let id = self.names.len() as u32;
        let name: Arc<str> = Arc::from(s);
        self.names.push(name.clone());
        self.ids.insert(name, id);
        self.values = None;
        id
    }

    pub fn values(&mut self) -> Arc<StringArray> {
        if let Some(v) = &self.values {
            return v.clone();
        }
        let v = Arc::new(StringArray::from_iter_values(
            self.names.iter().map(|s| &**s),
        ));
        self.values = Some(v.clone());
        v
    }
}
