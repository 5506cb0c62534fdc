//! Remote caches: `cwm push` and `cwm pull` of artifacts by hash.
//!
//! A remote mirrors the store's layout under a prefix:
//! ```text
//! <prefix>/objects/<hash>/data/<path>       an artifact's files
//! <prefix>/objects/<hash>/log.txt
//! <prefix>/objects/<hash>/manifest.json     written last: marks the artifact complete
//! <prefix>/keys/<key>.json                  stage key -> outputs, written after its artifacts
//! ```
//! URLs: `file:///path` (a shared directory), `s3://bucket/prefix` (any
//! S3-compatible service; endpoint, region and credentials come only from the
//! standard `AWS_*` environment variables, never from files cwm writes), and,
//! in builds with the cargo features `gcs` / `azure`, `gs://bucket/prefix`
//! (`GOOGLE_*` variables) and `az://container/prefix` (`AZURE_*` variables).
//!
//! Safety: every downloaded file is checked against the size and blake3 in
//! its manifest before the artifact is installed, by one atomic rename into
//! `objects/`; a manifest naming paths outside its artifact is refused. On the
//! remote, content-addressed objects are written with create-if-absent where
//! the service supports it, and the manifest only after the data.
//!
//! Transfers stream: a file of `MULTIPART_PART_BYTES` or more goes up as a
//! multipart upload read from disk part by part (`MULTIPART_CONCURRENCY`
//! parts in flight), and downloads are written to the staging directory chunk
//! by chunk while their size and blake3 are computed, so memory stays bounded
//! by a few parts whatever the artifact's size. A multipart upload becomes
//! visible only when complete; it cannot be create-if-absent, which is harmless
//! under a content address (the same bytes are rewritten), and the manifest,
//! which marks the artifact complete, is still written last and only if absent.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{
    GetResultPayload, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart,
};

use crate::lockfile::LockEntry;
use crate::store::hashing::{self, FileEntry};
use crate::store::{KeyRecord, Manifest, Store, is_hash, is_safe_relative};

/// Errors talking to a remote.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The URL is not one cwm understands.
    #[error(
        "unsupported remote `{0}`: use file:///path, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix"
    )]
    Url(String),
    /// The URL's service needs a cargo feature this build lacks.
    #[error(
        "remote `{url}` needs a cwm built with the cargo feature `{feature}` (cargo build --release --features {feature})"
    )]
    Feature {
        /// The URL.
        url: String,
        /// The missing feature.
        feature: String,
    },
    /// The object store failed.
    #[error("{context}: {source}")]
    Store {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: object_store::Error,
    },
    /// Local I/O failed.
    #[error("{path}: {source}")]
    Io {
        /// The local path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Downloaded content does not match its manifest; nothing was installed.
    #[error("artifact {hash}: {message}; it was not installed")]
    Integrity {
        /// The artifact.
        hash: String,
        /// What did not match.
        message: String,
    },
    /// A local store operation failed.
    #[error(transparent)]
    Local(#[from] crate::store::StoreError),
}

/// What a push or pull moved.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Transfer {
    /// Artifacts transferred.
    pub artifacts: usize,
    /// Artifacts already present at the destination.
    pub present: usize,
    /// Files transferred.
    pub files: usize,
    /// Bytes transferred.
    pub bytes: u64,
    /// Key records written.
    pub keys: usize,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Files of at least this many bytes are uploaded in parts of this size.
pub(crate) const MULTIPART_PART_BYTES: usize = 16 * 1024 * 1024;

/// Parts of one multipart upload in flight at once.
pub(crate) const MULTIPART_CONCURRENCY: usize = 4;

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full(file: &mut fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// A remote cache.
pub struct Remote {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    url: String,
    runtime: tokio::runtime::Runtime,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("url", &self.url).finish()
    }
}

impl Remote {
    /// Opens the remote at `url` (`file:///path` or `s3://bucket/prefix`).
    pub fn open(url: &str) -> Result<Remote, RemoteError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| RemoteError::Io {
                path: PathBuf::from(url),
                source,
            })?;
        let (store, prefix): (Arc<dyn ObjectStore>, ObjectPath) =
            if let Some(path) = url.strip_prefix("file://") {
                fs::create_dir_all(path).map_err(|source| RemoteError::Io {
                    path: PathBuf::from(path),
                    source,
                })?;
                let local = object_store::local::LocalFileSystem::new_with_prefix(path).map_err(
                    |source| RemoteError::Store {
                        context: format!("opening {url}"),
                        source,
                    },
                )?;
                (Arc::new(local), ObjectPath::default())
            } else if let Some(rest) = url.strip_prefix("s3://") {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(RemoteError::Url(url.to_owned()));
                }
                let s3 = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .build()
                    .map_err(|source| RemoteError::Store {
                        context: format!("configuring {url} from the AWS_* environment"),
                        source,
                    })?;
                (Arc::new(s3), ObjectPath::from(prefix.trim_matches('/')))
            } else if let Some(rest) = url.strip_prefix("gs://") {
                cloud_store(url, rest, "gcs")?
            } else if let Some(rest) = url.strip_prefix("az://") {
                cloud_store(url, rest, "azure")?
            } else {
                return Err(RemoteError::Url(url.to_owned()));
            };
        Ok(Remote {
            store,
            prefix,
            url: url.to_owned(),
            runtime,
        })
    }

    fn path(&self, rel: &str) -> ObjectPath {
        let prefix = self.prefix.as_ref();
        if prefix.is_empty() {
            ObjectPath::from(rel)
        } else {
            ObjectPath::from(format!("{prefix}/{rel}"))
        }
    }

    fn exists(&self, rel: &str) -> Result<bool, RemoteError> {
        match self.runtime.block_on(self.store.head(&self.path(rel))) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(source) => Err(RemoteError::Store {
                context: format!("checking {rel} on {}", self.url),
                source,
            }),
        }
    }

    /// Downloads `rel` into the new file `target`, chunk by chunk, and returns its size
    /// and blake3 (hex).
    fn get_to_file(&self, rel: &str, target: &Path) -> Result<(u64, String), RemoteError> {
        let context = || format!("downloading {rel} from {}", self.url);
        let io = |source| RemoteError::Io {
            path: target.to_path_buf(),
            source,
        };
        let mut file = fs::File::create(target).map_err(io)?;
        let mut hasher = blake3::Hasher::new();
        let mut size = 0u64;
        self.runtime.block_on(async {
            let result =
                self.store
                    .get(&self.path(rel))
                    .await
                    .map_err(|source| RemoteError::Store {
                        context: context(),
                        source,
                    })?;
            match result.payload {
                // A file:// remote hands over the open file: copy it in large blocks (its
                // generic stream reads 8 KiB at a time, several times slower).
                GetResultPayload::File(source, source_path) => {
                    let source_io = |source| RemoteError::Io {
                        path: source_path.clone(),
                        source,
                    };
                    let mut source = source;
                    source
                        .seek(SeekFrom::Start(result.range.start))
                        .map_err(source_io)?;
                    let mut source = source.take(result.range.end - result.range.start);
                    let mut buf = vec![0u8; 1 << 20];
                    loop {
                        let n = match source.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => n,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                            Err(e) => return Err(source_io(e)),
                        };
                        hasher.update(&buf[..n]);
                        size += n as u64;
                        file.write_all(&buf[..n]).map_err(io)?;
                    }
                }
                GetResultPayload::Stream(mut stream) => {
                    while let Some(chunk) = stream.next().await {
                        let chunk = chunk.map_err(|source| RemoteError::Store {
                            context: context(),
                            source,
                        })?;
                        hasher.update(&chunk);
                        size += chunk.len() as u64;
                        file.write_all(&chunk).map_err(io)?;
                    }
                }
            }
            Ok::<(), RemoteError>(())
        })?;
        file.sync_all().map_err(io)?;
        Ok((size, hasher.finalize().to_hex().to_string()))
    }

    /// Uploads the local file `local` (`size` bytes) to `rel`: in one request below
    /// [`MULTIPART_PART_BYTES`], else as a multipart upload streamed from disk.
    fn put_file(&self, rel: &str, local: &Path, size: u64) -> Result<(), RemoteError> {
        let io = |source| RemoteError::Io {
            path: local.to_path_buf(),
            source,
        };
        if size < MULTIPART_PART_BYTES as u64 {
            let bytes = fs::read(local).map_err(io)?;
            return self.put(rel, bytes, true);
        }
        let store_error = |source| RemoteError::Store {
            context: format!("uploading {rel} to {}", self.url),
            source,
        };
        let mut file = fs::File::open(local).map_err(io)?;
        self.runtime.block_on(async {
            let upload = self
                .store
                .put_multipart(&self.path(rel))
                .await
                .map_err(store_error)?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, MULTIPART_PART_BYTES);
            let mut buf = vec![0u8; MULTIPART_PART_BYTES];
            let sent: Result<(), RemoteError> = async {
                loop {
                    let n = read_full(&mut file, &mut buf).map_err(io)?;
                    if n == 0 {
                        return Ok(());
                    }
                    writer
                        .wait_for_capacity(MULTIPART_CONCURRENCY)
                        .await
                        .map_err(store_error)?;
                    writer.write(&buf[..n]);
                }
            }
            .await;
            match sent {
                Ok(()) => writer.finish().await.map(|_| ()).map_err(store_error),
                Err(e) => {
                    // Best effort: the parts already sent are discarded; the error that
                    // stopped the upload is the one to report.
                    let _ = writer.abort().await;
                    Err(e)
                }
            }
        })
    }

    fn get(&self, rel: &str) -> Result<Vec<u8>, RemoteError> {
        let context = || format!("downloading {rel} from {}", self.url);
        let result = self
            .runtime
            .block_on(self.store.get(&self.path(rel)))
            .map_err(|source| RemoteError::Store {
                context: context(),
                source,
            })?;
        let bytes = self
            .runtime
            .block_on(result.bytes())
            .map_err(|source| RemoteError::Store {
                context: context(),
                source,
            })?;
        Ok(bytes.to_vec())
    }

    /// Writes `rel`; with `create`, an existing object is left as it is
    /// (content-addressed objects are identical by construction).
    fn put(&self, rel: &str, bytes: Vec<u8>, create: bool) -> Result<(), RemoteError> {
        self.put_payload(rel, PutPayload::from(bytes), create)
    }

    fn put_payload(&self, rel: &str, payload: PutPayload, create: bool) -> Result<(), RemoteError> {
        let options = PutOptions {
            mode: if create {
                PutMode::Create
            } else {
                PutMode::Overwrite
            },
            ..PutOptions::default()
        };
        match self.runtime.block_on(
            self.store
                .put_opts(&self.path(rel), payload.clone(), options),
        ) {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
            // Services without conditional writes: plain overwrite of identical content.
            Err(object_store::Error::NotImplemented { .. }) if create => {
                self.put_payload(rel, payload, false)
            }
            Err(source) => Err(RemoteError::Store {
                context: format!("uploading {rel} to {}", self.url),
                source,
            }),
        }
    }

    /// Uploads every output of `entries` that the remote lacks, then the key
    /// records. Artifacts must be intact locally.
    pub fn push(&self, store: &Store, entries: &[&LockEntry]) -> Result<Transfer, RemoteError> {
        let started = Instant::now();
        let mut transfer = Transfer::default();
        for entry in entries {
            for hash in entry.outputs.values() {
                let manifest_rel = format!("objects/{hash}/manifest.json");
                if self.exists(&manifest_rel)? {
                    transfer.present += 1;
                    continue;
                }
                let manifest = store.manifest(hash)?;
                let dir = store.artifact_dir(hash);
                for file in &manifest.files {
                    let local = store.data_dir(hash).join(&file.path);
                    self.put_file(
                        &format!("objects/{hash}/data/{}", file.path),
                        &local,
                        file.size,
                    )?;
                    transfer.bytes += file.size;
                    transfer.files += 1;
                }
                let log = fs::read(dir.join(&manifest.log)).unwrap_or_default();
                self.put(&format!("objects/{hash}/log.txt"), log, true)?;
                let manifest_bytes =
                    fs::read(dir.join("manifest.json")).map_err(|source| RemoteError::Io {
                        path: dir.join("manifest.json"),
                        source,
                    })?;
                self.put(&manifest_rel, manifest_bytes, true)?;
                transfer.artifacts += 1;
            }
            let record = KeyRecord {
                format: 1,
                instance: entry.name.clone(),
                outputs: entry.outputs.clone(),
            };
            let bytes = serde_json::to_vec_pretty(&record).unwrap_or_default();
            self.put(&format!("keys/{}.json", entry.key), bytes, false)?;
            transfer.keys += 1;
        }
        transfer.seconds = started.elapsed().as_secs_f64();
        Ok(transfer)
    }

    /// Downloads every output of `entries` missing or damaged locally,
    /// verifies each file, installs the artifacts atomically and then writes
    /// the key records, so `cwm run` finds these stages cached.
    pub fn pull(&self, store: &Store, entries: &[&LockEntry]) -> Result<Transfer, RemoteError> {
        let started = Instant::now();
        let mut transfer = Transfer::default();
        for entry in entries {
            for hash in entry.outputs.values() {
                if store.integrity(hash) == crate::store::Integrity::Intact {
                    transfer.present += 1;
                    continue;
                }
                let (files, bytes) = self.pull_artifact(store, hash)?;
                transfer.artifacts += 1;
                transfer.files += files;
                transfer.bytes += bytes;
            }
            store.write_key_record(
                &entry.key,
                &KeyRecord {
                    format: 1,
                    instance: entry.name.clone(),
                    outputs: entry.outputs.clone(),
                },
            )?;
            transfer.keys += 1;
        }
        store.save_stat_cache()?;
        transfer.seconds = started.elapsed().as_secs_f64();
        Ok(transfer)
    }

    fn pull_artifact(&self, store: &Store, hash: &str) -> Result<(usize, u64), RemoteError> {
        let bad = |message: String| RemoteError::Integrity {
            hash: hash.to_owned(),
            message,
        };
        if !is_hash(hash) {
            return Err(bad("not an artifact hash".into()));
        }
        let manifest_bytes = self.get(&format!("objects/{hash}/manifest.json"))?;
        let manifest: Manifest = serde_json::from_slice(&manifest_bytes)
            .map_err(|e| bad(format!("malformed manifest: {e}")))?;
        if manifest.hash != hash || hashing::tree_digest(&manifest.files) != hash {
            return Err(bad("the manifest does not describe this artifact".into()));
        }
        if let Some(f) = manifest.files.iter().find(|f| !is_safe_relative(&f.path)) {
            return Err(bad(format!("file path `{}` leaves the artifact", f.path)));
        }
        let staging = store.stage(&format!("pull-{}", &hash[..12]), &["data"])?;
        let data = staging.outputs["data"].clone();
        let mut bytes_total = 0;
        let result = (|| -> Result<(), RemoteError> {
            for FileEntry { path, size, blake3 } in &manifest.files {
                let target = data.join(path);
                if let Some(parent) = target.parent() {
                    fs::create_dir_all(parent).map_err(|source| RemoteError::Io {
                        path: parent.to_path_buf(),
                        source,
                    })?;
                }
                let (got_size, got) =
                    self.get_to_file(&format!("objects/{hash}/data/{path}"), &target)?;
                if got_size != *size {
                    return Err(bad(format!("{path}: {got_size} bytes, expected {size}")));
                }
                if &got != blake3 {
                    return Err(bad(format!("{path}: blake3 {got}, expected {blake3}")));
                }
                bytes_total += *size;
            }
            Ok(())
        })();
        if let Err(e) = result {
            store.discard(staging);
            return Err(e);
        }
        let log = self
            .get(&format!("objects/{hash}/log.txt"))
            .unwrap_or_default();
        store.install_pulled(staging, &manifest, &manifest_bytes, &log)?;
        Ok((manifest.files.len(), bytes_total))
    }
}

/// The lock entries to transfer: those of the selected instances (all when
/// `selected` is empty) that the lock records.
pub fn selected_entries<'a>(
    lock: &'a crate::lockfile::LockFile,
    names: &[String],
) -> Vec<&'a LockEntry> {
    let wanted: BTreeMap<&str, ()> = names.iter().map(|n| (n.as_str(), ())).collect();
    lock.stages
        .iter()
        .filter(|e| wanted.is_empty() || wanted.contains_key(e.name.as_str()))
        .collect()
}

/// The store behind a `gs://` or `az://` URL (`rest` is the URL after the scheme), in builds
/// with the matching cargo feature (`gcs`, `azure`); configured only from the environment.
fn cloud_store(
    url: &str,
    rest: &str,
    feature: &str,
) -> Result<(Arc<dyn ObjectStore>, ObjectPath), RemoteError> {
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(RemoteError::Url(url.to_owned()));
    }
    let prefix = ObjectPath::from(prefix.trim_matches('/'));
    let built = if feature == "gcs" {
        gcs_store(bucket)
    } else {
        azure_store(bucket)
    };
    match built {
        Some(Ok(store)) => Ok((store, prefix)),
        Some(Err(source)) => Err(RemoteError::Store {
            context: format!("configuring {url} from the environment"),
            source,
        }),
        None => Err(RemoteError::Feature {
            url: url.to_owned(),
            feature: feature.to_owned(),
        }),
    }
}

/// What building a cloud store gives: `None` when this build lacks the service's feature.
type CloudStore = Option<Result<Arc<dyn ObjectStore>, object_store::Error>>;

#[cfg(feature = "gcs")]
fn gcs_store(bucket: &str) -> CloudStore {
    Some(
        object_store::gcp::GoogleCloudStorageBuilder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
    )
}

#[cfg(not(feature = "gcs"))]
fn gcs_store(_bucket: &str) -> CloudStore {
    None
}

#[cfg(feature = "azure")]
fn azure_store(container: &str) -> CloudStore {
    Some(
        object_store::azure::MicrosoftAzureBuilder::from_env()
            .with_container_name(container)
            .build()
            .map(|s| Arc::new(s) as Arc<dyn ObjectStore>),
    )
}

#[cfg(not(feature = "azure"))]
fn azure_store(_container: &str) -> CloudStore {
    None
}
