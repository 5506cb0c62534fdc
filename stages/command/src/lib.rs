//! The built-in `command` stage kind: runs a shell command as a pipeline step.
//!
//! This is how users extend a pipeline with their own steps, and what the
//! executor's tests use. The command runs under `sh -c` in the pipeline file's
//! directory with:
//! - `$CWM_OUT`: the (empty) output directory to fill;
//! - `$CWM_IN_<name>`: the directory of each input artifact (read-only). An
//!   input bound to several artifacts (a matrix) gets their paths separated by
//!   newlines, plus `$CWM_IN_<name>_COUNT` and `$CWM_IN_<name>_<i>`;
//! - `$CWM_PARAM_<name>`: every other parameter as plain text;
//! - `$CWM_THREADS`: the thread budget;
//! - `$CUDA_VISIBLE_DEVICES` and `$CWM_GPUS`: when the executor assigned GPUs to the stage, their
//!   ids joined with commas (e.g. `2,5`), so CUDA programs see exactly those; otherwise both are
//!   left as the executor's environment has them (the kind itself claims no GPU);
//! - `$CWM_PARTIAL`: a directory (create it on first use) for state a later run of the same
//!   cache key can resume from after a failure or a kill; it is removed once the stage's result
//!   is committed (unset outside a pipeline run).
//!
//! Standard output and standard error go to the stage log. A non-zero exit
//! status fails the stage. Files listed under a stage's `deps:` in the
//! pipeline join its cache key (handled by the executor for any kind).
#![deny(missing_docs)]

use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use cwm_stage::{
    InputsDecl, KindDecl, ParamDefault, ParamSpec, ParamType, StageContext, StageError, StageKind,
    ThreadsDecl,
};

include!(concat!(env!("OUT_DIR"), "/source_fingerprint.rs"));

/// The `command` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct CommandStage;

const PARAMS: &[ParamSpec] = &[
    ParamSpec::required("cmd", ParamType::Str, "shell command to run under `sh -c`"),
    ParamSpec::with_default(
        "threads",
        ParamType::Int,
        ParamDefault::Int(1),
        "threads the command uses (0 = all); exported as $CWM_THREADS",
    )
    .unkeyed(),
];

const DECL: KindDecl = KindDecl::new(
    "command",
    "runs a shell command with inputs in $CWM_IN_<name> and its output in $CWM_OUT",
)
.params(PARAMS)
.extra_params()
.inputs(InputsDecl::Any)
.threads(ThreadsDecl::Param);

impl StageKind for CommandStage {
    fn decl(&self) -> &'static KindDecl {
        &DECL
    }

    fn fingerprint(&self) -> String {
        SOURCE_FINGERPRINT.to_owned()
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let cmd = ctx.params().str("cmd")?;
        let out = ctx.output("out")?;
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(cmd)
            .current_dir(ctx.base_dir())
            .stdin(Stdio::null())
            .env("CWM_OUT", out)
            .env("CWM_THREADS", ctx.threads().to_string())
            .env("CWM_INSTANCE", ctx.instance());
        if let Some(partial) = ctx.partial_dir() {
            command.env("CWM_PARTIAL", partial);
        }
        if let Some(gpus) = gpu_list(ctx.gpus()) {
            command
                .env("CUDA_VISIBLE_DEVICES", &gpus)
                .env("CWM_GPUS", &gpus);
        }
        for (name, artifacts) in ctx.inputs() {
            let var = env_name("CWM_IN_", name);
            let joined: Vec<String> = artifacts
                .iter()
                .map(|a| a.path.display().to_string())
                .collect();
            command.env(&var, joined.join("\n"));
            command.env(format!("{var}_COUNT"), artifacts.len().to_string());
            for (i, path) in joined.iter().enumerate() {
                command.env(format!("{var}_{i}"), path);
            }
        }
        for (name, value) in ctx.params().iter() {
            if name != "cmd" && name != "threads" {
                command.env(env_name("CWM_PARAM_", name), value.to_plain_string());
            }
        }
        match (ctx.log().try_clone_file(), ctx.log().try_clone_file()) {
            (Some(stdout), Some(stderr)) => {
                command.stdout(stdout).stderr(stderr);
            }
            _ => {
                command.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        ctx.log().line(format!("$ {cmd}"));
        let mut child = command
            .spawn()
            .map_err(|e| StageError::failed(format!("cannot start `sh -c {cmd}`: {e}")))?;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if ctx.is_cancelled() => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(StageError::Cancelled);
                }
                Ok(None) => thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(StageError::failed(format!("waiting for command: {e}"))),
            }
        };
        if status.success() {
            Ok(())
        } else {
            Err(StageError::failed(match status.code() {
                Some(code) => format!("command exited with status {code} (see the stage log)"),
                None => "command was killed by a signal (see the stage log)".to_owned(),
            }))
        }
    }
}

/// The assigned GPU ids joined with commas; `None` when there are none.
fn gpu_list(gpus: &[u32]) -> Option<String> {
    if gpus.is_empty() {
        return None;
    }
    let ids: Vec<String> = gpus.iter().map(u32::to_string).collect();
    Some(ids.join(","))
}

/// `prefix` + `name` with every character that is not alphanumeric or `_`
/// replaced by `_`, so any input or param name makes a valid variable.
fn env_name(prefix: &str, name: &str) -> String {
    let mut var = String::from(prefix);
    var.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    var
}

#[cfg(test)]
mod tests {
    use super::*;
    use cwm_stage::{InputArtifact, ParamValue, Params, Progress, StageLog};
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("cwm-cmd-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn env_names_are_sanitised() {
        assert_eq!(
            env_name("CWM_PARAM_", "learning-rate.x"),
            "CWM_PARAM_learning_rate_x"
        );
    }

    #[test]
    fn gpu_lists_join_the_ids() {
        assert_eq!(gpu_list(&[]), None);
        assert_eq!(gpu_list(&[3]).as_deref(), Some("3"));
        assert_eq!(gpu_list(&[2, 5]).as_deref(), Some("2,5"));
    }

    /// What `cmd` writes to `$CWM_OUT/env.txt`, run with these GPUs assigned.
    fn run_with_gpus(tag: &str, gpus: Option<Vec<u32>>) -> String {
        let base = temp_dir(tag);
        let out = base.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let mut params = Params::new();
        params.insert(
            "cmd",
            ParamValue::Str(
                "echo \"${CUDA_VISIBLE_DEVICES-unset}|${CWM_GPUS-unset}\" > $CWM_OUT/env.txt"
                    .into(),
            ),
        );
        let mut outputs = BTreeMap::new();
        outputs.insert("out".to_owned(), out.clone());
        let mut ctx = StageContext::new(
            "t",
            params,
            BTreeMap::new(),
            outputs,
            base.clone(),
            1,
            Progress::disabled(),
            StageLog::discard(),
            Arc::new(AtomicBool::new(false)),
        );
        if let Some(gpus) = gpus {
            ctx = ctx.with_gpus(gpus);
        }
        CommandStage.run(&ctx).unwrap();
        let env = std::fs::read_to_string(out.join("env.txt")).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
        env
    }

    #[test]
    fn assigned_gpus_are_exported() {
        assert_eq!(run_with_gpus("gpus", Some(vec![2, 5])), "2,5|2,5\n");
        assert_eq!(run_with_gpus("gpu", Some(vec![0])), "0|0\n");
        // Without an assignment the command inherits the executor's environment: whatever
        // CUDA_VISIBLE_DEVICES is there, and no CWM_GPUS.
        let inherited = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "unset".into());
        assert_eq!(
            run_with_gpus("no-gpus", Some(Vec::new())),
            format!("{inherited}|unset\n")
        );
        assert_eq!(
            run_with_gpus("default", None),
            format!("{inherited}|unset\n")
        );
    }

    #[test]
    fn runs_with_inputs_params_and_output_and_reports_failure() {
        let base = temp_dir("run");
        let input = base.join("in");
        let out = base.join("out");
        std::fs::create_dir_all(&input).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(input.join("x.txt"), "41\n").unwrap();
        let mut params = Params::new();
        params.insert(
            "cmd",
            ParamValue::Str(
                "echo $(( $(cat $CWM_IN_data/x.txt) + CWM_PARAM_n )) > $CWM_OUT/y.txt".into(),
            ),
        );
        params.insert("n", ParamValue::Int(1));
        params.insert("threads", ParamValue::Int(1));
        let mut inputs = BTreeMap::new();
        inputs.insert(
            "data".to_owned(),
            vec![InputArtifact {
                producer: "p".into(),
                producer_kind: "command".into(),
                producer_params: Params::new(),
                output: "out".into(),
                hash: "h".into(),
                path: input.clone(),
            }],
        );
        let mut outputs = BTreeMap::new();
        outputs.insert("out".to_owned(), out.clone());
        let ctx = StageContext::new(
            "t",
            params.clone(),
            inputs.clone(),
            outputs.clone(),
            base.clone(),
            1,
            Progress::disabled(),
            StageLog::discard(),
            Arc::new(AtomicBool::new(false)),
        );
        CommandStage.run(&ctx).unwrap();
        assert_eq!(std::fs::read_to_string(out.join("y.txt")).unwrap(), "42\n");

        params.insert("cmd", ParamValue::Str("exit 3".into()));
        let ctx = StageContext::new(
            "t",
            params,
            inputs,
            outputs,
            base.clone(),
            1,
            Progress::disabled(),
            StageLog::discard(),
            Arc::new(AtomicBool::new(false)),
        );
        let err = CommandStage.run(&ctx).unwrap_err();
        assert!(err.to_string().contains("status 3"), "{err}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
