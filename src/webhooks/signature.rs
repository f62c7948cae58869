//! Standard Webhooks signing (<https://www.standardwebhooks.com/>): a secret is
//! `whsec_` + base64 of its bytes; the signature of a message is `v1,` + base64 of
//! HMAC-SHA256 over `{webhook-id}.{webhook-timestamp}.{body}`. While a secret is
//! rotated the key holds several, and every delivery carries one signature per secret
//! (space-separated), so receivers holding either the old or the new one accept it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::hmac;

/// Shortest and longest secret accepted, in bytes once decoded.
const MIN_SECRET_BYTES: usize = 24;
const MAX_SECRET_BYTES: usize = 64;

/// The demo keys' webhook secret, published in README.md: warned about at start.
pub const DEMO_SECRET: &str = "whsec_xRM79p/hSIjXTNu5g4EEbMLmFjq9esrWv6HAnHdQtTQ=";

/// A key's webhook secrets.
pub struct WebhookSigner {
    keys: Vec<hmac::Key>,
    demo: bool,
}

impl std::fmt::Debug for WebhookSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets themselves.
        write!(f, "WebhookSigner({} secrets)", self.keys.len())
    }
}

impl WebhookSigner {
    /// Read one or more `whsec_…` secrets separated by whitespace. Errors never quote
    /// a secret.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut keys = Vec::new();
        for (n, secret) in text.split_whitespace().enumerate() {
            let which = n + 1;
            let encoded = secret.strip_prefix("whsec_").ok_or_else(|| {
                format!("webhook secret {which} must start with `whsec_` (Standard Webhooks)")
            })?;
            let raw = STANDARD.decode(encoded).map_err(|_| {
                format!("webhook secret {which}: `whsec_` must be followed by base64")
            })?;
            if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&raw.len()) {
                return Err(format!(
                    "webhook secret {which} must decode to {MIN_SECRET_BYTES}–{MAX_SECRET_BYTES} bytes, not {}",
                    raw.len()
                ));
            }
            keys.push(hmac::Key::new(hmac::HMAC_SHA256, &raw));
        }
        if keys.is_empty() {
            return Err("no webhook secret given".into());
        }
        let demo = text.split_whitespace().any(|s| s == DEMO_SECRET);
        Ok(Self { keys, demo })
    }

    /// Whether one of the secrets is the published demo secret.
    pub fn is_demo(&self) -> bool {
        self.demo
    }

    /// The `webhook-signature` header value for one message.
    pub fn sign(&self, id: &str, timestamp: u64, body: &[u8]) -> String {
        let signed = |key: &hmac::Key| {
            let mut ctx = hmac::Context::with_key(key);
            ctx.update(id.as_bytes());
            ctx.update(b".");
            ctx.update(timestamp.to_string().as_bytes());
            ctx.update(b".");
            ctx.update(body);
            format!("v1,{}", STANDARD.encode(ctx.sign().as_ref()))
        };
        self.keys.iter().map(signed).collect::<Vec<_>>().join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the Standard Webhooks specification's reference libraries.
    #[test]
    fn signs_the_specification_example() {
        let signer = WebhookSigner::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            signer.sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1_614_265_330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn rotation_signs_with_every_secret() {
        let one = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let two = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        let both = WebhookSigner::parse(&format!("{one} \n {two}")).unwrap();
        let header = both.sign("msg_1", 1, b"{}");
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            parts[0],
            WebhookSigner::parse(one).unwrap().sign("msg_1", 1, b"{}")
        );
        assert_eq!(
            parts[1],
            WebhookSigner::parse(two).unwrap().sign("msg_1", 1, b"{}")
        );
        assert_ne!(parts[0], parts[1]);
    }

    #[test]
    fn refuses_what_is_not_a_secret_without_quoting_it() {
        let bad = [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_!!!not-base64",
            "whsec_AAAA",
        ];
        for secret in bad {
            let e = WebhookSigner::parse(secret).unwrap_err();
            assert!(!e.contains(secret), "{e}");
        }
        assert!(WebhookSigner::parse(" \n ").is_err());
    }
}
