//! Routing on any method and path: a route or a refusal of the catalogue, never a
//! panic; an id taken from a path is never empty and never holds a `/`.

use http::Method;
use proptest::prelude::*;

use super::routing::{Optional, Route, route};

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        Just(Method::GET),
        Just(Method::POST),
        Just(Method::HEAD),
        Just(Method::DELETE),
        "[A-Z]{1,10}".prop_map(|m| Method::from_bytes(m.as_bytes()).unwrap_or(Method::PUT)),
    ]
}

/// Paths near the real ones, and anything at all.
fn path() -> impl Strategy<Value = String> {
    let known = prop_oneof![
        Just("/v2/model-center/tasks"),
        Just("/v1/alpha/videos"),
        Just("/healthz"),
        Just("/metrics"),
        Just(""),
    ];
    prop_oneof![
        (known, "(/[^/]{0,12}){0,3}(/content)?/?").prop_map(|(k, rest)| format!("{k}{rest}")),
        "\\PC{0,64}",
    ]
}

proptest! {
    #[test]
    fn any_method_any_path(method in method(), path in path(), metrics in any::<bool>(), openapi in any::<bool>()) {
        let r = route(&method, &path, Optional { metrics, openapi });
        let _ = r.label();
        let _ = r.is_public();
        match r {
            Route::Query(_, id) | Route::Content(_, id, _) => {
                prop_assert!(!id.is_empty() && !id.contains('/'), "{id}");
                prop_assert!(method == Method::GET || method == Method::HEAD);
            }
            Route::Delete(_, id) => {
                prop_assert!(!id.is_empty() && !id.contains('/'), "{id}");
                prop_assert!(method == Method::DELETE);
            }
            Route::Refused { error, .. } => {
                prop_assert!(matches!(error.status.as_u16(), 404 | 405), "{}", error.status);
            }
            Route::Metrics => prop_assert!(metrics),
            Route::OpenApi => prop_assert!(openapi),
            _ => {}
        }
    }
}
