//! Providers: an upstream API described entirely by routes.toml.
//!
//! A provider is an [`origin`] (base URL and the headers that go only there), timeouts,
//! a pooled [`client`] and one [`plan`] per step, each built from jq programs ([`jq`]):
//! [`submit`] (create a task), [`query`] (its status, read by [`status`], with the
//! optional result request) and [`content`] (downloads that need our key). [`answer`]
//! is the one place an upstream answer becomes success or an error of the catalogue,
//! and decides whether a failed submit may fail over; [`redact`] cleans what is passed
//! on to clients. docs/providers.md describes every key, the failover rule and the
//! error mapping.

mod answer;
mod by_model;
mod cancel;
mod content;
pub mod document;
mod error;
pub mod jq;
mod plan;
mod query;
pub mod redact;
pub mod status;
mod submit;

pub use self::answer::{Refusal, Step};
pub use self::cancel::Canceled;
pub use self::error::UpstreamError;
pub use self::query::Queried;
pub use self::submit::{Accepted, SubmitError};
pub use crate::outbound::{CallError, UpstreamClient};

use std::path::Path;
use std::time::Duration;

use http::HeaderMap;
use http::header::{HeaderName, HeaderValue};
use prometheus_client::metrics::counter::Counter;

use self::cancel::CancelPlan;
use self::content::ContentPlan;
use self::jq::JqVars;
use self::query::{QueryPlan, ResultPlan};
use self::redact::Redactor;
use self::submit::SubmitPlan;
use crate::config::{AuthConfig, ProviderConfig, Scope, SecretSource};
use crate::outbound::Origin;
use crate::tasks::MediaKind;

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
    origin: Origin,
    submit_timeout: Duration,
    query_timeout: Duration,
    poll_interval: Duration,
    poll_max_in_flight: usize,
    client: UpstreamClient,
    submit: SubmitPlan,
    query: QueryPlan,
    result: Option<ResultPlan>,
    content: Option<ContentPlan>,
    cancel: Option<CancelPlan>,
    redactor: Redactor,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The origin's headers hold our secret: never printed.
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("base", &self.origin.base)
            .finish_non_exhaustive()
    }
}

impl Provider {
    /// Compile a provider block. `base_url` is the configured one, or the resolved
    /// address of the built-in simulator; `unmapped` counts unknown status words.
    /// Problems are recorded under `at` (`providers.NAME`).
    pub fn compile(
        name: &str,
        cfg: &ProviderConfig,
        base_url: &str,
        dir: &Path,
        at: &mut Scope,
        unmapped: &Counter,
    ) -> Option<Self> {
        let before = at.count();
        let mut headers = header_map(at, "headers", &cfg.headers);
        let secret = cfg
            .auth
            .as_ref()
            .and_then(|auth| auth_header(at, auth, dir, &mut headers));
        let networks = private_networks(at, &cfg.allow_private_networks);
        let origin = at
            .check("base_url", Origin::parse(base_url, headers))
            .map(|o| o.allow_private_networks(networks));
        let client = compile_client(cfg, dir, origin.as_ref(), at);
        // The tracker makes a semaphore of this size; tokio's has a maximum.
        if cfg.poll_max_in_flight > tokio::sync::Semaphore::MAX_PERMITS {
            at.push("poll_max_in_flight", "must not be absurdly large");
        }
        let submit = SubmitPlan::compile(&cfg.submit, &mut at.at("submit"));
        let query = QueryPlan::compile(&cfg.query, &mut at.at("query"), unmapped);
        let result = cfg
            .result
            .as_ref()
            .map(|c| ResultPlan::compile(c, &mut at.at("result")));
        let content = cfg
            .content
            .as_ref()
            .map(|c| ContentPlan::compile(c, &mut at.at("content")));
        let cancel = cfg
            .cancel
            .as_ref()
            .map(|c| CancelPlan::compile(c, &mut at.at("cancel")));
        if at.count() != before {
            return None;
        }
        let origin = origin?;
        let redactor = Redactor::new(
            cfg.redact
                .iter()
                .cloned()
                .chain([origin.host().to_string(), name.to_string()]),
            secret,
        );
        Some(Self {
            name: name.to_string(),
            origin,
            submit_timeout: Duration::from_millis(cfg.submit_timeout_ms),
            query_timeout: Duration::from_millis(cfg.query_timeout_ms),
            poll_interval: Duration::from_millis(cfg.poll_interval_ms.max(1)),
            poll_max_in_flight: cfg.poll_max_in_flight.max(1),
            client: client?,
            submit: submit?,
            query: query?,
            result: result.map_or(Some(None), |r| r.map(Some))?,
            content: content.map_or(Some(None), |c| c.map(Some))?,
            cancel: cancel.map_or(Some(None), |c| c.map(Some))?,
            redactor,
        })
    }

    /// The tracker's first interval between status requests of one task.
    pub fn poll_interval(&self) -> Duration {
        self.poll_interval
    }

    /// The tracker's status requests to this provider in flight at most.
    pub fn poll_max_in_flight(&self) -> usize {
        self.poll_max_in_flight
    }

    /// An upstream word (a task id, a status) as the log may show it: cleaned of what
    /// identifies the provider and cut short.
    pub fn for_log(&self, word: &str) -> String {
        self.redactor.for_log(word)
    }

    /// `e` with its text cleaned by the provider's redactor: for errors that carry what
    /// a program made of an upstream answer.
    fn cleaned(&self, e: UpstreamError) -> UpstreamError {
        e.cleaned(|text| self.redactor.clean(text))
    }

    /// How long a submit may take: after that, its outcome is unknown.
    pub fn submit_timeout(&self) -> Duration {
        self.submit_timeout
    }

    /// Whether completed tasks are served through the gateway's content URL, and the
    /// configured public base URL of that URL, if any.
    pub fn content_url_base(&self) -> Option<Option<&str>> {
        self.content.as_ref().map(ContentPlan::public_base_url)
    }
}

/// The listed private networks; each one that does not parse is a problem.
fn private_networks(at: &mut Scope, listed: &[String]) -> Vec<crate::config::Network> {
    listed
        .iter()
        .filter_map(|n| at.check("allow_private_networks", n.parse()))
        .collect()
}

/// The pooled client with the provider's connect timeout and CA file, connecting where
/// its origin's policy allows.
fn compile_client(
    cfg: &ProviderConfig,
    dir: &Path,
    origin: Option<&Origin>,
    at: &mut Scope,
) -> Option<UpstreamClient> {
    if cfg.connect_timeout_ms >= cfg.submit_timeout_ms {
        // Otherwise an unreachable provider looks like a slow one: no failover.
        at.push(
            "connect_timeout_ms",
            "must be shorter than submit_timeout_ms",
        );
    }
    if cfg.max_answer_bytes == 0 {
        at.push("max_answer_bytes", "must be greater than 0");
    }
    let ca_file = cfg.ca_file.as_ref().map(|f| dir.join(f));
    let connect_timeout = Duration::from_millis(cfg.connect_timeout_ms);
    let reach = origin?.reach();
    at.check(
        "ca_file",
        UpstreamClient::new(
            connect_timeout,
            ca_file.as_deref(),
            reach,
            cfg.max_answer_bytes,
        ),
    )
}

/// Static headers of a block; invalid ones are problems under `key`.
fn header_map(
    at: &mut Scope,
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
            _ => at.push(&format!("{key}.{name}"), "not a valid HTTP header"),
        }
    }
    map
}

/// Our secret for the provider, placed in `headers` as configured; the secret itself
/// is returned so that messages can be cleaned of it.
fn auth_header(
    at: &mut Scope,
    auth: &AuthConfig,
    dir: &Path,
    headers: &mut HeaderMap,
) -> Option<String> {
    let source = SecretSource {
        env: auth.secret_env.as_deref(),
        file: auth.secret_file.as_deref(),
    };
    let Some(secret) = at.check("auth", source.read(dir))? else {
        at.push("auth", "set secret_env or secret_file");
        return None;
    };
    let value = if auth.scheme.is_empty() {
        secret.clone()
    } else {
        format!("{} {secret}", auth.scheme)
    };
    match (
        HeaderName::try_from(auth.header.as_str()),
        HeaderValue::try_from(value),
    ) {
        (Ok(name), Ok(mut value)) => {
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        _ => at.push(
            "auth",
            "header name or secret is not valid in an HTTP header",
        ),
    }
    Some(secret)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Problems;

    fn compile(toml_text: &str) -> (Option<Provider>, Vec<(String, String)>) {
        let cfg: ProviderConfig = toml::from_str(toml_text).unwrap();
        let mut problems = Problems::default();
        let p = Provider::compile(
            "p",
            &cfg,
            &cfg.base_url,
            Path::new("."),
            &mut problems.at("providers.p"),
            &Counter::default(),
        );
        (p, problems.into_error(Path::new("r")).problems)
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
        let (_, problems) = compile(&MINIMAL.replace(
            "base_url = \"https://api.example\"",
            "base_url = \"ftp://x\"\nheaders = { \"bad header\" = \"v\" }\nauth = { secret_env = \"MEDIAGATE_TEST_UNSET_VAR\" }",
        ));
        let keys: Vec<&str> = problems.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "providers.p.headers.bad header",
                "providers.p.auth",
                "providers.p.base_url"
            ]
        );
    }
}
