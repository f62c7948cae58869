//! The upstream pool (`outbound::pool`) beside the client it stands in for,
//! hyper-util's pooled `legacy::Client`: the same generated sequences of requests
//! (methods, bodies, answers that keep the connection or close it, answers never
//! given, the upstream closing its idle connections or hanging up on a new one) go to
//! a real upstream on loopback, through each over HTTP/1, HTTPS/1.1 or HTTP/2 (ALPN),
//! and every request must end alike: the same status and body, and received by the
//! upstream as often (once, or never).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use mediagate::outbound::pool::Pool;
use proptest::prelude::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone, Copy)]
enum Proto {
    Http1,
    /// TLS, the upstream offering only `http/1.1`.
    Https1,
    /// TLS, the upstream offering `h2` first.
    Http2,
}

/// One request and what the upstream does with it.
#[derive(Debug, Clone)]
struct Spec {
    method: Method,
    path: String,
    body: Vec<u8>,
    status: u16,
    /// The answer ends the connection (`Connection: close`; HTTP/1 only).
    close: bool,
    /// Bytes of filler in the answer's body.
    size: usize,
    /// The upstream reads the request and ends its connection (HTTP/1) or stream
    /// (HTTP/2) without an answer.
    drop: bool,
}

#[derive(Debug, Clone)]
enum Step {
    Send(Spec),
    /// The upstream closes its idle connections (and the clients see it).
    CloseIdle,
    /// As `CloseIdle`, and the upstream hangs up on the next new connection before
    /// reading anything.
    HangUp,
}

/// How one request ended: the answer, and how often the upstream received it.
#[derive(Debug, PartialEq)]
struct Outcome {
    answer: Option<(u16, Bytes)>,
    received: usize,
}

fn spec() -> impl Strategy<Value = Spec> {
    let method = prop_oneof![
        Just(Method::GET),
        Just(Method::POST),
        Just(Method::PUT),
        Just(Method::PATCH),
        Just(Method::DELETE),
        Just(Method::HEAD),
    ];
    let statuses = [200u16, 201, 202, 400, 401, 404, 409, 429, 500, 502, 503];
    (
        method,
        "(/[a-z0-9_.-]{0,8}){1,3}(\\?[a-z0-9=&%]{0,10})?",
        prop::collection::vec(any::<u8>(), 0..3000),
        prop::sample::select(statuses.to_vec()),
        prop::bool::weighted(0.25),
        prop_oneof![0..64usize, 1000..40_000usize],
        prop::bool::weighted(0.1),
    )
        .prop_map(|(method, path, body, status, close, size, drop)| {
            let body = if [Method::POST, Method::PUT, Method::PATCH].contains(&method) {
                body
            } else {
                Vec::new()
            };
            Spec {
                method,
                path,
                body,
                status,
                close,
                size,
                drop,
            }
        })
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        8 => spec().prop_map(Step::Send),
        1 => Just(Step::CloseIdle),
        1 => Just(Step::HangUp),
    ];
    prop::collection::vec(step, 1..14)
}

/// A CA-signed certificate for 127.0.0.1, made once.
struct Certs {
    ca: CertificateDer<'static>,
    leaf: CertificateDer<'static>,
    key: Vec<u8>,
}

fn certs() -> &'static Certs {
    static CERTS: OnceLock<Certs> = OnceLock::new();
    CERTS.get_or_init(|| {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        Certs {
            ca: ca.der().clone(),
            leaf: leaf.der().clone(),
            key: key.serialize_der(),
        }
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The connector both clients use: the gateway's own kind (hyper-rustls over
/// hyper-util's `HttpConnector`, HTTP/1 and HTTP/2 offered), trusting the test CA.
fn connector() -> HttpsConnector<HttpConnector> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(certs().ca.clone()).unwrap();
    let tls = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http)
}

/// The upstream: answers as each request's headers say, counts what it receives.
struct Upstream {
    addr: SocketAddr,
    received: Arc<Mutex<HashMap<String, usize>>>,
    /// New connections to hang up on before reading anything.
    hang_up: Arc<AtomicUsize>,
    /// Connections open.
    open: Arc<AtomicUsize>,
    close_idle: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Upstream {
    async fn start(proto: Proto) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tls = match proto {
            Proto::Http1 => None,
            Proto::Https1 => Some(acceptor(&[b"http/1.1"])),
            Proto::Http2 => Some(acceptor(&[b"h2", b"http/1.1"])),
        };
        let received = Arc::new(Mutex::new(HashMap::new()));
        let hang_up = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicUsize::new(0));
        let (close_idle, _) = tokio::sync::watch::channel(0);
        let accept = {
            let (received, hang_up, open) = (received.clone(), hang_up.clone(), open.clone());
            let close_idle = close_idle.clone();
            async move {
                loop {
                    let (stream, _) = listener.accept().await.unwrap();
                    let hung_up = hang_up
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if hung_up {
                        drop(stream);
                        continue;
                    }
                    open.fetch_add(1, Ordering::SeqCst);
                    let (tls, received, open) = (tls.clone(), received.clone(), open.clone());
                    let close = close_idle.subscribe();
                    tokio::spawn(async move {
                        match tls {
                            None => serve(TokioIo::new(stream), addr, received, close).await,
                            Some(tls) => {
                                if let Ok(stream) = tls.accept(stream).await {
                                    serve(TokioIo::new(stream), addr, received, close).await;
                                }
                            }
                        }
                        open.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            }
        };
        Self {
            addr,
            received,
            hang_up,
            open,
            close_idle,
            task: tokio::spawn(accept),
        }
    }

    fn url(&self, proto: Proto, path: &str) -> String {
        let scheme = if matches!(proto, Proto::Http1) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// Close every idle connection, and wait until they are closed and the client's
    /// connection tasks have had the time to read the close.
    async fn close_idle(&self) {
        self.close_idle.send_modify(|n| *n += 1);
        for _ in 0..2000 {
            if self.open.load(Ordering::SeqCst) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(self.open.load(Ordering::SeqCst), 0, "idle connections left");
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn received(&self, id: &str) -> usize {
        self.received.lock().unwrap().get(id).copied().unwrap_or(0)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn acceptor(alpn: &[&[u8]]) -> tokio_rustls::TlsAcceptor {
    let certs = certs();
    let mut tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![certs.leaf.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(certs.key.clone())),
        )
        .unwrap();
    tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsAcceptor::from(Arc::new(tls))
}

/// One connection of the upstream, until it ends or is told to close when idle.
async fn serve<I>(
    io: I,
    addr: SocketAddr,
    received: Arc<Mutex<HashMap<String, usize>>>,
    mut close: tokio::sync::watch::Receiver<u64>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service =
        hyper::service::service_fn(move |request| answer(request, addr, received.clone()));
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = close.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// The upstream's answer: what it received (its own address, which differs between
/// the two runs, written as `upstream`), written back, and filler; or an error, which
/// makes hyper end the connection (HTTP/1) or the stream (HTTP/2) unanswered.
async fn answer(
    request: Request<Incoming>,
    addr: SocketAddr,
    received: Arc<Mutex<HashMap<String, usize>>>,
) -> Result<Response<Full<Bytes>>, BoxError> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let id = header("x-id");
    *received.lock().unwrap().entry(id.clone()).or_default() += 1;
    let (status, close, size) = (header("x-status"), header("x-close"), header("x-size"));
    let head = format!(
        "{} {} {:?} host={} length={} te={} id={id}\n",
        request.method(),
        request.uri(),
        request.version(),
        header("host"),
        header("content-length"),
        header("transfer-encoding"),
    )
    .replace(&addr.to_string(), "upstream");
    let version = request.version();
    let body = request.into_body().collect().await?.to_bytes();
    if header_is_set(&close, "drop") {
        return Err("no answer".into());
    }
    let mut out = head.into_bytes();
    out.extend_from_slice(&body);
    let size: usize = size.parse().unwrap_or(0);
    out.extend(id.bytes().cycle().take(size));
    let mut response = Response::builder().status(status.parse::<u16>()?);
    if header_is_set(&close, "close") && version != http::Version::HTTP_2 {
        response = response.header("connection", "close");
    }
    Ok(response.body(Full::new(Bytes::from(out)))?)
}

fn header_is_set(value: &str, word: &str) -> bool {
    value.split(',').any(|w| w == word)
}

fn request(url: String, id: &str, spec: &Spec) -> Request<Full<Bytes>> {
    let mut what = Vec::new();
    if spec.close {
        what.push("close");
    }
    if spec.drop {
        what.push("drop");
    }
    Request::builder()
        .method(spec.method.clone())
        .uri(url)
        .header("x-id", id)
        .header("x-status", spec.status)
        .header("x-size", spec.size)
        .header("x-close", what.join(","))
        .body(Full::new(Bytes::from(spec.body.clone())))
        .unwrap()
}

/// The two clients, behind one call.
enum Under {
    Pool(Arc<Pool<HttpsConnector<HttpConnector>>>),
    Legacy(Box<Client<HttpsConnector<HttpConnector>, Full<Bytes>>>),
}

impl Under {
    /// Send, and read the whole answer; `None` when there is none.
    async fn exchange(&self, request: Request<Full<Bytes>>) -> Option<(u16, Bytes)> {
        let exchange = async {
            let (response, lease) = match self {
                Self::Pool(pool) => pool.send(request).await.ok()?,
                Self::Legacy(client) => (client.request(request).await.ok()?, None),
            };
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.ok()?.to_bytes();
            if let (Self::Pool(pool), Some(lease)) = (self, lease) {
                pool.give_back(lease);
            }
            Some((status, body))
        };
        tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .expect("an answer or an error, in time")
    }
}

/// The steps through one client, against an upstream of its own.
async fn run(proto: Proto, steps: &[Step], client: Under) -> Vec<Outcome> {
    let upstream = Upstream::start(proto).await;
    let mut outcomes = Vec::new();
    for (n, step) in steps.iter().enumerate() {
        match step {
            Step::Send(spec) => {
                let id = n.to_string();
                let url = upstream.url(proto, &spec.path);
                let answer = client.exchange(request(url, &id, spec)).await;
                outcomes.push(Outcome {
                    answer,
                    received: upstream.received(&id),
                });
            }
            Step::CloseIdle => upstream.close_idle().await,
            Step::HangUp => {
                upstream.close_idle().await;
                upstream.hang_up.store(1, Ordering::SeqCst);
            }
        }
    }
    outcomes
}

fn both(proto: Proto, steps: &[Step]) -> (Vec<Outcome>, Vec<Outcome>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pool = Pool::new(connector(), 1, Duration::from_secs(90), 256);
        let ours = run(proto, steps, Under::Pool(pool)).await;
        let legacy = Client::builder(TokioExecutor::new()).build(connector());
        let theirs = run(proto, steps, Under::Legacy(Box::new(legacy))).await;
        (ours, theirs)
    })
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn the_pool_ends_each_request_as_hyper_util_s_client_does(
        proto in prop_oneof![Just(Proto::Http1), Just(Proto::Https1), Just(Proto::Http2)],
        steps in steps(),
    ) {
        let (ours, theirs) = both(proto, &steps);
        prop_assert_eq!(&ours, &theirs, "{:?}: {:?}", proto, steps);
        for outcome in &ours {
            // Never twice; and an answer only for what was received.
            prop_assert!(outcome.received <= 1, "{:?}", outcome);
            prop_assert!(outcome.answer.is_none() || outcome.received == 1, "{:?}", outcome);
        }
    }
}
