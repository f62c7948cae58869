//! Client keys: which key sent a request (Bearer authentication), and what it may use.
//!
//! Keys are kept only as SHA-256 digests; the presented key is hashed once and
//! compared against every configured digest in constant time, so neither the match
//! position nor a partial match shows in the timing.

use std::collections::HashSet;
use std::sync::Arc;

use http::HeaderMap;
use http::header::AUTHORIZATION;
use ring::digest::{SHA256, digest};
use subtle::ConstantTimeEq;

use crate::config::QuotaConfig;
use crate::error::ApiError;
use crate::money::Budget;
use crate::webhooks::WebhookSigner;

/// An authenticated client key.
#[derive(Debug)]
pub struct ApiKey {
    /// Name from routes.toml: shown in logs, owner of the key's tasks.
    pub name: Arc<str>,
    digest: [u8; 32],
    /// Allowed models; `None` means all.
    models: Option<HashSet<String>>,
    /// Daily allowance, enforced at submit through the ledger.
    pub quota: Option<QuotaConfig>,
    /// Submits must carry an `Idempotency-Key`.
    pub require_idempotency_key: bool,
    /// What its tasks may cost per UTC day and month, enforced at submit.
    pub budget: Option<Budget>,
    /// Task answers carry the task's cost.
    pub show_cost: bool,
    /// Where finished tasks are posted when a submit names no `callback_url`.
    pub webhook_url: Option<String>,
    /// Signs this key's webhooks; without it the key cannot ask for any.
    pub webhook_signer: Option<Arc<WebhookSigner>>,
}

impl ApiKey {
    pub fn new(name: &str, digest: [u8; 32], models: Option<HashSet<String>>) -> Self {
        Self {
            name: name.into(),
            digest,
            models,
            quota: None,
            require_idempotency_key: false,
            budget: None,
            show_cost: false,
            webhook_url: None,
            webhook_signer: None,
        }
    }

    /// The key's webhooks: its default URL (already checked) and its secrets.
    pub fn with_webhooks(
        mut self,
        url: Option<String>,
        signer: Option<Arc<WebhookSigner>>,
    ) -> Self {
        self.webhook_url = url;
        self.webhook_signer = signer;
        self
    }

    /// The key's submit policy: its quota and whether it must send `Idempotency-Key`.
    pub fn with_policy(
        mut self,
        quota: Option<QuotaConfig>,
        require_idempotency_key: bool,
    ) -> Self {
        self.quota = quota;
        self.require_idempotency_key = require_idempotency_key;
        self
    }

    /// The key's money: its budget, and whether its task answers show costs.
    pub fn with_money(mut self, budget: Option<Budget>, show_cost: bool) -> Self {
        self.budget = budget;
        self.show_cost = show_cost;
        self
    }

    pub fn may_use(&self, model: &str) -> bool {
        self.models.as_ref().is_none_or(|m| m.contains(model))
    }
}

/// SHA-256 of a key, as stored in routes.toml.
pub fn key_digest(key: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, key.as_bytes()).as_ref());
    out
}

/// All configured client keys.
#[derive(Debug, Default)]
pub struct KeyRing {
    keys: Vec<Arc<ApiKey>>,
}

impl KeyRing {
    pub fn new(keys: Vec<ApiKey>) -> Self {
        Self {
            keys: keys.into_iter().map(Arc::new).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key named `name` in routes.toml.
    pub fn named(&self, name: &str) -> Option<&Arc<ApiKey>> {
        self.keys.iter().find(|k| &*k.name == name)
    }

    /// The key presented in `Authorization: Bearer <key>`.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Arc<ApiKey>, ApiError> {
        let mut sent = headers.get_all(AUTHORIZATION).iter();
        let value = sent.next().ok_or_else(ApiError::missing_key)?;
        if sent.next().is_some() {
            return Err(ApiError::repeated_header("Authorization"));
        }
        let value = value.to_str().map_err(|_| ApiError::invalid_key())?;
        let (scheme, token) = value
            .trim()
            .split_once(' ')
            .ok_or_else(ApiError::invalid_key)?;
        let token = token.trim();
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return Err(ApiError::invalid_key());
        }
        let presented = key_digest(token);
        let mut found: Option<&Arc<ApiKey>> = None;
        for key in &self.keys {
            // No early exit: every digest is compared.
            if bool::from(key.digest.ct_eq(&presented)) {
                found = Some(key);
            }
        }
        found.cloned().ok_or_else(ApiError::invalid_key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ring() -> KeyRing {
        KeyRing::new(vec![
            ApiKey::new("a", key_digest("sk-a"), None),
            ApiKey::new(
                "b",
                key_digest("sk-b"),
                Some(["zeta-5.0".to_string()].into_iter().collect()),
            ),
        ])
    }

    fn auth(value: &'static str) -> Result<Arc<ApiKey>, ApiError> {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_static(value));
        ring().authenticate(&h)
    }

    #[test]
    fn finds_the_key_by_its_secret() {
        assert_eq!(&*auth("Bearer sk-a").unwrap().name, "a");
        assert_eq!(&*auth("bearer  sk-b ").unwrap().name, "b");
    }

    #[test]
    fn refuses_missing_malformed_and_unknown_keys() {
        assert_eq!(
            ring().authenticate(&HeaderMap::new()).unwrap_err().code,
            "missing_api_key"
        );
        for bad in [
            "sk-a",
            "Basic sk-a",
            "Bearer ",
            "Bearer sk-c",
            "Bearer sk-a2",
        ] {
            assert_eq!(auth(bad).unwrap_err().code, "invalid_api_key", "{bad}");
        }
    }

    #[test]
    fn model_permissions() {
        let b = auth("Bearer sk-b").unwrap();
        assert!(b.may_use("zeta-5.0"));
        assert!(!b.may_use("sd_2.0_special"));
        assert!(auth("Bearer sk-a").unwrap().may_use("anything"));
    }

    #[test]
    fn digest_matches_sha256sum() {
        // printf %s abc | sha256sum
        assert_eq!(
            hex::encode(key_digest("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
