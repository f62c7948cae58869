//! Providers: an upstream API described entirely by routes.toml.
//!
//! A provider is a base URL, an auth placement, static headers, timeouts and jq
//! programs ([`transform`]) that build its requests and read its answers. The
//! [`client`] does the HTTP. This module compiles a provider block and builds
//! requests; one module per phase decides what the answers mean: [`submit`] (in
//! particular whether a failed submit certainly created no task: only then may the
//! caller fail over, a user must never pay twice), [`query`] (with the optional result
//! request) and [`content`] (downloads that need our key).
//! docs/providers.md describes every key, the failover rule and the error mapping.

pub mod client;
pub mod content;
pub mod query;
pub mod submit;
pub mod transform;

pub use self::submit::{SubmitError, Submitted};

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::Full;
use jaq_json::Val;
use serde_json::Value;

use self::client::{CallError, UpstreamClient};
use self::transform::{Jq, JqVars};
use crate::config::{
    ContentConfig, ProviderConfig, QueryConfig, ResultConfig, SubmitConfig, read_secret,
};
use crate::error::ApiError;
use crate::normalize::{Redactor, StatusReader};
use crate::task::MediaKind;

/// Tried when a provider names no `error_message` program: the usual places.
const DEFAULT_ERROR_MESSAGE: &str = r#"if type == "object" then (.error.message? // .message? // .msg? // .detail? // .error? // .base_resp.status_msg?) else null end | if type == "string" then . else null end"#;

/// Which model a call is for, as the jq programs see it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub model: &'a str,
    pub upstream_model: &'a str,
    pub kind: MediaKind,
}

impl Call<'_> {
    /// The jq variables of a call; `upstream_id` once the task exists.
    fn vars(&self, upstream_id: Option<&str>) -> JqVars {
        JqVars::new(
            self.model,
            self.upstream_model,
            self.kind,
            upstream_id,
            None,
        )
    }
}

/// A compiled provider.
pub struct Provider {
    pub name: String,
    base: String,
    /// `base` parsed once: scheme and authority decide where our headers may go.
    origin: http::Uri,
    headers: HeaderMap,
    submit_headers: HeaderMap,
    submit_timeout: Duration,
    query_timeout: Duration,
    client: UpstreamClient,
    submit: SubmitPlan,
    query: QueryPlan,
    result: Option<ResultPlan>,
    content: Option<ContentPlan>,
    redactor: Redactor,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Headers hold our secret: never printed.
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

struct SubmitPlan {
    method: Method,
    path: Jq,
    query: Option<Jq>,
    body: Option<Jq>,
    success: Option<Jq>,
    refusal: Option<Jq>,
    id: Jq,
    status: Option<Jq>,
    error_message: Jq,
}

struct QueryPlan {
    method: Method,
    path: Jq,
    query: Option<Jq>,
    reader: StatusReader,
}

/// The second request of a completed task: `.` is the status answer.
struct ResultPlan {
    method: Method,
    path: Jq,
    query: Option<Jq>,
    urls: Jq,
}

/// The content endpoint that needs our key: `.` is null, `$id` the upstream id.
struct ContentPlan {
    method: Method,
    path: Jq,
    query: Option<Jq>,
    timeout: Duration,
    public_base_url: Option<String>,
}

/// Collects every problem of a provider block, each with its key path.
#[derive(Default)]
pub struct Problems(pub Vec<(String, String)>);

impl Problems {
    fn jq(&mut self, key: String, code: &str) -> Option<Jq> {
        Jq::compile(code)
            .map_err(|e| self.0.push((key, format!("jq: {e}"))))
            .ok()
    }
    fn opt_jq(&mut self, key: String, code: &Option<String>) -> Option<Option<Jq>> {
        match code {
            None => Some(None),
            Some(code) => self.jq(key, code).map(Some),
        }
    }
    pub fn push(&mut self, key: String, msg: impl Into<String>) {
        self.0.push((key, msg.into()));
    }
}

fn header_map(
    problems: &mut Problems,
    key: &str,
    headers: &std::collections::BTreeMap<String, String>,
) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        match (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            (Ok(n), Ok(v)) => {
                map.insert(n, v);
            }
            _ => problems.push(format!("{key}.{name}"), "not a valid HTTP header"),
        }
    }
    map
}

fn method(problems: &mut Problems, key: String, m: &str) -> Method {
    Method::from_bytes(m.to_ascii_uppercase().as_bytes()).unwrap_or_else(|_| {
        problems.push(key, format!("`{m}` is not an HTTP method"));
        Method::GET
    })
}

impl Provider {
    /// Compile a provider block. `base_url` is the configured one, or the resolved
    /// address of the built-in simulator. Problems are reported with their key path.
    pub fn compile(
        name: &str,
        cfg: &ProviderConfig,
        base_url: &str,
        dir: &Path,
        problems: &mut Problems,
    ) -> Option<Self> {
        let key = |k: &str| format!("providers.{name}.{k}");
        let before = problems.0.len();

        let base = base_url.trim_end_matches('/').to_string();
        let origin = match base.parse::<http::Uri>() {
            Ok(uri)
                if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() =>
            {
                uri
            }
            _ => {
                problems.push(
                    key("base_url"),
                    "must be an http:// or https:// URL, or builtin:simulator",
                );
                http::Uri::default()
            }
        };
        let host = origin.host().unwrap_or_default().to_string();

        let mut headers = header_map(problems, &key("headers"), &cfg.headers);
        let submit_headers = header_map(problems, &key("submit.headers"), &cfg.submit.headers);
        let mut secret_words = Vec::new();
        if let Some(auth) = &cfg.auth {
            match read_secret(auth.secret_env.as_deref(), auth.secret_file.as_deref(), dir) {
                Ok(Some(secret)) => {
                    let value = if auth.scheme.is_empty() {
                        secret.clone()
                    } else {
                        format!("{} {secret}", auth.scheme)
                    };
                    match (
                        HeaderName::try_from(auth.header.as_str()),
                        HeaderValue::try_from(value),
                    ) {
                        (Ok(n), Ok(mut v)) => {
                            v.set_sensitive(true);
                            headers.insert(n, v);
                        }
                        _ => problems.push(
                            key("auth"),
                            "header name or secret is not valid in an HTTP header",
                        ),
                    }
                    secret_words.push(secret);
                }
                Ok(None) => problems.push(key("auth"), "set secret_env or secret_file"),
                Err(e) => problems.push(key("auth"), e),
            }
        }

        if cfg.connect_timeout_ms >= cfg.submit_timeout_ms {
            // Otherwise an unreachable provider looks like a slow one: no failover.
            problems.push(
                key("connect_timeout_ms"),
                "must be shorter than submit_timeout_ms",
            );
        }
        let client = UpstreamClient::new(
            Duration::from_millis(cfg.connect_timeout_ms),
            cfg.ca_file.as_ref().map(|f| dir.join(f)).as_deref(),
        )
        .map_err(|e| problems.push(key("ca_file"), e))
        .ok();
        let submit = Self::compile_submit(name, &cfg.submit, problems);
        let query = Self::compile_query(name, &cfg.query, problems);
        let result = cfg
            .result
            .as_ref()
            .map(|c| Self::compile_result(name, c, problems));
        let content = cfg
            .content
            .as_ref()
            .map(|c| Self::compile_content(name, c, problems));

        if problems.0.len() != before {
            return None;
        }
        let redactor = Redactor::new(
            cfg.redact
                .iter()
                .cloned()
                .chain([host, name.to_string()])
                .chain(secret_words),
        );
        Some(Self {
            name: name.to_string(),
            base,
            origin,
            headers,
            submit_headers,
            submit_timeout: Duration::from_millis(cfg.submit_timeout_ms),
            query_timeout: Duration::from_millis(cfg.query_timeout_ms),
            client: client?,
            submit: submit?,
            query: query?,
            result: result.map_or(Some(None), |r| r.map(Some))?,
            content: content.map_or(Some(None), |c| c.map(Some))?,
            redactor,
        })
    }

    fn compile_submit(name: &str, c: &SubmitConfig, p: &mut Problems) -> Option<SubmitPlan> {
        let key = |k: &str| format!("providers.{name}.submit.{k}");
        let method = method(p, key("method"), &c.method);
        let path = p.jq(key("path"), &c.path);
        let query = p.opt_jq(key("query"), &c.query);
        let body = p.opt_jq(key("body"), &c.body);
        let success = p.opt_jq(key("success"), &c.success);
        let refusal = p.opt_jq(key("refusal"), &c.refusal);
        let id = p.jq(key("id"), &c.id);
        let status = p.opt_jq(key("status"), &c.status);
        let error_message = p.jq(
            key("error_message"),
            c.error_message.as_deref().unwrap_or(DEFAULT_ERROR_MESSAGE),
        );
        Some(SubmitPlan {
            method,
            path: path?,
            query: query?,
            body: body?,
            success: success?,
            refusal: refusal?,
            id: id?,
            status: status?,
            error_message: error_message?,
        })
    }

    fn compile_query(name: &str, c: &QueryConfig, p: &mut Problems) -> Option<QueryPlan> {
        let key = |k: &str| format!("providers.{name}.query.{k}");
        let method = method(p, key("method"), &c.method);
        let path = p.jq(key("path"), &c.path);
        let query = p.opt_jq(key("query"), &c.query);
        let status = p.jq(key("status"), &c.status);
        let progress = p.opt_jq(key("progress"), &c.progress);
        let urls = p.opt_jq(key("urls"), &c.urls);
        let error_code = p.opt_jq(key("error_code"), &c.error_code);
        let error_message = p.opt_jq(key("error_message"), &c.error_message);
        if c.status_map.is_empty() {
            p.push(
                key("status_map"),
                "must map every upstream status word to one of ours",
            );
        }
        Some(QueryPlan {
            method,
            path: path?,
            query: query?,
            reader: StatusReader {
                status: status?,
                status_map: c
                    .status_map
                    .iter()
                    .map(|(k, v)| (k.clone(), *v))
                    .collect::<HashMap<_, _>>(),
                progress: progress?,
                urls: urls?,
                error_code: error_code?,
                error_message: error_message?,
            },
        })
    }

    fn compile_result(name: &str, c: &ResultConfig, p: &mut Problems) -> Option<ResultPlan> {
        let key = |k: &str| format!("providers.{name}.result.{k}");
        let method = method(p, key("method"), &c.method);
        let path = p.jq(key("path"), &c.path);
        let query = p.opt_jq(key("query"), &c.query);
        let urls = p.jq(key("urls"), &c.urls);
        Some(ResultPlan {
            method,
            path: path?,
            query: query?,
            urls: urls?,
        })
    }

    fn compile_content(name: &str, c: &ContentConfig, p: &mut Problems) -> Option<ContentPlan> {
        let key = |k: &str| format!("providers.{name}.content.{k}");
        let method = method(p, key("method"), &c.method);
        let path = p.jq(key("path"), &c.path);
        let query = p.opt_jq(key("query"), &c.query);
        let public_base_url = c
            .public_base_url
            .as_ref()
            .map(|u| u.trim_end_matches('/').to_string());
        if let Some(url) = &public_base_url {
            let ok = url.parse::<http::Uri>().is_ok_and(|u| {
                matches!(u.scheme_str(), Some("http" | "https"))
                    && u.host().is_some()
                    && u.query().is_none()
            });
            if !ok {
                p.push(
                    key("public_base_url"),
                    "must be an http:// or https:// URL without a query",
                );
            }
        }
        Some(ContentPlan {
            method,
            path: path?,
            query: query?,
            timeout: Duration::from_millis(c.timeout_ms),
            public_base_url,
        })
    }

    /// Whether completed tasks are served through the gateway's content URL, and the
    /// configured public base URL of that URL, if any.
    pub fn content_url_base(&self) -> Option<Option<&str>> {
        self.content.as_ref().map(|c| c.public_base_url.as_deref())
    }

    /// Build an upstream request from the step's programs.
    #[allow(clippy::too_many_arguments)]
    fn build(
        &self,
        step: &str,
        method: &Method,
        path: &Jq,
        query: Option<&Jq>,
        body: Option<Vec<u8>>,
        extra: Option<&HeaderMap>,
        input: &Val,
        vars: &JqVars,
    ) -> Result<Request<Full<Bytes>>, ApiError> {
        let broken = |what: String| ApiError::upstream_failed(step, what);
        let path = match path.json(input.clone(), vars) {
            Ok(Value::String(p)) => p,
            Ok(other) => return Err(broken(format!("`{step}.path` gave {other}, not a string"))),
            Err(e) => return Err(broken(format!("`{step}.path` failed: {e}"))),
        };
        // An absolute URL (a result link of the upstream) is used as it is; our
        // headers then go only to the provider's own origin.
        let absolute = path.starts_with("https://") || path.starts_with("http://");
        let mut uri = if absolute {
            String::new()
        } else {
            self.base.clone()
        };
        if !absolute && !path.starts_with('/') {
            uri.push('/');
        }
        uri.push_str(&path);
        if let Some(query) = query {
            match query.json(input.clone(), vars) {
                Ok(Value::Object(pairs)) => {
                    let mut qs = form_urlencoded::Serializer::new(String::new());
                    for (k, v) in &pairs {
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
                Ok(other) => {
                    return Err(broken(format!(
                        "`{step}.query` gave {other}, not an object"
                    )));
                }
                Err(e) => return Err(broken(format!("`{step}.query` failed: {e}"))),
            }
        }
        let Ok(target) = uri.parse::<http::Uri>() else {
            return Err(broken(format!("`{step}.path` gave an invalid URL")));
        };
        if absolute && !self.may_reach(&target) {
            return Err(broken(format!(
                "`{step}.path` points into a private network; refused"
            )));
        }
        let mut builder = Request::builder()
            .method(method.clone())
            .uri(target.clone());
        let Some(headers) = builder.headers_mut() else {
            return Err(broken(format!("`{step}.path` gave an invalid URL")));
        };
        if !absolute || self.same_origin(&target) {
            headers.extend(self.headers.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if let Some(extra) = extra {
            headers.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if body.is_some() {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        builder
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| broken(format!("built an invalid request to `{path}`: {e}")))
    }

    /// Whether `to` is on the provider's own scheme, host and port.
    fn same_origin(&self, to: &http::Uri) -> bool {
        self.origin.scheme() == to.scheme() && self.origin.authority() == to.authority()
    }

    /// Whether a link or redirect the upstream handed us may be followed. An upstream
    /// on the public internet must not steer the gateway into its own network (cloud
    /// metadata, admin ports): loopback, private and link-local addresses are only
    /// reachable from a provider that is itself on one.
    fn may_reach(&self, to: &http::Uri) -> bool {
        self.same_origin(to) || !is_internal(to.host()) || is_internal(self.origin.host())
    }

    /// A query, result or content call that got no answer. (A submit is judged
    /// differently: there the kind of failure decides failover.)
    fn unanswered(&self, step: &str, e: CallError) -> ApiError {
        match e {
            CallError::TimedOut => ApiError::upstream_timeout(step),
            CallError::Unreached(e) | CallError::Broken(e) => {
                tracing::warn!(provider = %self.name, step, error = %e, "upstream call failed");
                ApiError::upstream_failed(step, "no answer")
            }
        }
    }

    /// Map an unsuccessful HTTP status of a query, result or content call.
    fn check_answer(
        &self,
        step: &str,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Result<(), ApiError> {
        match status {
            s if s.is_success() => Ok(()),
            // The upstream no longer knows the task: same answer as an unknown id.
            StatusCode::NOT_FOUND | StatusCode::GONE => Err(ApiError::task_not_found()),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                tracing::error!(provider = %self.name, %status, step, "provider refused our credentials");
                Err(ApiError::upstream_auth())
            }
            StatusCode::TOO_MANY_REQUESTS => {
                Err(ApiError::upstream_rate_limited(retry_after(headers)))
            }
            s => Err(ApiError::upstream_failed(
                step,
                format!("answered HTTP {}", s.as_u16()),
            )),
        }
    }
}

/// A host that names this machine or a private network: `localhost`, loopback,
/// private (RFC 1918, unique-local), link-local or unspecified addresses. Names are
/// judged as written; a public name that resolves to a private address is not caught.
fn is_internal(host: Option<&str>) -> bool {
    use std::net::IpAddr;
    let Some(host) = host else { return true };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") || host.to_ascii_lowercase().ends_with(".localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => {
            ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified()
        }
        Ok(IpAddr::V6(ip)) => {
            let first = ip.segments()[0];
            ip.is_loopback()
                || ip.is_unspecified()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link local
                || ip.to_ipv4_mapped().is_some_and(|v4| is_internal(Some(&v4.to_string())))
        }
        Err(_) => false,
    }
}

/// `Retry-After` in seconds from an upstream answer (HTTP dates are ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::content::redirect_target;
    use super::*;

    fn headers(name: http::HeaderName, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn redirects_resolve_absolute_and_same_origin_paths_only() {
        let from: http::Uri = "https://api.example/v1/files/a:download?alt=media"
            .parse()
            .unwrap();
        let to = |loc: &str| redirect_target(&from, &headers(http::header::LOCATION, loc));
        assert_eq!(
            to("https://storage.example/b/a.mp4?sig=1").unwrap(),
            "https://storage.example/b/a.mp4?sig=1"
        );
        assert_eq!(to("/v1/blobs/a").unwrap(), "https://api.example/v1/blobs/a");
        assert!(to("ftp://x/y").is_none());
        assert!(to("//other.example/x").is_none());
        assert!(to("relative/path").is_none());
        assert!(redirect_target(&from, &HeaderMap::new()).is_none());
    }

    #[test]
    fn retry_after_takes_seconds_only() {
        let h = |v: &str| headers(http::header::RETRY_AFTER, v);
        assert_eq!(retry_after(&h("7")), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(&h(" 12 ")), Some(Duration::from_secs(12)));
        assert_eq!(retry_after(&h("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    fn compile(toml_text: &str) -> (Option<Provider>, Vec<(String, String)>) {
        let cfg: ProviderConfig = toml::from_str(toml_text).unwrap();
        let mut problems = Problems::default();
        let p = Provider::compile("p", &cfg, &cfg.base_url, Path::new("."), &mut problems);
        (p, problems.0)
    }

    const MINIMAL: &str = r#"
base_url = "https://api.example"
[submit]
path = '"/t"'
id = '.id'
[query]
path = '"/t/\($id)"'
status = '.s'
status_map = { ok = "completed" }
"#;

    #[test]
    fn a_minimal_block_compiles_and_bad_ones_name_their_keys() {
        let (p, problems) = compile(MINIMAL);
        assert!(p.is_some() && problems.is_empty(), "{problems:?}");
        let (p, problems) = compile(&format!(
            "{MINIMAL}\n[result]\npath = '\"/r\"'\nurls = '.['\n[content]\npath = '.urls[0]'\npublic_base_url = \"not a url\"\n"
        ));
        assert!(p.is_none());
        let keys: Vec<&str> = problems.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "providers.p.result.urls",
                "providers.p.content.public_base_url"
            ]
        );
        let (_, problems) = compile(&MINIMAL.replace(
            "base_url = \"https://api.example\"",
            "base_url = \"https://api.example\"\nconnect_timeout_ms = 5000\nsubmit_timeout_ms = 5000",
        ));
        assert_eq!(problems[0].0, "providers.p.connect_timeout_ms");
    }

    /// A GET whose path is the jq program `code`.
    fn get(p: &Provider, code: &str) -> Result<Request<Full<Bytes>>, ApiError> {
        let vars = JqVars::new("m", "m", MediaKind::Video, Some("1"), None);
        let jq = Jq::compile(code).unwrap();
        p.build(
            "query",
            &Method::GET,
            &jq,
            None,
            None,
            None,
            &Val::Null,
            &vars,
        )
    }

    #[test]
    fn paths_may_be_absolute_and_keep_our_headers_on_our_origin() {
        let (p, _) = compile(&MINIMAL.replace(
            "base_url = \"https://api.example\"",
            "base_url = \"https://api.example\"\nheaders = { \"x-k\" = \"v\" }",
        ));
        let p = p.unwrap();
        let build = |code: &str| get(&p, code);
        let own = build(r#""https://api.example/files/1""#).unwrap();
        assert_eq!(own.uri(), "https://api.example/files/1");
        assert_eq!(own.headers()["x-k"], "v");
        let other = build(r#""https://cdn.example/files/1""#).unwrap();
        assert!(other.headers().get("x-k").is_none());
        let relative = build(r#""files/1""#).unwrap();
        assert_eq!(relative.uri(), "https://api.example/files/1");
        // An unusable URL is an upstream error, never a panic.
        let e = build(r#""/bad path\u0000""#).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_GATEWAY);
        let e = build("42").unwrap_err();
        assert!(e.message.contains("not a string"), "{}", e.message);
    }

    #[test]
    fn a_public_upstream_cannot_steer_us_into_a_private_network() {
        let (p, _) = compile(MINIMAL);
        let p = p.unwrap();
        let build = |code: &str| get(&p, code);
        for inside in [
            r#""http://169.254.169.254/latest/meta-data""#,
            r#""http://127.0.0.1:9090/metrics""#,
            r#""http://localhost/x""#,
            r#""http://10.0.0.5/x""#,
            r#""http://[::1]/x""#,
            r#""http://[fd00::1]/x""#,
        ] {
            let e = build(inside).unwrap_err();
            assert!(
                e.message.contains("private network"),
                "{inside}: {}",
                e.message
            );
        }
        assert!(build(r#""https://cdn.example/v.mp4""#).is_ok());
        assert!(build(r#""http://8.8.8.8/v.mp4""#).is_ok());

        // A provider that is itself inside may link to its neighbours.
        let (inside, _) = compile(&MINIMAL.replace("https://api.example", "http://10.1.2.3:8000"));
        let inside = inside.unwrap();
        assert!(inside.may_reach(&"http://10.9.9.9/file".parse().unwrap()));
        assert!(!p.may_reach(&"http://192.168.1.1/".parse().unwrap()));
        assert!(p.may_reach(&"https://api.example/own".parse().unwrap()));
    }
}
