//! The Slurm executor against a real Slurm cluster: CI starts a one-node cluster with two
//! fake GPUs (`.ci/slurm/start.sh`) before the tests; without one these tests skip, and under
//! CI they fail. They run one at a time (the node has two cores), each in its own workspace,
//! and check only their own jobs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Workspace, cwm_command, require};

/// One Slurm test at a time.
static CLUSTER: Mutex<()> = Mutex::new(());

/// The executor section every test pipeline starts with: a poll a second, and one CPU for
/// kinds that claim every thread (the CI node has two).
const SLURM: &str = "executor:\n  kind: slurm\n  slurm: {poll: 1, cpus_for_all: 1, warn: 20}\n";

/// Whether a Slurm controller answers here; takes the cluster for the calling test.
fn cluster() -> Option<std::sync::MutexGuard<'static, ()>> {
    let up = Command::new("timeout")
        .args(["10", "sinfo", "--noheader"])
        .output()
        .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
    require("a Slurm cluster (start one with .ci/slurm/start.sh)", up)
        .then(|| CLUSTER.lock().unwrap_or_else(|e| e.into_inner()))
}

fn text(out: &Output) -> (String, String) {
    let t = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (t(&out.stdout), t(&out.stderr))
}

/// `cwm ARGS` → (success, stdout + stderr).
fn cwm(ws: &Workspace, args: &[&str]) -> (bool, String) {
    let out = ws.cwm(args);
    let (stdout, stderr) = text(&out);
    (out.status.success(), format!("{stdout}{stderr}"))
}

/// The Slurm job ids this workspace's store records (jobs in flight).
fn recorded_jobs(ws: &Workspace) -> Vec<u64> {
    let jobs = ws.artifacts().join("jobs");
    let mut ids: Vec<u64> = std::fs::read_dir(jobs)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("slurm.json")).ok())
        .filter_map(|json| serde_json::from_str::<serde_json::Value>(&json).ok())
        .filter_map(|v| v["job_id"].as_u64())
        .collect();
    ids.sort_unstable();
    ids
}

/// Waits up to `secs` for `done`.
fn wait_for(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

/// The ids among `ids` that `squeue` lists as pending or running.
fn queued(ids: &[u64]) -> Vec<u64> {
    let list: Vec<String> = ids.iter().map(u64::to_string).collect();
    let out = Command::new("squeue")
        .args([
            "--noheader",
            "--format=%i",
            &format!("--jobs={}", list.join(",")),
        ])
        .output()
        .expect("squeue runs");
    let (stdout, _) = text(&out);
    stdout
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn spawn(ws: &Workspace, args: &[&str]) -> Child {
    cwm_command(&ws.dir, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start cwm")
}

#[test]
fn a_failing_stage_is_reported_with_its_exit_code_and_log() {
    let Some(_cluster) = cluster() else { return };
    let ws = Workspace::new("slurm-fail");
    ws.pipeline(&format!(
        "{SLURM}stages:\n  bad:\n    uses: command\n    params: {{cmd: 'echo about to fail; exit 3'}}\n  after:\n    uses: command\n    inputs: {{x: bad}}\n    params: {{cmd: 'true'}}\n"
    ));
    let (ok, out) = cwm(&ws, &["run", "--progress", "none"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("failed  bad: command exited with status 3"),
        "{out}"
    );
    assert!(out.contains("(Slurm job "), "{out}");
    assert!(out.contains("| about to fail"), "the log tail: {out}");
    assert!(out.contains("skipped after"), "{out}");
    assert!(recorded_jobs(&ws).is_empty(), "no job left recorded");
}

#[test]
fn a_stage_over_its_memory_is_reported_as_out_of_memory() {
    let Some(_cluster) = cluster() else { return };
    let ws = Workspace::new("slurm-oom");
    ws.pipeline(&format!(
        "{SLURM}stages:\n  hog:\n    uses: command\n    resources: {{mem: 100M}}\n    params: {{cmd: \"python3 -c 'import time; x = bytearray(600 << 20); x[::4096] = b\\\"1\\\" * len(x[::4096]); time.sleep(30)'\"}}\n"
    ));
    let (ok, out) = cwm(&ws, &["run", "--progress", "none"]);
    assert!(!ok, "{out}");
    assert!(out.contains("failed  hog: Slurm job"), "{out}");
    assert!(out.contains("ran out of memory"), "{out}");
    assert!(out.contains("100 MiB"), "says what it asked for: {out}");
}

#[test]
fn a_stage_over_its_time_limit_is_reported_as_such() {
    let Some(_cluster) = cluster() else { return };
    let ws = Workspace::new("slurm-timeout");
    ws.pipeline(&format!(
        "{SLURM}stages:\n  slow:\n    uses: command\n    resources: {{time: 1}}\n    params: {{cmd: 'sleep 300'}}\n"
    ));
    let started = Instant::now();
    let (ok, out) = cwm(&ws, &["run", "--progress", "none"]);
    assert!(!ok, "{out}");
    assert!(out.contains("failed  slow:"), "{out}");
    assert!(out.contains("time limit"), "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(200),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn gpu_requests_reach_slurm_and_two_gpu_stages_never_share_one() {
    let Some(_cluster) = cluster() else { return };
    let ws = Workspace::new("slurm-gpus");
    let cell = "echo \"$CUDA_VISIBLE_DEVICES $(date +%s.%N)\" > $CWM_OUT/start; sleep 3; date +%s.%N > $CWM_OUT/end";
    ws.pipeline(&format!(
        "{SLURM}stages:\n  g:\n    uses: command\n    matrix: {{n: [1, 2]}}\n    resources: {{gpus: 1}}\n    params: {{cmd: '{cell}'}}\n  many:\n    uses: command\n    resources: {{gpus: 3}}\n    params: {{cmd: 'true'}}\n"
    ));
    let (ok, out) = cwm(&ws, &["run", "--progress", "none", "--keep-going"]);
    assert!(!ok, "`many` asks for more GPUs than the node has: {out}");
    assert!(
        out.contains("failed  many: sbatch refused the job"),
        "{out}"
    );
    let read = |name: &str, file: &str| {
        let path = artifact_dir(&ws, name).join(file);
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}/{file}: {e}"))
    };
    let (a, b) = (read("g[n=1]", "start"), read("g[n=2]", "start"));
    let device = |s: &str| s.split_whitespace().next().unwrap_or_default().to_owned();
    assert!(!device(&a).is_empty() && !device(&b).is_empty(), "{a} {b}");
    let time = |s: &str| s.split_whitespace().last().unwrap().parse::<f64>().unwrap();
    let (end_a, end_b) = (time(&read("g[n=1]", "end")), time(&read("g[n=2]", "end")));
    let overlapped = time(&a) < end_b && time(&b) < end_a;
    assert!(
        !overlapped || device(&a) != device(&b),
        "two concurrent GPU stages shared device {}: {a} {b}",
        device(&a)
    );
}

#[test]
fn ctrl_c_cancels_every_job_it_submitted() {
    let Some(_cluster) = cluster() else { return };
    let ws = Workspace::new("slurm-ctrl-c");
    ws.pipeline(&format!(
        "{SLURM}stages:\n  w:\n    uses: command\n    matrix: {{n: [1, 2, 3]}}\n    params: {{cmd: 'sleep 120'}}\n"
    ));
    let child = spawn(&ws, &["run", "--progress", "plain"]);
    assert!(
        wait_for(60, || recorded_jobs(&ws).len() == 3),
        "three jobs submitted"
    );
    let ids = recorded_jobs(&ws);
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(130), "{stdout}{stderr}");
    assert!(
        stdout.contains("cancelled by this run's interrupt"),
        "{stdout}"
    );
    assert_eq!(
        queued(&ids),
        Vec::<u64>::new(),
        "jobs {ids:?} left in squeue"
    );
    assert!(recorded_jobs(&ws).is_empty());
}

#[test]
fn a_killed_run_leaves_its_jobs_to_the_next_run_which_submits_no_duplicate() {
    let Some(_cluster) = cluster() else { return };
    let ws = Workspace::new("slurm-adopt");
    ws.pipeline(&format!(
        "{SLURM}stages:\n  w:\n    uses: command\n    params: {{cmd: 'sleep 8; echo done > $CWM_OUT/x'}}\n  after:\n    uses: command\n    inputs: {{w: w}}\n    params: {{cmd: 'cp $CWM_IN_w/x $CWM_OUT/'}}\n"
    ));
    let mut first = spawn(&ws, &["run"]);
    assert!(
        wait_for(60, || recorded_jobs(&ws).len() == 1),
        "the job submitted"
    );
    let ids = recorded_jobs(&ws);
    first.kill().unwrap(); // SIGKILL: no chance to cancel anything
    first.wait().unwrap();
    assert_eq!(queued(&ids), ids, "the job outlives the killed run");
    let (ok, status) = cwm(&ws, &["status"]);
    assert!(ok, "{status}");
    let line = status
        .lines()
        .find(|l| l.trim_start().starts_with(&ids[0].to_string()));
    assert!(
        status.contains("Slurm jobs in flight:") && line.is_some_and(|l| l.ends_with(" w")),
        "{status}"
    );
    let (ok, out) = cwm(&ws, &["run", "--progress", "plain"]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("Slurm job {} from an earlier cwm run", ids[0])),
        "{out}"
    );
    assert!(
        out.contains("slurm: 1 job(s) submitted"),
        "only `after` is new: {out}"
    );
    assert!(out.contains("1 adopted"), "{out}");
    assert!(out.contains("ran     after"), "{out}");
}

/// The checkpoint's weights, tensor name -> raw bytes, read from `cwm model export`'s
/// safetensors file (neither the checkpoint file, which holds per-process parameter ids, nor
/// the export's header order is the same from one process to the next; the tensors are).
fn exported_weights(ws: &Workspace, instance: &str) -> BTreeMap<String, Vec<u8>> {
    let to = ws.dir.join(format!(
        "{}.safetensors",
        instance.replace(['[', ']', '='], "_")
    ));
    let checkpoint = artifact_dir(ws, instance).join("checkpoint");
    let args = [
        "model",
        "export",
        "--checkpoint",
        path_str(&checkpoint),
        "--out",
        path_str(&to),
    ];
    let (ok, out) = cwm(ws, &args);
    assert!(ok, "{out}");
    tensors(&std::fs::read(&to).unwrap())
}

/// The tensors of a safetensors file: an 8-byte little-endian header length, a JSON header
/// of `{name: {dtype, shape, data_offsets: [begin, end]}}`, then the data.
fn tensors(bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    let data = &bytes[8 + len..];
    let mut out = BTreeMap::new();
    for (name, info) in header.as_object().unwrap() {
        if let Some(offsets) = info["data_offsets"].as_array() {
            let at = |i: usize| offsets[i].as_u64().unwrap() as usize;
            out.insert(name.clone(), data[at(0)..at(1)].to_vec());
        }
    }
    assert!(!out.is_empty(), "no tensors");
    out
}

/// The directory of `instance`'s (only) output, as `cwm show` prints it.
fn artifact_dir(ws: &Workspace, instance: &str) -> PathBuf {
    let (ok, shown) = cwm(ws, &["show", instance]);
    assert!(ok, "{shown}");
    let line = shown.lines().find_map(|l| l.trim().strip_prefix("path: "));
    PathBuf::from(line.unwrap_or_else(|| panic!("no path in {shown}")))
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// The default pipeline, shrunk to a short training run, with the executor section `head`.
fn default_pipeline(name: &str, head: &str) -> Workspace {
    let ws = Workspace::with_repo_files(name, &["pipeline.yaml", "data/lichess_db_1000k.pgn.zst"]);
    let text = std::fs::read_to_string(ws.dir.join("pipeline.yaml")).unwrap();
    ws.pipeline(&format!("{head}{text}"));
    ws
}

/// The default pipeline's every stage, shrunk: a short training run, fewer random games, and
/// the probe and edit stages on a few steps and cases (at full size they are most of the run's
/// time, twice over: locally and on Slurm).
const SHRUNK: [&str; 20] = [
    "-s",
    "train.steps=12",
    "-s",
    "train.val_every=6",
    "-s",
    "train.warmup_steps=2",
    "-s",
    "random_uniform.games=40",
    "-s",
    "random_special.games=40",
    "-s",
    "random_probe.games=40",
    "-s",
    "probe.epochs=2",
    "-s",
    "probe.steps_per_game=2",
    "-s",
    "edit.cases=20",
    "-s",
    "edit.alphas=[1.0]",
];

#[test]
fn the_default_pipeline_on_slurm_gives_a_local_runs_artifacts() {
    let Some(_cluster) = cluster() else { return };
    let local = default_pipeline("slurm-default-local", "");
    let slurm = default_pipeline("slurm-default-slurm", SLURM);
    for ws in [&local, &slurm] {
        let mut args = vec!["run", "--progress", "none"];
        args.extend(SHRUNK);
        let (ok, out) = cwm(ws, &args);
        assert!(ok, "{out}");
    }
    let lock = |ws: &Workspace| std::fs::read_to_string(ws.dir.join("cwm.lock")).unwrap();
    let (a, b) = (lock(&local), lock(&slurm));
    for stage in [
        "download",
        "parse",
        "split",
        "split_test",
        "tokenize_train",
        "tokenize_random",
    ] {
        assert_eq!(outputs_of(&a, stage), outputs_of(&b, stage), "{stage}");
        assert!(!outputs_of(&a, stage).is_empty(), "{stage}");
    }
    for cell in ["train[arch=transformer]", "train[arch=slice]"] {
        assert!(
            exported_weights(&local, cell) == exported_weights(&slurm, cell),
            "{cell}"
        );
    }
}

/// The `[stage.outputs]` lines of `stage` in a `cwm.lock`.
fn outputs_of(lock: &str, stage: &str) -> Vec<String> {
    let Some(block) = lock
        .split("[[stage]]")
        .find(|b| b.contains(&format!("name = \"{stage}\"\n")))
    else {
        return Vec::new();
    };
    let outputs = block.split("[stage.outputs]").nth(1).unwrap_or_default();
    outputs
        .lines()
        .filter(|l| l.contains(" = "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_training_job_requeued_mid_run_resumes_to_the_same_weights() {
    let Some(_cluster) = cluster() else { return };
    let only = ["--only", "train[arch=transformer]"];
    let steps = ["-s", "train.steps=60", "-s", "train.checkpoint_every=1000"];
    let local = default_pipeline("slurm-requeue-local", "");
    let mut args = vec!["run", "--progress", "none"];
    args.extend(only);
    args.extend(steps);
    let (ok, out) = cwm(&local, &args);
    assert!(ok, "{out}");
    let slurm = default_pipeline("slurm-requeue-slurm", SLURM);
    let child = spawn(&slurm, &args);
    // Requeue the training job once it has trained a while (its progress file says so).
    // Only the training job is in flight: its directory under `jobs/` is the one there is.
    let progress = || -> Option<(u64, u64)> {
        let entry = std::fs::read_dir(slurm.artifacts().join("jobs"))
            .ok()?
            .flatten()
            .next()?;
        let line = std::fs::read_to_string(entry.path().join("progress.txt")).ok()?;
        let step: u64 = line
            .split("step ")
            .nth(1)?
            .split('/')
            .next()?
            .parse()
            .ok()?;
        let record = std::fs::read_to_string(entry.path().join("slurm.json")).ok()?;
        let id = serde_json::from_str::<serde_json::Value>(&record).ok()?["job_id"].as_u64()?;
        Some((id, step))
    };
    assert!(
        wait_for(300, || progress().is_some_and(|(_, step)| step >= 10)),
        "training ran"
    );
    let (job, step) = progress().unwrap();
    assert!(step < 60, "requeued before the end (step {step})");
    let requeue = Command::new("scontrol")
        .args(["requeue", &job.to_string()])
        .output()
        .unwrap();
    assert!(requeue.status.success(), "{:?}", text(&requeue));
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let cell = "train[arch=transformer]";
    let log = std::fs::read_to_string(artifact_dir(&slurm, cell).with_file_name("log.txt"));
    let log = log.expect("the stage log");
    assert!(
        log.contains("resuming from step"),
        "the requeued job resumed: {log}"
    );
    let local_log = std::fs::read_to_string(artifact_dir(&local, cell).with_file_name("log.txt"));
    assert!(
        exported_weights(&local, cell) == exported_weights(&slurm, cell),
        "bit-identical weights\nlocal: {local_log:?}\nslurm: {log}"
    );
}

/// Peak resident memory (`VmHWM`) and CPU time so far of process `pid`, from `/proc`.
fn usage(pid: u32) -> Option<(u64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some((kib, ticks / 100.0))
}

/// The number after `label` in the run's closing `slurm:` line.
fn figure(summary: &str, label: &str) -> u64 {
    let before = summary.split(label).next().unwrap_or_default();
    before
        .split_whitespace()
        .last()
        .and_then(|n| n.trim_end_matches(',').parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in {summary}"))
}

/// Many short jobs (`CWM_SLURM_SCALE_JOBS`, default 100) through the real controller: one
/// `squeue` call per poll, at most one poll per interval, and cwm small while it waits.
/// docs/cluster.md gives the figures of a 2,000-job run of this test.
#[test]
fn many_jobs_are_tracked_with_one_status_call_per_poll() {
    let Some(_cluster) = cluster() else { return };
    let n: usize = std::env::var("CWM_SLURM_SCALE_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let ws = Workspace::new("slurm-scale");
    let cells: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    ws.pipeline(&format!(
        "executor:\n  kind: slurm\n  slurm: {{poll: 2, max_jobs: 5000}}\nstages:\n  s:\n    uses: command\n    matrix: {{n: [{}]}}\n    resources: {{mem: 64M}}\n    params: {{cmd: 'true'}}\n",
        cells.join(", ")
    ));
    let started = Instant::now();
    let child = spawn(&ws, &["run", "--progress", "none"]);
    let pid = child.id();
    let (mut peak_kib, mut cpu_s) = (0, 0.0);
    let watcher = std::thread::spawn(move || {
        while let Some((kib, cpu)) = usage(pid) {
            (peak_kib, cpu_s) = (peak_kib.max(kib), cpu);
            std::thread::sleep(Duration::from_millis(200));
        }
        (peak_kib, cpu_s)
    });
    let out = child.wait_with_output().unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    let (peak_kib, cpu_s) = watcher.join().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let summary = stderr
        .lines()
        .find(|l| l.starts_with("slurm: "))
        .expect("summary line");
    let (polls, squeue) = (
        figure(summary, "status poll"),
        figure(summary, ", scontrol"),
    );
    let submitted = figure(summary, "job(s) submitted");
    eprintln!(
        "scale: {n} jobs in {elapsed:.1}s; {summary}; {:.1} polls/min; peak RSS {} MiB; CPU {cpu_s:.1}s",
        polls as f64 * 60.0 / elapsed,
        peak_kib / 1024
    );
    assert_eq!(submitted, n as u64);
    // One squeue per poll, plus the first launch's look for jobs of earlier runs and the
    // probe job's few.
    assert!(squeue <= polls + 1 + 10, "{summary}");
    assert!(
        polls as f64 <= elapsed / 2.0 + 2.0,
        "{polls} polls in {elapsed:.1}s"
    );
    assert!(peak_kib < 100 * 1024, "peak RSS {peak_kib} KiB");
}
