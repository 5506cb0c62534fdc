//! The `download` stage: a file from an http(s) URL or a local path into the store.
//!
//! * **Params**: `url` (an `http://` or `https://` URL, or a local path resolved against the
//!   pipeline file's directory, optionally written `file://PATH`), and optionally `sha256` and/or
//!   `blake3`: expected hex digests of the file.
//! * **Output** `out`: the file under its original name (the URL's last path segment).
//!
//! Local files are declared through [`StageKind::external_files`], so their *content* joins the
//! cache key: editing the file reruns the download and everything after it. URLs join the key
//! by their text only (plus the checksums, when given): pin a checksum to make a remote file's
//! content part of the contract.
//!
//! HTTP downloads stream to `NAME.part` in the output directory. When the connection fails or
//! drops mid-file, the next attempt asks for the rest with an HTTP `Range` request (and starts
//! over if the server ignores it), after an exponential backoff; [`DownloadOptions::retries`]
//! attempts are made. A checksum mismatch is an error that leaves nothing behind (the executor
//! commits outputs only when a stage succeeds).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cwm_stage::{
    KindDecl, ParamSpec, ParamType, ParamValue, Params, Progress, StageContext, StageError,
    StageKind,
};
use sha2::{Digest, Sha256};

use crate::DataError;

/// Settings of a download.
#[derive(Debug, Clone, Default)]
pub struct DownloadOptions {
    /// Expected SHA-256 (hex), if any.
    pub sha256: Option<String>,
    /// Expected BLAKE3 (hex), if any.
    pub blake3: Option<String>,
    /// Attempts after the first one for HTTP downloads.
    pub retries: u32,
    /// Wait before the first retry; doubled for each further one (capped at 30 s).
    pub initial_backoff: Duration,
}

impl DownloadOptions {
    /// Defaults: no checksums, 6 retries, 1 s first backoff.
    pub fn new() -> DownloadOptions {
        DownloadOptions {
            sha256: None,
            blake3: None,
            retries: 6,
            initial_backoff: Duration::from_secs(1),
        }
    }
}

/// Whether `url` is an http(s) URL.
pub fn is_http(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// The local path a non-http `url` names (`file://` stripped).
fn local_path(url: &str) -> &str {
    url.strip_prefix("file://").unwrap_or(url)
}

/// The file name for `url`: its last path segment (query and fragment dropped), with characters
/// outside `[A-Za-z0-9._-]` replaced by `_`; `download` if that leaves nothing usable.
pub fn file_name_for(url: &str) -> String {
    let without_query = url.split(['?', '#']).next().unwrap_or_default();
    let after_scheme = without_query
        .split_once("://")
        .map_or(without_query, |(_, rest)| {
            rest.split_once('/').map_or("", |(_, p)| p)
        });
    let last = after_scheme.rsplit(['/', '\\']).next().unwrap_or_default();
    let name: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.chars().all(|c| c == '.') {
        "download".to_owned()
    } else {
        name
    }
}

/// Copies or downloads `url` into `out_dir` under its original name and checks the expected
/// checksums. A relative local path is taken as is (resolve it first). Returns the file's path.
///
/// # Errors
///
/// [`DataError::Download`] after the last failed attempt, [`DataError::Checksum`] on a
/// mismatch (the file is removed), [`DataError::Io`] on local errors, or cancellation.
pub fn download(
    url: &str,
    out_dir: &Path,
    options: &DownloadOptions,
    progress: &Progress,
    cancelled: &dyn Fn() -> bool,
) -> Result<PathBuf, DataError> {
    let target = out_dir.join(file_name_for(url));
    if is_http(url) {
        http_download(url, &target, options, progress, cancelled)?;
    } else {
        copy_local(Path::new(local_path(url)), &target, progress, cancelled)?;
    }
    if let Err(err) = verify(&target, options) {
        let _ = std::fs::remove_file(&target);
        return Err(err);
    }
    Ok(target)
}

fn copy_local(
    source: &Path,
    target: &Path,
    progress: &Progress,
    cancelled: &dyn Fn() -> bool,
) -> Result<(), DataError> {
    let mut input = File::open(source).map_err(|e| DataError::io(source, e))?;
    let size = input
        .metadata()
        .map_err(|e| DataError::io(source, e))?
        .len();
    progress.set_total(size);
    let mut output = File::create(target).map_err(|e| DataError::io(target, e))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        if cancelled() {
            return Err(DataError::Cancelled);
        }
        let n = input.read(&mut buf).map_err(|e| DataError::io(source, e))?;
        if n == 0 {
            break;
        }
        output
            .write_all(&buf[..n])
            .map_err(|e| DataError::io(target, e))?;
        progress.inc(n as u64);
    }
    output.sync_all().map_err(|e| DataError::io(target, e))
}

/// Hex digests of a file: (sha256, blake3).
pub fn file_digests(path: &Path) -> Result<(String, String), DataError> {
    let mut file = File::open(path).map_err(|e| DataError::io(path, e))?;
    let mut sha = Sha256::new();
    let mut b3 = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| DataError::io(path, e))?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
        b3.update(&buf[..n]);
    }
    let sha_hex: String = sha.finalize().iter().map(|b| format!("{b:02x}")).collect();
    Ok((sha_hex, b3.finalize().to_hex().to_string()))
}

fn verify(path: &Path, options: &DownloadOptions) -> Result<(), DataError> {
    if options.sha256.is_none() && options.blake3.is_none() {
        return Ok(());
    }
    let (sha, b3) = file_digests(path)?;
    let checks = [
        ("sha256", &options.sha256, sha),
        ("blake3", &options.blake3, b3),
    ];
    for (algorithm, expected, actual) in checks {
        if let Some(expected) = expected
            && !expected.trim().eq_ignore_ascii_case(&actual)
        {
            return Err(DataError::Checksum {
                path: path.to_path_buf(),
                algorithm,
                expected: expected.trim().to_owned(),
                actual,
            });
        }
    }
    Ok(())
}

/// Why one attempt failed.
enum Attempt {
    /// Try again (network error, dropped connection, 5xx).
    Retry(String),
    /// Give up (4xx, local I/O error, cancellation).
    Fatal(DataError),
}

/// State of a resumable download.
struct Transfer<'a> {
    url: &'a str,
    part: PathBuf,
    have: u64,
    total: Option<u64>,
}

fn http_download(
    url: &str,
    target: &Path,
    options: &DownloadOptions,
    progress: &Progress,
    cancelled: &dyn Fn() -> bool,
) -> Result<(), DataError> {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(30)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        .build();
    let agent: ureq::Agent = config.into();
    let mut part_name = target.as_os_str().to_owned();
    part_name.push(".part");
    let mut transfer = Transfer {
        url,
        part: PathBuf::from(part_name),
        have: 0,
        total: None,
    };
    let mut last_error = String::new();
    for attempt in 0..=options.retries {
        if attempt > 0 {
            let factor = 1u32 << (attempt - 1).min(16);
            let wait = options
                .initial_backoff
                .saturating_mul(factor)
                .min(Duration::from_secs(30));
            std::thread::sleep(wait);
        }
        if cancelled() {
            return Err(DataError::Cancelled);
        }
        match transfer.attempt(&agent, progress, cancelled) {
            Ok(()) => {
                return std::fs::rename(&transfer.part, target)
                    .map_err(|e| DataError::io(target, e));
            }
            Err(Attempt::Fatal(err)) => {
                let _ = std::fs::remove_file(&transfer.part);
                return Err(err);
            }
            Err(Attempt::Retry(message)) => last_error = message,
        }
    }
    let _ = std::fs::remove_file(&transfer.part);
    Err(DataError::Download {
        url: url.to_owned(),
        message: format!(
            "{} attempts failed; last: {last_error}",
            options.retries + 1
        ),
    })
}

/// `bytes START-END/TOTAL` → (START, TOTAL).
fn parse_content_range(value: &str) -> Option<(u64, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes")?.trim();
    let (range, total) = rest.split_once('/')?;
    let (start, _end) = range.split_once('-')?;
    Some((start.trim().parse().ok()?, total.trim().parse().ok()))
}

impl Transfer<'_> {
    fn restart(&mut self) {
        self.have = 0;
    }

    fn attempt(
        &mut self,
        agent: &ureq::Agent,
        progress: &Progress,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<(), Attempt> {
        let mut request = agent.get(self.url);
        if self.have > 0 {
            request = request.header("Range", format!("bytes={}-", self.have));
        }
        let response = request.call().map_err(|e| Attempt::Retry(e.to_string()))?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        match status {
            200 => {
                self.restart();
                self.total = header("content-length").and_then(|v| v.trim().parse().ok());
            }
            206 => match header("content-range")
                .as_deref()
                .and_then(parse_content_range)
            {
                Some((start, total)) if start == self.have => self.total = total.or(self.total),
                _ => {
                    self.restart();
                    return Err(Attempt::Retry(
                        "unexpected Content-Range; starting over".into(),
                    ));
                }
            },
            416 if self.total == Some(self.have) => return Ok(()),
            416 => {
                self.restart();
                return Err(Attempt::Retry(
                    "range not satisfiable; starting over".into(),
                ));
            }
            s if (500..600).contains(&s) || s == 408 || s == 429 => {
                return Err(Attempt::Retry(format!("HTTP status {s}")));
            }
            s => {
                return Err(Attempt::Fatal(DataError::Download {
                    url: self.url.to_owned(),
                    message: format!("HTTP status {s}"),
                }));
            }
        }
        if let Some(total) = self.total {
            progress.set_total(total);
        }
        let fatal_io = |path: &Path, e| Attempt::Fatal(DataError::io(path, e));
        let mut file = if self.have == 0 {
            File::create(&self.part).map_err(|e| fatal_io(&self.part, e))?
        } else {
            OpenOptions::new()
                .append(true)
                .open(&self.part)
                .map_err(|e| fatal_io(&self.part, e))?
        };
        let mut body = response.into_body().into_reader();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            if cancelled() {
                return Err(Attempt::Fatal(DataError::Cancelled));
            }
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    file.flush().map_err(|e| fatal_io(&self.part, e))?;
                    return Err(Attempt::Retry(format!(
                        "connection lost after {} bytes: {e}",
                        self.have
                    )));
                }
            };
            file.write_all(&buf[..n])
                .map_err(|e| fatal_io(&self.part, e))?;
            self.have += n as u64;
            progress.inc(n as u64);
        }
        file.sync_all().map_err(|e| fatal_io(&self.part, e))?;
        match self.total {
            Some(total) if total != self.have => Err(Attempt::Retry(format!(
                "got {} of {total} bytes",
                self.have
            ))),
            _ => Ok(()),
        }
    }
}

/// The `download` stage kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct DownloadStage;

const PARAMS: &[ParamSpec] = &[
    ParamSpec::required(
        "url",
        ParamType::Str,
        "http(s) URL, or a local path relative to the pipeline file",
    ),
    ParamSpec::optional(
        "sha256",
        ParamType::Str,
        "expected SHA-256 of the file (hex)",
    ),
    ParamSpec::optional(
        "blake3",
        ParamType::Str,
        "expected BLAKE3 of the file (hex)",
    ),
];

fn optional_str(params: &Params, name: &str) -> Option<String> {
    match params.get(name) {
        Some(ParamValue::Str(s)) => Some(s.clone()),
        _ => None,
    }
}

const DECL: KindDecl = KindDecl::new(
    "download",
    "fetches a file (http/https with resume and retries, or a local path) into the store",
)
.params(PARAMS);

impl StageKind for DownloadStage {
    fn decl(&self) -> &'static KindDecl {
        &DECL
    }

    fn fingerprint(&self) -> String {
        cwm_stage::combine_fingerprints(&[&cwm_stage::fingerprint_of_files(
            crate::FILE_FINGERPRINTS,
            &[
                "Cargo.toml",
                "src/lib.rs",
                "src/error.rs",
                "src/download.rs",
            ],
        )])
    }

    fn external_files(&self, params: &Params) -> Vec<PathBuf> {
        match params.get("url") {
            Some(ParamValue::Str(url)) if !is_http(url) => vec![PathBuf::from(local_path(url))],
            _ => Vec::new(),
        }
    }

    fn run(&self, ctx: &StageContext) -> Result<(), StageError> {
        let url = ctx.params().str("url")?;
        let options = DownloadOptions {
            sha256: optional_str(ctx.params(), "sha256"),
            blake3: optional_str(ctx.params(), "blake3"),
            ..DownloadOptions::new()
        };
        let source = if is_http(url) {
            url.to_owned()
        } else {
            ctx.resolve_path(local_path(url)).display().to_string()
        };
        let path = download(
            &source,
            ctx.output("out")?,
            &options,
            ctx.progress(),
            &|| ctx.is_cancelled(),
        )?;
        let (sha, b3) = file_digests(&path)?;
        ctx.log().line(format!(
            "{url} -> {}: sha256 {sha}, blake3 {b3}",
            path.display()
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn file_names_come_from_the_last_segment() {
        assert_eq!(
            file_name_for(
                "https://database.lichess.org/standard/lichess_db_standard_rated_2025-03.pgn.zst"
            ),
            "lichess_db_standard_rated_2025-03.pgn.zst"
        );
        assert_eq!(file_name_for("http://h/x/a b.pgn?x=1#f"), "a_b.pgn");
        assert_eq!(file_name_for("http://host"), "download");
        assert_eq!(file_name_for("data/lichess.pgn.zst"), "lichess.pgn.zst");
        assert_eq!(
            parse_content_range("bytes 10-99/100"),
            Some((10, Some(100)))
        );
        assert_eq!(parse_content_range("bytes 10-99/*"), Some((10, None)));
    }

    /// Serves `body`; the first `drops` GET requests get the full headers but only half the body
    /// before the connection is closed. Honours `Range: bytes=N-`.
    fn serve(body: Vec<u8>, drops: usize) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let n = seen.fetch_add(1, Ordering::SeqCst);
                handle(stream, &body, n < drops);
            }
        });
        (format!("http://{addr}/files/games.pgn"), requests)
    }

    fn handle(mut stream: TcpStream, body: &[u8], drop_midway: bool) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut start = 0usize;
        let mut path = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            if line.starts_with("GET ") {
                path = line.split(' ').nth(1).unwrap_or_default().to_owned();
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("range: bytes=") {
                start = v.trim().trim_end_matches('-').parse().unwrap_or(0);
            }
        }
        if path != "/files/games.pgn" {
            let _ = stream.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            return;
        }
        let rest = &body[start..];
        let head = if start > 0 {
            format!(
                "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {}-{}/{}\r\nConnection: close\r\n\r\n",
                rest.len(),
                start,
                body.len() - 1,
                body.len()
            )
        } else {
            format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                rest.len()
            )
        };
        let _ = stream.write_all(head.as_bytes());
        let send = if drop_midway {
            &rest[..rest.len() / 2]
        } else {
            rest
        };
        let _ = stream.write_all(send);
        let _ = stream.flush();
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }

    fn quick() -> DownloadOptions {
        DownloadOptions {
            initial_backoff: Duration::from_millis(10),
            retries: 4,
            ..DownloadOptions::new()
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cwm-dl-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_dropped_connection_resumes_with_a_range_request() {
        let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let (url, requests) = serve(body.clone(), 2);
        let dir = temp_dir("resume");
        let (sha, b3) = {
            let p = dir.join("expected");
            std::fs::write(&p, &body).unwrap();
            let d = file_digests(&p).unwrap();
            std::fs::remove_file(&p).unwrap();
            d
        };
        let options = DownloadOptions {
            sha256: Some(sha),
            blake3: Some(b3.to_uppercase()),
            ..quick()
        };
        let path = download(&url, &dir, &options, &Progress::disabled(), &|| false).unwrap();
        assert_eq!(path, dir.join("games.pgn"));
        assert_eq!(std::fs::read(&path).unwrap(), body);
        assert_eq!(requests.load(Ordering::SeqCst), 3);
        assert!(!dir.join("games.pgn.part").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_checksum_mismatch_is_an_error_and_leaves_nothing() {
        let (url, _) = serve(b"hello".to_vec(), 0);
        let dir = temp_dir("mismatch");
        let options = DownloadOptions {
            sha256: Some("00".repeat(32)),
            ..quick()
        };
        let err = download(&url, &dir, &options, &Progress::disabled(), &|| false).unwrap_err();
        assert!(
            err.to_string().contains("sha256 checksum mismatch"),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        // A 404 is not retried.
        let missing = url.replace("games.pgn", "nothing.pgn");
        let err = download(&missing, &dir, &quick(), &Progress::disabled(), &|| false).unwrap_err();
        assert!(err.to_string().contains("404"), "{err}");
        // Nothing listening: retried, then a clear error.
        let closed = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}/x.pgn", l.local_addr().unwrap())
        };
        let err = download(&closed, &dir, &quick(), &Progress::disabled(), &|| false).unwrap_err();
        assert!(err.to_string().contains("5 attempts failed"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn local_files_are_copied_and_checked() {
        let dir = temp_dir("local");
        let source = dir.join("src.pgn");
        std::fs::write(&source, b"[Site \"x\"]\n\n1. e4 *\n").unwrap();
        let out = dir.join("out");
        std::fs::create_dir_all(&out).unwrap();
        let (sha, _) = file_digests(&source).unwrap();
        let options = DownloadOptions {
            sha256: Some(sha),
            ..quick()
        };
        let path = download(
            source.to_str().unwrap(),
            &out,
            &options,
            &Progress::disabled(),
            &|| false,
        )
        .unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(&source).unwrap()
        );
        assert_eq!(path.file_name().unwrap(), "src.pgn");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
