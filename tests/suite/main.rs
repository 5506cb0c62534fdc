//! Integration tests of the `cwm` binary, in one test binary (`cargo test -p cwm --test tests`):
//! each drives the real `cwm` in its own temp workspace. One module per concern; the shared
//! helpers (a temp workspace with a pipeline file, running `cwm` in it, [`require`]) are here.

mod cache_keys;
mod data_commands;
mod data_stages;
mod evaluate;
mod executor;
mod model_commands;
mod paper_final;
mod paper_smoke;
mod pipeline_errors;
mod pipeline_vars;
mod query;
mod remote;
mod report_page;
mod run_progress;
mod slurm;
mod status_summary;
mod store;
mod tuning_report;
mod workspace;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use cwm_testkit::require;

/// A temp directory holding a pipeline; removed on drop.
pub struct Workspace {
    pub dir: PathBuf,
}

impl Workspace {
    /// A fresh workspace named after the test.
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir()
            .join("cwm-tests")
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create workspace");
        Workspace { dir }
    }

    /// A fresh workspace holding copies of the repository's `files` (paths relative to the
    /// repository root, kept relative here).
    pub fn with_repo_files(name: &str, files: &[&str]) -> Self {
        let ws = Workspace::new(name);
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        for file in files {
            let to = ws.dir.join(file);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).expect("create dir");
            }
            std::fs::copy(repo.join(file), &to).unwrap_or_else(|e| panic!("copy {file}: {e}"));
        }
        ws
    }

    /// `cwm ARGS` on `pipeline` with the vars file `vars`, asserting success: `run` takes the
    /// pipeline as its argument, the other commands as `-p`.
    pub fn ok_with_vars(&self, pipeline: &str, vars: &str, args: &[&str]) -> String {
        let mut all = args.to_vec();
        if args[0] == "run" {
            all.insert(1, pipeline);
        } else {
            all.extend(["-p", pipeline]);
        }
        all.extend(["--vars", vars]);
        self.ok(&all)
    }

    /// Writes `pipeline.yaml`.
    pub fn pipeline(&self, text: &str) -> &Self {
        self.write("pipeline.yaml", text);
        self
    }

    /// Writes a file in the workspace.
    pub fn write(&self, rel: &str, text: &str) {
        let path = self.dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create dir");
        }
        std::fs::write(path, text).expect("write file");
    }

    /// Runs `cwm ARGS` in the workspace.
    pub fn cwm(&self, args: &[&str]) -> Output {
        cwm_command(&self.dir, args).output().expect("run cwm")
    }

    /// Runs `cwm ARGS`, asserts success, returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.cwm(args);
        assert!(
            out.status.success(),
            "cwm {args:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `cwm run --json` → the parsed summary.
    pub fn run_json(&self, extra: &[&str]) -> serde_json::Value {
        let mut args = vec!["run", "--json"];
        args.extend_from_slice(extra);
        let stdout = self.ok(&args);
        serde_json::from_str(&stdout).expect("run --json prints JSON")
    }

    /// `cwm status --json` → (stage, state, reasons) rows.
    pub fn status(&self) -> Vec<(String, String, Vec<String>)> {
        let stdout = self.ok(&["status", "--json"]);
        let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).expect("JSON");
        rows.into_iter()
            .map(|r| {
                (
                    r["stage"].as_str().unwrap_or_default().to_owned(),
                    r["state"].as_str().unwrap_or_default().to_owned(),
                    r["reasons"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|x| x.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default(),
                )
            })
            .collect()
    }

    /// The artifacts directory.
    pub fn artifacts(&self) -> PathBuf {
        self.dir.join("artifacts")
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `benches/python/NAME` on `file` with `args`; returns (exit status, stdout, stderr).
pub fn bench_script(name: &str, file: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("benches/python")
        .join(name);
    let out = Command::new("python3")
        .arg(script)
        .arg(file)
        .args(args)
        .output()
        .expect("run python3");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// A `cwm` command in `dir`.
pub fn cwm_command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cwm"));
    cmd.current_dir(dir)
        .args(args)
        .env_remove("RAYON_NUM_THREADS");
    cmd
}

/// The names in a JSON array field.
pub fn names(summary: &serde_json::Value, field: &str) -> Vec<String> {
    summary[field]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Deterministic pseudo-random delays in `0..max_ms` for the kill tests (xorshift from `seed`;
/// no RNG dependency).
pub fn kill_delays(n: usize, max_ms: u64, seed: u64) -> Vec<u64> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % max_ms
        })
        .collect()
}
