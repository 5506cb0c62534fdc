//! The paper's published numbers of Tables 4–12, embedded from `paper/table<N>.csv` (see
//! `paper/README.md`) and parsed into typed rows: a family, a size where the table has one,
//! and per value column the number and the text the paper prints.
//!
//! Column names are those of our tables as Markdown and CSV print them: a grouped column is
//! `<header> (<group>)`, so the CSV's `Real: Loss` is `Loss (Held-out real games)` here.

use std::path::Path;

use cwm_models::{Family, Size};

use crate::error::ReportError;
use crate::format;
use crate::tables::{PAPER_ORDER, paper_name, size_label};

/// Table 8's column group of the held-out real test split.
pub const REAL_GROUP: &str = "Held-out real games";
/// Table 8's column group of the random-uniform test split.
pub const RANDOM_GROUP: &str = "Random-uniform games";

/// The size of the models of the paper's Tables 11 and 12.
pub const BINS_SIZE: Size = Size::D512;

/// What identifies a row of a published table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// A `Model` column (Table 4).
    Model,
    /// `Model` (or `Variant`) and `Size` columns.
    ModelSize,
    /// A `Model` column, every row at one size (Tables 11 and 12).
    ModelAt(Size),
}

impl Keys {
    fn columns(self) -> usize {
        match self {
            Keys::ModelSize => 2,
            Keys::Model | Keys::ModelAt(_) => 1,
        }
    }
}

/// One embedded file.
struct File {
    number: u8,
    name: &'static str,
    text: &'static str,
    keys: Keys,
}

const FILES: [File; 9] = [
    File {
        number: 4,
        name: "table4.csv",
        text: include_str!("../paper/table4.csv"),
        keys: Keys::Model,
    },
    File {
        number: 5,
        name: "table5.csv",
        text: include_str!("../paper/table5.csv"),
        keys: Keys::ModelSize,
    },
    File {
        number: 6,
        name: "table6.csv",
        text: include_str!("../paper/table6.csv"),
        keys: Keys::ModelSize,
    },
    File {
        number: 7,
        name: "table7.csv",
        text: include_str!("../paper/table7.csv"),
        keys: Keys::ModelSize,
    },
    File {
        number: 8,
        name: "table8.csv",
        text: include_str!("../paper/table8.csv"),
        keys: Keys::ModelSize,
    },
    File {
        number: 9,
        name: "table9.csv",
        text: include_str!("../paper/table9.csv"),
        keys: Keys::ModelSize,
    },
    File {
        number: 10,
        name: "table10.csv",
        text: include_str!("../paper/table10.csv"),
        keys: Keys::ModelSize,
    },
    File {
        number: 11,
        name: "table11.csv",
        text: include_str!("../paper/table11.csv"),
        keys: Keys::ModelAt(BINS_SIZE),
    },
    File {
        number: 12,
        name: "table12.csv",
        text: include_str!("../paper/table12.csv"),
        keys: Keys::ModelAt(BINS_SIZE),
    },
];

/// One published number.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedValue {
    /// The number.
    pub value: f64,
    /// As the paper prints it (`5.60×10⁻⁵`).
    pub text: String,
    /// As the CSV file writes it (`5.60e-5`).
    pub raw: String,
}

/// One row of a published table.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedRow {
    /// The model.
    pub family: Family,
    /// The size (`None` in Table 4, whose columns are the sizes).
    pub size: Option<Size>,
    /// One value per column of [`PublishedTable::headers`].
    pub values: Vec<PublishedValue>,
}

/// One published table.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedTable {
    /// The paper's number (4 to 12).
    pub number: u8,
    /// The embedded file (`table8.csv`).
    pub file: &'static str,
    /// The value columns, named as in our tables.
    pub headers: Vec<String>,
    /// The rows, in the paper's order.
    pub rows: Vec<PublishedRow>,
}

impl PublishedTable {
    /// The value of `family` at `size` in column `header`.
    pub fn get(&self, family: Family, size: Option<Size>, header: &str) -> Option<&PublishedValue> {
        let column = self.headers.iter().position(|h| h == header)?;
        self.rows
            .iter()
            .find(|r| r.family == family && r.size == size)
            .and_then(|r| r.values.get(column))
    }

    /// The number of `family` at `size` in column `header`.
    pub fn value(&self, family: Family, size: Option<Size>, header: &str) -> Option<f64> {
        self.get(family, size, header).map(|v| v.value)
    }
}

/// Every published table.
#[derive(Debug, Clone, PartialEq)]
pub struct Paper {
    /// Tables 4 to 12, in order.
    pub tables: Vec<PublishedTable>,
}

impl Paper {
    /// Parses the embedded files.
    ///
    /// # Errors
    /// [`ReportError::Field`] naming the file, the line and the column of a cell that does
    /// not parse.
    pub fn load() -> Result<Paper, ReportError> {
        let tables = FILES.iter().map(parse).collect::<Result<_, _>>()?;
        Ok(Paper { tables })
    }

    /// Table `number`, if the paper has it among Tables 4–12.
    pub fn table(&self, number: u8) -> Option<&PublishedTable> {
        self.tables.iter().find(|t| t.number == number)
    }
}

/// The column name of a CSV header: `Real: Loss` → `Loss (Held-out real games)`.
fn column_name(header: &str) -> String {
    if let Some(rest) = header.strip_prefix("Real: ") {
        format!("{rest} ({REAL_GROUP})")
    } else if let Some(rest) = header.strip_prefix("RU: ") {
        format!("{rest} ({RANDOM_GROUP})")
    } else {
        header.to_owned()
    }
}

fn parse(file: &File) -> Result<PublishedTable, ReportError> {
    let path = Path::new("paper").join(file.name);
    let mut lines = file.text.lines().filter(|l| !l.trim().is_empty());
    let header = lines
        .next()
        .ok_or_else(|| ReportError::field(&path, "header", "the file is empty"))?;
    let keys = file.keys.columns();
    let headers: Vec<String> = header.split(',').skip(keys).map(column_name).collect();
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let at = |column: &str| format!("line {}, {column}", i + 2);
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != keys + headers.len() {
            return Err(ReportError::field(
                &path,
                at("all columns"),
                format!("{} cells, expected {}", cells.len(), keys + headers.len()),
            ));
        }
        let family = PAPER_ORDER
            .into_iter()
            .find(|&f| paper_name(f) == cells[0])
            .ok_or_else(|| ReportError::field(&path, at("Model"), "not a model of the paper"))?;
        let size = match file.keys {
            Keys::Model => None,
            Keys::ModelAt(size) => Some(size),
            Keys::ModelSize => Some(
                Size::ALL
                    .into_iter()
                    .find(|&s| size_label(s) == cells[1])
                    .ok_or_else(|| ReportError::field(&path, at("Size"), "not a size"))?,
            ),
        };
        let values = cells[keys..]
            .iter()
            .zip(&headers)
            .map(|(cell, name)| {
                let value: f64 = cell
                    .parse()
                    .map_err(|_| ReportError::field(&path, at(name), "not a number"))?;
                let text = format::times_ten(cell).unwrap_or_else(|| (*cell).to_owned());
                Ok(PublishedValue {
                    value,
                    text,
                    raw: (*cell).to_owned(),
                })
            })
            .collect::<Result<_, ReportError>>()?;
        rows.push(PublishedRow {
            family,
            size,
            values,
        });
    }
    Ok(PublishedTable {
        number: file.number,
        file: file.name,
        headers,
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::{MAIN, VARIANTS};

    fn paper() -> Paper {
        Paper::load().unwrap()
    }

    fn table(number: u8) -> PublishedTable {
        paper().table(number).unwrap().clone()
    }

    /// Every (family, size) of `families`, family-major, sizes ascending.
    fn cells(families: &[Family]) -> Vec<(Family, Option<Size>)> {
        families
            .iter()
            .flat_map(|&f| Size::ALL.map(|s| (f, Some(s))))
            .collect()
    }

    #[test]
    fn every_table_has_the_papers_rows_in_the_papers_order() {
        let keys = |n: u8| -> Vec<(Family, Option<Size>)> {
            table(n).rows.iter().map(|r| (r.family, r.size)).collect()
        };
        let all: Vec<_> = PAPER_ORDER.iter().map(|&f| (f, None)).collect();
        assert_eq!(keys(4), all);
        for n in [5, 6, 7, 8] {
            assert_eq!(keys(n), cells(&MAIN), "Table {n}");
        }
        for n in [9, 10] {
            assert_eq!(keys(n), cells(&VARIANTS), "Table {n}");
        }
        for n in [11, 12] {
            let d512: Vec<_> = MAIN.iter().map(|&f| (f, Some(BINS_SIZE))).collect();
            assert_eq!(keys(n), d512, "Table {n}");
        }
        assert_eq!(
            table(8).headers[..2],
            [
                "Loss (Held-out real games)",
                "Labelwise (%) (Held-out real games)"
            ]
        );
        assert_eq!(table(11).headers.len(), 7);
        assert_eq!(paper().tables.len(), 9);
    }

    /// Table 5's and Table 7's hyperparameters agree except in SLiCE d512/l6, which the
    /// paper retrained with its second-best first-stage configuration.
    #[test]
    fn tables_5_and_7_agree_except_slice_d512() {
        let (t5, t7) = (table(5), table(7));
        for (family, size) in cells(&MAIN) {
            let same = ["LR", "Warmup", "β2", "Weight decay"]
                .iter()
                .all(|h| t5.value(family, size, h) == t7.value(family, size, h));
            let exception = (family, size) == (Family::Slice, Some(Size::D512));
            assert_eq!(same, !exception, "{family} {size:?}");
        }
        let lr = |t: &PublishedTable| t.value(Family::Slice, Some(Size::D512), "LR");
        assert_eq!((lr(&t5), lr(&t7)), (Some(0.001), Some(0.0003)));
    }

    #[test]
    fn table6_best_floor_is_table7_floor_and_beats_the_other() {
        let (t6, t7) = (table(6), table(7));
        for (family, size) in cells(&MAIN) {
            let best = t6.value(family, size, "Best floor");
            assert_eq!(
                best,
                t7.value(family, size, "LR floor"),
                "{family} {size:?}"
            );
            let other = t6.value(family, size, "Other floor");
            assert!(best.is_some() && best != other, "{family} {size:?}");
            let loss = |h| t6.value(family, size, h).unwrap();
            assert!(
                loss("Best val. loss") < loss("Other val. loss"),
                "{family} {size:?}"
            );
        }
    }

    /// §3.2's parameter ranges are the minimum and maximum of Table 4's four main rows.
    #[test]
    fn table4_main_rows_span_the_stated_ranges() {
        const RANGES: [(&str, f64, f64); 4] = [
            ("d128/l1", 3.13, 3.20),
            ("d256/l2", 7.70, 8.25),
            ("d384/l4", 16.89, 19.72),
            ("d512/l6", 35.14, 40.83),
        ];
        let t4 = table(4);
        for (column, low, high) in RANGES {
            let values: Vec<f64> = MAIN
                .iter()
                .map(|&f| t4.value(f, None, column).unwrap())
                .collect();
            let min = values.iter().copied().fold(f64::INFINITY, f64::min);
            let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            assert_eq!((min, max), (low, high), "{column}");
        }
    }

    /// Our loss format prints the paper's losses as the paper does, but for the one cell it
    /// prints with four decimals (Diagonal SLiCE d128/l1 on random-uniform games).
    #[test]
    fn the_loss_format_reproduces_the_papers_loss_cells() {
        let mut differ = Vec::new();
        for n in [5, 8, 9, 10] {
            let t = table(n);
            for (c, header) in t.headers.iter().enumerate() {
                if !header.contains("oss") {
                    continue;
                }
                for row in &t.rows {
                    let v = &row.values[c];
                    if format::loss(v.value) != v.text {
                        differ.push((n, row.family, v.text.clone()));
                    }
                }
            }
        }
        assert_eq!(differ, [(10, Family::SliceDiag, "35.9174".to_owned())]);
        // Table 6: both losses of a row in scientific form when its best is below 1e-4.
        let t6 = table(6);
        for row in &t6.rows {
            let (best, other) = (&row.values[1], &row.values[3]);
            let print: fn(f64) -> String = if best.value < format::SCI_BELOW {
                format::loss_sci
            } else {
                format::loss
            };
            assert_eq!(print(best.value), best.text, "{row:?}");
            assert_eq!(print(other.value), other.text, "{row:?}");
        }
    }

    #[test]
    fn printed_text_follows_the_paper() {
        let t8 = table(8);
        let v = t8
            .get(
                Family::Transformer,
                Some(Size::D384),
                "Loss (Held-out real games)",
            )
            .unwrap();
        assert_eq!(
            (v.value, v.text.as_str(), v.raw.as_str()),
            (7.65e-5, "7.65×10⁻⁵", "7.65e-5")
        );
        let huge = table(10)
            .get(Family::SliceDiag, Some(Size::D256), "Loss")
            .unwrap()
            .clone();
        assert_eq!((huge.value, huge.text.as_str()), (4.43e17, "4.43×10¹⁷"));
        assert_eq!(
            table(12).value(Family::Mamba3, Some(Size::D512), "500–520"),
            Some(97.23)
        );
        assert_eq!(
            t8.get(
                Family::Mamba2,
                Some(Size::D128),
                "Loss (Held-out real games)"
            ),
            None
        );
    }
}
