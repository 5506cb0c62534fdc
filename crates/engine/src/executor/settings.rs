//! The pipeline file's `executor:` section, as data (read by the pipeline loader, used by
//! `cwm run` to build the executor).

use std::path::PathBuf;
use std::time::Duration;

/// Which executor runs the stale stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecutorKind {
    /// Threads of the `cwm run` process.
    #[default]
    Local,
    /// One Slurm job per stage.
    Slurm,
}

impl ExecutorKind {
    /// The name the pipeline file and `--executor` use.
    pub fn name(self) -> &'static str {
        match self {
            ExecutorKind::Local => "local",
            ExecutorKind::Slurm => "slurm",
        }
    }

    /// The kind named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "local" => Some(ExecutorKind::Local),
            "slurm" => Some(ExecutorKind::Slurm),
            _ => None,
        }
    }
}

/// The whole `executor:` section.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExecutorSettings {
    /// `kind:` (`--executor` overrides it).
    pub kind: ExecutorKind,
    /// `local:`.
    pub local: LocalSettings,
    /// `slurm:`.
    pub slurm: SlurmSettings,
}

/// `executor: local:`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LocalSettings {
    /// The GPU ids stages may use; by default those of `CUDA_VISIBLE_DEVICES`, else every
    /// device the NVIDIA driver lists.
    pub gpus: Option<Vec<u32>>,
}

/// `executor: slurm:`.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmSettings {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--account`.
    pub account: Option<String>,
    /// `--qos`.
    pub qos: Option<String>,
    /// Further `sbatch` options, passed as written.
    pub sbatch: Vec<String>,
    /// The most jobs in flight (queued or running) at once.
    pub max_jobs: usize,
    /// The least time between two status calls.
    pub poll: Duration,
    /// How long before its time limit (or on preemption) a job is told to save its state and
    /// be requeued (`--signal`).
    pub warn: Duration,
    /// CPUs for a stage whose kind claims all threads and whose `resources:` set no `cpus`.
    pub cpus_for_all: u32,
    /// The `cwm` program the jobs run (default: this one's path).
    pub cwm: Option<PathBuf>,
    /// How long to wait for the probe job that checks the compute nodes see the store.
    pub probe_timeout: Duration,
}

impl Default for SlurmSettings {
    fn default() -> Self {
        SlurmSettings {
            partition: None,
            account: None,
            qos: None,
            sbatch: Vec::new(),
            max_jobs: 500,
            poll: Duration::from_secs(10),
            warn: Duration::from_secs(300),
            cpus_for_all: 8,
            cwm: None,
            probe_timeout: Duration::from_secs(600),
        }
    }
}
