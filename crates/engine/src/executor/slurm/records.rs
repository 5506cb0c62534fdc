//! The record of a submitted job in the store (`artifacts/jobs/<key>/slurm.json`): what lets
//! a later `cwm run` find the job still queued or running and wait for it instead of
//! submitting it again, and `cwm status` show it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::executor::job::JobFiles;

/// One submitted job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Slurm's job id.
    pub job_id: u64,
    /// The instance it runs.
    pub instance: String,
    /// Its key (the directory's name).
    pub key: String,
    /// When it was submitted, in seconds since the Unix epoch.
    pub submitted: u64,
    /// The resources it asked for, in words.
    pub resources: String,
}

impl JobRecord {
    /// A record of job `job_id` submitted now.
    pub fn new(job_id: u64, instance: &str, key: &str, resources: String) -> Self {
        let submitted = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        JobRecord {
            job_id,
            instance: instance.to_owned(),
            key: key.to_owned(),
            submitted,
            resources,
        }
    }
}

/// `slurm.json` in a job's directory.
pub fn record_path(files: &JobFiles) -> PathBuf {
    files.dir.join("slurm.json")
}

/// Slurm's output file for job `job_id` (`--output` writes `slurm-%j.out`).
pub fn log_path(files: &JobFiles, job_id: u64) -> PathBuf {
    files.dir.join(format!("slurm-{job_id}.out"))
}

/// Writes `record` (atomically).
///
/// # Errors
/// When it cannot be written.
pub fn write(files: &JobFiles, record: &JobRecord) -> io::Result<()> {
    let json = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
    cwm_formats::fs::write_atomic(&record_path(files), &json)
}

/// The record in `files`' directory, if one reads.
pub fn read(files: &JobFiles) -> Option<JobRecord> {
    let bytes = fs::read(record_path(files)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Every job record in the store at `store_root`, in submission order.
pub fn all(store_root: &Path) -> Vec<JobRecord> {
    let Ok(entries) = fs::read_dir(store_root.join("jobs")) else {
        return Vec::new();
    };
    let mut records: Vec<JobRecord> = entries
        .flatten()
        .filter_map(|e| {
            let key = e.file_name().to_string_lossy().into_owned();
            read(&JobFiles::new(store_root, &key))
        })
        .collect();
    records.sort_by_key(|r| (r.submitted, r.job_id));
    records
}

/// Removes the record, leaving the rest of the job's directory.
pub fn forget(files: &JobFiles) {
    let _ = fs::remove_file(record_path(files));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_written_read_listed_and_forgotten() {
        let root = std::env::temp_dir().join(format!("cwm-slurm-records-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let (a, b) = (JobFiles::new(&root, "k1"), JobFiles::new(&root, "k2"));
        for files in [&a, &b] {
            fs::create_dir_all(&files.dir).unwrap();
        }
        let mut first = JobRecord::new(7, "a", "k1", "1 CPU(s)".into());
        first.submitted = 10;
        let mut second = JobRecord::new(8, "b", "k2", "1 CPU(s)".into());
        second.submitted = 20;
        write(&b, &second).unwrap();
        write(&a, &first).unwrap();
        assert_eq!(read(&a), Some(first.clone()));
        assert_eq!(all(&root), vec![first, second.clone()]);
        forget(&a);
        assert_eq!(all(&root), vec![second]);
        assert_eq!(log_path(&b, 8), root.join("jobs/k2/slurm-8.out"));
        fs::remove_dir_all(&root).unwrap();
    }
}
