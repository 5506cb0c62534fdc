//! A rendered table and its three formats: Markdown, LaTeX (booktabs) and CSV.
//!
//! Every cell has the text the paper would print and, optionally, a full-precision `raw`
//! value: Markdown and LaTeX print the text, CSV prints the raw value when there is one (so
//! `3.13M` in Markdown is `3128150` in CSV, and `98.77` is `98.7654321`). Headers carry the
//! unit (`ExactState (%)`), identical in all three formats. The artifacts a table was built
//! from are listed under it (a `Sources:` line in Markdown and LaTeX) and, for CSV, in a
//! sidecar `<id>.sources.csv` (`instance,kind,hash`), so the CSV itself is a plain grid.

use std::fmt::Write as _;

/// One cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// The text Markdown and LaTeX print.
    pub text: String,
    /// The full-precision value CSV prints, when it differs from the text.
    pub raw: Option<String>,
}

impl Cell {
    /// A cell whose CSV value is its text.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            raw: None,
        }
    }

    /// A cell with a separate full-precision CSV value.
    pub fn with_raw(text: impl Into<String>, raw: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            raw: Some(raw.into()),
        }
    }

    /// The empty cell of a value that does not exist (printed as an en dash, empty in CSV).
    pub fn missing() -> Self {
        Self::with_raw("–", "")
    }

    fn csv_value(&self) -> &str {
        self.raw.as_deref().unwrap_or(&self.text)
    }
}

/// How a column is aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text columns.
    Left,
    /// Number columns.
    Right,
}

/// One column.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// The header.
    pub header: String,
    /// The alignment.
    pub align: Align,
    /// A spanning group header above it (LaTeX), or a suffix `header (group)` (Markdown, CSV).
    pub group: Option<String>,
}

impl Column {
    /// A left-aligned text column.
    pub fn left(header: impl Into<String>) -> Self {
        Self {
            header: header.into(),
            align: Align::Left,
            group: None,
        }
    }

    /// A right-aligned number column.
    pub fn right(header: impl Into<String>) -> Self {
        Self {
            header: header.into(),
            align: Align::Right,
            group: None,
        }
    }

    /// The same column under a group header.
    pub fn in_group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// The header with its group as a suffix (`Loss (Held-out real games)`), as Markdown and
    /// CSV print it.
    pub fn flat_header(&self) -> String {
        match &self.group {
            Some(group) => format!("{} ({group})", self.header),
            None => self.header.clone(),
        }
    }
}

/// A table the inputs could not fill, listed in `index.md` with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingTable {
    /// The paper's label, e.g. `Table 5`.
    pub label: String,
    /// Why it is absent, e.g. `no first-stage train run and no select artifact among the
    /// inputs`.
    pub reason: String,
}

/// An artifact a table was built from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Source {
    /// The producing instance, e.g. `train[arch=slice,size=d128]`.
    pub instance: String,
    /// The producer's kind.
    pub kind: String,
    /// The artifact's content hash.
    pub hash: String,
}

/// A run of adjacent columns under one group header (or under none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSpan<'a> {
    /// The group header, `None` for columns outside any group.
    pub group: Option<&'a str>,
    /// Index of the span's first column.
    pub first: usize,
    /// Number of columns it spans.
    pub len: usize,
}

/// A table ready to render.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// File stem of the three files, e.g. `table4_params`.
    pub id: String,
    /// The paper's label, e.g. `Table 4`.
    pub label: String,
    /// The caption.
    pub title: String,
    /// The columns.
    pub columns: Vec<Column>,
    /// The rows; each has one cell per column.
    pub rows: Vec<Vec<Cell>>,
    /// Notes printed under the table.
    pub notes: Vec<String>,
    /// The artifacts it came from, sorted (empty: computed without artifacts).
    pub sources: Vec<Source>,
}

impl Table {
    /// The column groups as spans of adjacent columns, left to right; `None` when no column
    /// has a group (the header then has one row).
    pub fn group_spans(&self) -> Option<Vec<GroupSpan<'_>>> {
        if self.columns.iter().all(|c| c.group.is_none()) {
            return None;
        }
        let mut spans: Vec<GroupSpan<'_>> = Vec::new();
        for (i, column) in self.columns.iter().enumerate() {
            let group = column.group.as_deref();
            match spans.last_mut() {
                Some(span) if span.group == group => span.len += 1,
                _ => spans.push(GroupSpan {
                    group,
                    first: i,
                    len: 1,
                }),
            }
        }
        Some(spans)
    }

    /// The Markdown rendering.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# {}: {}\n", self.label, md_escape(&self.title));
        let headers: Vec<String> = self
            .columns
            .iter()
            .map(|c| md_escape(&c.flat_header()))
            .collect();
        let _ = writeln!(out, "| {} |", headers.join(" | "));
        let rules: Vec<&str> = self
            .columns
            .iter()
            .map(|c| match c.align {
                Align::Left => ":---",
                Align::Right => "---:",
            })
            .collect();
        let _ = writeln!(out, "|{}|", rules.join("|"));
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(|c| md_escape(&c.text)).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out.push('\n');
        for note in &self.notes {
            let _ = writeln!(out, "{}\n", md_escape(note));
        }
        let _ = writeln!(
            out,
            "{}",
            self.sources_line(|s| format!("`{s}`"), str::to_owned)
        );
        out
    }

    /// The LaTeX rendering: a `table` float with a booktabs `tabular`.
    pub fn latex(&self) -> String {
        let mut out = String::new();
        let spec: String = self
            .columns
            .iter()
            .map(|c| match c.align {
                Align::Left => 'l',
                Align::Right => 'r',
            })
            .collect();
        out.push_str("\\begin{table}[ht]\n\\centering\n");
        let _ = writeln!(
            out,
            "\\caption{{{}}}\n\\label{{tab:{}}}",
            tex_escape(&self.title),
            tex_escape(&self.id)
        );
        let _ = writeln!(out, "\\begin{{tabular}}{{{spec}}}\n\\toprule");
        if let Some(spans) = self.group_spans() {
            let mut cells = Vec::new();
            let mut rules = Vec::new();
            for span in spans {
                match span.group {
                    Some(name) => {
                        cells.push(format!(
                            "\\multicolumn{{{}}}{{c}}{{{}}}",
                            span.len,
                            tex_escape(name)
                        ));
                        rules.push(format!(
                            "\\cmidrule(lr){{{}-{}}}",
                            span.first + 1,
                            span.first + span.len
                        ));
                    }
                    None => cells.extend(std::iter::repeat_n(String::new(), span.len)),
                }
            }
            let _ = writeln!(out, "{} \\\\", cells.join(" & "));
            let _ = writeln!(out, "{}", rules.join(" "));
        }
        let headers: Vec<String> = self.columns.iter().map(|c| tex_escape(&c.header)).collect();
        let _ = writeln!(out, "{} \\\\\n\\midrule", headers.join(" & "));
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(|c| tex_escape(&c.text)).collect();
            let _ = writeln!(out, "{} \\\\", cells.join(" & "));
        }
        out.push_str("\\bottomrule\n\\end{tabular}\n");
        out.push_str("\\par\\smallskip\n{\\footnotesize\n");
        for note in &self.notes {
            let _ = writeln!(out, "{}\\par", tex_escape(note));
        }
        let _ = writeln!(
            out,
            "{}\\par",
            self.sources_line(|s| format!("\\texttt{{{}}}", tex_escape(s)), tex_escape)
        );
        out.push_str("}\n\\end{table}\n");
        out
    }

    /// The CSV rendering: one header line, then the rows (raw values where a cell has one).
    pub fn csv(&self) -> String {
        let mut out = String::new();
        let headers: Vec<String> = self
            .columns
            .iter()
            .map(|c| csv_field(&c.flat_header()))
            .collect();
        let _ = writeln!(out, "{}", headers.join(","));
        for row in &self.rows {
            let cells: Vec<String> = row.iter().map(|c| csv_field(c.csv_value())).collect();
            let _ = writeln!(out, "{}", cells.join(","));
        }
        out
    }

    /// The CSV sidecar naming the artifacts the table came from.
    pub fn sources_csv(&self) -> String {
        let mut out = String::from("instance,kind,hash\n");
        for s in &self.sources {
            let _ = writeln!(
                out,
                "{},{},{}",
                csv_field(&s.instance),
                csv_field(&s.kind),
                csv_field(&s.hash)
            );
        }
        out
    }

    fn sources_line(
        &self,
        code: impl Fn(&str) -> String,
        plain: impl Fn(&str) -> String,
    ) -> String {
        if self.sources.is_empty() {
            return "Sources: none (computed from the model definitions).".to_owned();
        }
        let parts: Vec<String> = self
            .sources
            .iter()
            .map(|s| {
                format!(
                    "{} ({}, {})",
                    code(&s.instance),
                    plain(&s.kind),
                    code(&s.hash)
                )
            })
            .collect();
        format!("Sources: {}.", parts.join("; "))
    }
}

/// Escapes the characters Markdown table cells cannot hold as they are.
fn md_escape(text: &str) -> String {
    text.replace('|', "\\|")
}

/// Escapes LaTeX's special characters; `×10⁻⁵` becomes `$\times 10^{-5}$` and a
/// `` `code` `` span `\texttt{code}`.
pub fn tex_escape(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut code = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            '`' => {
                out.push_str(if code { "}" } else { "\\texttt{" });
                code = !code;
            }
            '\\' => out.push_str("\\textbackslash{}"),
            '&' | '%' | '$' | '#' | '_' | '{' | '}' => {
                out.push('\\');
                out.push(c);
            }
            '~' => out.push_str("\\textasciitilde{}"),
            '^' => out.push_str("\\textasciicircum{}"),
            'β' => out.push_str("$\\beta$"),
            '–' => out.push_str("--"),
            'Δ' => out.push_str("$\\Delta$"),
            '×' => {
                let (power, used) = power_of_ten(&chars[i..]);
                out.push_str(&format!("$\\times{power}$"));
                i += used;
            }
            c => match from_superscript(c) {
                Some(s) => out.push_str(&format!("\\textsuperscript{{{s}}}")),
                None => out.push(c),
            },
        }
    }
    if code {
        out.push('}');
    }
    out
}

/// After a `×`: ` 10^{-5}` and the characters it used when they are `10` and superscript
/// digits, else nothing.
fn power_of_ten(rest: &[char]) -> (String, usize) {
    if rest.len() < 3 || rest[0] != '1' || rest[1] != '0' {
        return (String::new(), 0);
    }
    let exponent: String = rest[2..]
        .iter()
        .map_while(|&c| from_superscript(c))
        .collect();
    if exponent.is_empty() {
        return (String::new(), 0);
    }
    let used = 2 + exponent.chars().count();
    (format!(" 10^{{{exponent}}}"), used)
}

/// A superscript digit, minus or k as its plain character.
fn from_superscript(c: char) -> Option<char> {
    const DIGITS: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    match c {
        '⁻' => return Some('-'),
        'ᵏ' => return Some('k'),
        _ => {}
    }
    let digit = DIGITS.iter().position(|&d| d == c)?;
    char::from_digit(u32::try_from(digit).ok()?, 10)
}

/// Quotes a CSV field when it holds a comma, a quote or a line break (RFC 4180).
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(
            tex_escape("slice_diag 50% & #1"),
            "slice\\_diag 50\\% \\& \\#1"
        );
        assert_eq!(tex_escape("β2"), "$\\beta$2");
        assert_eq!(tex_escape("7.65×10⁻⁵"), "7.65$\\times 10^{-5}$");
        assert_eq!(tex_escape("4.43×10¹⁷ x"), "4.43$\\times 10^{17}$ x");
        assert_eq!(tex_escape("2×3"), "2$\\times$3");
        assert_eq!(tex_escape("x²"), "x\\textsuperscript{2}");
        assert_eq!(tex_escape("0–20"), "0--20");
        assert_eq!(tex_escape("a.bc×10ᵏ"), "a.bc$\\times 10^{k}$");
        assert_eq!(
            tex_escape("split `test_real` and `x"),
            "split \\texttt{test\\_real} and \\texttt{x}"
        );
        assert_eq!(csv_field("3e-3, 5k"), "\"3e-3, 5k\"");
        assert_eq!(csv_field("a\"b"), "\"a\"\"b\"");
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(md_escape("a|b"), "a\\|b");
    }
}
