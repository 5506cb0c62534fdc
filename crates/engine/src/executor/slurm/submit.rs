//! What one task's Slurm job is: its batch script and its `sbatch` options.

use std::path::Path;
use std::time::Duration;

use crate::executor::settings::SlurmSettings;
use crate::resources::{Resources, slurm_time};

/// The most seconds `--signal` takes (Slurm's limit).
const MAX_SIGNAL_LEAD: u64 = 65_535;

/// The batch script: runs the task's spec with `cwm job run`. `exec` makes `cwm` the batch
/// shell itself, so `--signal=B:USR1@...` reaches it.
pub fn batch_script(cwm: &Path, spec: &Path, instance: &str) -> String {
    format!(
        "#!/bin/sh\n# cwm: {instance}\nexec {} job run {}\n",
        shell_quote(&cwm.display().to_string()),
        shell_quote(&spec.display().to_string())
    )
}

/// `text` as one single-quoted shell word.
pub(super) fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The job's `sbatch` options (the script's path goes last, after them).
pub struct JobOptions<'a> {
    /// Its instance, for `--job-name`.
    pub instance: &'a str,
    /// The CPUs it gets.
    pub cpus: u32,
    /// What its stage asked for.
    pub resources: &'a Resources,
    /// Where Slurm writes its output (`slurm-%j.out` under the job's directory).
    pub log: &'a Path,
    /// The directory it runs in.
    pub chdir: &'a Path,
}

impl JobOptions<'_> {
    /// The `sbatch` arguments, `settings` included.
    pub fn args(&self, settings: &SlurmSettings) -> Vec<String> {
        let mut args = vec![
            "--parsable".to_owned(),
            format!("--job-name=cwm:{}", job_name(self.instance)),
            format!("--output={}", self.log.display()),
            "--open-mode=append".to_owned(),
            format!("--chdir={}", self.chdir.display()),
            format!("--cpus-per-task={}", self.cpus),
            "--requeue".to_owned(),
        ];
        let r = self.resources;
        if let Some(mib) = r.mem_mib {
            args.push(format!("--mem={mib}M"));
        }
        if r.gpus > 0 {
            args.push(format!("--gres=gpu:{}", r.gpus));
        }
        if let Some(minutes) = r.time_min {
            args.push(format!("--time={}", slurm_time(minutes)));
        }
        args.push(format!(
            "--signal=B:USR1@{}",
            signal_lead(settings.warn, r.time_min)
        ));
        push_named(&mut args, "partition", settings.partition.as_deref());
        push_named(&mut args, "account", settings.account.as_deref());
        push_named(&mut args, "qos", settings.qos.as_deref());
        args.extend(settings.sbatch.iter().cloned());
        args
    }

    /// The resources in words, for messages: `4 CPUs, 16384 MiB, 1 GPU, 1440 min`.
    pub fn describe(&self) -> String {
        let r = self.resources;
        let mut parts = vec![format!("{} CPU(s)", self.cpus)];
        parts.push(match r.mem_mib {
            Some(mib) => format!("{mib} MiB"),
            None => "the default memory".to_owned(),
        });
        if r.gpus > 0 {
            parts.push(format!("{} GPU(s)", r.gpus));
        }
        parts.push(match r.time_min {
            Some(minutes) => format!("{} time", slurm_time(minutes)),
            None => "the default time limit".to_owned(),
        });
        parts.join(", ")
    }
}

fn push_named(args: &mut Vec<String>, name: &str, value: Option<&str>) {
    if let Some(value) = value {
        args.push(format!("--{name}={value}"));
    }
}

/// The instance's name as a job name: what `squeue` shows, without characters a shell or
/// Slurm's format strings would trip on.
fn job_name(instance: &str) -> String {
    let mut name: String = instance
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=,[]_.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    name.truncate(100);
    name
}

/// Seconds before the time limit at which the job is warned: `warn`, but at most a quarter
/// of a limit it knows (so a short job is not warned at its start) and Slurm's maximum.
fn signal_lead(warn: Duration, time_min: Option<u64>) -> u64 {
    let mut lead = warn.as_secs().max(1);
    if let Some(minutes) = time_min {
        lead = lead.min((minutes * 60 / 4).max(1));
    }
    lead.min(MAX_SIGNAL_LEAD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn the_script_execs_cwm_on_the_spec_with_safe_quoting() {
        let script = batch_script(
            Path::new("/opt/cwm it's/cwm"),
            Path::new("/s/jobs/k/spec.json"),
            "train[a=1]",
        );
        assert!(script.starts_with("#!/bin/sh\n"));
        assert!(script.contains(r"exec '/opt/cwm it'\''s/cwm' job run '/s/jobs/k/spec.json'"));
    }

    #[test]
    fn resources_and_settings_become_sbatch_options() {
        let resources = Resources {
            cpus: Some(4),
            mem_mib: Some(16 * 1024),
            gpus: 1,
            time_min: Some(4 * 1440),
        };
        let (log, chdir) = (PathBuf::from("/s/jobs/k/slurm-%j.out"), PathBuf::from("/p"));
        let job = JobOptions {
            instance: "train[arch=slice,size=d512]",
            cpus: 4,
            resources: &resources,
            log: &log,
            chdir: &chdir,
        };
        let settings = SlurmSettings {
            partition: Some("gpu".into()),
            qos: Some("long".into()),
            sbatch: vec!["--constraint=h100".into()],
            ..SlurmSettings::default()
        };
        let args = job.args(&settings);
        for want in [
            "--parsable",
            "--job-name=cwm:train[arch=slice,size=d512]",
            "--output=/s/jobs/k/slurm-%j.out",
            "--cpus-per-task=4",
            "--mem=16384M",
            "--gres=gpu:1",
            "--time=4-00:00:00",
            "--signal=B:USR1@300",
            "--requeue",
            "--partition=gpu",
            "--qos=long",
            "--constraint=h100",
        ] {
            assert!(
                args.iter().any(|a| a == want),
                "{want} missing from {args:?}"
            );
        }
        assert!(!args.iter().any(|a| a.starts_with("--account")));
        assert_eq!(
            job.describe(),
            "4 CPU(s), 16384 MiB, 1 GPU(s), 4-00:00:00 time"
        );
    }

    #[test]
    fn a_short_limit_is_warned_a_quarter_before_its_end() {
        let warn = Duration::from_secs(300);
        assert_eq!(signal_lead(warn, None), 300);
        assert_eq!(signal_lead(warn, Some(2)), 30);
        assert_eq!(signal_lead(warn, Some(1440)), 300);
        assert_eq!(
            signal_lead(Duration::from_secs(10 * 86_400), None),
            MAX_SIGNAL_LEAD
        );
        assert_eq!(job_name("a b'c"), "a_b_c");
    }
}
