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
    /// `{collection}/{id}/content`: a result streamed from an upstream that needs our key.
    Content(Endpoint, Box<str>),
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
            Self::Health | Self::Ready | Self::Metrics => true,
            Self::Refused { public, .. } => *public,
            Self::Submit(_) | Self::List(_) | Self::Query(..) | Self::Content(..) => false,
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
            Route::Content(Endpoint::ModelCenter, _) => "GET /v2/model-center/tasks/{id}/content",
            Route::Content(Endpoint::AlphaVideos, _) => "GET /v1/alpha/videos/{id}/content",
            Route::Health => "GET /healthz",
            Route::Ready => "GET /readyz",
            Route::Metrics => "GET /metrics",
            Route::Refused { .. } => "-",
        }
    }
}

/// Map a method and path to a route (`/metrics` only when `metrics_here`).
pub fn route(method: &Method, path: &str, metrics_here: bool) -> Route {
    resolve(method, path, metrics_here).unwrap_or_else(|error| Route::Refused {
        error,
        public: matches!(path, "/healthz" | "/readyz") || (metrics_here && path == "/metrics"),
    })
}

/// The route; 405 with `Allow` for a known path, 404 otherwise.
fn resolve(method: &Method, path: &str, metrics_here: bool) -> Result<Route, ApiError> {
    let (route, allow) = match path {
        "/healthz" => (Route::Health, "GET, HEAD"),
        "/readyz" => (Route::Ready, "GET, HEAD"),
        "/metrics" if metrics_here => (Route::Metrics, "GET, HEAD"),
        _ => {
            let endpoint = Endpoint::ALL
                .into_iter()
                .find(|e| path.starts_with(e.path()))
                .ok_or_else(ApiError::path_not_found)?;
            match &path[endpoint.path().len()..] {
                "" if method == Method::POST => (Route::Submit(endpoint), "GET, HEAD, POST"),
                "" => (Route::List(endpoint), "GET, HEAD, POST"),
                rest => match rest.strip_prefix('/') {
                    Some(id) if !id.is_empty() && !id.contains('/') => {
                        (Route::Query(endpoint, id.into()), "GET, HEAD")
                    }
                    Some(rest) => match rest.strip_suffix("/content") {
                        Some(id) if !id.is_empty() && !id.contains('/') => {
                            (Route::Content(endpoint, id.into()), "GET, HEAD")
                        }
                        _ => return Err(ApiError::path_not_found()),
                    },
                    _ => return Err(ApiError::path_not_found()),
                },
            }
        }
    };
    let ok = match route {
        Route::Submit(_) => true,
        _ => method == Method::GET || method == Method::HEAD,
    };
    if ok {
        Ok(route)
    } else {
        Err(ApiError::method_not_allowed(allow))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(method: Method, path: &str) -> &'static str {
        route(&method, path, true).label()
    }

    #[test]
    fn routes_every_endpoint() {
        assert!(matches!(
            route(&Method::POST, "/v2/model-center/tasks", false),
            Route::Submit(Endpoint::ModelCenter)
        ));
        assert!(matches!(
            route(&Method::GET, "/v1/alpha/videos/task_abc", false),
            Route::Query(Endpoint::AlphaVideos, id) if &*id == "task_abc"
        ));
        assert!(matches!(
            route(&Method::GET, "/healthz", false),
            Route::Health
        ));
        assert!(matches!(
            route(&Method::GET, "/v1/alpha/videos/task_abc/content", false),
            Route::Content(Endpoint::AlphaVideos, id) if &*id == "task_abc"
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
            matches!(route(&Method::GET, "/metrics", false), Route::Refused { error, public: false } if error.status == 404)
        );
        assert!(route(&Method::GET, "/metrics", true).is_public());
        assert!(route(&Method::POST, "/healthz", false).is_public());
        assert!(route(&Method::GET, "/readyz", false).is_public());
        assert!(!route(&Method::POST, "/v1/alpha/videos", true).is_public());
        assert!(!route(&Method::GET, "/nope", true).is_public());
    }

    fn refused(method: Method, path: &str) -> ApiError {
        match route(&method, path, true) {
            Route::Refused { error, .. } => error,
            other => panic!("{path} routed to {other:?}"),
        }
    }

    #[test]
    fn wrong_method_names_allowed_ones() {
        let e = refused(Method::PUT, "/v2/model-center/tasks");
        assert_eq!(e.status, 405);
        assert_eq!(e.allow, Some("GET, HEAD, POST"));
        assert!(matches!(
            route(&Method::GET, "/v1/alpha/videos", false),
            Route::List(Endpoint::AlphaVideos)
        ));
        let e = refused(Method::DELETE, "/v1/alpha/videos/x");
        assert_eq!(e.allow, Some("GET, HEAD"));
        assert_eq!(refused(Method::POST, "/metrics").allow, Some("GET, HEAD"));
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
}
