//! Hot reload: on SIGHUP the routes file is read again and, when valid, swapped in as
//! one snapshot ([`Gateway::reload`]); an invalid file keeps the running config.

use std::sync::Arc;

use crate::app::Gateway;

/// Reload on every SIGHUP until the process ends.
pub async fn on_sighup(gateway: Arc<Gateway>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; hot reload is off");
                return;
            }
        };
        while hangups.recv().await.is_some() {
            reload(&gateway).await;
        }
    }
    #[cfg(not(unix))]
    let _ = gateway;
}

/// Reload once, off the async workers (compiling the file is CPU work), and log the
/// outcome.
pub async fn reload(gateway: &Arc<Gateway>) {
    let g = gateway.clone();
    let outcome = tokio::task::spawn_blocking(move || g.reload()).await;
    let file = gateway.config_path().display().to_string();
    match outcome {
        Ok(Ok(())) => {
            let s = gateway.snapshot();
            tracing::info!(
                %file,
                models = s.models.len(),
                providers = s.providers.len(),
                keys = s.keys.len(),
                "configuration reloaded"
            );
        }
        Ok(Err(e)) => tracing::error!(
            %file,
            problems = %e.to_string().replace('\n', "; "),
            "configuration NOT reloaded; the previous one stays in force"
        ),
        Err(e) => tracing::error!(%file, error = %e, "configuration reload failed"),
    }
}
