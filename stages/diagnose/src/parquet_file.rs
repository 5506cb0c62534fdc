//! The one way this crate writes a Parquet table: zstd, under a temporary name, renamed into
//! place when complete ([`AtomicFile`]), so a reader never takes a half-written file for a
//! finished one. `steps.parquet` (diagnose) and `novelty.parquet` (novelty) both use it.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::SchemaRef;
use cwm_formats::fs::AtomicFile;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

/// What went wrong writing the file at `path`; each stage turns it into its own error type.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// Creating or renaming the file.
    Io(PathBuf, std::io::Error),
    /// A batch that does not fit the schema.
    Arrow(PathBuf, arrow::error::ArrowError),
    /// Encoding or closing the file.
    Parquet(PathBuf, parquet::errors::ParquetError),
}

/// A Parquet table being written.
pub(crate) struct ParquetFile {
    path: PathBuf,
    file: AtomicFile,
    schema: SchemaRef,
    writer: ArrowWriter<File>,
}

impl ParquetFile {
    /// Starts `path` with `schema` (under a temporary name until [`ParquetFile::finish`]).
    pub(crate) fn create(path: &Path, schema: SchemaRef) -> Result<ParquetFile, WriteError> {
        let file = AtomicFile::new(path);
        let tmp = file.temp_path();
        let out = File::create(tmp).map_err(|e| WriteError::Io(tmp.to_path_buf(), e))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).unwrap_or_default()))
            .build();
        let writer = ArrowWriter::try_new(out, schema.clone(), Some(props))
            .map_err(|e| WriteError::Parquet(path.to_path_buf(), e))?;
        Ok(ParquetFile {
            path: path.to_path_buf(),
            file,
            schema,
            writer,
        })
    }

    /// Appends one batch of `columns` in schema order.
    pub(crate) fn write(&mut self, columns: Vec<ArrayRef>) -> Result<(), WriteError> {
        let batch = RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| WriteError::Arrow(self.path.clone(), e))?;
        self.writer
            .write(&batch)
            .map_err(|e| WriteError::Parquet(self.path.clone(), e))
    }

    /// Closes the file and renames it into place.
    pub(crate) fn finish(self) -> Result<(), WriteError> {
        self.writer
            .close()
            .map_err(|e| WriteError::Parquet(self.path.clone(), e))?;
        self.file
            .commit()
            .map_err(|e| WriteError::Io(self.path.clone(), e))
    }
}
