//! The edge: what faces the network before a request reaches the API. Listeners and
//! connections with their caps and timeouts ([`server`]), TLS termination ([`tls`]),
//! and the bounds on a request body ([`body`]).

pub(crate) mod body;
pub mod conn;
pub mod server;
pub(crate) mod tls;

pub use self::conn::{ClientLimits, Connection};
pub use self::server::{Host, Listeners, Services, Settings, serve, shutdown_signal};
