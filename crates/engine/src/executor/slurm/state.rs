//! Slurm's job states: reading them from `squeue` and `scontrol`, and saying what a
//! terminal one means.

use std::collections::BTreeMap;

/// Where a Slurm job stands, as this executor needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Waiting to start (with Slurm's reason, e.g. `Resources`, `Priority`, `BeginTime`).
    Pending(String),
    /// Started and not ended (running, configuring, completing, suspended, requeued on its
    /// way back to pending, ...).
    Running(String),
    /// Ended.
    Ended(Ended),
}

/// A terminal state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Exit code 0.
    Completed,
    /// A non-zero exit code or a launch failure; Slurm's reason and exit code.
    Failed {
        /// `Reason=`, e.g. `NonZeroExitCode`.
        reason: String,
        /// `ExitCode=` (`code:signal`), when known.
        exit_code: Option<String>,
    },
    /// Over its time limit.
    Timeout,
    /// Over its memory (on clusters whose cgroups report it so).
    OutOfMemory,
    /// Cancelled (`scancel`, or a dependency that can never be met).
    Cancelled,
    /// Its node failed.
    NodeFail,
    /// Preempted and not requeued.
    Preempted,
    /// Its node could not boot.
    BootFail,
    /// Past its deadline.
    Deadline,
    /// A state this executor does not know; taken as an end.
    Other(String),
}

impl JobState {
    /// The state named `name` (`squeue`'s `%T`, `scontrol`'s `JobState`), with `reason`.
    pub fn parse(name: &str, reason: &str, exit_code: Option<&str>) -> Self {
        let name = name.trim();
        // squeue may print `CANCELLED by 0`; scontrol prints the bare state.
        let base = name.split_whitespace().next().unwrap_or("");
        let reason = reason.trim().to_owned();
        match base {
            "PENDING" | "REQUEUE_HOLD" | "REQUEUE_FED" | "SPECIAL_EXIT" | "RESV_DEL_HOLD" => {
                JobState::Pending(reason)
            }
            "RUNNING" | "CONFIGURING" | "COMPLETING" | "SUSPENDED" | "STOPPED" | "RESIZING"
            | "REQUEUED" | "SIGNALING" | "STAGE_OUT" => JobState::Running(base.to_owned()),
            "COMPLETED" => JobState::Ended(Ended::Completed),
            "FAILED" => JobState::Ended(Ended::Failed {
                reason,
                exit_code: exit_code.map(str::to_owned),
            }),
            "TIMEOUT" => JobState::Ended(Ended::Timeout),
            "OUT_OF_MEMORY" => JobState::Ended(Ended::OutOfMemory),
            "CANCELLED" => JobState::Ended(Ended::Cancelled),
            "NODE_FAIL" => JobState::Ended(Ended::NodeFail),
            "PREEMPTED" => JobState::Ended(Ended::Preempted),
            "BOOT_FAIL" => JobState::Ended(Ended::BootFail),
            "DEADLINE" => JobState::Ended(Ended::Deadline),
            other => JobState::Ended(Ended::Other(other.to_owned())),
        }
    }

    /// A few words for the display (`queued (Priority)`, `RUNNING`).
    pub fn describe(&self) -> String {
        match self {
            JobState::Pending(reason) if reason.is_empty() || reason == "None" => {
                "queued".to_owned()
            }
            JobState::Pending(reason) => format!("queued ({reason})"),
            JobState::Running(state) => state.to_lowercase(),
            JobState::Ended(ended) => format!("{ended:?}").to_lowercase(),
        }
    }
}

impl Ended {
    /// Why the job ended without a result, in words, for `cwm run`'s failure line.
    /// `log` is the job's output (Slurm's own lines about memory land there).
    pub fn cause(&self, job: u64, resources: &str, log: &str) -> String {
        let over_memory = log.contains("exceeded memory limit")
            || log.contains("oom-kill")
            || log.contains("oom_kill");
        match self {
            Ended::OutOfMemory => {
                format!(
                    "Slurm job {job} ran out of memory (OUT_OF_MEMORY; it asked for {resources})"
                )
            }
            Ended::Failed { .. } if over_memory => format!(
                "Slurm job {job} ran out of memory: Slurm killed it over its limit (it asked for \
                 {resources})"
            ),
            Ended::Failed { reason, exit_code } => {
                let code = exit_code.as_deref().unwrap_or("unknown");
                format!("Slurm job {job} failed (FAILED, reason {reason}, exit code {code})")
            }
            Ended::Timeout => format!(
                "Slurm job {job} hit its time limit (TIMEOUT; it asked for {resources}) and \
                 left no state to resume from"
            ),
            Ended::Cancelled => format!("Slurm job {job} was cancelled (CANCELLED)"),
            Ended::NodeFail => format!("Slurm job {job} lost its node (NODE_FAIL)"),
            Ended::Preempted => {
                format!("Slurm job {job} was preempted and not requeued (PREEMPTED)")
            }
            Ended::BootFail => format!("Slurm job {job}'s node failed to boot (BOOT_FAIL)"),
            Ended::Deadline => format!("Slurm job {job} passed its deadline (DEADLINE)"),
            Ended::Completed => {
                format!("Slurm job {job} completed but its task left no result in the store")
            }
            Ended::Other(state) => format!("Slurm job {job} ended in state {state}"),
        }
    }
}

/// The states in `squeue -h -o '%i|%T|%r'` output, by job id (array tasks' `ID_N` lines and
/// lines that do not read are left out).
pub fn parse_squeue(text: &str) -> BTreeMap<u64, JobState> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split('|');
            let id = fields.next()?.trim().parse().ok()?;
            let state = fields.next()?;
            let reason = fields.next().unwrap_or("");
            Some((id, JobState::parse(state, reason, None)))
        })
        .collect()
}

/// The state in one line of `scontrol show job -o ID`.
pub fn parse_scontrol(line: &str) -> Option<JobState> {
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    };
    let state = field("JobState")?;
    Some(JobState::parse(
        state,
        field("Reason").unwrap_or(""),
        field("ExitCode"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_lines_give_states_by_id() {
        let text = "12|PENDING|Priority\n13|RUNNING|None\n14|TIMEOUT|TimeLimit\n\
                    15|CANCELLED by 0|None\n16_3|RUNNING|None\nnoise\n17|COMPLETING|None\n";
        let states = parse_squeue(text);
        assert_eq!(states[&12], JobState::Pending("Priority".into()));
        assert_eq!(states[&13], JobState::Running("RUNNING".into()));
        assert_eq!(states[&14], JobState::Ended(Ended::Timeout));
        assert_eq!(states[&15], JobState::Ended(Ended::Cancelled));
        assert_eq!(states[&17], JobState::Running("COMPLETING".into()));
        assert_eq!(states.len(), 5);
    }

    #[test]
    fn scontrol_lines_give_state_reason_and_exit_code() {
        let line = "JobId=7 JobName=x UserId=root(0) JobState=FAILED Reason=NonZeroExitCode \
                    Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 ExitCode=3:0";
        let failed = Ended::Failed {
            reason: "NonZeroExitCode".into(),
            exit_code: Some("3:0".into()),
        };
        assert_eq!(parse_scontrol(line), Some(JobState::Ended(failed)));
        assert_eq!(parse_scontrol("JobId=7 Name=x"), None);
    }

    #[test]
    fn every_terminal_state_has_its_own_cause() {
        let states = [
            "COMPLETED",
            "FAILED",
            "TIMEOUT",
            "OUT_OF_MEMORY",
            "CANCELLED",
            "NODE_FAIL",
            "PREEMPTED",
            "BOOT_FAIL",
            "DEADLINE",
            "WEIRD",
        ];
        let mut causes = Vec::new();
        for name in states {
            let JobState::Ended(ended) = JobState::parse(name, "", Some("1:0")) else {
                panic!("{name} is not terminal");
            };
            let cause = ended.cause(9, "1 CPU", "");
            assert!(cause.contains("Slurm job 9"), "{cause}");
            causes.push(cause);
        }
        causes.sort();
        causes.dedup();
        assert_eq!(causes.len(), states.len());
    }

    #[test]
    fn a_failure_with_slurms_memory_line_reads_as_out_of_memory() {
        let failed = Ended::Failed {
            reason: "JobLaunchFailure".into(),
            exit_code: Some("0:9".into()),
        };
        let log = "slurmstepd: error: Job 5 exceeded memory limit (400000 > 51200), being killed";
        assert!(failed.cause(5, "50M", log).contains("ran out of memory"));
        assert!(failed.cause(5, "50M", "").contains("exit code 0:9"));
    }

    #[test]
    fn pending_and_running_states_are_not_ends() {
        for name in [
            "PENDING",
            "REQUEUE_HOLD",
            "RUNNING",
            "COMPLETING",
            "REQUEUED",
        ] {
            assert!(!matches!(
                JobState::parse(name, "", None),
                JobState::Ended(_)
            ));
        }
        assert_eq!(
            JobState::parse("PENDING", "BeginTime", None).describe(),
            "queued (BeginTime)"
        );
    }
}
