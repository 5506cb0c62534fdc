//! `report.html`: the whole report as one self-contained page (tables, the figures' SVG
//! inlined, selection notes, the tables the inputs could not fill, and every input with its
//! hash), readable offline with no script and no external resource.

use std::fmt::Write as _;
use std::path::Path;

use crate::table::{Align, Table};
use crate::{ReportError, ReportOptions, ReportSummary};

/// The file name.
pub const HTML_FILE: &str = "report.html";

const STYLE: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;
max-width:1100px;padding:1.5rem;color:#1b1b1b;line-height:1.45}
h1{font-size:1.7rem;margin-bottom:.2rem}h2{font-size:1.25rem;margin-top:2.2rem;
border-bottom:1px solid #ddd;padding-bottom:.2rem}h3{font-size:1.05rem;margin-top:1.8rem}
nav ol{columns:2;font-size:.92rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem}
th,td{padding:.22rem .6rem;border-bottom:1px solid #e3e3e3;vertical-align:top}
thead th{border-bottom:2px solid #555;background:#f7f7f7;white-space:nowrap}
th.group{border-bottom:1px solid #999;text-align:center}
td.r,th.r{text-align:right;font-variant-numeric:tabular-nums}
tbody tr:hover{background:#f3f7ff}
.note{font-size:.88rem;color:#444;margin:.3rem 0}
details{font-size:.82rem;color:#555;margin:.3rem 0 1rem}
code{font-size:.85em;word-break:break-all}
figure{margin:1rem 0}figure svg{max-width:100%;height:auto}
figcaption{font-size:.9rem;color:#333}
.table-wrap{overflow-x:auto}
";

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes `text` and sets its Markdown code spans (`` `sweep[...]` ``) as `<code>`, for the
/// notes, which are written for Markdown.
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, part) in escape(text).split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            out.push_str(part);
        }
    }
    out
}

fn class_of(align: Align) -> &'static str {
    match align {
        Align::Left => "l",
        Align::Right => "r",
    }
}

/// The header row of column groups, when the table has any.
fn group_row(table: &Table) -> String {
    let Some(spans) = table.group_spans() else {
        return String::new();
    };
    let mut out = String::from("<tr>");
    for span in spans {
        let _ = write!(
            out,
            "<th colspan=\"{}\" class=\"group\">{}</th>",
            span.len,
            span.group.map(escape).unwrap_or_default()
        );
    }
    out.push_str("</tr>");
    out
}

/// One table as an HTML section.
pub fn table_html(table: &Table) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<section id=\"{id}\"><h3>{label}: {title}</h3><div class=\"table-wrap\"><table>",
        id = escape(&table.id),
        label = escape(&table.label),
        title = escape(&table.title)
    );
    let _ = write!(out, "<thead>{}<tr>", group_row(table));
    for c in &table.columns {
        let _ = write!(
            out,
            "<th class=\"{}\">{}</th>",
            class_of(c.align),
            escape(&c.header)
        );
    }
    out.push_str("</tr></thead><tbody>\n");
    for row in &table.rows {
        out.push_str("<tr>");
        for (cell, column) in row.iter().zip(&table.columns) {
            let _ = write!(
                out,
                "<td class=\"{}\">{}</td>",
                class_of(column.align),
                escape(&cell.text)
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
    for note in &table.notes {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", prose(note));
    }
    out.push_str(&sources_html(table));
    let _ = writeln!(
        out,
        "<p class=\"note\">Files: <a href=\"{id}.md\">md</a> · <a href=\"{id}.tex\">tex</a> · \
         <a href=\"{id}.csv\">csv</a></p></section>",
        id = escape(&table.id)
    );
    out
}

fn sources_html(table: &Table) -> String {
    if table.sources.is_empty() {
        return "<details><summary>Sources: none (computed from the code's own \
                declarations)</summary></details>\n"
            .to_owned();
    }
    let mut out = format!(
        "<details><summary>Sources: {} artifacts</summary><table><thead><tr><th>Instance</th>\
         <th>Kind</th><th>Hash</th></tr></thead><tbody>",
        table.sources.len()
    );
    for s in &table.sources {
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td><td><code>{}</code></td></tr>",
            escape(&s.instance),
            escape(&s.kind),
            escape(&s.hash)
        );
    }
    out.push_str("</tbody></table></details>\n");
    out
}

/// An SVG file's markup without its XML declaration, ready to inline.
fn inline_svg(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(start) => &svg[start..],
        None => svg,
    }
}

fn figures_html(summary: &ReportSummary, out_dir: &Path) -> Result<String, ReportError> {
    let mut out = String::from("<h2 id=\"figures\">Figures</h2>\n");
    if summary.figures.is_empty() {
        out.push_str("<p>No figure.</p>\n");
    }
    for f in &summary.figures {
        let path = out_dir.join(format!("{}.svg", f.id));
        let svg = std::fs::read_to_string(&path).map_err(|e| ReportError::io(&path, e))?;
        let _ = writeln!(
            out,
            "<figure id=\"{id}\">{svg}<figcaption>{title} (<a href=\"{id}.svg\">svg</a> · \
             <a href=\"{id}.png\">png</a>)</figcaption></figure>",
            id = escape(&f.id),
            svg = inline_svg(&svg),
            title = escape(&f.title)
        );
    }
    Ok(out)
}

fn contents_html(summary: &ReportSummary) -> String {
    let mut out = String::from("<nav><ol>");
    for t in &summary.tables {
        let _ = write!(
            out,
            "<li><a href=\"#{}\">{}</a>: {}</li>",
            escape(&t.id),
            escape(&t.label),
            escape(&t.title)
        );
    }
    for f in &summary.figures {
        let _ = write!(
            out,
            "<li><a href=\"#{}\">{}</a></li>",
            escape(&f.id),
            escape(&f.title)
        );
    }
    out.push_str("</ol></nav>\n");
    out
}

fn list_html(heading: &str, id: &str, items: &[String]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let mut out = format!("<h2 id=\"{id}\">{}</h2>\n<ul>\n", escape(heading));
    for item in items {
        let _ = writeln!(out, "<li>{}</li>", prose(item));
    }
    out.push_str("</ul>\n");
    out
}

fn inputs_html(summary: &ReportSummary) -> String {
    let mut out = String::from(
        "<h2 id=\"inputs\">Inputs</h2>\n<details><summary>Every input artifact, with its \
         hash</summary><table><thead><tr><th>Instance</th><th>Kind</th><th>Hash</th>\
         <th>Used</th></tr></thead><tbody>\n",
    );
    for (origin, used) in &summary.inputs.listed {
        let _ = writeln!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            escape(&origin.instance),
            escape(&origin.kind),
            escape(&origin.hash),
            if used.is_some() { "yes" } else { "ignored" }
        );
    }
    out.push_str("</tbody></table></details>\n");
    out
}

/// The text of `report.html`; the figures' SVG files are read from `out_dir`.
///
/// # Errors
/// [`ReportError::Io`] when a figure's SVG cannot be read.
pub fn report_html(
    options: &ReportOptions,
    summary: &ReportSummary,
    out_dir: &Path,
) -> Result<String, ReportError> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><style>{STYLE}</style></head><body>\n<h1>{title}</h1>",
        title = escape(&options.title)
    );
    let _ = writeln!(
        out,
        "<p class=\"note\">{} tables and {} figures from {} input artifacts. Every table \
         lists the artifacts it was built from, by content hash.</p>",
        summary.tables.len(),
        summary.figures.len(),
        summary.inputs.listed.len()
    );
    out.push_str(&contents_html(summary));
    out.push_str(&list_html("Selection notes", "notes", &summary.notes));
    out.push_str("<h2 id=\"tables\">Tables</h2>\n");
    if summary.tables.is_empty() {
        out.push_str("<p>No table: none of the inputs feeds one.</p>\n");
    }
    for table in &summary.tables {
        out.push_str(&table_html(table));
    }
    let missing: Vec<String> = summary
        .missing
        .iter()
        .map(|m| format!("{}: {}", m.label, m.reason))
        .collect();
    out.push_str(&list_html(
        "Not built: what the inputs cannot fill",
        "missing",
        &missing,
    ));
    out.push_str(&figures_html(summary, out_dir)?);
    out.push_str(&inputs_html(summary));
    out.push_str("</body></html>\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Cell, Column, Source};

    #[test]
    fn escaping_and_svg_inlining() {
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(
            prose("run `a<b` chose `c`."),
            "run <code>a&lt;b</code> chose <code>c</code>."
        );
        assert_eq!(
            inline_svg("<?xml version=\"1.0\"?>\n<svg width=\"1\"></svg>"),
            "<svg width=\"1\"></svg>"
        );
    }

    #[test]
    fn a_table_keeps_its_groups_cells_and_sources() {
        let table = Table {
            id: "t8".into(),
            label: "Table 8".into(),
            title: "Test <results>".into(),
            columns: vec![
                Column::left("Model"),
                Column::right("Loss").in_group("real"),
                Column::right("Loss").in_group("random"),
            ],
            rows: vec![vec![
                Cell::text("SLiCE"),
                Cell::text("0.1"),
                Cell::text("0.2"),
            ]],
            notes: vec!["a note".into()],
            sources: vec![Source {
                instance: "evaluate[arch=slice]".into(),
                kind: "evaluate".into(),
                hash: "abc123".into(),
            }],
        };
        let html = table_html(&table);
        assert!(
            html.contains("<h3>Table 8: Test &lt;results&gt;</h3>"),
            "{html}"
        );
        assert!(html.contains(
            "<tr><th colspan=\"1\" class=\"group\"></th><th colspan=\"1\" class=\"group\">real</th>"
        ));
        assert!(html.contains("<td class=\"r\">0.2</td>"));
        assert!(html.contains("<code>abc123</code>"));
        assert!(html.contains("<p class=\"note\">a note</p>"));
    }
}
