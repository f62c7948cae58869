//! One connection's bookkeeping: what the API learns about it (peer, whether it came
//! over TLS, the client address), whether it is idle, and the per-client-address cap.
//!
//! - [`Connection`] goes into every request's extensions.
//! - [`Activity`] counts the requests in progress on a connection (until their response
//!   bodies end) and says when it has been idle for the idle timeout, so that HTTP/2
//!   connections without requests are closed (hyper has no idle timeout for them).
//! - [`PerIp`] caps the connections one client address holds (IPv6 by its /64), taken
//!   right after accept. A connection from a trusted proxy is exempt; when a client
//!   address header is configured, each request through such a proxy holds a slot of
//!   the address the header names, for as long as it is in progress.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tower::Service;

use crate::config::Network;
use crate::response::{BoxError, ResponseBody, ResponseFuture};

/// What a request's connection was, in its extensions.
#[derive(Debug, Clone, Copy)]
pub struct Connection {
    /// The TCP peer.
    pub peer: SocketAddr,
    /// The request came in over the gateway's own TLS listener.
    pub tls: bool,
    /// The client's address: the peer's, or (from a trusted proxy, when a header is
    /// configured) the one the header names.
    pub client: IpAddr,
}

/// In a request's extensions when its client address is over its cap: the API refuses
/// it (with its request id and access-log line), the edge only marks it.
#[derive(Debug, Clone, Copy)]
pub struct OverCap;

/// The per-client-address settings from `[server]`.
#[derive(Debug, Clone, Default)]
pub struct ClientLimits {
    /// Connections (or, through a trusted proxy, requests in progress) one client
    /// address may hold; 0 = no cap.
    pub max_per_ip: usize,
    /// Peers whose connections carry many clients: exempt from the per-address cap.
    pub trusted_proxies: Vec<Network>,
    /// Header naming the client address on requests from a trusted proxy
    /// (`x-forwarded-for`: its rightmost address that is not a trusted proxy).
    pub client_ip_header: Option<HeaderName>,
}

impl ClientLimits {
    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|n| n.contains(peer))
    }

    /// The client address of a request from `peer`.
    pub fn client_of(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let Some(name) = &self.client_ip_header else {
            return peer;
        };
        if !self.trusts(peer) {
            return peer;
        }
        // Proxies append: the rightmost entry not itself a proxy is what the first
        // trusted proxy saw.
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|a| parse_ip(a.trim()))
            .rev()
            .find(|ip| !self.trusts(*ip))
            .unwrap_or(peer)
    }
}

/// An address as a header may write it: `1.2.3.4`, `1.2.3.4:5678`, `[::1]:80`, `::1`.
fn parse_ip(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .map(|ip| ip.to_canonical())
}

/// Slots per client address (IPv4 address, IPv6 /64).
#[derive(Debug, Default)]
pub struct PerIp {
    held: Mutex<HashMap<u128, usize>>,
}

/// A slot of one client address, given back on drop.
#[derive(Debug)]
pub struct IpSlot {
    table: Arc<PerIp>,
    key: u128,
}

impl PerIp {
    /// A slot for `ip` if it holds fewer than `max` (always when `max` is 0).
    pub fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<Option<IpSlot>> {
        if max == 0 {
            return Some(None);
        }
        let key = match ip.to_canonical() {
            IpAddr::V4(v4) => u128::from(u32::from(v4)),
            // One subscriber typically holds a whole /64.
            IpAddr::V6(v6) => (u128::from(v6) >> 64) | (1 << 127),
        };
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(key).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Some(IpSlot {
            table: self.clone(),
            key,
        }))
    }

    /// Addresses holding a slot now.
    pub fn addresses(&self) -> usize {
        self.held.lock().map_or(0, |h| h.len())
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut held = self.table.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// Requests in progress on one connection, and when the last one ended; responses
/// being sent, and when one last moved.
#[derive(Debug)]
pub struct Activity {
    in_progress: AtomicUsize,
    /// Milliseconds since `epoch` at the last start or end of a request.
    last_ms: AtomicU64,
    sending: AtomicUsize,
    /// Of those, the ones whose body was asked for more and has none yet (its source,
    /// such as a provider's stream, is slow; the client is not to blame).
    waiting_on_source: AtomicUsize,
    /// Milliseconds since `epoch` when a response body was last asked for more.
    sent_ms: AtomicU64,
    epoch: Instant,
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            in_progress: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
            sending: AtomicUsize::new(0),
            waiting_on_source: AtomicUsize::new(0),
            sent_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// A response body was asked for more: its client reads.
    fn moved(&self) {
        self.sent_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Resolves once a response is being sent and no response body has been asked
    /// for more for `limit`: hyper asks only when it can write, so the client has
    /// stopped reading (a zero window). Its request would otherwise stay in progress,
    /// holding the connection, the key's place and an upstream connection, for good.
    pub async fn stalled_for(&self, limit: Duration) {
        loop {
            let sending = self.sending.load(Ordering::Acquire)
                > self.waiting_on_source.load(Ordering::Acquire);
            let moved = Duration::from_millis(self.sent_ms.load(Ordering::Relaxed));
            let still = self.epoch.elapsed().saturating_sub(moved);
            if sending && still >= limit {
                return;
            }
            let wait = if sending { limit - still } else { limit };
            tokio::time::sleep(wait.max(Duration::from_millis(10))).await;
        }
    }

    fn begin(self: &Arc<Self>) -> Busy {
        self.in_progress.fetch_add(1, Ordering::AcqRel);
        self.touch();
        Busy(self.clone())
    }

    /// Resolves once no request has been in progress for `idle` (noticed within twice
    /// that: one timer per connection, waking at most once per `idle` while busy).
    pub async fn idle_for(&self, idle: Duration) {
        loop {
            let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let quiet = self.epoch.elapsed().saturating_sub(last);
            let busy = self.in_progress.load(Ordering::Acquire) > 0;
            if !busy && quiet >= idle {
                return;
            }
            // Recently busy: look again when it could first be idle; busy (a long
            // download, a slow submit): look again a whole period later.
            let wait = if busy { idle } else { idle - quiet };
            tokio::time::sleep(wait.max(Duration::from_millis(10))).await;
        }
    }
}

/// A request in progress, until its response body ends (or is dropped).
#[derive(Debug)]
struct Busy(Arc<Activity>);

/// A response being sent, until its body ends (or is dropped); whether its body's
/// source owes the next frame.
#[derive(Debug)]
struct Sending {
    activity: Arc<Activity>,
    waiting: bool,
}

impl Sending {
    fn of(activity: &Arc<Activity>) -> Self {
        activity.sending.fetch_add(1, Ordering::AcqRel);
        activity.moved();
        Self {
            activity: activity.clone(),
            waiting: false,
        }
    }

    /// The body was asked for more; `waiting`: its source has none yet.
    fn asked(&mut self, waiting: bool) {
        self.activity.moved();
        if waiting != self.waiting {
            let count = &self.activity.waiting_on_source;
            match waiting {
                true => count.fetch_add(1, Ordering::AcqRel),
                false => count.fetch_sub(1, Ordering::AcqRel),
            };
            self.waiting = waiting;
        }
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        self.asked(false);
        self.activity.sending.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_progress.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The service one connection is served by: the API's, with the connection's
/// extension, its activity and (through a trusted proxy) the client's slot.
#[derive(Clone)]
pub struct ConnService<S> {
    pub inner: S,
    pub peer: SocketAddr,
    pub tls: bool,
    pub activity: Arc<Activity>,
    pub limits: Arc<ClientLimits>,
    pub per_ip: Arc<PerIp>,
}

impl<S> Service<Request<Incoming>> for ConnService<S>
where
    S: Service<Request<Incoming>, Response = Response<ResponseBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Incoming>) -> ResponseFuture {
        let busy = self.activity.begin();
        let peer = self.peer.ip().to_canonical();
        let client = self.limits.client_of(peer, req.headers());
        // Through a trusted proxy, each request holds its client's slot; one over the
        // cap is refused by the API (with its request id and access-log line).
        let slot = if client != peer {
            match self.per_ip.take(client, self.limits.max_per_ip) {
                Some(slot) => slot,
                None => {
                    req.extensions_mut().insert(OverCap);
                    None
                }
            }
        } else {
            None
        };
        req.extensions_mut().insert(Connection {
            peer: self.peer,
            tls: self.tls,
            client,
        });
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        // Called here, so that the future kept while the request runs holds the
        // answer's future alone, not the whole service with it.
        let answer = ready.call(req);
        Box::pin(async move {
            let Ok(resp) = answer.await;
            Ok(resp.map(|body| {
                Held {
                    body,
                    sending: Sending::of(&busy.0),
                    _busy: busy,
                    _slot: slot,
                }
                .boxed()
            }))
        })
    }
}

/// A response body that keeps its request counted as in progress until it ends, and
/// notes each time it is asked for more.
struct Held {
    body: ResponseBody,
    sending: Sending,
    _busy: Busy,
    _slot: Option<IpSlot>,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        self.sending.asked(frame.is_pending());
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn one_address_holds_at_most_its_share() {
        let table = Arc::new(PerIp::default());
        let a: Vec<_> = (0..3).map(|_| table.take(ip("10.0.0.1"), 3)).collect();
        assert!(a.iter().all(Option::is_some));
        assert!(table.take(ip("10.0.0.1"), 3).is_none());
        assert!(table.take(ip("10.0.0.2"), 3).is_some());
        // One /64 is one client.
        let _b = table.take(ip("2001:db8::1"), 1).unwrap();
        assert!(table.take(ip("2001:db8::2"), 1).is_none());
        assert!(table.take(ip("2001:db8:0:1::1"), 1).is_some());
        drop(a);
        assert!(table.take(ip("10.0.0.1"), 3).is_some());
        assert!(
            table.take(ip("10.0.0.1"), 0).unwrap().is_none(),
            "0 is no cap"
        );
    }

    #[test]
    fn the_client_address_comes_from_a_trusted_proxy_only() {
        let limits = ClientLimits {
            max_per_ip: 1,
            trusted_proxies: vec!["10.0.0.0/8".parse().unwrap()],
            client_ip_header: Some(HeaderName::from_static("x-forwarded-for")),
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-forwarded-for",
            "1.1.1.1, 2.2.2.2, 10.0.0.9".parse().unwrap(),
        );
        assert_eq!(limits.client_of(ip("10.1.1.1"), &headers), ip("2.2.2.2"));
        // From anyone else the header is ignored.
        assert_eq!(limits.client_of(ip("8.8.8.8"), &headers), ip("8.8.8.8"));
        // Garbage falls back to the peer.
        headers.insert("x-forwarded-for", "nonsense".parse().unwrap());
        assert_eq!(limits.client_of(ip("10.1.1.1"), &headers), ip("10.1.1.1"));
        let without = ClientLimits {
            client_ip_header: None,
            ..limits
        };
        assert_eq!(without.client_of(ip("10.1.1.1"), &headers), ip("10.1.1.1"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_without_requests() {
        let activity = Activity::new();
        let busy = activity.begin();
        let idle = tokio::time::timeout(
            Duration::from_secs(5),
            activity.idle_for(Duration::from_secs(1)),
        );
        assert!(idle.await.is_err(), "a request in progress is not idleness");
        drop(busy);
        tokio::time::timeout(
            Duration::from_secs(5),
            activity.idle_for(Duration::from_secs(1)),
        )
        .await
        .expect("idle once the request ended");
    }
}
