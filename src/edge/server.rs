//! Listeners and connections: the plain listener, the TLS listener beside it, the
//! optional admin listener for `/metrics`; HTTP/1.1 and HTTP/2 (hyper 1 + hyper-util);
//! connection hardening; a graceful stop that lets in-flight requests finish.
//!
//! Hardening, in the order a connection meets it:
//! - a cap on open connections (`server.max_connections`), taken right after accept,
//!   before any handshake: past it, a connection is closed at once, not queued (the
//!   admin listener has a small cap of its own, `server.admin_max_connections`, so an
//!   overloaded gateway can still be observed);
//! - a cap per client address (`server.max_connections_per_ip`, IPv6 by /64), taken
//!   at the same time, so one client cannot hold every slot; trusted proxies are
//!   exempt, and their clients are capped per request by the address header
//!   ([`super::conn`]);
//! - the TLS handshake, in the connection's own task under
//!   `server.tls.handshake_timeout_ms`, so a slow client never blocks accepting;
//! - `server.header_read_timeout_ms` for the first byte of a connection (so a client
//!   that connects and sends nothing is closed), and for each request's headers
//!   (HTTP/1.1, idle keep-alive included);
//! - `server.idle_timeout_ms`: a connection without a request in progress for that long
//!   is closed gracefully (HTTP/2 GOAWAY; hyper has no idle timeout for HTTP/2);
//! - the body deadline, the per-key limits and the request timeout further in.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::conn::{Activity, ClientLimits, ConnService, IpSlot, PerIp};

use crate::config::ServerConfig;
use crate::metrics::Metrics;
use crate::response::Answers;
use crate::workers::Workers;

/// What the edge needs from the gateway it serves, so that it needs nothing else of it.
pub trait Host: Send + Sync + 'static {
    /// The settings a new connection takes (a reload applies to new connections).
    fn settings(&self) -> Settings;
    /// A stop was requested: stop reporting ready.
    fn start_draining(&self);
    fn metrics(&self) -> &Metrics;
}

/// Connection settings from `[server]`, compiled with the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    pub header_read_timeout: Duration,
    /// A connection without a request in progress this long is closed.
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// Connections the admin listener holds at most.
    pub admin_max_connections: usize,
    /// The per-client-address cap and who may name the client address.
    pub clients: Arc<ClientLimits>,
    pub shutdown_delay: Duration,
    pub shutdown_grace: Duration,
    /// The TLS config and the handshake timeout, when `[server.tls]` is set.
    pub tls: Option<(Arc<rustls::ServerConfig>, Duration)>,
}

/// The bound listeners.
pub struct Listeners {
    pub plain: TcpListener,
    pub tls: Option<TcpListener>,
    pub admin: Option<TcpListener>,
}

impl Listeners {
    /// Bind every configured listener; an error names the address that failed.
    pub async fn bind(cfg: &ServerConfig) -> Result<Self, (SocketAddr, std::io::Error)> {
        let bind =
            |addr: SocketAddr| async move { TcpListener::bind(addr).await.map_err(|e| (addr, e)) };
        let plain = bind(cfg.listen).await?;
        let tls = match &cfg.tls {
            Some(t) => Some(bind(t.listen).await?),
            None => None,
        };
        let admin = match cfg.metrics_listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        Ok(Self { plain, tls, admin })
    }
}

/// Which listener a connection came from.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Plain,
    Tls,
    Admin,
}

/// Held for a connection's whole life: its slots under the caps, and the gauge.
struct Slot {
    _permit: OwnedSemaphorePermit,
    _per_ip: Option<IpSlot>,
    open: Gauge,
}

/// What every connection shares: the caps, and the stop.
struct Shared {
    slots: Arc<Semaphore>,
    admin_slots: Arc<Semaphore>,
    per_ip: Arc<PerIp>,
    stop: CancellationToken,
    connections: TaskTracker,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// The services a connection is served by: the client API and the admin listener's.
pub struct Services<S, A> {
    pub main: S,
    pub admin: A,
}

/// Serve on the listeners until `shutdown` resolves, then drain: report not ready,
/// keep accepting for `server.shutdown_delay_ms`, stop accepting, and give in-flight
/// requests `server.shutdown_grace_ms` to finish. Connections are accepted here and
/// served on `workers`.
pub async fn serve<H, S, A>(
    listeners: Listeners,
    host: Arc<H>,
    services: Services<S, A>,
    workers: Arc<Workers>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    H: Host,
    S: HttpService,
    A: HttpService,
{
    let settings = host.settings();
    let shared = Arc::new(Shared {
        slots: Arc::new(Semaphore::new(settings.max_connections.max(1))),
        admin_slots: Arc::new(Semaphore::new(settings.admin_max_connections.max(1))),
        per_ip: Arc::default(),
        stop: CancellationToken::new(),
        connections: TaskTracker::new(),
    });
    drop(settings);
    tokio::pin!(shutdown);
    let mut delay: Option<Pin<Box<tokio::time::Sleep>>> = None;
    loop {
        let (accepted, kind) = tokio::select! {
            a = listeners.plain.accept() => (a, Kind::Plain),
            a = accept(listeners.tls.as_ref()) => (a, Kind::Tls),
            a = accept(listeners.admin.as_ref()) => (a, Kind::Admin),
            () = &mut shutdown, if delay.is_none() => {
                host.start_draining();
                let after = host.settings().shutdown_delay;
                tracing::info!(delay_ms = after.as_millis() as u64, "shutdown requested: /readyz now answers 503");
                delay = Some(Box::pin(tokio::time::sleep(after)));
                continue;
            }
            () = async { delay.as_mut().expect("guarded").await }, if delay.is_some() => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                if let Some(slot) = admit(&*host, &shared, kind, peer) {
                    let to = workers.next();
                    spawn_connection(&host, &services, &shared, (kind, stream, peer), slot, to);
                }
            }
            Err(e) => {
                // Out of descriptors or similar: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    drop(listeners);
    drain(&shared, host.settings().shutdown_grace).await;
    Ok(())
}

/// A service a connection can be served by.
pub trait HttpService: Answers<http::Request<Incoming>> {}

impl<T: Answers<http::Request<Incoming>>> HttpService for T {}

/// The connection's slots, taken before any handshake or read: past a cap it is closed
/// at once. The admin listener has its own small cap (an overloaded gateway can still
/// be observed); client listeners share `max_connections`, and each client address
/// (but a trusted proxy) its share of it.
fn admit(host: &impl Host, shared: &Shared, kind: Kind, peer: SocketAddr) -> Option<Slot> {
    let refuse = |why: &str| {
        host.metrics().connections_refused.inc();
        tracing::debug!(%peer, "connection refused: {why}");
    };
    let slots = match kind {
        Kind::Admin => &shared.admin_slots,
        Kind::Plain | Kind::Tls => &shared.slots,
    };
    let Ok(permit) = slots.clone().try_acquire_owned() else {
        refuse("the listener's connection cap is reached");
        return None;
    };
    let clients = host.settings().clients;
    let per_ip = match kind {
        Kind::Plain | Kind::Tls if !clients.trusts(peer.ip()) => {
            let Some(slot) = shared.per_ip.take(peer.ip(), clients.max_per_ip) else {
                refuse("server.max_connections_per_ip reached");
                return None;
            };
            slot
        }
        _ => None,
    };
    let open = host.metrics().connections_open.clone();
    open.inc();
    Some(Slot {
        _permit: permit,
        _per_ip: per_ip,
        open,
    })
}

/// Serve one accepted connection in its own task on `worker`, with the settings
/// current now.
fn spawn_connection<H: Host, S: HttpService, A: HttpService>(
    host: &Arc<H>,
    services: &Services<S, A>,
    shared: &Arc<Shared>,
    (kind, stream, peer): (Kind, TcpStream, SocketAddr),
    slot: Slot,
    worker: &tokio::runtime::Handle,
) {
    let _ = stream.set_nodelay(true);
    // The socket leaves this runtime's reactor here and joins the worker's there.
    let stream = match stream.into_std() {
        Ok(stream) => stream,
        Err(e) => {
            tracing::debug!(%peer, error = %e, "connection closed: cannot hand it to a worker");
            return;
        }
    };
    let settings = host.settings();
    let conn = Conn {
        builder: http_builder(settings.header_read_timeout),
        first_byte: settings.header_read_timeout,
        idle: settings.idle_timeout,
        stop: shared.stop.clone(),
        peer,
    };
    let wrap = |tls: bool| {
        (
            Activity::new(),
            settings.clients.clone(),
            shared.per_ip.clone(),
            tls,
        )
    };
    match kind {
        Kind::Plain => {
            let svc = conn.service(services.main.clone(), wrap(false));
            let served = serve_plain(conn, svc, stream, slot);
            shared.connections.spawn_on(served, worker);
        }
        Kind::Admin => {
            let svc = conn.service(services.admin.clone(), wrap(false));
            let served = serve_plain(conn, svc, stream, slot);
            shared.connections.spawn_on(served, worker);
        }
        Kind::Tls => {
            let Some((tls, timeout)) = settings.tls.clone() else {
                tracing::debug!(%peer, "TLS connection closed: TLS is no longer configured");
                return;
            };
            let svc = conn.service(services.main.clone(), wrap(true));
            let host = host.clone();
            shared.connections.spawn_on(
                async move {
                    let Some(stream) = adopt(stream, peer) else {
                        return;
                    };
                    if let Some(stream) =
                        handshake(stream, tls, timeout, host.metrics(), peer).await
                    {
                        let protocol = match stream.get_ref().1.alpn_protocol() {
                            Some(b"h2") => Protocol::Http2,
                            Some(b"http/1.1") => Protocol::Http1,
                            _ => Protocol::Unknown,
                        };
                        conn.run(stream, protocol, svc).await;
                    }
                    drop(slot);
                },
                worker,
            );
        }
    }
}

/// A plain-text connection on its worker: the protocol told by the first bytes, then
/// served; its slot is given back when it ends.
async fn serve_plain<S: HttpService>(
    conn: Conn,
    svc: ConnService<S>,
    stream: std::net::TcpStream,
    slot: Slot,
) {
    if let Some(stream) = adopt(stream, conn.peer)
        && let Some(protocol) = sniff(&stream, conn.first_byte).await
    {
        conn.run(stream, protocol, svc).await;
    }
    drop(slot);
}

/// The accepted socket registered with the runtime this runs on (a worker's).
fn adopt(stream: std::net::TcpStream, peer: SocketAddr) -> Option<TcpStream> {
    TcpStream::from_std(stream)
        .inspect_err(
            |e| tracing::debug!(%peer, error = %e, "connection closed: cannot register it"),
        )
        .ok()
}

/// Give in-flight requests `grace` to finish after the listeners closed.
async fn drain(shared: &Shared, grace: Duration) {
    tracing::info!(
        grace_ms = grace.as_millis() as u64,
        "listeners closed: draining in-flight requests"
    );
    shared.stop.cancel();
    shared.connections.close();
    match tokio::time::timeout(grace, shared.connections.wait()).await {
        Ok(()) => tracing::info!("all connections closed"),
        Err(_) => tracing::warn!("grace period over; closing remaining connections"),
    }
}

/// Accept on a listener that may not exist (then never).
async fn accept(listener: Option<&TcpListener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

/// The protocol of a connection, when it is known before hyper reads from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
    /// hyper-util tells it from the first bytes.
    Unknown,
}

/// What every HTTP/2 connection without TLS starts with (prior knowledge, RFC 9113).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The protocol of a plain connection from its first bytes, peeked (left unread);
/// `None` when it closes, fails or stays silent for `timeout`.
///
/// Why not hyper-util's own detection: it reads the first bytes and hands them to
/// hyper's HTTP/1 reader as a read of their own, after which hyper grows its 8 KiB
/// read buffer to 16 KiB and keeps that for the connection's whole life (8 KiB more
/// per idle keep-alive connection). Told here, hyper reads the request itself.
async fn sniff(stream: &TcpStream, timeout: Duration) -> Option<Protocol> {
    let mut first = [0u8; H2_PREFACE.len()];
    let n = match tokio::time::timeout(timeout, stream.peek(&mut first)).await {
        Ok(Ok(n)) if n > 0 => n,
        _ => return None,
    };
    Some(protocol_of(&first[..n]))
}

/// The protocol that bytes a client sent first mean.
fn protocol_of(first: &[u8]) -> Protocol {
    if !H2_PREFACE.starts_with(first) {
        Protocol::Http1
    } else if first.len() == H2_PREFACE.len() {
        Protocol::Http2
    } else {
        // A prefix of the preface (a split write): hyper-util waits for the rest.
        Protocol::Unknown
    }
}

/// A connection's IO that fails if its protocol is not known within the timeout: no
/// byte at all, or, when it was not known from the first bytes, neither the whole
/// HTTP/2 preface nor a byte that is not the preface's (then it is HTTP/1). hyper's
/// header read timeout starts only once the HTTP version is known; without this, a
/// client that connects and stays silent (or stops inside the preface) would hold
/// its slot forever, or until the idle timeout.
struct FirstByte<I> {
    io: I,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Of the HTTP/2 preface, the bytes read so far match this many; `None` when the
    /// protocol was known before the first byte.
    preface: Option<usize>,
}

impl<I> FirstByte<I> {
    fn new(io: I, timeout: Duration, protocol: Protocol) -> Self {
        Self {
            io,
            deadline: Some(Box::pin(tokio::time::sleep(timeout))),
            preface: (protocol == Protocol::Unknown).then_some(0),
        }
    }

    /// Whether the protocol is known once `read` has been read too.
    fn known_after(&mut self, read: &[u8]) -> bool {
        let Some(seen) = self.preface else {
            return !read.is_empty();
        };
        let rest = &H2_PREFACE[seen.min(H2_PREFACE.len())..];
        let n = read.len().min(rest.len());
        if read[..n] != rest[..n] {
            return true;
        }
        self.preface = Some(seen + n);
        seen + n == H2_PREFACE.len()
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for FirstByte<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if this.deadline.is_some() && this.known_after(&buf.filled()[before..]) {
                    this.deadline = None;
                }
                Poll::Ready(result)
            }
            Poll::Pending => match this.deadline.as_mut().map(|d| d.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no request within server.header_read_timeout_ms",
                ))),
                _ => Poll::Pending,
            },
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for FirstByte<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// HTTP/1.1 and HTTP/2 with the current header read timeout.
fn http_builder(header_read_timeout: Duration) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    // Pings find HTTP/2 peers that vanished without closing their connection.
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(60))
        .keep_alive_timeout(Duration::from_secs(20));
    builder
}

/// The TLS handshake under its timeout; `None` (counted, logged) when it fails.
async fn handshake(
    stream: TcpStream,
    tls: Arc<rustls::ServerConfig>,
    timeout: Duration,
    metrics: &Metrics,
    peer: SocketAddr,
) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
    match tokio::time::timeout(timeout, TlsAcceptor::from(tls).accept(stream)).await {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            metrics.tls_handshake_failures.inc();
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            metrics.tls_handshake_failures.inc();
            tracing::debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}

/// One connection's settings, taken when it was accepted.
struct Conn {
    builder: auto::Builder<TokioExecutor>,
    first_byte: Duration,
    idle: Duration,
    stop: CancellationToken,
    peer: SocketAddr,
}

impl Conn {
    /// `inner` with this connection's extension, activity and client slot.
    fn service<S: HttpService>(
        &self,
        inner: S,
        (activity, limits, per_ip, tls): (Arc<Activity>, Arc<ClientLimits>, Arc<PerIp>, bool),
    ) -> ConnService<S> {
        ConnService {
            inner,
            peer: self.peer,
            tls,
            activity,
            limits,
            per_ip,
        }
    }

    /// Serve until the connection ends; on the gateway's stop, or once it has been
    /// idle for the idle timeout, close it gracefully (requests in progress finish).
    async fn run<I, S>(self, io: I, protocol: Protocol, svc: ConnService<S>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: HttpService,
    {
        let activity = svc.activity.clone();
        let io = FirstByte::new(io, self.first_byte, protocol);
        let builder = match protocol {
            Protocol::Http1 => self.builder.http1_only(),
            Protocol::Http2 => self.builder.http2_only(),
            Protocol::Unknown => self.builder,
        };
        let conn = builder
            .serve_connection(TokioIo::new(io), TowerToHyperService::new(svc))
            .into_owned();
        tokio::pin!(conn);
        let idle = activity.idle_for(self.idle);
        tokio::pin!(idle);
        // A response its client stopped reading would hold the connection (and a
        // graceful close would wait for it) for good: dropped, not closed gracefully.
        let stalled = activity.stalled_for(self.idle);
        tokio::pin!(stalled);
        let mut closing = false;
        let ended = loop {
            tokio::select! {
                ended = conn.as_mut() => break ended,
                () = &mut stalled => {
                    tracing::debug!(peer = %self.peer, "a response its client stopped reading: connection dropped");
                    break Ok(());
                }
                () = self.stop.cancelled(), if !closing => {}
                () = &mut idle, if !closing => {
                    tracing::debug!(peer = %self.peer, "idle connection closed");
                }
            }
            closing = true;
            conn.as_mut().graceful_shutdown();
        };
        if let Err(e) = ended {
            tracing::debug!(peer = %self.peer, error = %e, "connection ended with an error");
        }
    }
}

/// Resolves on SIGTERM or Ctrl-C. The signals are taken over when this is called (not
/// when it is first awaited), so call it before the gateway is announced: a SIGTERM
/// after that always means a graceful stop.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let signals = [SignalKind::terminate(), SignalKind::interrupt()].map(signal);
    async move {
        let [term, int] = signals.map(|s| async move {
            match s {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        });
        tokio::select! {
            () = term => {},
            () = int => {},
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn first_bytes_tell_the_protocol() {
        assert_eq!(protocol_of(b"GET /healthz HTTP/1.1\r\n"), Protocol::Http1);
        // Methods starting like the preface part from it at once.
        assert_eq!(protocol_of(b"POST /v1"), Protocol::Http1);
        assert_eq!(protocol_of(b"PUT"), Protocol::Http1);
        assert_eq!(protocol_of(H2_PREFACE), Protocol::Http2);
        // Too few bytes to tell: hyper-util reads on.
        assert_eq!(protocol_of(b"P"), Protocol::Unknown);
        assert_eq!(protocol_of(b"PRI * HTTP/2.0\r\n"), Protocol::Unknown);
    }

    /// The bytes are only peeked: hyper reads the whole request itself.
    #[tokio::test]
    async fn sniffing_leaves_the_bytes_and_gives_up_on_silence() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let protocol = sniff(&server, Duration::from_secs(5)).await;
        assert_eq!(protocol, Some(Protocol::Http1));
        let mut read = [0u8; 18];
        server.try_read(&mut read).unwrap();
        assert_eq!(&read, b"GET / HTTP/1.1\r\n\r\n");

        let _silent = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        assert_eq!(sniff(&server, Duration::from_millis(50)).await, None);

        let mut closed = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        closed.shutdown().await.unwrap();
        assert_eq!(sniff(&server, Duration::from_secs(5)).await, None);
    }
}
