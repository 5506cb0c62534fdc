//! Calling Slurm's commands (`sbatch`, `squeue`, `scontrol`, `scancel`): each call bounded in
//! time (a controller that does not answer makes them block), and counted, so a run can say
//! how hard it worked the controller.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::state::{JobState, parse_squeue};
use crate::executor::ExecutorError;

/// How long one Slurm command may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// What one call printed.
#[derive(Debug, Clone)]
pub struct Output {
    /// Exit status 0.
    pub ok: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Calls made so far, by command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Calls {
    /// `sbatch`.
    pub sbatch: u64,
    /// `squeue`.
    pub squeue: u64,
    /// `scontrol`.
    pub scontrol: u64,
    /// `scancel`.
    pub scancel: u64,
}

/// Runs Slurm's commands.
#[derive(Debug, Default)]
pub struct SlurmCli {
    /// What has been called.
    pub calls: Calls,
}

impl SlurmCli {
    /// Runs `program args`, waiting at most [`CALL_TIMEOUT`].
    ///
    /// # Errors
    /// [`ExecutorError`] when the program cannot start or does not end in time.
    pub fn call(&mut self, program: &str, args: &[String]) -> Result<Output, ExecutorError> {
        match program {
            "sbatch" => self.calls.sbatch += 1,
            "squeue" => self.calls.squeue += 1,
            "scontrol" => self.calls.scontrol += 1,
            "scancel" => self.calls.scancel += 1,
            _ => {}
        }
        run_bounded(program, args, CALL_TIMEOUT)
    }
}

impl SlurmCli {
    /// The states of jobs `ids` from one `squeue` call (all states, so jobs that just ended
    /// are seen until Slurm's `MinJobAge`); ids Slurm no longer knows are left out.
    ///
    /// # Errors
    /// [`ExecutorError`] when `squeue` fails.
    pub fn job_states(&mut self, ids: &[u64]) -> Result<BTreeMap<u64, JobState>, ExecutorError> {
        if ids.is_empty() {
            return Ok(BTreeMap::new());
        }
        let list: Vec<String> = ids.iter().map(u64::to_string).collect();
        let args = vec![
            "--noheader".to_owned(),
            "--states=all".to_owned(),
            format!("--jobs={}", list.join(",")),
            "--format=%i|%T|%r".to_owned(),
        ];
        let out = self.call("squeue", &args)?;
        // squeue leaves unknown ids out, except that it fails when the only id asked about
        // is unknown: that, too, is an id without a state.
        if !out.ok && !out.stderr.contains("Invalid job id") {
            return Err(ExecutorError::Cluster(format!(
                "squeue failed: {}",
                out.stderr.trim()
            )));
        }
        Ok(parse_squeue(&out.stdout))
    }
}

/// Runs `program args` with output captured, killing it after `timeout`.
fn run_bounded(program: &str, args: &[String], timeout: Duration) -> Result<Output, ExecutorError> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            ExecutorError::Cluster(format!(
                "cannot run `{program}` ({e}); is Slurm installed and on PATH?"
            ))
        })?;
    // Read both pipes on threads so a chatty command never blocks on a full pipe.
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let out = thread::spawn(move || read_all(stdout.as_mut()));
    let err = thread::spawn(move || read_all(stderr.as_mut()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ExecutorError::Cluster(format!(
                    "`{program}` did not answer within {}s: is the Slurm controller up?",
                    timeout.as_secs()
                )));
            }
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                return Err(ExecutorError::Cluster(format!(
                    "waiting for `{program}`: {e}"
                )));
            }
        }
    };
    Ok(Output {
        ok: status.success(),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

fn read_all(pipe: Option<&mut impl std::io::Read>) -> String {
    let mut text = String::new();
    if let Some(pipe) = pipe {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_captures_output_and_status_and_a_missing_program_is_an_error() {
        let out = run_bounded(
            "sh",
            &["-c".into(), "echo hi; echo no >&2; exit 3".into()],
            CALL_TIMEOUT,
        )
        .unwrap();
        assert!(!out.ok);
        assert_eq!(out.stdout, "hi\n");
        assert_eq!(out.stderr, "no\n");
        let missing = run_bounded("no-such-slurm-command", &[], CALL_TIMEOUT).unwrap_err();
        assert!(missing.to_string().contains("no-such-slurm-command"));
    }

    #[test]
    fn a_call_that_hangs_is_killed_at_its_deadline() {
        let started = Instant::now();
        let err = run_bounded("sleep", &["30".into()], Duration::from_millis(300)).unwrap_err();
        assert!(err.to_string().contains("did not answer"));
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn calls_are_counted_by_command() {
        let mut cli = SlurmCli::default();
        // `scancel --version` may be missing here; the count is taken before the call.
        let _ = cli.call("scancel", &["--version".into()]);
        let _ = cli.call("squeue", &["--version".into()]);
        let _ = cli.call("squeue", &["--version".into()]);
        assert_eq!(cli.calls.scancel, 1);
        assert_eq!(cli.calls.squeue, 2);
        assert_eq!(cli.calls.sbatch, 0);
    }
}
