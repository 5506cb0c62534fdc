//! Sharing results by hash: push, pull, the collaborator flow, and a real
//! S3-compatible server (moto's, started on 127.0.0.1); without moto those tests fail under CI
//! and skip loudly elsewhere (`crate::require`).

use super::{Workspace, kill_delays, names};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PIPELINE: &str = r#"
stages:
  a:
    uses: command
    params:
      cmd: seq 1 "$CWM_PARAM_n" > "$CWM_OUT/a.txt"
      n: 5000
  b:
    uses: command
    inputs: {src: a}
    params:
      cmd: wc -l < "$CWM_IN_src/a.txt" > "$CWM_OUT/b.txt"
"#;

/// A runs, pushes and shares pipeline.yaml + cwm.lock; B pulls and finds
/// everything fresh; B edits one stage and reruns only it.
fn collaborator_flow(remote: &str, tag: &str) {
    let a = Workspace::new(&format!("remote-a-{tag}"));
    a.pipeline(PIPELINE);
    a.run_json(&[]);
    let pushed = a.ok(&["push", "--remote", remote]);
    assert!(pushed.contains("2 artifacts"), "{pushed}");
    let again = a.ok(&["push", "--remote", remote]);
    assert!(
        again.contains("0 artifacts") && again.contains("2 already there"),
        "{again}"
    );

    let b = Workspace::new(&format!("remote-b-{tag}"));
    b.pipeline(PIPELINE);
    std::fs::copy(a.dir.join("cwm.lock"), b.dir.join("cwm.lock")).unwrap();
    assert!(b.status().iter().all(|s| s.1 == "stale"));
    let pulled = b.ok(&["pull", "--remote", remote]);
    assert!(pulled.contains("2 artifacts"), "{pulled}");
    assert!(
        b.status().iter().all(|s| s.1 == "fresh"),
        "{:?}",
        b.status()
    );
    assert!(names(&b.run_json(&[]), "ran").is_empty());
    assert!(b.ok(&["verify"]).contains("0 corrupt"));
    b.pipeline(&PIPELINE.replace(
        "wc -l < \"$CWM_IN_src/a.txt\"",
        "wc -c < \"$CWM_IN_src/a.txt\"",
    ));
    let run = b.run_json(&[]);
    assert_eq!(names(&run, "ran"), ["b"]);
    assert_eq!(names(&run, "cached"), ["a"]);
}

#[test]
fn collaborators_share_results_through_a_shared_directory() {
    let dir = std::env::temp_dir().join(format!("cwm-remote-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    collaborator_flow(&format!("file://{}", dir.display()), "file");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_corrupt_remote_file_is_refused_and_not_installed() {
    let dir = std::env::temp_dir().join(format!("cwm-remote-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let url = format!("file://{}", dir.display());
    let a = Workspace::new("remote-bad-a");
    a.pipeline(PIPELINE);
    a.run_json(&[]);
    a.ok(&["push", "--remote", &url]);
    // Flip the content of every remote data file, keeping sizes.
    for entry in std::fs::read_dir(dir.join("objects")).unwrap().flatten() {
        for f in std::fs::read_dir(entry.path().join("data"))
            .unwrap()
            .flatten()
        {
            let mut bytes = std::fs::read(f.path()).unwrap();
            bytes[0] ^= 1;
            std::fs::write(f.path(), bytes).unwrap();
        }
    }
    let b = Workspace::new("remote-bad-b");
    b.pipeline(PIPELINE);
    std::fs::copy(a.dir.join("cwm.lock"), b.dir.join("cwm.lock")).unwrap();
    let out = b.cwm(&["pull", "--remote", &url]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("blake3") && err.contains("not installed"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(b.artifacts().join("objects"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(
        std::fs::read_dir(b.artifacts().join("keys"))
            .unwrap()
            .count(),
        0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// moto's S3 server on a free loopback port, stopped on drop.
struct S3Server {
    child: Child,
    port: u16,
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// moto's S3 server with the bucket `cwm-test`, or `None` when it cannot be had (see
/// [`crate::require`]: under CI that fails the test).
fn start_s3() -> Option<S3Server> {
    match try_start_s3() {
        Ok(server) => Some(server),
        Err(why) => {
            let what = format!("a working moto S3 server (pip install 'moto[server]'): {why}");
            crate::require(&what, false);
            None
        }
    }
}

fn try_start_s3() -> Result<S3Server, String> {
    let ok = Command::new("python3")
        .args(["-c", "import moto.server"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return Err("python3 cannot import moto.server".into());
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(|e| format!("no free loopback port: {e}"))?
        .port();
    let child = Command::new("python3")
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot spawn python3 -m moto.server: {e}"))?;
    let server = S3Server { child, port };
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("the server did not listen within 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Create the bucket with a plain HTTP PUT (moto needs no signature for this).
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("cannot connect to the server: {e}"))?;
    use std::io::{Read, Write};
    write!(stream, "PUT /cwm-test HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("cannot send the bucket request: {e}"))?;
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    if !response.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "could not create the test bucket: {}",
            response.lines().next().unwrap_or("")
        ));
    }
    Ok(server)
}

#[test]
fn collaborators_share_results_through_a_local_s3_server() {
    let Some(server) = start_s3() else { return };
    // Credentials and endpoint only through the environment.
    // SAFETY-free: tests set the variables for the child processes they spawn.
    let url = "s3://cwm-test/shared";
    let vars = s3_env(&server);
    let a = Workspace::new("s3-a");
    a.pipeline(PIPELINE);
    a.run_json(&[]);
    let run = |ws: &Workspace, args: &[&str]| ok_with_env(ws, args, &vars);
    assert!(run(&a, &["push", "--remote", url]).contains("2 artifacts"));
    let b = Workspace::new("s3-b");
    b.pipeline(PIPELINE);
    std::fs::copy(a.dir.join("cwm.lock"), b.dir.join("cwm.lock")).unwrap();
    assert!(run(&b, &["pull", "--remote", url]).contains("2 artifacts"));
    assert!(b.status().iter().all(|s| s.1 == "fresh"));
    assert!(names(&b.run_json(&[]), "ran").is_empty());
    // The secret never reaches the lock file or the store.
    let lock = std::fs::read_to_string(b.dir.join("cwm.lock")).unwrap();
    assert!(!lock.contains("test-secret"));
}

/// Runs cwm in `ws` with `env` added to its environment; asserts success and returns stdout.
fn ok_with_env(ws: &Workspace, args: &[&str], env: &[(&str, String)]) -> String {
    let mut cmd = super::cwm_command(&ws.dir, args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A 40 MiB file: above `MULTIPART_PART_BYTES` (16 MiB), so it goes up as a three-part
/// multipart upload and comes down as a stream.
const LARGE_PIPELINE: &str = r#"
stages:
  big:
    uses: command
    params:
      cmd: yes "cwm $CWM_PARAM_tag" | head -c 41943040 > "$CWM_OUT/big.bin"
      tag: large
"#;

/// Pushes an artifact with a 40 MiB file to `url`, pulls it into a second workspace and checks
/// the bytes; `env` configures the child processes (S3 endpoint and credentials).
fn large_file_round_trip(url: &str, tag: &str, env: &[(&str, String)]) {
    let run = |ws: &Workspace, args: &[&str]| ok_with_env(ws, args, env);
    let a = Workspace::new(&format!("large-a-{tag}"));
    a.pipeline(LARGE_PIPELINE);
    a.run_json(&[]);
    let pushed = run(&a, &["push", "--remote", url]);
    assert!(pushed.contains("1 artifacts"), "{pushed}");
    let b = Workspace::new(&format!("large-b-{tag}"));
    b.pipeline(LARGE_PIPELINE);
    std::fs::copy(a.dir.join("cwm.lock"), b.dir.join("cwm.lock")).unwrap();
    let pulled = run(&b, &["pull", "--remote", url]);
    assert!(pulled.contains("1 artifacts"), "{pulled}");
    assert!(b.status().iter().all(|s| s.1 == "fresh"));
    let show = |ws: &Workspace| {
        let objects = ws.artifacts().join("objects");
        let dir = std::fs::read_dir(&objects)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        std::fs::read(dir.path().join("data/big.bin")).unwrap()
    };
    let (sent, got) = (show(&a), show(&b));
    assert_eq!(sent.len(), 41_943_040);
    assert!(sent == got, "the pulled file differs from the pushed one");
    assert!(b.ok(&["verify"]).contains("0 corrupt"));
}

#[test]
fn a_large_file_goes_through_a_shared_directory_in_parts() {
    let dir = std::env::temp_dir().join(format!("cwm-remote-large-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    large_file_round_trip(&format!("file://{}", dir.display()), "file", &[]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_large_file_goes_through_a_local_s3_server_in_parts() {
    let Some(server) = start_s3() else { return };
    large_file_round_trip("s3://cwm-test/large", "s3", &s3_env(&server));
}

/// The environment that points cwm at the moto server, the only way credentials reach it.
fn s3_env(server: &S3Server) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", server.port)),
        ("AWS_ALLOW_HTTP", "true".to_owned()),
        ("AWS_ACCESS_KEY_ID", "test".to_owned()),
        ("AWS_SECRET_ACCESS_KEY", "test-secret".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
    ]
}

#[test]
fn a_remote_of_a_feature_this_build_lacks_is_named_with_the_feature() {
    let a = Workspace::new("remote-feature");
    a.pipeline(PIPELINE);
    a.run_json(&[]);
    for (url, feature) in [("gs://bucket/x", "gcs"), ("az://container/x", "azure")] {
        let out = a.cwm(&["push", "--remote", url]);
        let err = String::from_utf8_lossy(&out.stderr);
        if cfg!(feature = "gcs") && feature == "gcs"
            || cfg!(feature = "azure") && feature == "azure"
        {
            continue;
        }
        assert!(!out.status.success());
        assert!(err.contains(&format!("--features {feature}")), "{err}");
    }
    let out = a.cwm(&["push", "--remote", "ftp://host/x"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unsupported remote"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Spawns `cwm args` in `ws`, SIGKILLs it after `delay_ms`, and reaps it.
fn kill_after(ws: &Workspace, args: &[&str], delay_ms: u64) {
    let mut child = super::cwm_command(&ws.dir, args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(delay_ms));
    let _ = child.kill();
    let _ = child.wait();
}

/// Corrupt artifacts `cwm verify --all` finds in `ws`'s store.
fn corrupt_count(ws: &Workspace) -> usize {
    let out = ws.cwm(&["verify", "--all", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    report["corrupt"].as_array().map_or(usize::MAX, Vec::len)
}

#[test]
fn sigkill_during_push_pull_and_gc_never_corrupts_a_store_or_the_remote() {
    let dir = std::env::temp_dir().join(format!("cwm-remote-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let remote = format!("file://{}", dir.display());
    // Three artifacts of 20 MB each plus a consumer: transfers take long enough
    // for kills to land inside them, and each file is above the multipart
    // threshold (16 MiB), so kills also land inside multipart uploads.
    let pipeline = "stages:\n  big:\n    uses: command\n    matrix: {n: [1, 2, 3]}\n    params: {cmd: 'head -c 20000000 /dev/urandom > \"$CWM_OUT/z\"; echo $CWM_PARAM_n > \"$CWM_OUT/n\"'}\n  sum:\n    uses: command\n    inputs: {b: big}\n    params: {cmd: 'cat $CWM_IN_b/n > \"$CWM_OUT/ns\"'}\n".replace("$CWM_IN_b/n", "$(for d in $CWM_IN_b; do echo $d/n; done)");
    let a = Workspace::new("kill-push");
    a.pipeline(&pipeline);
    assert!(names(&a.run_json(&[]), "failed").is_empty());
    let (mut trials, mut corrupt) = (0usize, 0usize);

    // push: killed at random moments, then a fresh clone pulls whatever the
    // remote claims to have; every installed artifact must verify.
    for (i, delay) in kill_delays(8, 250, 0x9e37_79b9_7f4a_7c15)
        .into_iter()
        .enumerate()
    {
        kill_after(&a, &["push", "--remote", &remote], delay);
        trials += 1;
        corrupt += corrupt_count(&a);
        let probe = Workspace::new(&format!("kill-probe-{i}"));
        probe.pipeline(&pipeline);
        std::fs::copy(a.dir.join("cwm.lock"), probe.dir.join("cwm.lock")).unwrap();
        // A partial remote may lack artifacts (pull then fails cleanly), but
        // it must never hand out a damaged one.
        let out = probe.cwm(&["pull", "--remote", &remote]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("does not match") || stderr.contains("blake3") {
            corrupt += 1;
        }
        corrupt += corrupt_count(&probe);
    }
    let pushed = a.ok(&["push", "--remote", &remote]);
    assert!(pushed.contains("pushed"), "{pushed}");

    // pull: killed at random moments; the store stays clean and the next
    // pull completes.
    let b = Workspace::new("kill-pull");
    b.pipeline(&pipeline);
    std::fs::copy(a.dir.join("cwm.lock"), b.dir.join("cwm.lock")).unwrap();
    for delay in kill_delays(8, 250, 0xd1b5_4a32_d192_ed03) {
        kill_after(&b, &["pull", "--remote", &remote], delay);
        trials += 1;
        corrupt += corrupt_count(&b);
        if delay % 2 == 0 {
            // Start over now and then so kills also land early in a pull:
            // without a lock file, `gc --keep-lock` frees everything.
            std::fs::remove_file(b.dir.join("cwm.lock")).unwrap();
            b.ok(&["gc", "--keep-lock"]);
            std::fs::copy(a.dir.join("cwm.lock"), b.dir.join("cwm.lock")).unwrap();
        }
    }
    b.ok(&["pull", "--remote", &remote]);
    assert!(
        b.status().iter().all(|s| s.1 == "fresh"),
        "{:?}",
        b.status()
    );
    assert!(names(&b.run_json(&[]), "ran").is_empty());

    // gc: killed at random moments while it frees every artifact.
    for delay in kill_delays(8, 60, 0x2545_f491_4f6c_dd1d) {
        std::fs::remove_file(b.dir.join("cwm.lock")).ok();
        kill_after(&b, &["gc", "--keep-lock"], delay);
        trials += 1;
        corrupt += corrupt_count(&b);
        // Bring the artifacts back for the next trial.
        std::fs::copy(a.dir.join("cwm.lock"), b.dir.join("cwm.lock")).unwrap();
        b.ok(&["pull", "--remote", &remote]);
    }
    eprintln!("push/pull/gc kill test: {trials} trials, {corrupt} corrupt results");
    assert_eq!(corrupt, 0);
    assert!(b.status().iter().all(|s| s.1 == "fresh"));
    assert!(b.ok(&["verify", "--all"]).contains("0 corrupt"));
    let _ = std::fs::remove_dir_all(&dir);
}
