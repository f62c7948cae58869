//! Webhooks: what a delivery of a finished task is made of, kept apart from how it is
//! delivered (the loop in `gateway::deliveries`, over the ledger's `deliveries` table).
//!
//! - [`target`]: which `callback_url`s are accepted (https, or http to the hosts the
//!   configuration names; never into a private network unless it is allowed).
//! - [`signature`]: the Standard Webhooks signature, `v1,` + base64 of
//!   HMAC-SHA256(`id.timestamp.body`) under each of the key's `whsec_…` secrets.

pub mod signature;
pub mod target;

pub use self::signature::WebhookSigner;
pub use self::target::CallbackPolicy;
