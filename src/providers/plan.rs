//! A request plan: how one step (submit, query, result, content) builds its upstream
//! request from jq programs. Every step uses this one type, compiled once at load.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, Method, Request, Uri};
use http_body_util::Full;
use jaq_json::Val;
use serde_json::Value;

use super::UpstreamError;
use super::answer::Step;
use super::by_model::ByModel;
use super::jq::{Jq, JqVars};
use crate::config::Scope;
use crate::outbound::origin::Origin;

/// Method, path and query programs of one step, and its own static headers.
pub struct RequestPlan {
    step: Step,
    method: Method,
    path: Jq,
    query: Option<Jq>,
    headers: HeaderMap,
    /// The targets already built, when the path and query read only the model's
    /// variables (the usual `"/v1/tasks"` and `{kind: $kind}` of a submit): the same
    /// for every request of a model, so not built again per request.
    built: Option<BuiltTargets>,
}

/// Targets by model, for a plan whose target depends on nothing else: the URL and
/// whether the path was absolute.
type BuiltTargets = ByModel<(Uri, bool)>;

impl RequestPlan {
    /// Compile a step's `method`, `path` and `query`; problems are recorded under `at`.
    pub fn compile(
        step: Step,
        at: &mut Scope,
        method: &str,
        path: &str,
        query: &Option<String>,
    ) -> Option<Self> {
        let method = parse_method(at, method);
        let path = Jq::at(at, "path", path)?;
        let query = Jq::optional_at(at, "query", query)?;
        let model_only = path.model_only() && query.as_ref().is_none_or(Jq::model_only);
        Some(Self {
            step,
            method: method?,
            path,
            query,
            headers: HeaderMap::new(),
            built: model_only.then(BuiltTargets::default),
        })
    }

    /// Headers sent on this step only (e.g. an "async mode" header on submit).
    pub fn with_headers(mut self, headers: HeaderMap) -> Self {
        self.headers = headers;
        self
    }

    /// Build the request: `.` is `input` for the path and query programs. A path that
    /// is an absolute URL (a result link of the upstream) is used as it is, and our
    /// headers then go along only when it stays on the provider's own origin.
    pub fn build(
        &self,
        origin: &Origin,
        input: &Val,
        vars: &JqVars,
        body: Option<Vec<u8>>,
    ) -> Result<Request<Full<Bytes>>, UpstreamError> {
        let (target, absolute) = self.target(vars, || self.build_target(origin, input, vars))?;
        self.request(origin, target, absolute, body)
    }

    /// [`RequestPlan::build`] where `.` and the variables come from `inputs`, called
    /// only when the target is not built already: `model_vars` need only the model's
    /// variables (a submit's parameters become a jq value only if a program reads them).
    pub fn build_lazily(
        &self,
        origin: &Origin,
        model_vars: &JqVars,
        inputs: impl FnOnce() -> (Val, JqVars),
        body: Option<Vec<u8>>,
    ) -> Result<Request<Full<Bytes>>, UpstreamError> {
        let (target, absolute) = self.target(model_vars, || {
            let (input, vars) = inputs();
            self.build_target(origin, &input, &vars)
        })?;
        self.request(origin, target, absolute, body)
    }

    fn request(
        &self,
        origin: &Origin,
        target: Uri,
        absolute: bool,
        body: Option<Vec<u8>>,
    ) -> Result<Request<Full<Bytes>>, UpstreamError> {
        let mut builder = Request::builder()
            .method(self.method.clone())
            .uri(target.clone());
        let Some(headers) = builder.headers_mut() else {
            return Err(self.broken("path", "gave an invalid URL"));
        };
        if !absolute || origin.same_origin(&target) {
            headers.extend(origin.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        headers.extend(self.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
        if body.is_some() {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| self.broken("path", format!("built an invalid request: {e}")))
    }

    /// The URL the path and query programs name, and whether the path was absolute:
    /// built (by `build`) once per model when nothing else decides it.
    fn target(
        &self,
        vars: &JqVars,
        build: impl FnOnce() -> Result<(Uri, bool), UpstreamError>,
    ) -> Result<(Uri, bool), UpstreamError> {
        let Some((built, model)) = self.built.as_ref().zip(vars.model_values()) else {
            return build();
        };
        if let Some(found) = built.get(model) {
            return Ok(found);
        }
        let (target, absolute) = build()?;
        built.add(model, (target.clone(), absolute));
        Ok((target, absolute))
    }

    fn build_target(
        &self,
        origin: &Origin,
        input: &Val,
        vars: &JqVars,
    ) -> Result<(Uri, bool), UpstreamError> {
        let path = match self.path.json(input.clone(), vars) {
            Ok(Value::String(p)) => p,
            Ok(other) => {
                let other = shown(&other);
                return Err(self.broken("path", format!("gave {other}, not a string")));
            }
            Err(e) => return Err(self.broken("path", format!("failed: {e}"))),
        };
        let absolute = path.starts_with("https://") || path.starts_with("http://");
        let mut uri = if absolute {
            String::new()
        } else {
            origin.base.clone()
        };
        if !absolute && !path.starts_with('/') {
            uri.push('/');
        }
        uri.push_str(&path);
        if let Some(query) = &self.query {
            let pairs = match query.json(input.clone(), vars) {
                Ok(Value::Object(pairs)) => pairs,
                Ok(other) => {
                    let other = shown(&other);
                    return Err(self.broken("query", format!("gave {other}, not an object")));
                }
                Err(e) => return Err(self.broken("query", format!("failed: {e}"))),
            };
            append_query(&mut uri, &pairs);
        }
        let target = uri
            .parse::<Uri>()
            .map_err(|_| self.broken("path", "gave an invalid URL"))?;
        if absolute && !origin.may_reach(&target) {
            return Err(self.broken("path", "points into a private network; refused"));
        }
        Ok((target, absolute))
    }

    /// A request the configuration could not build: the operator's to fix.
    fn broken(&self, key: &str, what: impl std::fmt::Display) -> UpstreamError {
        let step = self.step.as_str();
        UpstreamError::failed(step, format!("`{step}.{key}` {what}"))
    }
}

/// A value a program gave, as a message may show it: quoted values elided (they may
/// come from an upstream answer) and cut short.
fn shown(value: &Value) -> String {
    const MAX: usize = 80;
    let text = super::jq::elide_values(&value.to_string());
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// `pairs` as a query string after `uri`: strings as they are, nulls left out, other
/// values as JSON text.
fn append_query(uri: &mut String, pairs: &serde_json::Map<String, Value>) {
    let mut qs = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        match v {
            Value::Null => {}
            Value::String(s) => {
                qs.append_pair(k, s);
            }
            other => {
                qs.append_pair(k, &other.to_string());
            }
        }
    }
    let qs = qs.finish();
    if !qs.is_empty() {
        uri.push(if uri.contains('?') { '&' } else { '?' });
        uri.push_str(&qs);
    }
}

/// An HTTP method from the file; a problem (and GET, to go on checking) when invalid.
fn parse_method(at: &mut Scope, m: &str) -> Option<Method> {
    let method = Method::from_bytes(m.to_ascii_uppercase().as_bytes());
    at.check(
        "method",
        method.map_err(|_| format!("`{m}` is not an HTTP method")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Problems;
    use crate::tasks::MediaKind;

    fn origin() -> Origin {
        let mut headers = HeaderMap::new();
        headers.insert("x-k", HeaderValue::from_static("v"));
        Origin::parse("https://api.example", headers).unwrap()
    }

    /// A GET whose path is the jq program `code`.
    fn get(code: &str) -> Result<Request<Full<Bytes>>, UpstreamError> {
        let mut problems = Problems::default();
        let plan = RequestPlan::compile(
            Step::Query,
            &mut problems.at("q"),
            "get",
            code,
            &Some(r#"{a: "b c", n: 1, skip: null}"#.into()),
        )
        .unwrap();
        let vars = JqVars::new("m", "m", MediaKind::Video, Some("1"), None);
        plan.build(&origin(), &Val::Null, &vars, None)
    }

    #[test]
    fn paths_may_be_absolute_and_keep_our_headers_on_our_origin() {
        let own = get(r#""https://api.example/files/1""#).unwrap();
        assert_eq!(own.uri(), "https://api.example/files/1?a=b+c&n=1");
        assert_eq!(own.headers()["x-k"], "v");
        let other = get(r#""https://cdn.example/files/1""#).unwrap();
        assert!(other.headers().get("x-k").is_none());
        let relative = get(r#""files/1""#).unwrap();
        assert_eq!(relative.uri(), "https://api.example/files/1?a=b+c&n=1");
        assert_eq!(relative.method(), Method::GET);
    }

    #[test]
    fn targets_only_the_model_decides_are_built_once_per_model() {
        let mut problems = Problems::default();
        let plan = RequestPlan::compile(
            Step::Submit,
            &mut problems.at("s"),
            "post",
            r#""/v1/\($upstream_model)/tasks""#,
            &Some("{kind: $kind}".into()),
        )
        .unwrap();
        let build = |model, upstream_model, kind| {
            let vars = JqVars::new(model, upstream_model, kind, None, None);
            let req = plan.build(&origin(), &Val::Null, &vars, None).unwrap();
            (req.uri().to_string(), req.headers().get("x-k").cloned())
        };
        let first = build("a", "up-a", MediaKind::Video);
        assert_eq!(first.0, "https://api.example/v1/up-a/tasks?kind=video");
        assert_eq!(first.1, Some(HeaderValue::from_static("v")));
        assert_eq!(build("a", "up-a", MediaKind::Video), first);
        assert_eq!(
            build("b", "up-b", MediaKind::Image).0,
            "https://api.example/v1/up-b/tasks?kind=image"
        );
        // One model name, another upstream model or kind: another target.
        assert_eq!(
            build("a", "up-c", MediaKind::Video).0,
            "https://api.example/v1/up-c/tasks?kind=video"
        );
        assert_eq!(
            build("a", "up-a", MediaKind::Image).0,
            "https://api.example/v1/up-a/tasks?kind=image"
        );
        assert_eq!(plan.built.as_ref().unwrap().len(), 4);

        // A path that reads the request is built for each.
        let mut problems = Problems::default();
        let per_request = RequestPlan::compile(
            Step::Submit,
            &mut problems.at("s"),
            "post",
            r#""/v1/\(.route)""#,
            &None,
        )
        .unwrap();
        assert!(per_request.built.is_none());
        let vars = JqVars::new("a", "up-a", MediaKind::Video, None, None);
        for route in ["x", "y"] {
            let input = crate::providers::jq::from_json(&serde_json::json!({"route": route}));
            let req = per_request.build(&origin(), &input, &vars, None).unwrap();
            assert_eq!(
                req.uri().to_string(),
                format!("https://api.example/v1/{route}")
            );
        }
    }

    #[test]
    fn unusable_paths_are_upstream_errors_never_panics() {
        for (code, says) in [
            (r#""/bad path\u0000""#, "invalid URL"),
            ("42", "not a string"),
            (r#""http://169.254.169.254/latest""#, "private network"),
            (r#""x" | .a"#, "failed"),
            (
                r#"{"a": "a value far longer than sixteen characters"}"#,
                "gave {\"a\":\"…\"}",
            ),
        ] {
            let UpstreamError::Failed { step, what } = get(code).unwrap_err() else {
                panic!("{code}: not a failed step");
            };
            assert_eq!(step, "query", "{code}");
            assert!(what.contains(says), "{code}: {what}");
            assert!(what.contains("`query.path`"), "{code}: {what}");
        }
    }

    #[test]
    fn bad_methods_and_programs_name_their_keys() {
        let mut problems = Problems::default();
        let plan = RequestPlan::compile(
            Step::Submit,
            &mut problems.at("providers.p.submit"),
            "NOT A METHOD",
            ".[",
            &None,
        );
        assert!(plan.is_none());
        let e = problems.into_error(std::path::Path::new("r.toml"));
        let keys: Vec<&str> = e.problems.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            ["providers.p.submit.method", "providers.p.submit.path"]
        );
    }
}
