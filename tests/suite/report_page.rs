//! `report.html` opened in a real headless browser (Chromium): it renders with no console
//! message, loads nothing from outside itself, and shows the tables and figures the report
//! wrote. A screenshot is kept at `target/report-page.png` for a person to look at.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The first Chromium-like browser on the PATH.
fn browser() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// Runs the browser headless on `page` with `args`; returns (stdout, stderr).
fn headless(browser: &Path, page: &Path, args: &[&str]) -> (String, String) {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("start the browser");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Opens `report_dir/report.html` in Chromium and checks what it shows: every label in
/// `labels` as a table heading, `figures` inline SVG figures, no console message and no
/// external resource. Returns the screenshot's path, or `None` when there is no browser
/// outside CI (under CI a missing browser fails the test).
pub fn check(report_dir: &Path, labels: &[&str], figures: usize) -> Option<PathBuf> {
    let browser = browser();
    if !super::require(
        "a Chromium browser (Debian package `chromium`)",
        browser.is_some(),
    ) {
        return None;
    }
    let browser = browser.unwrap();
    let page = report_dir.join("report.html");
    assert!(page.is_file(), "{} is missing", page.display());
    let (dom, log) = headless(&browser, &page, &["--dump-dom"]);
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    for label in labels {
        assert!(
            dom.contains(&format!("<h3>{label}: ")),
            "no {label} heading in the page"
        );
    }
    assert_eq!(dom.matches("<figure ").count(), figures, "inline figures");
    assert!(dom.matches("<svg").count() >= figures);
    for external in ["<script", "<link", "<img", "src=\"http", "href=\"http"] {
        assert!(!dom.contains(external), "the page loads {external}");
    }
    let shot = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/report-page.png");
    let shot_arg = format!("--screenshot={}", shot.display());
    headless(&browser, &page, &[&shot_arg, "--window-size=1200,2600"]);
    let png = std::fs::read(&shot).expect("the screenshot");
    assert_eq!(&png[1..4], b"PNG", "{} is not a PNG", shot.display());
    eprintln!("report page screenshot: {}", shot.display());
    Some(shot)
}
