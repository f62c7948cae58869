//! Long-poll: `GET {collection}/{id}?wait=N` (or `Prefer: wait=N`, RFC 7240) answers
//! as soon as the task's status differs from the one the client last saw (`?status=`,
//! or the current one), or when N seconds (at most 60) have passed. Here what the
//! client asked for is read; the waiting itself is the task service's
//! (`TaskService::changed`): it costs no status requests, since the background tracker
//! asks the provider and its answers wake the waiting clients.

use std::time::Duration;

use http::request::Parts;
use http::{HeaderValue, Response};

use crate::error::ApiError;
use crate::response::ResponseBody;
use crate::tasks::TaskStatus;

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
