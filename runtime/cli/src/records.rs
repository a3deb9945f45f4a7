//! Machine-readable output: `--format json|csv` (or `--json`) makes a command print one
//! self-describing record per measured row ([`Record`], JSON lines or CSV) instead of its human
//! table.

use std::io::{self, Write};

pub(crate) use sagessd_experiments::record::{Record, write_csv, write_json};

use clap::{Args, ValueEnum};

/// How a command prints its results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// The human tables (the default).
    #[default]
    Table,
    /// One JSON object per line.
    Json,
    /// CSV with one header line.
    Csv,
}

/// The output flags every measuring command takes.
#[derive(Clone, Debug, Args)]
pub(crate) struct FormatArgs {
    /// Output: the human tables, or one record per row as JSON lines or CSV (progress and notes
    /// go to stderr then).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Shorthand for --format json.
    #[arg(long, conflicts_with = "format")]
    json: bool,
}

impl FormatArgs {
    /// The format asked for.
    pub(crate) fn format(&self) -> Format {
        if self.json { Format::Json } else { self.format }
    }
}

/// Where a command's results go: in table mode its human text, otherwise its records.
pub(crate) struct Output {
    format: Format,
    records: Vec<Record>,
}

impl Output {
    /// Output in `format`.
    pub(crate) fn new(format: Format) -> Self {
        Self {
            format,
            records: Vec::new(),
        }
    }

    /// Whether the human tables are printed.
    pub(crate) fn human(&self) -> bool {
        self.format == Format::Table
    }

    /// Prints `text` (a line of the human table, with its newline) in table mode; otherwise
    /// nothing (the records carry the numbers).
    pub(crate) fn text(&self, text: impl AsRef<str>) {
        if self.human() {
            print!("{}", text.as_ref());
        }
    }

    /// Prints `note` (an explanation) on stdout in table mode, on stderr otherwise, so that the
    /// records stay alone on stdout.
    pub(crate) fn note(&self, note: impl AsRef<str>) {
        if self.human() {
            println!("{}", note.as_ref());
        } else {
            eprintln!("{}", note.as_ref());
        }
    }

    /// Adds a record (written by [`Self::finish`]; JSON lines are written at once).
    pub(crate) fn record(&mut self, record: Record) -> io::Result<()> {
        match self.format {
            Format::Table => Ok(()),
            Format::Json => {
                let mut out = io::stdout().lock();
                write_json(&record, &mut out)?;
                out.flush()
            }
            Format::Csv => {
                self.records.push(record);
                Ok(())
            }
        }
    }

    /// Writes what is still held (the CSV, whose header needs every record).
    pub(crate) fn finish(self) -> io::Result<()> {
        if self.format == Format::Csv {
            let mut out = io::stdout().lock();
            write_csv(&self.records, &mut out)?;
            out.flush()?;
        }
        Ok(())
    }
}
