//! A CSV writer (RFC 4180): a header row, then one row per record; fields
//! holding a comma, a quote or a line break are quoted, quotes doubled.

use std::io::Write;

/// Quotes a field when it needs it.
pub fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub struct CsvWriter<W: Write> {
    out: W,
    columns: usize,
}

impl<W: Write> CsvWriter<W> {
    pub fn new(mut out: W, header: &[&str]) -> std::io::Result<CsvWriter<W>> {
        let line: Vec<String> = header.iter().map(|h| field(h)).collect();
        writeln!(out, "{}", line.join(","))?;
        Ok(CsvWriter {
            out,
            columns: header.len(),
        })
    }

    /// Writes one record; it must have as many fields as the header.
    pub fn row(&mut self, fields: &[String]) -> std::io::Result<()> {
        if fields.len() != self.columns {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "CSV row of {} fields, header has {}",
                    fields.len(),
                    self.columns
                ),
            ));
        }
        let line: Vec<String> = fields.iter().map(|f| field(f)).collect();
        writeln!(self.out, "{}", line.join(","))
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// An optional number as a CSV field: empty when absent.
pub fn opt(x: Option<f64>, decimals: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.decimals$}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_what_needs_quoting() {
        let mut buf = Vec::new();
        {
            let mut w = CsvWriter::new(&mut buf, &["a", "b,c"]).unwrap();
            w.row(&["1".into(), "say \"hi\"".into()]).unwrap();
            w.row(&["x\ny".into(), opt(None, 2)]).unwrap();
            assert!(w.row(&["only one".into()]).is_err());
        }
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "a,\"b,c\"\n1,\"say \"\"hi\"\"\"\n\"x\ny\",\n"
        );
        assert_eq!(opt(Some(1.23456), 2), "1.23");
        assert_eq!(opt(Some(f64::NAN), 2), "");
    }
}
