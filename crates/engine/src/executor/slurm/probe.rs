//! The probe job: before the first submission, one tiny job checks that a compute node runs
//! this `cwm` and sees this store, so a cluster without a shared file system fails at once
//! with a clear message instead of after hours in the queue.
//!
//! The executor writes a random token to `artifacts/jobs/probe-<token>/token` and submits
//! `cwm job probe <that dir> <token>`; the job checks the token and writes `reply` beside it.

use std::fs;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::cli::SlurmCli;
use super::state::JobState;
use super::submit::shell_quote;
use crate::executor::ExecutorError;
use crate::executor::settings::SlurmSettings;
use crate::store::host_name;

/// The exit status of `cwm job probe` on a node that does not see the store.
pub const UNSHARED_EXIT: u8 = 3;

/// Submits the probe job and waits for its answer.
///
/// # Errors
/// [`ExecutorError`] saying what the compute node lacks, or that the probe did not run.
pub fn run(
    cli: &mut SlurmCli,
    settings: &SlurmSettings,
    cwm: &Path,
    store_root: &Path,
) -> Result<(), ExecutorError> {
    let token = token();
    let dir = store_root.join("jobs").join(format!("probe-{token}"));
    let fail = |message: String| ExecutorError::Cluster(message);
    fs::create_dir_all(&dir)
        .and_then(|()| fs::write(dir.join("token"), &token))
        .map_err(|e| fail(format!("writing {}: {e}", dir.display())))?;
    let result = submit_and_wait(cli, settings, cwm, &dir, &token);
    let _ = fs::remove_dir_all(&dir);
    result
}

fn submit_and_wait(
    cli: &mut SlurmCli,
    settings: &SlurmSettings,
    cwm: &Path,
    dir: &Path,
    token: &str,
) -> Result<(), ExecutorError> {
    let log = dir.join("probe.out");
    let mut args = vec![
        "--parsable".to_owned(),
        "--job-name=cwm:probe".to_owned(),
        format!("--output={}", log.display()),
        "--time=5".to_owned(),
        "--cpus-per-task=1".to_owned(),
    ];
    for (name, value) in [
        ("partition", &settings.partition),
        ("account", &settings.account),
        ("qos", &settings.qos),
    ] {
        if let Some(value) = value {
            args.push(format!("--{name}={value}"));
        }
    }
    let quoted = |p: &Path| shell_quote(&p.display().to_string());
    args.push(format!(
        "--wrap=exec {} job probe {} {token}",
        quoted(cwm),
        quoted(dir)
    ));
    let out = cli.call("sbatch", &args)?;
    let job_id: u64 = match out.stdout.trim().split(';').next().map(str::parse) {
        Some(Ok(id)) if out.ok => id,
        _ => {
            return Err(ExecutorError::Cluster(format!(
                "sbatch refused the probe job: {}",
                out.stderr.trim()
            )));
        }
    };
    let state = wait_for_end(cli, job_id, settings.probe_timeout)?;
    if fs::read_to_string(dir.join("reply")).is_ok_and(|r| r.contains(token)) {
        return Ok(());
    }
    let log = fs::read_to_string(&log).unwrap_or_default();
    Err(ExecutorError::Cluster(probe_failure(
        job_id, &state, &log, cwm, dir,
    )))
}

/// Polls the probe job until it ends or `timeout` passes; its last state.
fn wait_for_end(
    cli: &mut SlurmCli,
    job_id: u64,
    timeout: Duration,
) -> Result<JobState, ExecutorError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(200);
    loop {
        let state = cli.job_states(&[job_id])?.remove(&job_id);
        match state {
            Some(state @ JobState::Ended(_)) => return Ok(state),
            // Gone from squeue's view: it ended; its reply says how.
            None => return Ok(JobState::Ended(super::state::Ended::Completed)),
            Some(state) if started.elapsed() >= timeout => {
                let _ = cli.call("scancel", &[job_id.to_string()]);
                return Err(ExecutorError::Cluster(format!(
                    "the probe job {job_id} did not finish within {}s (it is {}); raise \
                     `executor: slurm: probe_timeout` on a busy cluster",
                    timeout.as_secs(),
                    state.describe()
                )));
            }
            _ => {}
        }
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// What a probe that gave no answer says about the cluster.
fn probe_failure(job_id: u64, state: &JobState, log: &str, cwm: &Path, dir: &Path) -> String {
    let tail: Vec<&str> = log
        .lines()
        .rev()
        .take(3)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    let mut message = if log.contains("does not see") {
        format!(
            "the compute node does not see this store ({}): the store and the pipeline \
             directory must be on a file system the compute nodes share (docs/cluster.md)",
            dir.parent().and_then(Path::parent).unwrap_or(dir).display()
        )
    } else if log.contains("No such file") || log.contains("not found") || log.is_empty() {
        format!(
            "the probe job {job_id} could not run {} on a compute node (it ended {}): put cwm \
             on the shared file system or set `executor: slurm: cwm:` to its path there",
            cwm.display(),
            state.describe()
        )
    } else {
        format!(
            "the probe job {job_id} ended {} without answering",
            state.describe()
        )
    };
    if !tail.is_empty() {
        message.push_str("; its log ends: ");
        message.push_str(&tail.join(" | "));
    }
    message
}

/// A token no earlier probe used.
fn token() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}{:x}", std::process::id(), nanos)
}

/// The job's side (`cwm job probe DIR TOKEN`): checks that `dir/token` holds `token` and
/// writes `dir/reply`; an error message when this node does not see it.
///
/// # Errors
/// A message saying this node does not see the directory.
pub fn answer(dir: &Path, token: &str, version: &str) -> Result<(), String> {
    let seen = fs::read_to_string(dir.join("token")).ok();
    if seen.as_deref() != Some(token) {
        return Err(format!(
            "this node does not see {} (the token is {}): the store is not shared with it",
            dir.display(),
            if seen.is_some() {
                "different"
            } else {
                "missing"
            }
        ));
    }
    let reply = format!("{token}\nhost {}\ncwm {version}\n", host_name());
    fs::write(dir.join("reply"), reply).map_err(|e| format!("writing the reply: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_needs_the_token_and_says_what_is_missing() {
        let dir = std::env::temp_dir().join(format!("cwm-probe-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let missing = answer(&dir, "t1", "0.1").unwrap_err();
        assert!(
            missing.contains("does not see") && missing.contains("missing"),
            "{missing}"
        );
        fs::write(dir.join("token"), "t2").unwrap();
        assert!(answer(&dir, "t1", "0.1").unwrap_err().contains("different"));
        fs::write(dir.join("token"), "t1").unwrap();
        answer(&dir, "t1", "0.1").unwrap();
        assert!(
            fs::read_to_string(dir.join("reply"))
                .unwrap()
                .starts_with("t1\n")
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_probe_names_the_likely_cause() {
        let dir = Path::new("/s/artifacts/jobs/probe-1");
        let ended = JobState::Ended(super::super::state::Ended::Completed);
        let unshared = probe_failure(
            4,
            &ended,
            "error: this node does not see x",
            Path::new("/c"),
            dir,
        );
        assert!(
            unshared.contains("compute nodes share") && unshared.contains("/s/artifacts"),
            "{unshared}"
        );
        let no_cwm = probe_failure(
            4,
            &ended,
            "/c: No such file or directory",
            Path::new("/c"),
            dir,
        );
        assert!(no_cwm.contains("could not run /c"), "{no_cwm}");
    }
}
