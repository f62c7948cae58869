//! Hot reload: on SIGHUP, or when `server.reload_poll_ms` is set and the routes file or
//! the certificate files changed, the routes file is read again and, when valid,
//! swapped in as one snapshot ([`Gateway::reload`]); an invalid file keeps the running
//! config.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::Gateway;
use crate::config::LoadError;

/// SIGHUP, taken over from its default action (ending the process). Call it before
/// the gateway is announced, so that no SIGHUP sent after that can end it.
pub fn hangups() -> Option<tokio::signal::unix::Signal> {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; hot reload is off");
            None
        }
    }
}

/// Reload on every SIGHUP until the process ends.
pub async fn on_sighup(hangups: Option<tokio::signal::unix::Signal>, gateway: Arc<Gateway>) {
    let Some(mut hangups) = hangups else { return };
    while hangups.recv().await.is_some() {
        let _ = reload(&gateway).await;
    }
}

/// Reload once, off the async workers (compiling the file is CPU work), and log the
/// outcome.
pub async fn reload(gateway: &Arc<Gateway>) -> Result<(), LoadError> {
    let g = gateway.clone();
    let outcome = tokio::task::spawn_blocking(move || g.reload())
        .await
        .unwrap_or_else(|e| {
            Err(LoadError::whole_file(
                gateway.config_path(),
                format!("the reload failed: {e}"),
            ))
        });
    let file = gateway.config_path().display().to_string();
    match &outcome {
        Ok(()) => {
            let s = gateway.snapshot();
            tracing::info!(
                %file,
                models = s.models.len(),
                providers = s.providers.len(),
                keys = s.keys.len(),
                "configuration reloaded"
            );
        }
        Err(e) => tracing::error!(
            %file,
            problems = %e.to_string().replace('\n', "; "),
            "configuration NOT reloaded; the previous one stays in force"
        ),
    }
    outcome
}

/// What identifies a version of a file: modification time and length.
type Stamp = Option<(SystemTime, u64)>;

fn watched_files(gateway: &Gateway) -> Vec<PathBuf> {
    let path = gateway.config_path();
    let mut files = vec![path.to_path_buf()];
    if let Some(tls) = &gateway.snapshot().server.tls {
        let dir = crate::config::config_dir(path);
        files.push(dir.join(&tls.cert_file));
        files.push(dir.join(&tls.key_file));
    }
    files
}

fn stamps(files: &[PathBuf]) -> Vec<Stamp> {
    files
        .iter()
        .map(|f| {
            std::fs::metadata(f)
                .ok()
                .and_then(|m| Some((m.modified().ok()?, m.len())))
        })
        .collect()
}

/// Poll the routes file and the certificate files every `server.reload_poll_ms` (when
/// not 0) and reload when one of them changed. A file that is broken when it is seen
/// is reported once; the next change is tried again.
///
/// The files are looked at when this is called, so call it right after loading.
pub fn watch_files(gateway: Arc<Gateway>) -> impl Future<Output = ()> + Send + 'static {
    let mut files = watched_files(&gateway);
    let mut seen = stamps(&files);
    async move {
        loop {
            let every = gateway.snapshot().server.reload_poll_ms;
            if every == 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            tokio::time::sleep(Duration::from_millis(every)).await;
            let now = stamps(&files);
            if now != seen {
                tracing::info!("routes or certificate file changed; reloading");
                let _ = reload(&gateway).await;
                files = watched_files(&gateway);
                seen = stamps(&files);
            }
        }
    }
}
