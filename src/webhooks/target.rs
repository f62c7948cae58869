//! Which callback URLs are accepted: absolute `https://` URLs (plain `http://` only to
//! the hosts `[webhooks] allow_http_hosts` names), without userinfo, and never into a
//! private network unless `[webhooks] allow_private_networks` lets them — the rule of
//! upstream links ([`Reach`]). The host as written is judged when the URL is given
//! (routes.toml or a submit), its resolved addresses at submit and again at every
//! delivery, by the connector, so DNS rebinding gains nothing.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::Uri;
use tokio::sync::Semaphore;

use crate::config::{Network, WebhooksConfig};
use crate::outbound::Reach;

/// Longest callback URL accepted.
pub const MAX_URL_LEN: usize = 2_048;
/// How long a submit waits for the callback host's addresses.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// Lookups of callback hosts under way at once, in the process. A lookup runs on a
/// blocking thread until the system resolver gives up (tens of seconds for a name
/// whose servers never answer), whether or not the submit still waits: without a
/// bound, a key sending such names could fill tokio's blocking pool, which the
/// ledger's and storage's file work shares.
const MAX_LOOKUPS: usize = 32;

/// The places of [`MAX_LOOKUPS`], shared by every configuration a reload makes.
fn lookups() -> Arc<Semaphore> {
    static LOOKUPS: OnceLock<Arc<Semaphore>> = OnceLock::new();
    LOOKUPS
        .get_or_init(|| Arc::new(Semaphore::new(MAX_LOOKUPS)))
        .clone()
}

/// The callback URL rule of one configuration.
#[derive(Debug, Clone)]
pub struct CallbackPolicy {
    allow_http_hosts: Vec<String>,
    reach: Arc<Reach>,
    lookups: Arc<Semaphore>,
}

impl CallbackPolicy {
    /// From `[webhooks]`; errors name the network that does not parse.
    pub fn new(config: &WebhooksConfig) -> Result<Self, String> {
        let networks = config
            .allow_private_networks
            .iter()
            .map(|n| n.parse::<Network>())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            allow_http_hosts: config
                .allow_http_hosts
                .iter()
                .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
                .collect(),
            reach: Arc::new(Reach::without_origin(networks)),
            lookups: lookups(),
        })
    }

    /// The URL as written. The message says what is wrong, for a 400 or a config
    /// problem.
    pub fn check(&self, url: &str) -> Result<Uri, String> {
        if url.len() > MAX_URL_LEN {
            return Err(format!("must be at most {MAX_URL_LEN} characters"));
        }
        let uri: Uri = url
            .parse()
            .map_err(|_| "must be an absolute https:// URL".to_string())?;
        let host = match uri.authority() {
            Some(a) if a.as_str().contains('@') => {
                return Err("must not carry a user name or password".into());
            }
            Some(_) => uri.host().unwrap_or_default(),
            None => return Err("must be an absolute https:// URL".into()),
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") if self.allow_http_hosts.contains(&host) => {}
            Some("http") => {
                return Err(format!(
                    "must use https:// (plain http is allowed only to the hosts in [webhooks] allow_http_hosts, and `{host}` is not one)"
                ));
            }
            _ => return Err("must be an absolute https:// URL".into()),
        }
        if !self.reach.may_reach(&uri) {
            return Err("must not point into a private network".into());
        }
        Ok(uri)
    }

    /// The host's addresses, looked up now: refused when it resolves only into private
    /// networks, or not at all.
    pub async fn check_resolved(&self, uri: &Uri) -> Result<(), String> {
        let host = uri.host().unwrap_or_default();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.parse::<std::net::IpAddr>().is_ok() {
            return Ok(()); // judged as written by `check`
        }
        let port = uri.port_u16().unwrap_or(443);
        let (host, lookups) = (host.to_string(), self.lookups.clone());
        // The place is held by the lookup itself, in a task of its own, until the
        // resolver answers: a submit that stops waiting does not free it early.
        let lookup = async move {
            let place = lookups.acquire_owned().await.ok()?;
            let resolved = tokio::spawn(async move {
                let addrs = tokio::net::lookup_host((host.as_str(), port)).await;
                drop(place);
                addrs.map(Iterator::collect::<Vec<_>>).ok()
            });
            resolved.await.ok().flatten()
        };
        let Ok(Some(addrs)) = tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await else {
            return Err("its host cannot be resolved".into());
        };
        if addrs.iter().any(|a| self.reach.allows(a.ip())) {
            Ok(())
        } else {
            Err("must not point into a private network (its host resolves to one)".into())
        }
    }

    /// The rule, for the connector that delivers.
    pub fn reach(&self) -> Arc<Reach> {
        self.reach.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(http: &[&str], private: &[&str]) -> CallbackPolicy {
        CallbackPolicy::new(&WebhooksConfig {
            allow_http_hosts: http.iter().map(|s| s.to_string()).collect(),
            allow_private_networks: private.iter().map(|s| s.to_string()).collect(),
            ..WebhooksConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn only_public_https_urls_by_default() {
        let p = policy(&[], &[]);
        assert!(p.check("https://hooks.example.com/mediagate?x=1").is_ok());
        for bad in [
            "http://hooks.example.com/x",
            "ftp://hooks.example.com/x",
            "/relative",
            "hooks.example.com/x",
            "https://user:pw@hooks.example.com/x",
            "https://127.0.0.1/x",
            "https://10.1.2.3/x",
            "https://169.254.169.254/latest",
            "https://[::1]/x",
            "https://[fd00::1]/x",
            "https://localhost./x",
        ] {
            assert!(p.check(bad).is_err(), "{bad}");
        }
        let long = format!("https://hooks.example.com/{}", "a".repeat(MAX_URL_LEN));
        assert!(p.check(&long).unwrap_err().contains("2048"));
    }

    #[test]
    fn configured_exceptions_open_http_and_private_networks() {
        let p = policy(&["127.0.0.1", "Receiver.Local."], &["127.0.0.0/8"]);
        assert!(p.check("http://127.0.0.1:9000/hook").is_ok());
        // A name: allowed as written, its addresses are judged when resolved.
        assert!(p.check("http://receiver.local/hook").is_ok());
        assert!(p.check("http://other.example/hook").is_err());
        assert!(p.check("https://10.0.0.1/x").is_err());
    }

    /// With every place for lookups taken (by lookups the resolver has not answered),
    /// a submit's callback host is refused when its wait is over, and no further
    /// lookup is started.
    #[tokio::test(start_paused = true)]
    async fn lookups_under_way_are_bounded() {
        let mut p = policy(&[], &["127.0.0.0/8", "::1"]);
        p.lookups = Arc::new(Semaphore::new(1));
        let local: Uri = "https://localhost/x".parse().unwrap();
        let taken = p.lookups.clone().acquire_owned().await.unwrap();
        let started = tokio::time::Instant::now();
        assert_eq!(
            p.check_resolved(&local).await,
            Err("its host cannot be resolved".to_string())
        );
        assert_eq!(started.elapsed(), RESOLVE_TIMEOUT);
        drop(taken);
        assert!(p.check_resolved(&local).await.is_ok());
        assert_eq!(p.lookups.available_permits(), 1, "the place is given back");
    }

    #[tokio::test]
    async fn names_are_judged_by_their_addresses() {
        let p = policy(&[], &[]);
        let uri = p.check("https://localhost.localdomain.invalid/x").unwrap();
        assert!(p.check_resolved(&uri).await.is_err());
        // Numeric forms the resolver reads as addresses (169.254.169.254, 127.0.0.1).
        for numeric in ["https://2852039166/x", "https://0x7f000001/x"] {
            let uri = p.check(numeric).unwrap();
            assert!(p.check_resolved(&uri).await.is_err(), "{numeric}");
        }
        let open = policy(&[], &["127.0.0.0/8", "::1"]);
        let local = "https://localhost/x".parse().unwrap();
        assert!(open.check_resolved(&local).await.is_ok());
        assert!(p.check("https://localhost/x").is_err());
    }
}
