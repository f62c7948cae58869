//! Where completed tasks' results are kept: the `object_store` crate over local files
//! (the embedded default) or any S3-compatible service (replicas share it). A result
//! is streamed in (multipart: memory stays bounded whatever its size), hashed and
//! counted on the way; read back whole or by range.
//!
//! Keys: `{prefix}/results/{ledger row}/{n}`. The ledger row, not the task id: ids
//! are long and sealed with a secret that may rotate; the row is what the ledger
//! records the object under.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use http_body::Body;
use http_body_util::BodyExt;
use object_store::path::Path as ObjectPath;
use object_store::signer::Signer;
use object_store::{
    Attribute, Attributes, GetOptions, GetRange, GetResultPayload, ObjectStore, ObjectStoreExt,
    PutMultipartOptions, WriteMultipart,
};

/// Where results are kept, from `[storage] url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageUrl {
    /// Not kept: links stay the provider's.
    Off,
    /// A directory, created when missing.
    File(PathBuf),
    /// A bucket and a prefix in it (may be empty).
    S3 { bucket: String, prefix: String },
}

impl StorageUrl {
    /// Parse the configured URL; a relative path is relative to `dir`.
    pub fn parse(url: &str, dir: &Path) -> Result<Self, String> {
        if url == "none" {
            return Ok(Self::Off);
        }
        if let Some(path) = url.strip_prefix("file://") {
            if path.is_empty() {
                return Err("file:// needs a directory".into());
            }
            return Ok(Self::File(dir.join(path)));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err("s3:// needs a bucket: `s3://BUCKET/PREFIX`".into());
            }
            return Ok(Self::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.trim_matches('/').to_string(),
            });
        }
        Err("must be `file://PATH`, `s3://BUCKET/PREFIX` or `none`".into())
    }
}

/// What went wrong with storage. The message names no credential: object_store's
/// errors carry the object's path and the service's answer, never the keys.
#[derive(Debug)]
pub enum StorageError {
    /// The object is not there (deleted, expired, never written).
    NotFound,
    /// The source sent more than the limit: nothing is kept.
    TooLarge(u64),
    /// Reading the source failed (its connection broke, it timed out).
    Source(String),
    /// Storage refused or could not be reached.
    Unavailable(String),
}

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound => f.write_str("the stored result is gone"),
            Self::TooLarge(max) => write!(f, "the result is larger than {max} bytes"),
            Self::Source(e) => write!(f, "reading the result failed: {e}"),
            Self::Unavailable(e) => write!(f, "storage failed: {e}"),
        }
    }
}

impl std::error::Error for StorageError {}

impl From<object_store::Error> for StorageError {
    fn from(e: object_store::Error) -> Self {
        match e {
            object_store::Error::NotFound { .. } => Self::NotFound,
            e => Self::Unavailable(e.to_string()),
        }
    }
}

/// One result written: its size and SHA-256 (hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub bytes: u64,
    pub sha256: String,
}

/// A stored result read back: its total size, the bytes asked for, streamed.
pub struct Read {
    pub size: u64,
    pub range: Range<u64>,
    pub body: futures_util::stream::BoxStream<'static, Result<Bytes, StorageError>>,
}

/// An upload not yet finished nor aborted: dropped so (its copy failed, or was cut
/// short by `copy_timeout_ms`), it is aborted in a task of its own, so that its parts
/// are not left at S3.
struct Unfinished(Option<WriteMultipart>);

impl Unfinished {
    fn writer(&mut self) -> &mut WriteMultipart {
        self.0.as_mut().expect("not taken yet")
    }

    /// The upload, for the caller to finish.
    fn take(mut self) -> WriteMultipart {
        self.0.take().expect("taken once")
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let (Some(writer), Ok(runtime)) = (self.0.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(async move {
                if let Err(e) = writer.abort().await {
                    tracing::warn!(error = %e, "storage: an upload cut short cannot be aborted");
                }
            });
        }
    }
}

/// Parts of a multipart upload in flight at once (each `object_store`'s 5 MiB
/// chunk at least): what bounds the memory a copy holds.
const PARTS_IN_FLIGHT: usize = 2;

/// The store results are kept in.
#[derive(Clone)]
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    /// S3's: presigns direct links, and the objects keep their content type (local
    /// files keep no attributes).
    signer: Option<Arc<dyn Signer>>,
    prefix: String,
    /// `file:///…` or `s3://bucket/prefix`, for logs.
    describe: String,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe)
    }
}

impl Storage {
    /// Open the configured storage; `None` when it is off. S3's endpoint, region and
    /// credentials come from the standard AWS environment variables
    /// (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, …).
    pub fn open(url: &StorageUrl) -> Result<Option<Self>, String> {
        match url {
            StorageUrl::Off => Ok(None),
            StorageUrl::File(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(dir)
                    .map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
                Ok(Some(Self {
                    store: Arc::new(store),
                    signer: None,
                    prefix: String::new(),
                    describe: format!("file://{}", dir.display()),
                }))
            }
            StorageUrl::S3 { bucket, prefix } => {
                // object_store's HTTP client (reqwest, built without a TLS provider of
                // its own) takes the process's default rustls provider, and panics
                // without one: the gateway's, ring. One installed already stays.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let builder =
                    object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                let store = allow_http_when_named(builder)
                    .build()
                    .map_err(|e| format!("cannot open s3://{bucket}: {e}"))?;
                let store = Arc::new(store);
                Ok(Some(Self {
                    store: store.clone(),
                    signer: Some(store),
                    prefix: prefix.clone(),
                    describe: format!("s3://{bucket}/{prefix}"),
                }))
            }
        }
    }

    /// Where result `n` of the task in ledger row `row` is kept.
    pub fn key(&self, row: i64, n: usize) -> String {
        format!("{}/{n}", self.results_of(row))
    }

    /// Where the results of the task in ledger row `row` are kept: each under it.
    fn results_of(&self, row: i64) -> String {
        if self.prefix.is_empty() {
            format!("results/{row}")
        } else {
            format!("{}/results/{row}", self.prefix)
        }
    }

    /// `key` as [`Storage::result_keys`] lists it (object_store's paths drop empty
    /// segments, so a prefix with `//` lists otherwise than it was written).
    pub fn listed_as(&self, key: &str) -> String {
        ObjectPath::from(key).to_string()
    }

    /// The keys of every object kept for the task in ledger row `row`.
    pub async fn result_keys(&self, row: i64) -> Result<Vec<String>, StorageError> {
        let dir = ObjectPath::from(self.results_of(row));
        let mut listed = self.store.list(Some(&dir));
        let mut keys = Vec::new();
        while let Some(object) = listed.next().await {
            keys.push(object?.location.to_string());
        }
        Ok(keys)
    }

    /// Where the uploaded input `name` is kept.
    pub fn input_key(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            format!("inputs/{name}")
        } else {
            format!("{}/inputs/{name}", self.prefix)
        }
    }

    /// Stream `body` into `key`, at most `max_bytes` of it; a body that is longer,
    /// or breaks off, leaves nothing behind. An S3 object keeps `content_type`, for
    /// the clients of its direct links.
    pub async fn put<B>(
        &self,
        key: &str,
        body: B,
        max_bytes: u64,
        content_type: Option<&str>,
    ) -> Result<Stored, StorageError>
    where
        B: Body<Data = Bytes>,
        B::Error: std::fmt::Display,
    {
        let path = ObjectPath::from(key);
        let mut options = PutMultipartOptions::default();
        if let (Some(_), Some(ct)) = (&self.signer, content_type) {
            options.attributes = Attributes::from_iter([(Attribute::ContentType, ct.to_string())]);
        }
        let upload = self.store.put_multipart_opts(&path, options).await?;
        let mut upload = Unfinished(Some(WriteMultipart::new(upload)));
        let mut hash = ring::digest::Context::new(&ring::digest::SHA256);
        let mut bytes = 0_u64;
        let mut body = std::pin::pin!(body);
        let failed = loop {
            let frame = match body.frame().await {
                None => break None,
                Some(Err(e)) => break Some(StorageError::Source(e.to_string())),
                Some(Ok(frame)) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            bytes += data.len() as u64;
            if bytes > max_bytes {
                break Some(StorageError::TooLarge(max_bytes));
            }
            hash.update(&data);
            if let Err(e) = upload.writer().wait_for_capacity(PARTS_IN_FLIGHT).await {
                break Some(e.into());
            }
            upload.writer().put(data);
        };
        if let Some(e) = failed {
            // Aborted by the guard, in a task of its own that a copy's timeout does
            // not cut short: S3 keeps the parts of an upload never completed nor
            // aborted (and bills them) until a lifecycle rule removes them.
            drop(upload);
            return Err(e);
        }
        // Finished in a task of its own, for the same reason: a copy cut short while
        // its last parts go up leaves the upload to complete, not half made.
        let writer = upload.take();
        tokio::spawn(writer.finish())
            .await
            .map_err(|e| StorageError::Unavailable(format!("the upload's end was lost: {e}")))??;
        Ok(Stored {
            bytes,
            sha256: hex::encode(hash.finish()),
        })
    }

    /// Read `key`, the bytes of `range` only when one is given (clamped to the
    /// object; the caller checked it against the size it knows).
    pub async fn get(&self, key: &str, range: Option<Range<u64>>) -> Result<Read, StorageError> {
        let options = GetOptions {
            range: range.map(GetRange::Bounded),
            ..GetOptions::default()
        };
        let got = self.store.get_opts(&ObjectPath::from(key), options).await?;
        let size = got.meta.size;
        let range = got.range.clone();
        let body = match got.payload {
            GetResultPayload::File(file, _) => file_stream(file, range.clone())?,
            GetResultPayload::Stream(s) => s.map(|r| r.map_err(StorageError::from)).boxed(),
        };
        Ok(Read { size, range, body })
    }

    /// A presigned URL for `method` (GET or HEAD) of `key`, valid `ttl`; `None`
    /// where storage cannot presign (local files).
    pub async fn direct_link(
        &self,
        method: http::Method,
        key: &str,
        ttl: std::time::Duration,
    ) -> Option<Result<String, StorageError>> {
        let signer = self.signer.as_ref()?;
        let url = signer.signed_url(method, &ObjectPath::from(key), ttl).await;
        Some(url.map(String::from).map_err(StorageError::from))
    }

    /// Remove `key`; gone already is done.
    pub async fn delete(&self, key: &str) -> Result<(), StorageError> {
        match self.store.delete(&ObjectPath::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// Bytes read from a local file at once when serving it.
const FILE_READ_BYTES: usize = 256 * 1024;

/// The bytes of `range` of a stored file, `FILE_READ_BYTES` per read. object_store's
/// own stream of a local file reads 8 KiB per hand-off to the blocking pool: serving a
/// stored result that way ran at a tenth of nginx's rate, the gateway's time mostly
/// in the scheduler (BENCHMARKS.md, the copy benchmark).
fn file_stream(
    mut file: std::fs::File,
    range: Range<u64>,
) -> Result<futures_util::stream::BoxStream<'static, Result<Bytes, StorageError>>, StorageError> {
    use std::io::{Seek, SeekFrom};
    use tokio::io::AsyncReadExt;
    let unavailable = |e: std::io::Error| StorageError::Unavailable(e.to_string());
    file.seek(SeekFrom::Start(range.start))
        .map_err(unavailable)?;
    let reader = tokio::fs::File::from_std(file).take(range.end - range.start);
    Ok(
        tokio_util::io::ReaderStream::with_capacity(reader, FILE_READ_BYTES)
            .map(move |chunk| chunk.map_err(unavailable))
            .boxed(),
    )
}

/// An endpoint the operator named with `http://` (MinIO, Ceph on a private network):
/// plain HTTP is what was asked for. The endpoint is the one the builder took from the
/// environment (`AWS_ENDPOINT_URL_S3` before `AWS_ENDPOINT_URL` or `AWS_ENDPOINT`),
/// so that what is allowed is what is used.
fn allow_http_when_named(
    builder: object_store::aws::AmazonS3Builder,
) -> object_store::aws::AmazonS3Builder {
    use object_store::aws::AmazonS3ConfigKey as Key;
    let endpoint = builder
        .get_config_value(&Key::S3Endpoint)
        .or_else(|| builder.get_config_value(&Key::Endpoint));
    if endpoint.is_some_and(|e| e.starts_with("http://")) {
        builder.with_allow_http(true)
    } else {
        builder
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};

    fn local(dir: &Path) -> Storage {
        Storage::open(&StorageUrl::File(dir.join("media")))
            .unwrap()
            .unwrap()
    }

    async fn read_all(read: Read) -> Vec<u8> {
        let chunks: Vec<Bytes> = read.body.map(|c| c.unwrap()).collect().await;
        chunks.concat()
    }

    #[test]
    fn urls_parse() {
        let dir = Path::new("/etc/mg");
        assert_eq!(StorageUrl::parse("none", dir), Ok(StorageUrl::Off));
        assert_eq!(
            StorageUrl::parse("file://.mediagate/media", dir),
            Ok(StorageUrl::File(dir.join(".mediagate/media")))
        );
        assert_eq!(
            StorageUrl::parse("s3://bucket/some/prefix/", dir),
            Ok(StorageUrl::S3 {
                bucket: "bucket".into(),
                prefix: "some/prefix".into()
            })
        );
        assert_eq!(
            StorageUrl::parse("s3://bucket", dir),
            Ok(StorageUrl::S3 {
                bucket: "bucket".into(),
                prefix: String::new()
            })
        );
        assert!(StorageUrl::parse("s3://", dir).is_err());
        assert!(StorageUrl::parse("ftp://x", dir).is_err());
    }

    #[test]
    fn plain_http_is_allowed_for_the_endpoint_used_when_it_is_named_so() {
        use object_store::ClientConfigKey;
        use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey as Key};
        let allowed = |settings: &[(&str, &str)]| {
            let builder = settings
                .iter()
                .fold(AmazonS3Builder::new(), |b, (key, value)| {
                    b.with_config(key.parse().unwrap(), *value)
                });
            allow_http_when_named(builder)
                .get_config_value(&Key::Client(ClientConfigKey::AllowHttp))
                .as_deref()
                == Some("true")
        };
        // The names `from_env` reads, lowercased.
        assert!(allowed(&[("aws_endpoint_url", "http://127.0.0.1:9000")]));
        assert!(allowed(&[("aws_endpoint", "http://minio:9000")]));
        assert!(allowed(&[("aws_endpoint_url_s3", "http://minio:9000")]));
        assert!(!allowed(&[("aws_endpoint_url", "https://s3.example")]));
        assert!(!allowed(&[]));
        // The S3-specific endpoint is the one used: its scheme decides.
        assert!(!allowed(&[
            ("aws_endpoint_url", "http://127.0.0.1:9000"),
            ("aws_endpoint_url_s3", "https://s3.example"),
        ]));
        assert!(allowed(&[
            ("aws_endpoint_url", "https://s3.example"),
            ("aws_endpoint_url_s3", "http://127.0.0.1:9000"),
        ]));
    }

    #[test]
    fn s3_storage_opens() {
        // object_store's HTTP client (reqwest without a TLS provider of its own) needs
        // a process-wide rustls provider: none was installed, and opening panicked.
        let url = StorageUrl::S3 {
            bucket: "bucket".into(),
            prefix: "some/prefix".into(),
        };
        let storage = Storage::open(&url).unwrap().unwrap();
        assert_eq!(storage.key(3, 1), "some/prefix/results/3/1");
    }

    #[tokio::test]
    async fn a_result_is_written_hashed_and_read_back_whole_and_by_range() {
        let dir = tempfile::tempdir().unwrap();
        let storage = local(dir.path());
        // Eleven chunks of 1 MiB: more than one part of the multipart upload.
        let chunk: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
        let chunks: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = (0..11)
            .map(|_| Ok(http_body::Frame::data(Bytes::from(chunk.clone()))))
            .collect();
        let key = storage.key(7, 0);
        let stored = storage
            .put(
                &key,
                StreamBody::new(futures_util::stream::iter(chunks)),
                u64::MAX,
                Some("video/mp4"),
            )
            .await
            .unwrap();
        let whole = chunk.repeat(11);
        assert_eq!(stored.bytes, whole.len() as u64);
        assert_eq!(
            stored.sha256,
            hex::encode(ring::digest::digest(&ring::digest::SHA256, &whole))
        );
        let read = storage.get(&key, None).await.unwrap();
        assert_eq!(read.size, whole.len() as u64);
        assert_eq!(read_all(read).await, whole);
        let read = storage.get(&key, Some(1_048_570..1_048_590)).await.unwrap();
        assert_eq!(read.range, 1_048_570..1_048_590);
        assert_eq!(read_all(read).await, &whole[1_048_570..1_048_590]);
    }

    #[tokio::test]
    async fn a_result_over_the_limit_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let storage = local(dir.path());
        let key = storage.key(1, 0);
        let e = storage
            .put(&key, Full::new(Bytes::from(vec![0_u8; 100])), 99, None)
            .await
            .unwrap_err();
        assert!(matches!(e, StorageError::TooLarge(99)), "{e}");
        assert!(matches!(
            storage.get(&key, None).await.err(),
            Some(StorageError::NotFound)
        ));
        storage
            .delete(&key)
            .await
            .expect("deleting nothing is done");
    }
}
