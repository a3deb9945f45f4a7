//! A result row as data: a kind (`"compare.mode"`, `"device.check"`, …) and named fields, each
//! name carrying its unit (`makespan_ns`, `bytes_read`, `hit_ratio`), written as a JSON line or
//! as CSV (one header: the `record` column, then every field name in the order it first
//! appears; a field a record lacks left empty). Numbers that are not finite are `null` in JSON
//! and empty in CSV. The experiments write their figures' CSVs with it; the CLI prints every
//! command's rows with it.

use std::io::{self, Write};

/// One field's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Text.
    Str(String),
    /// An unsigned count or quantity.
    U64(u64),
    /// A measured or derived number.
    F64(f64),
    /// A yes/no fact.
    Bool(bool),
    /// A list (of a serialized row): a JSON array in JSON, its JSON text in CSV.
    Json(serde_json::Value),
    /// Not applicable to this row.
    Null,
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Self::Str(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Self::Str(v)
    }
}
impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Self::U64(v)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Self {
        Self::U64(v.into())
    }
}
impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Self::U64(v as u64)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Self::F64(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Self::Null, Into::into)
    }
}

/// One row of a command's results.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    kind: &'static str,
    fields: Vec<(String, Value)>,
}

impl Record {
    /// An empty record of `kind`.
    pub fn new(kind: &'static str) -> Self {
        Self {
            kind,
            fields: Vec::new(),
        }
    }

    /// The record with field `name` (its unit in the name) set to `value`.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<Value>) -> Self {
        let name = name.into();
        debug_assert!(
            name != "record" && self.fields.iter().all(|(n, _)| *n != name),
            "field {name} twice or reserved"
        );
        self.fields.push((name, value.into()));
        self
    }

    /// A record of `kind` from a JSON object (a serialized row), nested objects flattened into
    /// `outer_inner` names; arrays stay arrays (JSON text in CSV).
    pub fn from_json(kind: &'static str, value: &serde_json::Value) -> Self {
        fn flatten(prefix: &str, v: &serde_json::Value, r: Record) -> Record {
            use serde_json::Value as J;
            match v {
                J::Object(map) => map.iter().fold(r, |r, (k, v)| {
                    let name = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}_{k}")
                    };
                    flatten(&name, v, r)
                }),
                J::Null => r.with(prefix, Value::Null),
                J::Bool(b) => r.with(prefix, *b),
                J::Number(n) => match n.as_u64() {
                    Some(u) => r.with(prefix, u),
                    None => r.with(prefix, n.as_f64().unwrap_or(f64::NAN)),
                },
                J::String(s) => r.with(prefix, s.as_str()),
                J::Array(_) => r.with(prefix, Value::Json(v.clone())),
            }
        }
        flatten("", value, Self::new(kind))
    }
}

fn json_value(v: &Value) -> serde_json::Value {
    match v {
        Value::Str(s) => s.clone().into(),
        Value::U64(n) => (*n).into(),
        Value::F64(x) => {
            serde_json::Number::from_f64(*x).map_or(serde_json::Value::Null, Into::into)
        }
        Value::Bool(b) => (*b).into(),
        Value::Json(v) => v.clone(),
        Value::Null => serde_json::Value::Null,
    }
}

/// Writes `record` as one JSON object line, its kind first.
pub fn write_json(record: &Record, out: &mut impl Write) -> io::Result<()> {
    let mut map = serde_json::Map::new();
    map.insert("record".into(), record.kind.into());
    for (name, value) in &record.fields {
        map.insert(name.clone(), json_value(value));
    }
    serde_json::to_writer(&mut *out, &serde_json::Value::Object(map))?;
    writeln!(out)
}

fn csv_cell(v: &Value) -> String {
    let text = match v {
        Value::Str(s) => s.clone(),
        Value::U64(n) => n.to_string(),
        Value::F64(x) if x.is_finite() => x.to_string(),
        Value::F64(_) | Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Json(v) => v.to_string(),
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// Writes `records` as CSV: the `record` column, then every field name in first-appearance order.
pub fn write_csv(records: &[Record], out: &mut impl Write) -> io::Result<()> {
    let mut columns: Vec<&str> = Vec::new();
    for r in records {
        for (name, _) in &r.fields {
            if !columns.contains(&name.as_str()) {
                columns.push(name);
            }
        }
    }
    writeln!(out, "record,{}", columns.join(","))?;
    for r in records {
        let cells: Vec<String> = columns
            .iter()
            .map(|c| {
                r.fields
                    .iter()
                    .find(|(n, _)| n == c)
                    .map_or(String::new(), |(_, v)| csv_cell(v))
            })
            .collect();
        writeln!(out, "{},{}", r.kind, cells.join(","))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Record> {
        vec![
            Record::new("a.row")
                .with("mode", "mmap")
                .with("makespan_ns", 12u64)
                .with("hit_ratio", 0.5)
                .with("note", "x, \"y\""),
            Record::new("a.summary")
                .with("identical", true)
                .with("makespan_ns", None::<u64>)
                .with("ratio", f64::NAN),
        ]
    }

    #[test]
    fn json_lines_carry_the_kind_and_every_field() {
        let mut out = Vec::new();
        for r in rows() {
            write_json(&r, &mut out).unwrap();
        }
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["record"], "a.row");
        assert_eq!(lines[0]["makespan_ns"], 12);
        assert_eq!(lines[0]["hit_ratio"], 0.5);
        assert_eq!(lines[0]["note"], "x, \"y\"");
        assert_eq!(lines[1]["identical"], true);
        assert!(lines[1]["makespan_ns"].is_null());
        assert!(lines[1]["ratio"].is_null(), "NaN is null");
    }

    #[test]
    fn a_nested_json_row_flattens_into_named_fields() {
        let v =
            serde_json::json!({"epoch": 2, "loss": 0.5, "stages": {"sample_s": 1.5}, "idle": null});
        let r = Record::from_json("t.epoch", &v);
        let mut out = Vec::new();
        write_csv(&[r], &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "record,epoch,loss,stages_sample_s,idle\nt.epoch,2,0.5,1.5,\n"
        );
    }

    #[test]
    fn csv_has_one_header_of_every_column_and_quotes_what_needs_it() {
        let mut out = Vec::new();
        write_csv(&rows(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "record,mode,makespan_ns,hit_ratio,note,identical,ratio"
        );
        assert_eq!(lines[1], "a.row,mmap,12,0.5,\"x, \"\"y\"\"\",,");
        assert_eq!(lines[2], "a.summary,,,,,true,");
        assert_eq!(lines.len(), 3);
    }
}
