//! `benches/python/tuning_report.py`: what cubecl's autotuner measured, read from a kernel
//! cache's database, on entries an H200 session brought back (`tuning-h200.txt`).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Workspace, bench_script};

/// The fixture's entries: (namespace, key, value), the key and value as hex.
fn fixture() -> Vec<[&'static str; 3]> {
    include_str!("tuning-h200.txt")
        .split("\n\n")
        .map(|block| {
            block
                .lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
                .collect::<Vec<_>>()
        })
        .filter(|lines| !lines.is_empty())
        .map(|lines| [lines[0], lines[1], lines[2]])
        .collect()
}

/// A database laid out as cubecl's (its `entries` table) with the fixture's entries and a
/// compiled kernel's stand-in, made by Python's sqlite3.
fn database(ws: &Workspace) -> PathBuf {
    let db = ws.dir.join("default.db");
    let mut rows: Vec<String> = fixture()
        .iter()
        .map(|[ns, k, v]| format!("({ns:?}, bytes.fromhex('{k}'), bytes.fromhex('{v}'))"))
        .collect();
    rows.push("(\"cuda/0.11.3/ptx_sm90-llvm-ptx90\", b\"kernel\", b\"ptx\")".to_string());
    let script = format!(
        "import sqlite3, sys\n\
         db = sqlite3.connect(sys.argv[1])\n\
         db.execute('CREATE TABLE entries (namespace TEXT NOT NULL, \"key\" BLOB NOT NULL, \
         value BLOB NOT NULL, origin INTEGER NOT NULL, PRIMARY KEY (namespace, \"key\"))')\n\
         for ns, k, v in [{}]:\n    db.execute('INSERT INTO entries VALUES (?, ?, ?, 0)', (ns, k, v))\n\
         db.commit()\n",
        rows.join(", ")
    );
    let status = Command::new("python3")
        .args(["-c", &script])
        .arg(&db)
        .status()
        .expect("run python3");
    assert!(status.success());
    db
}

/// Runs the script on `db` with `args`; returns (exit status, stdout, stderr).
fn tuning_report(db: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    bench_script("tuning_report.py", db, args)
}

#[test]
fn a_kernel_cache_s_tuning_becomes_a_table_and_can_be_forgotten() {
    let ws = Workspace::new("tuning-report");
    let db = database(&ws);

    // The H200's search for this product ended at its first candidate: one timed, 32 never,
    // its 1,996 µs under the limit (2,110 µs) taken from the f32 cores' peak of 6.11e13 ops/s.
    let (code, out, err) = tuning_report(&db, &["--op", "matmul"]);
    assert_eq!(code, Some(0), "{err}");
    for part in [
        "## burn_cubecl-kernel-matmul-tune-base: 1 shape(s), 1 with untimed candidates and a \
         fastest time under the early stop's limit",
        "| 512×4096×256 permuted/Contiguous | 1 | 0 | 32 | matmul_simple_cyclic_cmma | 1,996.4 \
         | 1.00× | 2,109.8 | 6.11e+13 |",
        "| ComputeDirect (dtype {'Float': 'F32'}) | 17,301,504 | 283 | 6.11e+13 |",
    ] {
        assert!(out.contains(part), "no {part:?} in:\n{out}");
    }

    // Forgetting the products' tuning leaves the compiled kernel and the probe, and removes
    // the database engine's index of its log, which would be stale.
    let index = ws.dir.join("default.db-tshm");
    std::fs::write(&index, [0u8; 64]).unwrap();
    let (code, out, err) = tuning_report(&db, &["--forget", "matmul"]);
    assert!(!index.exists(), "the engine's index stays");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out.trim(),
        "Forgot 1 tuning result(s) of 1 operation(s) named like 'matmul'."
    );
    let (code, out, err) = tuning_report(&db, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.starts_with("No tuning results of an operation named like ''."),
        "{out}"
    );
    assert!(out.contains("| ComputeDirect"), "{out}");
    let count = Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(\
             'SELECT count(*) FROM entries').fetchone()[0])",
        ])
        .arg(&db)
        .output()
        .expect("run python3");
    assert_eq!(String::from_utf8_lossy(&count.stdout).trim(), "2");

    // Not a database, or no file: exit status 1 and the reason.
    let text = ws.dir.join("notes.txt");
    std::fs::write(&text, "not sqlite").unwrap();
    let (code, _, err) = tuning_report(&text, &[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("not a kernel cache's database"), "{err}");
    let (code, _, err) = tuning_report(&ws.dir.join("missing.db"), &[]);
    assert_eq!(code, Some(1));
    assert!(err.contains("missing.db: no such file"), "{err}");
}
