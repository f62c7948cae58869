//! Route by path: which endpoint a request is for, and which methods it allows.

use http::Method;

use crate::config::Endpoint;
use crate::error::ApiError;

/// What a request asks for.
#[derive(Debug, Clone)]
pub enum Route {
    Submit(Endpoint),
    /// `GET {collection}`: the key's own tasks, newest first.
    List(Endpoint),
    /// `{collection}/{id}`.
    Query(Endpoint, Box<str>),
    /// `DELETE {collection}/{id}`: cancel the task if unfinished, remove its results.
    Delete(Endpoint, Box<str>),
    /// `{collection}/{id}/content` and `…/content/{n}`: result `n` (0 for the first),
    /// from storage or streamed from the provider.
    Content(Endpoint, Box<str>, usize),
    /// `GET {usage}`: the key's own tasks, seconds and spend per day and model.
    Usage(Endpoint),
    /// `GET {models}`: the models the key may submit on the endpoint.
    Models(Endpoint),
    /// `GET {models}/{id}`: one of them; the id as sent (percent-encoded).
    Model(Endpoint, Box<str>),
    /// `POST /v1/videos/{id}/remix`: refused, no provider has a remix step.
    Remix(Box<str>),
    /// `GET /v1/videos/inputs/{name}`: an uploaded `input_reference`, opened by the
    /// signature of its link (no key: the provider fetches it).
    Input(Box<str>),
    /// `GET /openapi.json`, unless `server.openapi` turns it off.
    OpenApi,
    Health,
    Ready,
    /// `/metrics`, when it is served on the client listeners.
    Metrics,
    /// No such path (404) or not that method (405): answered after authentication
    /// (unless the path is a public one), so that a caller without a key learns
    /// nothing about paths.
    Refused {
        error: ApiError,
        public: bool,
    },
}

impl Route {
    /// Operational routes that answer without client authentication.
    pub fn is_public(&self) -> bool {
        match self {
            Self::Health | Self::Ready | Self::Metrics | Self::OpenApi => true,
            Self::Refused { public, .. } => *public,
            Self::Input(_) => true,
            Self::Submit(_)
            | Self::Remix(_)
            | Self::List(_)
            | Self::Query(..)
            | Self::Delete(..)
            | Self::Content(..)
            | Self::Usage(_)
            | Self::Models(_)
            | Self::Model(..) => false,
        }
    }

    /// Label for logs: the route template, never the id itself.
    pub fn label(&self) -> &'static str {
        match self {
            Route::Submit(Endpoint::ModelCenter) => "POST /v2/model-center/tasks",
            Route::Submit(Endpoint::AlphaVideos) => "POST /v1/alpha/videos",
            Route::List(Endpoint::ModelCenter) => "GET /v2/model-center/tasks",
            Route::List(Endpoint::AlphaVideos) => "GET /v1/alpha/videos",
            Route::Query(Endpoint::ModelCenter, _) => "GET /v2/model-center/tasks/{id}",
            Route::Query(Endpoint::AlphaVideos, _) => "GET /v1/alpha/videos/{id}",
            Route::Delete(Endpoint::ModelCenter, _) => "DELETE /v2/model-center/tasks/{id}",
            Route::Delete(Endpoint::AlphaVideos, _) => "DELETE /v1/alpha/videos/{id}",
            Route::Content(Endpoint::ModelCenter, ..) => "GET /v2/model-center/tasks/{id}/content",
            Route::Content(Endpoint::AlphaVideos, ..) => "GET /v1/alpha/videos/{id}/content",
            Route::Usage(Endpoint::ModelCenter) => "GET /v2/usage",
            Route::Usage(Endpoint::AlphaVideos) => "GET /v1/alpha/usage",
            Route::Models(Endpoint::ModelCenter) => "GET /v2/model-center/models",
            Route::Models(Endpoint::AlphaVideos) => "GET /v1/alpha/models",
            Route::Model(Endpoint::ModelCenter, _) => "GET /v2/model-center/models/{id}",
            Route::Model(Endpoint::AlphaVideos, _) => "GET /v1/alpha/models/{id}",
            Route::Submit(Endpoint::OpenAiVideos) => "POST /v1/videos",
            Route::List(Endpoint::OpenAiVideos) => "GET /v1/videos",
            Route::Query(Endpoint::OpenAiVideos, _) => "GET /v1/videos/{id}",
            Route::Delete(Endpoint::OpenAiVideos, _) => "DELETE /v1/videos/{id}",
            Route::Content(Endpoint::OpenAiVideos, ..) => "GET /v1/videos/{id}/content",
            Route::Usage(Endpoint::OpenAiVideos) => "GET /v1/usage",
            Route::Models(Endpoint::OpenAiVideos) => "GET /v1/models",
            Route::Model(Endpoint::OpenAiVideos, _) => "GET /v1/models/{id}",
            Route::Remix(_) => "POST /v1/videos/{id}/remix",
            Route::Input(_) => "GET /v1/videos/inputs/{name}",
            Route::OpenApi => "GET /openapi.json",
            Route::Health => "GET /healthz",
            Route::Ready => "GET /readyz",
            Route::Metrics => "GET /metrics",
            Route::Refused { .. } => "-",
        }
    }
}

/// The optional routes of the client listeners, as the snapshot's `[server]` says.
#[derive(Debug, Clone, Copy)]
pub struct Optional {
    /// `/metrics` (when it has no listener of its own).
    pub metrics: bool,
    /// `/openapi.json`.
    pub openapi: bool,
}

/// Map a method and path to a route.
pub fn route(method: &Method, path: &str, optional: Optional) -> Route {
    resolve(method, path, optional).unwrap_or_else(|error| Route::Refused {
        error,
        public: matches!(path, "/healthz" | "/readyz")
            || (optional.metrics && path == "/metrics")
            || (optional.openapi && path == OPENAPI),
    })
}

const OPENAPI: &str = "/openapi.json";

/// The route; 405 with `Allow` for a known path, 404 otherwise.
fn resolve(method: &Method, path: &str, optional: Optional) -> Result<Route, ApiError> {
    let (route, allow) = match path {
        "/healthz" => (Route::Health, "GET, HEAD"),
        "/readyz" => (Route::Ready, "GET, HEAD"),
        "/metrics" if optional.metrics => (Route::Metrics, "GET, HEAD"),
        OPENAPI if optional.openapi => (Route::OpenApi, "GET, HEAD"),
        _ if let Some(e) = Endpoint::ALL.into_iter().find(|e| e.usage_path() == path) => {
            (Route::Usage(e), "GET, HEAD")
        }
        _ => match (models(path), openai(path)) {
            (Some(route), _) => (route?, "GET, HEAD"),
            (None, Some(route)) => route,
            (None, None) => tasks(method, path)?,
        },
    };
    let ok = match route {
        Route::Submit(_) | Route::Delete(..) => true,
        Route::Remix(_) => method == Method::POST,
        _ => method == Method::GET || method == Method::HEAD,
    };
    if ok {
        Ok(route)
    } else {
        Err(ApiError::method_not_allowed(allow))
    }
}

/// `{models}` and `{models}/{id}` of an endpoint; `None` when the path is not under one.
fn models(path: &str) -> Option<Result<Route, ApiError>> {
    let endpoint = Endpoint::ALL
        .into_iter()
        .find(|e| path.starts_with(e.models_path()))?;
    Some(match &path[endpoint.models_path().len()..] {
        "" => Ok(Route::Models(endpoint)),
        rest => match rest.strip_prefix('/') {
            Some(id) if !id.is_empty() && !id.contains('/') => {
                Ok(Route::Model(endpoint, id.into()))
            }
            _ => Err(ApiError::path_not_found()),
        },
    })
}

/// The paths of `/v1/videos` that the other endpoints do not have: a remix (POST)
/// and an uploaded input (GET).
fn openai(path: &str) -> Option<(Route, &'static str)> {
    let rest = path.strip_prefix(INPUTS);
    if let Some(name) = rest.filter(|n| !n.is_empty() && !n.contains('/')) {
        return Some((Route::Input(name.into()), "GET, HEAD"));
    }
    let id = path
        .strip_prefix(Endpoint::OpenAiVideos.path())?
        .strip_prefix('/')?
        .strip_suffix("/remix")?;
    (!id.is_empty() && !id.contains('/')).then(|| (Route::Remix(id.into()), "POST"))
}

/// Where uploaded inputs are served: `{INPUTS}{name}`.
pub const INPUTS: &str = "/v1/videos/inputs/";

/// A task collection, a task or its content, with the methods the path allows.
fn tasks(method: &Method, path: &str) -> Result<(Route, &'static str), ApiError> {
    let endpoint = Endpoint::ALL
        .into_iter()
        .find(|e| path.starts_with(e.path()))
        .ok_or_else(ApiError::path_not_found)?;
    Ok(match &path[endpoint.path().len()..] {
        "" if method == Method::POST => (Route::Submit(endpoint), "GET, HEAD, POST"),
        "" => (Route::List(endpoint), "GET, HEAD, POST"),
        rest => match rest.strip_prefix('/') {
            Some(id) if !id.is_empty() && !id.contains('/') => {
                let route = if method == Method::DELETE {
                    Route::Delete(endpoint, id.into())
                } else {
                    Route::Query(endpoint, id.into())
                };
                (route, "GET, HEAD, DELETE")
            }
            Some(rest) => match content_path(rest) {
                Some((id, n)) => (Route::Content(endpoint, id.into(), n), "GET, HEAD"),
                None => return Err(ApiError::path_not_found()),
            },
            _ => return Err(ApiError::path_not_found()),
        },
    })
}

/// Results a task may have, at most: `…/content/{n}` takes up to three digits.
const MAX_RESULT_DIGITS: usize = 3;

/// `{id}/content` (result 0) or `{id}/content/{n}`.
fn content_path(rest: &str) -> Option<(&str, usize)> {
    let (id, tail) = rest.split_once('/')?;
    if id.is_empty() {
        return None;
    }
    if tail == "content" {
        return Some((id, 0));
    }
    let n = tail.strip_prefix("content/")?;
    let digits =
        !n.is_empty() && n.len() <= MAX_RESULT_DIGITS && n.bytes().all(|b| b.is_ascii_digit());
    Some((id, n.parse().ok().filter(|_| digits)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Optional = Optional {
        metrics: true,
        openapi: true,
    };
    const NONE: Optional = Optional {
        metrics: false,
        openapi: false,
    };

    fn label(method: Method, path: &str) -> &'static str {
        route(&method, path, ALL).label()
    }

    #[test]
    fn routes_every_endpoint() {
        assert!(matches!(
            route(&Method::POST, "/v2/model-center/tasks", NONE),
            Route::Submit(Endpoint::ModelCenter)
        ));
        assert!(matches!(
            route(&Method::GET, "/v1/alpha/videos/task_abc", NONE),
            Route::Query(Endpoint::AlphaVideos, id) if &*id == "task_abc"
        ));
        assert!(matches!(
            route(&Method::GET, "/healthz", NONE),
            Route::Health
        ));
        assert!(matches!(
            route(&Method::GET, "/v1/alpha/videos/task_abc/content", NONE),
            Route::Content(Endpoint::AlphaVideos, id, 0) if &*id == "task_abc"
        ));
        assert_eq!(label(Method::GET, "/metrics"), "GET /metrics");
        assert_eq!(
            label(Method::GET, "/v2/model-center/tasks/x"),
            "GET /v2/model-center/tasks/{id}"
        );
    }

    #[test]
    fn metrics_only_where_served_and_public_routes_are_few() {
        assert!(
            matches!(route(&Method::GET, "/metrics", NONE), Route::Refused { error, public: false } if error.status == 404)
        );
        assert!(route(&Method::GET, "/metrics", ALL).is_public());
        assert!(route(&Method::POST, "/healthz", NONE).is_public());
        assert!(route(&Method::GET, "/readyz", NONE).is_public());
        assert!(!route(&Method::POST, "/v1/alpha/videos", ALL).is_public());
        assert!(!route(&Method::GET, "/nope", ALL).is_public());
    }

    fn refused(method: Method, path: &str) -> ApiError {
        match route(&method, path, ALL) {
            Route::Refused { error, .. } => error,
            other => panic!("{path} routed to {other:?}"),
        }
    }

    #[test]
    fn content_paths_name_their_result() {
        let content = |path: &str| match route(&Method::GET, path, NONE) {
            Route::Content(_, id, n) => Some((id.to_string(), n)),
            _ => None,
        };
        assert_eq!(
            content("/v2/model-center/tasks/t1/content"),
            Some(("t1".into(), 0))
        );
        assert_eq!(
            content("/v2/model-center/tasks/t1/content/0"),
            Some(("t1".into(), 0))
        );
        assert_eq!(
            content("/v1/alpha/videos/t1/content/12"),
            Some(("t1".into(), 12))
        );
        for no in [
            "/v2/model-center/tasks/t1/content/",
            "/v2/model-center/tasks/t1/content/1234",
            "/v2/model-center/tasks/t1/content/+1",
            "/v2/model-center/tasks/t1/content/1/2",
            "/v2/model-center/tasks//content/1",
        ] {
            assert_eq!(content(no), None, "{no}");
        }
    }

    #[test]
    fn wrong_method_names_allowed_ones() {
        let e = refused(Method::PUT, "/v2/model-center/tasks");
        assert_eq!(e.status, 405);
        assert_eq!(e.allow, Some("GET, HEAD, POST"));
        assert!(matches!(
            route(&Method::GET, "/v1/alpha/videos", NONE),
            Route::List(Endpoint::AlphaVideos)
        ));
        let e = refused(Method::POST, "/v1/alpha/videos/x");
        assert_eq!(e.allow, Some("GET, HEAD, DELETE"));
        assert!(matches!(
            route(&Method::DELETE, "/v1/alpha/videos/x", NONE),
            Route::Delete(Endpoint::AlphaVideos, id) if &*id == "x"
        ));
        assert_eq!(refused(Method::POST, "/metrics").allow, Some("GET, HEAD"));
    }

    #[test]
    fn v1_videos_has_a_remix_and_uploaded_inputs() {
        assert!(matches!(
            route(&Method::POST, "/v1/videos/task_a/remix", NONE),
            Route::Remix(id) if &*id == "task_a"
        ));
        assert_eq!(
            refused(Method::GET, "/v1/videos/task_a/remix").allow,
            Some("POST")
        );
        let input = route(&Method::GET, "/v1/videos/inputs/ab-3.png", NONE);
        assert!(matches!(&input, Route::Input(name) if &**name == "ab-3.png"));
        assert!(input.is_public());
        assert!(matches!(
            route(&Method::GET, "/v1/videos/task_a/content", NONE),
            Route::Content(Endpoint::OpenAiVideos, id, 0) if &*id == "task_a"
        ));
        for no in [
            "/v1/videos//remix",
            "/v1/videos/inputs/",
            "/v1/videos/inputs/a/b",
        ] {
            assert_eq!(refused(Method::GET, no).status, 404, "{no}");
        }
        assert_eq!(
            label(Method::DELETE, "/v1/videos/x"),
            "DELETE /v1/videos/{id}"
        );
    }

    #[test]
    fn unknown_paths_are_404() {
        for p in [
            "/",
            "/v2/model-center/tasksx",
            "/v2/model-center/tasks/",
            "/v2/model-center/tasks/a/b",
            "/v2/model-center/tasks//content",
            "/v2/model-center/tasks/a/b/content",
            "/v3/x",
        ] {
            assert_eq!(refused(Method::GET, p).status, 404, "{p}");
        }
    }

    #[test]
    fn models_and_the_document() {
        for endpoint in Endpoint::ALL {
            let list = endpoint.models_path();
            assert!(matches!(route(&Method::GET, list, NONE), Route::Models(e) if e == endpoint));
            let one = format!("{list}/eta%201.0%20%E5%8F%82");
            assert!(matches!(
                route(&Method::HEAD, &one, NONE),
                Route::Model(e, id) if e == endpoint && &*id == "eta%201.0%20%E5%8F%82"
            ));
            assert!(!route(&Method::GET, &one, ALL).is_public());
            assert_eq!(refused(Method::POST, list).allow, Some("GET, HEAD"));
            assert_eq!(refused(Method::DELETE, &one).allow, Some("GET, HEAD"));
            for bad in [
                format!("{list}/"),
                format!("{list}/a/b"),
                format!("{list}x"),
            ] {
                assert_eq!(refused(Method::GET, &bad).status, 404, "{bad}");
            }
        }
        assert_eq!(
            label(Method::GET, "/v1/alpha/models/alpha2Stable"),
            "GET /v1/alpha/models/{id}"
        );
        assert!(matches!(
            route(&Method::GET, "/openapi.json", ALL),
            Route::OpenApi
        ));
        assert!(route(&Method::GET, "/openapi.json", ALL).is_public());
        assert!(route(&Method::POST, "/openapi.json", ALL).is_public());
        assert_eq!(
            refused(Method::POST, "/openapi.json").allow,
            Some("GET, HEAD")
        );
        // Turned off, it is an unknown path like any other: behind authentication.
        let off = route(&Method::GET, "/openapi.json", NONE);
        assert!(matches!(&off, Route::Refused { error, public: false } if error.status == 404));
    }
}
