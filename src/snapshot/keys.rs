//! `[[keys]]` and `[limits]`: the client keys (as digests), their model permissions
//! and their limits.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use crate::FastMap;
use crate::access::{ApiKey, KeyLimiter, KeyLimits, KeyRing, SharedSettings, key_digest};
use crate::config::{
    BudgetConfig, KeyConfig, LimitsTable, Problems, RoutesFile, Scope, SecretSource,
};
use crate::models::Model;
use crate::money::{Budget, MAX_UNITS, Micros};
use crate::webhooks::{CallbackPolicy, WebhookSigner};

/// Published demo keys: warned about at every start.
const DEMO_KEYS: [&str; 2] = ["sk-demo", "sk-demo-2"];

/// The compiled `[[keys]]`.
pub(super) struct Keys {
    pub ring: KeyRing,
    pub limits: KeyLimits,
    /// Where replicas share the limits (`[limits] shared`).
    pub shared: Option<SharedSettings>,
    /// Names of keys whose secret is a published demo value.
    pub demo: Vec<String>,
    /// Names of keys that sign webhooks with the published demo secret.
    pub demo_webhook_secrets: Vec<String>,
}

pub(super) fn compile(
    file: &RoutesFile,
    models: &FastMap<String, Arc<Model>>,
    dir: &Path,
    ledger_on: bool,
    callbacks: Option<&CallbackPolicy>,
    p: &mut Problems,
) -> Keys {
    let defaults = file.limits.defaults();
    KeyLimiter::check(&defaults, &mut p.at("limits"));
    let shared = shared_of(&file.limits, dir, &mut p.at("limits"));
    if file.keys.is_empty() {
        p.push("keys", "at least one client key is required");
    }
    let (mut ring, mut limits, mut demo) = (Vec::new(), Vec::new(), Vec::new());
    let mut demo_webhook_secrets = Vec::new();
    let (mut names, mut digests) = (HashSet::new(), HashSet::new());
    for (i, k) in file.keys.iter().enumerate() {
        let mut at = p.at(format!("keys[{i}]"));
        if k.name.trim().is_empty() {
            at.push("name", "must not be empty");
        } else if !names.insert(k.name.as_str()) {
            at.push("name", format!("`{}` is used by another key", k.name));
        }
        for m in k.models.iter().flatten() {
            let listed = file.families.values().any(|f| f.models.contains(m));
            if !models.contains_key(m) && !listed {
                at.push("models", format!("no model named `{m}`"));
            }
        }
        let own = defaults.with(k.limits.as_ref());
        KeyLimiter::check(&own, &mut at.at("limits"));
        limits.push((Arc::<str>::from(k.name.as_str()), own));
        let Some(digest) = digest_of(k, dir, &mut at) else {
            continue;
        };
        // The same secret twice would make one of the keys unreachable.
        if !digests.insert(digest) {
            at.push("sha256", "the same secret as another key");
        }
        if DEMO_KEYS.iter().any(|demo| key_digest(demo) == digest) {
            demo.push(k.name.clone());
        }
        let allowed = k.models.as_ref().map(|m| m.iter().cloned().collect());
        if (k.quota.is_some() || k.require_idempotency_key) && !ledger_on {
            at.push(
                "quota",
                "quotas and require_idempotency_key need the ledger ([ledger] url is none)",
            );
        }
        if k.budget.is_some() && !ledger_on {
            at.push("budget", "budgets need the ledger ([ledger] url is none)");
        }
        let budget = k.budget.as_ref().and_then(|cfg| budget(cfg, &mut at));
        let (webhook_url, signer) = webhooks_of(k, dir, ledger_on, callbacks, &mut at);
        if signer.as_ref().is_some_and(|s| s.is_demo()) {
            demo_webhook_secrets.push(k.name.clone());
        }
        ring.push(
            ApiKey::new(&k.name, digest, allowed)
                .with_policy(k.quota, k.require_idempotency_key)
                .with_money(budget, k.show_cost)
                .with_webhooks(webhook_url, signer),
        );
    }
    Keys {
        ring: KeyRing::new(ring),
        limits: KeyLimits::new(limits, shared.as_ref()),
        shared,
        demo,
        demo_webhook_secrets,
    }
}

/// `[limits] shared` with its password and settings; `None` when unset.
fn shared_of(limits: &LimitsTable, dir: &Path, at: &mut Scope) -> Option<SharedSettings> {
    let password = SecretSource {
        env: limits.shared_password_env.as_deref(),
        file: limits.shared_password_file.as_deref(),
    };
    if !(0.01..=1.0).contains(&limits.local_share) {
        at.push("local_share", "must be between 0.01 and 1");
    }
    at.within("shared_timeout_ms", limits.shared_timeout_ms, 1..=10_000);
    // Renewed every third of a lease: short leases would cost Redis a renewal per
    // request in progress every few milliseconds.
    at.within("shared_lease_ms", limits.shared_lease_ms, 300..=3_600_000);
    at.within("shared_stock_ms", limits.shared_stock_ms, 0..=1000);
    let Some(url) = &limits.shared else {
        if password.env.is_some() || password.file.is_some() {
            at.push(
                "shared",
                "a Redis password is set but no `shared` Redis URL",
            );
        }
        return None;
    };
    let field = match password.env {
        Some(_) => "shared_password_env",
        None => "shared_password_file",
    };
    let password = at.check(field, password.read(dir))?;
    let mut settings = at.check("shared", SharedSettings::parse(url, password))?;
    settings.timeout = std::time::Duration::from_millis(limits.shared_timeout_ms);
    settings.lease = std::time::Duration::from_millis(limits.shared_lease_ms);
    settings.local_share = limits.local_share;
    settings.stock_for = std::time::Duration::from_millis(limits.shared_stock_ms);
    Some(settings)
}

/// A key's default webhook URL and its signing secrets. Webhooks need the ledger
/// (deliveries are owed there), and a URL needs a secret to sign with.
fn webhooks_of(
    k: &KeyConfig,
    dir: &Path,
    ledger_on: bool,
    callbacks: Option<&CallbackPolicy>,
    at: &mut Scope,
) -> (Option<String>, Option<Arc<WebhookSigner>>) {
    let source = SecretSource {
        env: k.webhook_secret_env.as_deref(),
        file: k.webhook_secret_file.as_deref(),
    };
    let field = match (&k.webhook_secret, &k.webhook_secret_env) {
        (Some(_), _) => "webhook_secret",
        (None, Some(_)) => "webhook_secret_env",
        (None, None) => "webhook_secret_file",
    };
    let text = match &k.webhook_secret {
        Some(_) if source.env.is_some() || source.file.is_some() => {
            let msg = "set one of webhook_secret, webhook_secret_env or webhook_secret_file";
            at.push(field, msg);
            None
        }
        Some(inline) => Some(inline.clone()),
        None => at.check(field, source.read(dir)).flatten(),
    };
    let signer = text
        .and_then(|text| at.check(field, WebhookSigner::parse(&text)))
        .map(Arc::new);
    let url = k.webhook_url.as_ref().and_then(|url| {
        if !ledger_on {
            at.push(
                "webhook_url",
                "webhooks need the ledger ([ledger] url is none)",
            );
        } else if signer.is_none() {
            at.push(
                "webhook_url",
                "needs a webhook secret to sign with (webhook_secret_env, webhook_secret_file or webhook_secret)",
            );
        }
        let checked = callbacks.map(|policy| policy.check(url));
        at.check("webhook_url", checked?).map(|_| url.clone())
    });
    (url, signer)
}

/// The SHA-256 of the key: given as hex, or of the key read from its variable.
fn digest_of(k: &KeyConfig, dir: &Path, at: &mut Scope) -> Option<[u8; 32]> {
    match (&k.sha256, &k.env) {
        (Some(hex_digest), None) => {
            let mut d = [0u8; 32];
            let parsed = hex::decode_to_slice(hex_digest.trim(), &mut d)
                .map(|()| d)
                .map_err(|_| "must be 64 hex digits (printf %s KEY | sha256sum)".to_string());
            at.check("sha256", parsed)
        }
        (None, Some(var)) => {
            let source = SecretSource {
                env: Some(var),
                file: None,
            };
            let secret = at.check("env", source.read(dir))??;
            Some(key_digest(&secret))
        }
        _ => {
            at.push("sha256", "set exactly one of sha256 or env");
            None
        }
    }
}

/// A key's budget in millionths; a problem is recorded for an amount that is not one.
fn budget(cfg: &BudgetConfig, at: &mut Scope) -> Option<Budget> {
    let mut amount = |key: &str, units: Option<f64>| match units {
        None => Some(None),
        Some(u) => at.check(
            key,
            Micros::from_units(u)
                .map(Some)
                .ok_or_else(|| format!("must be an amount from 0 to {MAX_UNITS}")),
        ),
    };
    let per_day = amount("budget.per_day", cfg.per_day);
    let per_month = amount("budget.per_month", cfg.per_month);
    Some(Budget {
        per_day: per_day?,
        per_month: per_month?,
    })
}
