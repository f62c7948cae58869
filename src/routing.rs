//! Route by path: which endpoint a request is for, and which methods it allows.

use http::Method;
use serde::Deserialize;

use crate::error::ApiError;

/// A submission family of the service interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum Endpoint {
    /// `/v2/model-center/tasks`
    #[serde(rename = "model-center")]
    ModelCenter,
    /// `/v1/alpha/videos`
    #[serde(rename = "alpha-videos")]
    AlphaVideos,
}

impl Endpoint {
    pub const ALL: [Endpoint; 2] = [Endpoint::ModelCenter, Endpoint::AlphaVideos];

    /// The collection path clients submit to.
    pub fn path(self) -> &'static str {
        match self {
            Self::ModelCenter => "/v2/model-center/tasks",
            Self::AlphaVideos => "/v1/alpha/videos",
        }
    }
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    Submit(Endpoint),
    Query(Endpoint, &'a str),
    /// `{collection}/{id}/content`: a result streamed from an upstream that needs our key.
    Content(Endpoint, &'a str),
    Health,
    Ready,
}

impl Route<'_> {
    /// Operational routes that answer without client authentication.
    pub fn is_public(path: &str) -> bool {
        matches!(path, "/healthz" | "/readyz")
    }

    /// Label for logs: the route template, never the id itself.
    pub fn label(&self) -> &'static str {
        match self {
            Route::Submit(Endpoint::ModelCenter) => "POST /v2/model-center/tasks",
            Route::Submit(Endpoint::AlphaVideos) => "POST /v1/alpha/videos",
            Route::Query(Endpoint::ModelCenter, _) => "GET /v2/model-center/tasks/{id}",
            Route::Query(Endpoint::AlphaVideos, _) => "GET /v1/alpha/videos/{id}",
            Route::Content(Endpoint::ModelCenter, _) => "GET /v2/model-center/tasks/{id}/content",
            Route::Content(Endpoint::AlphaVideos, _) => "GET /v1/alpha/videos/{id}/content",
            Route::Health => "GET /healthz",
            Route::Ready => "GET /readyz",
        }
    }
}

/// Map a method and path to a route; 405 with `Allow` for a known path, 404 otherwise.
pub fn route<'a>(method: &Method, path: &'a str) -> Result<Route<'a>, ApiError> {
    let (route, allow) = match path {
        "/healthz" => (Route::Health, "GET, HEAD"),
        "/readyz" => (Route::Ready, "GET, HEAD"),
        _ => {
            let endpoint = Endpoint::ALL
                .into_iter()
                .find(|e| path.starts_with(e.path()))
                .ok_or_else(ApiError::path_not_found)?;
            match &path[endpoint.path().len()..] {
                "" => (Route::Submit(endpoint), "POST"),
                rest => match rest.strip_prefix('/') {
                    Some(id) if !id.is_empty() && !id.contains('/') => {
                        (Route::Query(endpoint, id), "GET, HEAD")
                    }
                    Some(rest) => match rest.strip_suffix("/content") {
                        Some(id) if !id.is_empty() && !id.contains('/') => {
                            (Route::Content(endpoint, id), "GET, HEAD")
                        }
                        _ => return Err(ApiError::path_not_found()),
                    },
                    _ => return Err(ApiError::path_not_found()),
                },
            }
        }
    };
    let ok = match route {
        Route::Submit(_) => method == Method::POST,
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

    #[test]
    fn routes_every_endpoint() {
        assert_eq!(
            route(&Method::POST, "/v2/model-center/tasks").unwrap(),
            Route::Submit(Endpoint::ModelCenter)
        );
        assert_eq!(
            route(&Method::GET, "/v1/alpha/videos/task_abc").unwrap(),
            Route::Query(Endpoint::AlphaVideos, "task_abc")
        );
        assert_eq!(route(&Method::GET, "/healthz").unwrap(), Route::Health);
        assert_eq!(
            route(&Method::GET, "/v1/alpha/videos/task_abc/content").unwrap(),
            Route::Content(Endpoint::AlphaVideos, "task_abc")
        );
    }

    #[test]
    fn wrong_method_names_allowed_ones() {
        let e = route(&Method::GET, "/v2/model-center/tasks").unwrap_err();
        assert_eq!(e.status, 405);
        assert_eq!(e.allow, Some("POST"));
        let e = route(&Method::DELETE, "/v1/alpha/videos/x").unwrap_err();
        assert_eq!(e.allow, Some("GET, HEAD"));
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
            assert_eq!(route(&Method::GET, p).unwrap_err().status, 404, "{p}");
        }
    }
}
