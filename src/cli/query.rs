//! `cwm query`: SQL over the Parquet files of the pipeline's fresh results (DataFusion).
//!
//! Every instance whose result is fresh (the decision `cwm status` makes, from `cwm.lock` and
//! the store) contributes each Parquet file of its artifacts as a table named after the
//! instance and the file ([`table_name`]): `evaluate_real[arch=transformer]`'s
//! `predictions.parquet` is `evaluate_real_arch_transformer_predictions`, and, when no other
//! table takes it, also `evaluate_real_transformer_predictions` (the matrix values without
//! their keys). A numbered series of files (`shard_000000.parquet`, `shard_000001.parquet`,
//! ...) is one table (`tokenize_test_shard`). Stale or missing instances have no table;
//! `--tables` lists them. The query runs read-only (no DDL, no DML, no `SET`) on one thread;
//! its result is printed as an aligned table (the first `--limit` rows) or written whole as
//! CSV or Parquet. `docs/query.md` has the naming scheme and examples.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Args;
use cwm_engine::lockfile::LockFile;
use cwm_engine::pipeline::Override;
use cwm_engine::plan::Plan;
use cwm_engine::registry::Registry;
use cwm_engine::store::Store;
use cwm_formats::fs::AtomicFile;
use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::TableReference;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::WriterProperties;
use datafusion::parquet::file::reader::{FileReader as _, SerializedFileReader};
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use futures_util::StreamExt as _;

use super::{Context, VarArgs, load_plan, open_store, read_lock};

/// SQL over the Parquet outputs of the pipeline's fresh results.
#[derive(Args)]
pub struct QueryArgs {
    /// The query, e.g. "SELECT COUNT(*) FROM evaluate_real_transformer_predictions";
    /// `cwm query --tables` lists the table names.
    #[arg(required_unless_present = "tables")]
    sql: Option<String>,
    /// The pipeline file (default: pipeline.yaml, else the built-in default).
    #[arg(short = 'p', long, visible_short_alias = 'f')]
    pipeline: Option<PathBuf>,
    /// Override a param as `cwm run -s` did: stage.param=value (the tables are those of the
    /// results it made).
    #[arg(short = 's', long = "set", value_name = "STAGE.PARAM=VALUE")]
    set: Vec<Override>,
    #[command(flatten)]
    vars: VarArgs,
    /// List the tables (name, short name, rows, instance, file) and the instances that have
    /// none because their result is stale or missing.
    #[arg(long, conflicts_with = "sql")]
    tables: bool,
    /// Write the whole result as CSV to FILE instead of printing it.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["parquet", "output"])]
    csv: Option<PathBuf>,
    /// Write the whole result as Parquet (zstd) to FILE instead of printing it.
    #[arg(long, value_name = "FILE", conflicts_with = "output")]
    parquet: Option<PathBuf>,
    /// Write the whole result to FILE, as CSV or Parquet by its extension (.csv, .parquet).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Print at most N rows (0 = all); how many were left out is printed below them.
    #[arg(long, value_name = "N", default_value_t = 50)]
    limit: usize,
}

/// Runs `cwm query`.
pub fn run(args: QueryArgs, ctx: &Context) -> Result<ExitCode> {
    let load = args.vars.load_options(args.set.clone())?;
    let plan = load_plan(args.pipeline.as_deref(), &ctx.registry, &load)?;
    let store = open_store(&plan)?;
    let lock = read_lock(&plan)?;
    let catalog = Catalog::of(&plan, &ctx.registry, &store, &lock);
    store.save_stat_cache()?;
    if args.tables {
        list_tables(&catalog)?;
        return Ok(ExitCode::SUCCESS);
    }
    let sql = args.sql.as_deref().unwrap_or_default();
    let target = target(&args)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .context("starting the query runtime")?;
    runtime.block_on(run_query(&catalog, sql, target, args.limit))?;
    Ok(ExitCode::SUCCESS)
}

/// A table: one Parquet file of a fresh artifact, or a numbered series of them.
#[derive(Debug, Clone, PartialEq)]
struct Table {
    /// The full name: instance (and output, for an instance with several) and file.
    name: String,
    /// The short name, without the matrix keys, where it is unambiguous.
    alias: Option<String>,
    /// The instance whose artifact holds the file.
    instance: String,
    /// The file, relative to the artifact (`shard_*.parquet` for a series).
    file: String,
    /// The files' paths in the store.
    paths: Vec<PathBuf>,
}

/// An instance (or one output of it) without tables, and why.
#[derive(Debug, Clone, PartialEq)]
struct Missing {
    instance: String,
    why: String,
}

/// The tables of a pipeline's fresh results.
#[derive(Debug, Default)]
struct Catalog {
    tables: Vec<Table>,
    missing: Vec<Missing>,
    /// Names two files map to: neither is registered (name, the files it would name).
    clashes: Vec<(String, Vec<String>)>,
}

impl Catalog {
    /// The tables of every instance of `plan` that is fresh.
    fn of(plan: &Plan, registry: &Registry, store: &Store, lock: &LockFile) -> Catalog {
        let statuses = cwm_engine::status::status(plan, registry, store, lock);
        let mut tables = Vec::new();
        let mut missing = Vec::new();
        for inst in &plan.pipeline.instances {
            let why = match statuses.iter().find(|s| s.stage == inst.name) {
                None => Some("not planned".to_owned()),
                Some(s) => s.reasons.first().map(ToString::to_string),
            };
            let entry = match (why, lock.get(&inst.name)) {
                (Some(why), _) => {
                    missing.push(Missing {
                        instance: inst.name.clone(),
                        why,
                    });
                    continue;
                }
                (None, None) => {
                    missing.push(Missing {
                        instance: inst.name.clone(),
                        why: "no result recorded in cwm.lock".to_owned(),
                    });
                    continue;
                }
                (None, Some(entry)) => entry,
            };
            let several = entry.outputs.len() > 1;
            for (output, hash) in &entry.outputs {
                let manifest = match store.manifest(hash) {
                    Ok(m) => m,
                    Err(e) => {
                        missing.push(Missing {
                            instance: format!("{}.{output}", inst.name),
                            why: e.to_string(),
                        });
                        continue;
                    }
                };
                let data = store.data_dir(hash);
                let with_output = |prefix: String| {
                    if several {
                        format!("{prefix}_{output}")
                    } else {
                        prefix
                    }
                };
                let prefix = with_output(inst.name.clone());
                let short = short_instance(&inst.name).map(with_output);
                for group in parquet_groups(manifest.files.iter().map(|f| f.path.as_str())) {
                    tables.push(Table {
                        name: table_name(&prefix, &group.key),
                        alias: short.as_ref().map(|s| table_name(s, &group.key)),
                        instance: inst.name.clone(),
                        file: group.label,
                        paths: group.files.iter().map(|f| data.join(f)).collect(),
                    });
                }
            }
        }
        let (tables, clashes) = resolve_names(tables);
        Catalog {
            tables,
            missing,
            clashes,
        }
    }

    /// Every name a query may use: full names and short ones.
    fn names(&self) -> impl Iterator<Item = &str> {
        self.tables
            .iter()
            .flat_map(|t| std::iter::once(t.name.as_str()).chain(t.alias.as_deref()))
    }

    /// Up to five registered names close to `wanted`, closest first.
    fn close_names(&self, wanted: &str) -> Vec<&str> {
        let mut scored: Vec<(usize, &str)> = self
            .names()
            .filter_map(|name| {
                let distance = edit_distance(wanted, name);
                let close = distance <= (wanted.len() / 3).max(2)
                    || (wanted.len() >= 4 && (name.contains(wanted) || wanted.contains(name)));
                close.then_some((distance, name))
            })
            .collect();
        scored.sort();
        scored.into_iter().take(5).map(|(_, name)| name).collect()
    }
}

/// Drops the tables whose full name another table also has (recorded as clashes) and the
/// short names that are not unique or that equal a full name.
fn resolve_names(tables: Vec<Table>) -> (Vec<Table>, Vec<(String, Vec<String>)>) {
    let mut full: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut short: BTreeMap<String, usize> = BTreeMap::new();
    for t in &tables {
        full.entry(t.name.clone())
            .or_default()
            .push(format!("{} of {}", t.file, t.instance));
        if let Some(alias) = &t.alias {
            *short.entry(alias.clone()).or_default() += 1;
        }
    }
    let kept = tables
        .into_iter()
        .filter(|t| full.get(&t.name).is_some_and(|files| files.len() == 1))
        .map(|mut t| {
            t.alias = t
                .alias
                .filter(|a| short.get(a) == Some(&1) && !full.contains_key(a));
            t
        })
        .collect();
    let clashes = full
        .into_iter()
        .filter(|(_, files)| files.len() > 1)
        .collect();
    (kept, clashes)
}

/// The Parquet files of an artifact grouped into tables.
#[derive(Debug, PartialEq)]
struct Group {
    /// The name part from the file: its stem, or the series' stem without the number.
    key: String,
    /// The file as listed: `games.parquet`, or `shard_*.parquet` for a series.
    label: String,
    /// Paths relative to the artifact, in name order.
    files: Vec<String>,
}

/// Groups an artifact's files (paths relative to it) into tables: each `.parquet` file is one,
/// except that files whose stems end in `_<digits>` form one table per stem before the digits.
fn parquet_groups<'a>(paths: impl IntoIterator<Item = &'a str>) -> Vec<Group> {
    let mut groups: BTreeMap<(String, bool), Vec<String>> = BTreeMap::new();
    for path in paths {
        let Some(stem) = path.strip_suffix(".parquet") else {
            continue;
        };
        let (key, series) = match series_stem(stem) {
            Some(prefix) => (prefix, true),
            None => (stem, false),
        };
        groups
            .entry((key.to_owned(), series))
            .or_default()
            .push(path.to_owned());
    }
    groups
        .into_iter()
        .map(|((key, series), mut files)| {
            files.sort();
            let label = if series {
                format!("{key}_*.parquet")
            } else {
                format!("{key}.parquet")
            };
            Group { key, label, files }
        })
        .collect()
}

/// `shard` for `shard_000001`: the stem before a final `_<digits>`.
fn series_stem(stem: &str) -> Option<&str> {
    let (prefix, digits) = stem.rsplit_once('_')?;
    let numbered = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    (numbered && !prefix.is_empty() && !prefix.ends_with('/')).then_some(prefix)
}

/// The table name of `key` (a file's stem) in the artifact of `instance`: `instance_key`
/// lower-cased, every character that is not `[a-z0-9_]` mapped to `_`, runs of `_` collapsed
/// and `_` trimmed from both ends.
fn table_name(instance: &str, key: &str) -> String {
    let mut name = String::with_capacity(instance.len() + key.len() + 1);
    for c in format!("{instance}_{key}")
        .chars()
        .flat_map(char::to_lowercase)
    {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '_'
        };
        if c != '_' || !(name.is_empty() || name.ends_with('_')) {
            name.push(c);
        }
    }
    while name.ends_with('_') {
        name.pop();
    }
    name
}

/// A matrix instance's name without the matrix keys: `evaluate_real[arch=transformer]` is
/// `evaluate_real_transformer`; `None` for an instance outside a matrix.
fn short_instance(name: &str) -> Option<String> {
    let (stage, rest) = name.split_once('[')?;
    let cell = rest.strip_suffix(']')?;
    let mut parts = vec![stage.to_owned()];
    let mut depth = 0usize;
    let mut start = 0;
    let mut cells = Vec::new();
    for (i, c) in cell.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                cells.push(&cell[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    cells.push(&cell[start..]);
    for binding in cells {
        let (_, value) = binding.split_once('=')?;
        parts.push(value.to_owned());
    }
    Some(parts.join("_"))
}

/// Levenshtein distance in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// `cwm query --tables`: the tables with their rows (from the Parquet footers), then the
/// instances without tables.
fn list_tables(catalog: &Catalog) -> Result<()> {
    let mut unreadable = Vec::new();
    let rows: Vec<Option<u64>> = catalog
        .tables
        .iter()
        .map(|t| {
            row_count(&t.paths)
                .map_err(|e| unreadable.push(format!("{}: {e:#}", t.name)))
                .ok()
        })
        .collect();
    let column = |f: fn(&Table) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(catalog.tables.iter().map(f)))
    };
    let batch = RecordBatch::try_from_iter([
        ("table", column(|t| t.name.as_str())),
        ("short name", column(|t| t.alias.as_deref().unwrap_or(""))),
        ("rows", Arc::new(UInt64Array::from(rows)) as ArrayRef),
        ("instance", column(|t| t.instance.as_str())),
        ("file", column(|t| t.file.as_str())),
    ])?;
    if catalog.tables.is_empty() {
        outln!("no tables: no instance of this pipeline has a fresh result with Parquet files");
    } else {
        outln!("{}", pretty_format_batches(&[batch])?);
        outln!("{} tables", catalog.tables.len());
    }
    for problem in &unreadable {
        outln!("unreadable: {problem}");
    }
    for (name, files) in &catalog.clashes {
        outln!(
            "not registered: {name} would name each of {}",
            files.join(", ")
        );
    }
    if !catalog.missing.is_empty() {
        outln!(
            "no tables for these instances, whose results are stale or missing (`cwm run` makes them):"
        );
        let width = catalog
            .missing
            .iter()
            .map(|m| m.instance.chars().count())
            .max()
            .unwrap_or(0);
        for m in &catalog.missing {
            outln!("  {:<width$}  {}", m.instance, m.why);
        }
    }
    Ok(())
}

/// Rows in the Parquet files at `paths`, from their footers.
fn row_count(paths: &[PathBuf]) -> Result<u64> {
    let mut rows = 0u64;
    for path in paths {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let reader = SerializedFileReader::new(file)
            .with_context(|| format!("reading the footer of {}", path.display()))?;
        rows += u64::try_from(reader.metadata().file_metadata().num_rows()).unwrap_or(0);
    }
    Ok(rows)
}

/// How a result is written instead of printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Csv,
    Parquet,
}

/// The file `--csv`, `--parquet` or `--output` names, with its format.
fn target(args: &QueryArgs) -> Result<Option<(PathBuf, Format)>> {
    if let Some(path) = &args.csv {
        return Ok(Some((path.clone(), Format::Csv)));
    }
    if let Some(path) = &args.parquet {
        return Ok(Some((path.clone(), Format::Parquet)));
    }
    let Some(path) = &args.output else {
        return Ok(None);
    };
    let extension = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    let format = match extension.as_deref() {
        Some("csv") => Format::Csv,
        Some("parquet" | "pq") => Format::Parquet,
        _ => bail!(
            "cannot tell the format of {} from its name: end it in .csv or .parquet, or use --csv / --parquet",
            path.display()
        ),
    };
    Ok(Some((path.clone(), format)))
}

/// Registers the tables, runs `sql` and prints or writes the result.
async fn run_query(
    catalog: &Catalog,
    sql: &str,
    target: Option<(PathBuf, Format)>,
    limit: usize,
) -> Result<()> {
    let ctx = session(catalog).await?;
    let read_only = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let stream = match ctx.sql_with_options(sql, read_only).await {
        Ok(frame) => frame.execute_stream().await,
        Err(e) => Err(e),
    }
    .map_err(|e| anyhow!(explain(catalog, &e.to_string())))?;
    match target {
        None => print_stream(stream, limit).await,
        Some((path, format)) => {
            let rows = write_stream(stream, &path, format)
                .await
                .with_context(|| format!("writing {}", path.display()))?;
            outln!("{rows} rows written to {}", path.display());
            Ok(())
        }
    }
}

/// A session with every table of `catalog` registered (and the short names), read with the
/// files' own column types, on one partition.
async fn session(catalog: &Catalog) -> Result<SessionContext> {
    let config = SessionConfig::new()
        .with_information_schema(true)
        .with_target_partitions(1);
    let ctx = SessionContext::new_with_config(config);
    for table in &catalog.tables {
        let provider = Arc::new(
            listing_table(&ctx, &table.paths)
                .await
                .with_context(|| format!("opening {} ({})", table.name, table.file))?,
        );
        ctx.register_table(TableReference::bare(table.name.as_str()), provider.clone())?;
        if let Some(alias) = &table.alias {
            ctx.register_table(TableReference::bare(alias.as_str()), provider)?;
        }
    }
    Ok(ctx)
}

/// The Parquet files at `paths` as one table, its schema from the first.
async fn listing_table(
    ctx: &SessionContext,
    paths: &[PathBuf],
) -> datafusion::error::Result<ListingTable> {
    use datafusion::error::DataFusionError;
    let mut urls = Vec::with_capacity(paths.len());
    for path in paths {
        // A `file://` URL, not a path: DataFusion would read `*`, `?` and `[` in a path as a glob.
        let absolute = std::path::absolute(path)?;
        let url = url::Url::from_file_path(&absolute).map_err(|()| {
            DataFusionError::Execution(format!("{} is not a file path", absolute.display()))
        })?;
        urls.push(ListingTableUrl::try_new(url, None)?);
    }
    let format = ParquetFormat::new().with_force_view_types(false);
    let options = ListingOptions::new(Arc::new(format)).with_file_extension(".parquet");
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .infer_schema(&ctx.state())
        .await?;
    ListingTable::try_new(config)
}

/// The message of a failed query, with the registered names close to an unknown table's and
/// what would make a table whose instance is stale.
fn explain(catalog: &Catalog, message: &str) -> String {
    let mut text = format!("the query failed: {message}");
    if let Some(wanted) = unknown_table(message) {
        let stale = catalog.missing.iter().find(|m| {
            let full = table_name(&m.instance, "");
            let short = short_instance(&m.instance).map(|s| table_name(&s, ""));
            wanted.starts_with(&full) || short.is_some_and(|s| wanted.starts_with(&s))
        });
        if let Some(m) = stale {
            text.push_str(&format!(
                "\n  {wanted} looks like a table of {}, which has no fresh result ({}): `cwm run` makes it",
                m.instance, m.why
            ));
        }
        let close = catalog.close_names(&wanted);
        if !close.is_empty() {
            text.push_str(&format!(
                "\n  tables with close names: {}",
                close.join(", ")
            ));
        }
    }
    text.push_str(&match catalog.tables.len() {
        0 => "\n  no table is registered: no instance has a fresh result with Parquet files \
              (`cwm query --tables` lists the instances)"
            .to_owned(),
        n => format!("\n  `cwm query --tables` lists all {n} tables"),
    });
    text
}

/// The table name in DataFusion's "table '…' not found", without its catalog and schema.
fn unknown_table(message: &str) -> Option<String> {
    let start = message.find("table '")? + "table '".len();
    let rest = &message[start..];
    let end = rest.find('\'')?;
    if !rest[end..].starts_with("' not found") {
        return None;
    }
    let name = &rest[..end];
    Some(name.rsplit('.').next().unwrap_or(name).to_owned())
}

/// Prints the first `limit` rows (all with 0) as an aligned table and counts the rest.
async fn print_stream(mut stream: SendableRecordBatchStream, limit: usize) -> Result<()> {
    let schema = stream.schema();
    let mut shown: Vec<RecordBatch> = Vec::new();
    let mut shown_rows = 0usize;
    let mut total = 0usize;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        total += batch.num_rows();
        let room = match limit {
            0 => batch.num_rows(),
            limit => limit.saturating_sub(shown_rows).min(batch.num_rows()),
        };
        if room > 0 {
            shown.push(batch.slice(0, room));
            shown_rows += room;
        }
    }
    if shown.is_empty() {
        shown.push(RecordBatch::new_empty(schema));
    }
    outln!("{}", pretty_format_batches(&shown)?);
    let left_out = total - shown_rows;
    if left_out > 0 {
        outln!(
            "{shown_rows} of {total} rows shown, {left_out} left out (--limit N shows more, \
             --limit 0 all; --csv or --parquet FILE writes them)"
        );
    } else {
        outln!("{total} {}", if total == 1 { "row" } else { "rows" });
    }
    Ok(())
}

/// Writes the whole result to `path` (under a temporary name, renamed when complete) and
/// returns its rows.
async fn write_stream(
    mut stream: SendableRecordBatchStream,
    path: &Path,
    format: Format,
) -> Result<u64> {
    if format == Format::Csv {
        let schema = stream.schema();
        let nested: Vec<&str> = schema
            .fields()
            .iter()
            .filter(|f| f.data_type().is_nested())
            .map(|f| f.name().as_str())
            .collect();
        if !nested.is_empty() {
            bail!(
                "CSV holds no lists, and {} {}: select elements (pred[1] is label 0) or write Parquet",
                nested.join(", "),
                if nested.len() == 1 {
                    "is one"
                } else {
                    "are lists"
                }
            );
        }
    }
    let atomic = AtomicFile::new(path);
    let file = File::create(atomic.temp_path())
        .with_context(|| format!("creating {}", atomic.temp_path().display()))?;
    let mut rows = 0u64;
    match format {
        Format::Csv => {
            let mut writer = datafusion::arrow::csv::Writer::new(BufWriter::new(file));
            // The header, also for an empty result.
            writer.write(&RecordBatch::new_empty(stream.schema()))?;
            while let Some(batch) = stream.next().await {
                let batch = batch?;
                rows += batch.num_rows() as u64;
                writer.write(&batch)?;
            }
            writer.into_inner().flush()?;
        }
        Format::Parquet => {
            let props = WriterProperties::builder()
                .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
                .build();
            let mut writer = ArrowWriter::try_new(file, stream.schema(), Some(props))?;
            while let Some(batch) = stream.next().await {
                let batch = batch?;
                rows += batch.num_rows() as u64;
                writer.write(&batch)?;
            }
            writer.close()?;
        }
    }
    atomic.commit()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_keep_lowercase_letters_digits_and_single_underscores() {
        assert_eq!(
            table_name("evaluate_real[arch=transformer]", "predictions"),
            "evaluate_real_arch_transformer_predictions"
        );
        assert_eq!(
            table_name("train[arch=slice,size=d128,lr=0.003]", "val"),
            "train_arch_slice_size_d128_lr_0_003_val"
        );
        assert_eq!(table_name("Parse-2", "sub/Games"), "parse_2_sub_games");
        assert_eq!(table_name("x", "__a__"), "x_a");
    }

    #[test]
    fn short_names_drop_the_matrix_keys() {
        assert_eq!(
            short_instance("evaluate_real[arch=transformer]").as_deref(),
            Some("evaluate_real_transformer")
        );
        assert_eq!(
            short_instance("train[arch=slice,hp=[1, 2],size=d128]").as_deref(),
            Some("train_slice_[1, 2]_d128")
        );
        assert_eq!(short_instance("parse"), None);
        assert_eq!(short_instance("odd[novalue]"), None);
    }

    #[test]
    fn numbered_files_form_one_table_and_other_files_one_each() {
        let groups = parquet_groups([
            "README.md",
            "coverage.json",
            "shard_000001.parquet",
            "shard_000000.parquet",
            "games.parquet",
            "v_2/steps.parquet",
            "_7.parquet",
        ]);
        let summary: Vec<(&str, &str, usize)> = groups
            .iter()
            .map(|g| (g.key.as_str(), g.label.as_str(), g.files.len()))
            .collect();
        assert_eq!(
            summary,
            [
                ("_7", "_7.parquet", 1),
                ("games", "games.parquet", 1),
                ("shard", "shard_*.parquet", 2),
                ("v_2/steps", "v_2/steps.parquet", 1),
            ]
        );
        assert_eq!(
            groups[2].files,
            ["shard_000000.parquet", "shard_000001.parquet"]
        );
    }

    fn table(name: &str, alias: Option<&str>, instance: &str) -> Table {
        Table {
            name: name.to_owned(),
            alias: alias.map(str::to_owned),
            instance: instance.to_owned(),
            file: "f.parquet".to_owned(),
            paths: Vec::new(),
        }
    }

    #[test]
    fn clashing_names_are_dropped_and_short_names_kept_only_when_unique() {
        let (kept, clashes) = resolve_names(vec![
            table("e_arch_t_p", Some("e_t_p"), "e[arch=t]"),
            table("e_size_t_p", Some("e_t_p"), "e[size=t]"),
            table("f_arch_u_p", Some("f_u_p"), "f[arch=u]"),
            table("a_b", None, "a-b"),
            table("a_b", None, "a.b"),
            table("g_p", None, "g"),
            table("h_arch_g_p", Some("g_p"), "h[arch=g]"),
        ]);
        let names: Vec<(&str, Option<&str>)> = kept
            .iter()
            .map(|t| (t.name.as_str(), t.alias.as_deref()))
            .collect();
        assert_eq!(
            names,
            [
                ("e_arch_t_p", None),
                ("e_size_t_p", None),
                ("f_arch_u_p", Some("f_u_p")),
                ("g_p", None),
                ("h_arch_g_p", None),
            ]
        );
        assert_eq!(clashes.len(), 1);
        assert_eq!(clashes[0].0, "a_b");
        assert_eq!(clashes[0].1.len(), 2);
    }

    #[test]
    fn unknown_tables_are_read_from_datafusion_messages_and_matched_to_close_names() {
        assert_eq!(
            unknown_table("Error during planning: table 'datafusion.public.evaluate_x' not found")
                .as_deref(),
            Some("evaluate_x")
        );
        assert_eq!(unknown_table("Schema error: No field named t2"), None);
        let catalog = Catalog {
            tables: vec![
                table(
                    "evaluate_real_arch_transformer_predictions",
                    Some("evaluate_real_transformer_predictions"),
                    "evaluate_real[arch=transformer]",
                ),
                table("tokenize_test_shard", None, "tokenize_test"),
            ],
            ..Catalog::default()
        };
        assert_eq!(
            catalog.close_names("evaluate_real_transformer_prediction"),
            [
                "evaluate_real_transformer_predictions",
                "evaluate_real_arch_transformer_predictions"
            ]
        );
        assert_eq!(
            catalog.close_names("tokenize_test"),
            ["tokenize_test_shard"]
        );
        assert!(catalog.close_names("zzz").is_empty());
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
