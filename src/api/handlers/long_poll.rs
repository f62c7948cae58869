//! Long-poll: `GET {collection}/{id}?wait=N` (or `Prefer: wait=N`, RFC 7240) answers
//! as soon as the task's status differs from the one the client last saw (`?status=`,
//! or the current one), or when N seconds (at most 60) have passed. Waiting costs no
//! status requests: the background tracker asks the provider, and its answers reach
//! waiting clients through the gateway's watchers.

use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{HeaderValue, Response};

use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::response::ResponseBody;
use crate::tasks::{TaskCache, TaskId, TaskState, TaskStatus};

/// Longest wait a client may ask for.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(60);

/// What the client asked to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Wait {
    pub wait: Duration,
    /// The status the client last saw; the current one when not given.
    pub seen: Option<TaskStatus>,
    /// Asked with `Prefer`: answered with `Preference-Applied`.
    pub preferred: bool,
}

impl Wait {
    /// `?wait=` and `?status=`, else `Prefer: wait=N`; `None` when neither asks.
    pub fn of(req: &Parts) -> Result<Option<Self>, ApiError> {
        let (mut wait, mut seen) = (None, None);
        for (k, v) in form_urlencoded::parse(req.uri.query().unwrap_or_default().as_bytes()) {
            match &*k {
                "wait" => {
                    let secs = super::digits::<u64>(&v).filter(|s| *s <= MAX_WAIT.as_secs());
                    let msg = "`wait` must be a whole number of seconds from 0 to 60";
                    let secs =
                        secs.ok_or_else(|| ApiError::invalid_parameter("wait", msg.into()))?;
                    wait = Some(Duration::from_secs(secs));
                }
                "status" => {
                    let status = serde_json::from_value(serde_json::Value::from(&*v)).ok();
                    let msg = "`status` must be queued, processing, completed or failed";
                    seen = Some(
                        status.ok_or_else(|| ApiError::invalid_parameter("status", msg.into()))?,
                    );
                }
                _ => {}
            }
        }
        if let Some(wait) = wait {
            return Ok(Some(Self {
                wait,
                seen,
                preferred: false,
            }));
        }
        Ok(preferred_wait(req).map(|wait| Self {
            wait,
            seen,
            preferred: true,
        }))
    }

    /// `Preference-Applied` for a wait asked with `Prefer`.
    pub fn applied(&self, resp: &mut Response<ResponseBody>) {
        if self.preferred {
            let value = format!("wait={}", self.wait.as_secs());
            if let Ok(v) = HeaderValue::try_from(value) {
                resp.headers_mut().insert("preference-applied", v);
            }
        }
    }
}

/// `Prefer: wait=N` (among other preferences), capped at [`MAX_WAIT`].
fn preferred_wait(req: &Parts) -> Option<Duration> {
    req.headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split([',', ';']))
        .find_map(|pref| {
            let (name, value) = pref.split_once('=')?;
            (name.trim().eq_ignore_ascii_case("wait"))
                .then(|| super::digits::<u64>(value.trim().trim_matches('"')))
                .flatten()
        })
        .map(|secs| Duration::from_secs(secs).min(MAX_WAIT))
}

/// How often a waiting client's replica looks at the ledger, where the tracker of
/// another replica records what it learns.
const LEDGER_LOOK: Duration = Duration::from_millis(500);

/// Why a wait ended.
pub(super) enum Woken {
    /// This replica saw the task's state (changed, or as it is when the wait is over).
    State(Arc<TaskState>),
    /// Another replica recorded a change in the ledger: the state is to be read again.
    Elsewhere,
}

/// Wait until the task's state differs from `seen`, `wait` has passed, or the gateway
/// is stopping. A state this replica reads (its tracker, a query) wakes the wait at
/// once; a change another replica recorded in the ledger within [`LEDGER_LOOK`].
pub(super) async fn changed(
    gateway: &Gateway,
    task: &TaskId,
    current: Arc<TaskState>,
    seen: TaskStatus,
    wait: Duration,
) -> Woken {
    if current.status != seen || current.status.is_terminal() || wait.is_zero() {
        return Woken::State(current);
    }
    let key = TaskCache::key(&task.provider, &task.upstream_id);
    let mut states = gateway.watch(key, current);
    let recorded_elsewhere = async {
        let Some(ledger) = &gateway.ledger else {
            return std::future::pending().await;
        };
        loop {
            tokio::time::sleep(LEDGER_LOOK).await;
            let status = ledger.status_of(&task.provider, &task.upstream_id).await;
            // Only a later status: the ledger may lag behind what this client saw.
            if let Ok(Some(status)) = status
                && stage(&status) > stage(seen.as_str())
            {
                return;
            }
        }
    };
    tokio::select! {
        changed = states.wait_for(|s| s.status != seen) => {
            if let Ok(state) = changed {
                return Woken::State(state.clone());
            }
        }
        () = recorded_elsewhere => return Woken::Elsewhere,
        () = tokio::time::sleep(wait) => {}
        () = gateway.stopped() => {}
    }
    Woken::State(states.borrow().clone())
}

/// How far along a task is: queued, processing, then finished.
fn stage(status: &str) -> u8 {
    match status {
        "queued" => 0,
        "processing" => 1,
        _ => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(uri: &str, prefer: Option<&str>) -> Parts {
        let mut req = http::Request::builder().uri(uri);
        if let Some(p) = prefer {
            req = req.header("prefer", p);
        }
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn waits_are_asked_by_query_or_preference() {
        let w = Wait::of(&parts("/t/x?wait=30&status=queued", None))
            .unwrap()
            .unwrap();
        assert_eq!(
            (w.wait.as_secs(), w.seen, w.preferred),
            (30, Some(TaskStatus::Queued), false)
        );
        let w = Wait::of(&parts("/t/x", Some("respond-async, wait=100")))
            .unwrap()
            .unwrap();
        assert_eq!((w.wait.as_secs(), w.preferred), (60, true), "capped at 60");
        assert_eq!(Wait::of(&parts("/t/x", None)).unwrap(), None);
        assert_eq!(
            Wait::of(&parts("/t/x", Some("return=minimal"))).unwrap(),
            None
        );
        for bad in [
            "/t/x?wait=61",
            "/t/x?wait=-1",
            "/t/x?wait=soon",
            "/t/x?wait=5&status=done",
        ] {
            assert!(Wait::of(&parts(bad, None)).is_err(), "{bad}");
        }
    }
}
