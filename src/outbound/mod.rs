//! Requests the gateway makes: to providers and to webhook receivers alike. An origin
//! and where its requests may lead ([`origin`]: our headers only to the origin, the
//! private-network policy judged on resolved addresses), the guarded HTTP client with
//! its timeouts and answer bounds ([`client`]), and the connections it keeps open per
//! worker thread ([`pool`]). It knows nothing of providers' APIs or of webhooks.

pub mod client;
pub mod origin;
pub mod pool;

pub use self::client::{CallError, Reply, UpstreamClient};
pub use self::origin::{Origin, Reach};
