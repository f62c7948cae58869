//! The upstream connection pool against upstreams that end their connections: a
//! closed idle connection is never written to, and a connection the upstream said it
//! would close is not kept.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{
    Answer, DEMO, Gateway, Http, MODEL_CENTER, Routes, done_task_with_files, eventually, family,
    tasks_provider,
};

/// How a [`ClosingUpstream`] ends a connection after its first answer.
#[derive(Clone, Copy)]
enum Ending {
    /// Says nothing, and closes the connection this long after the answer (as an
    /// upstream's idle timeout does).
    Silently(Duration),
    /// Answers with `connection: close` and closes at once.
    Announced,
}

/// One connection as the upstream saw it.
#[derive(Default)]
struct Seen {
    /// The requests read on it, as `METHOD path body`.
    requests: Vec<String>,
    closed: bool,
}

type Connections = Arc<Mutex<Vec<Seen>>>;

/// An HTTP/1.1 upstream written by hand, so that when it closes is the test's to say:
/// each connection gets one answer (`{"id": "t<n>"}`, n counting requests), then ends.
struct ClosingUpstream {
    addr: SocketAddr,
    /// In the order accepted.
    connections: Connections,
}

impl ClosingUpstream {
    async fn start(ending: Ending) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Connections::default();
        let seen = connections.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let n = {
                    let mut all = seen.lock().unwrap();
                    all.push(Seen::default());
                    all.len() - 1
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    Self::serve_one(stream, n, &seen, ending).await;
                    seen.lock().unwrap()[n].closed = true;
                });
            }
        });
        Self { addr, connections }
    }

    async fn serve_one(mut stream: TcpStream, n: usize, seen: &Mutex<Vec<Seen>>, ending: Ending) {
        let Some(request) = read_request(&mut stream).await else {
            return;
        };
        let requests = {
            let mut all = seen.lock().unwrap();
            all[n].requests.push(request);
            all.iter().map(|c| c.requests.len()).sum::<usize>()
        };
        let body = json!({"id": format!("t{requests}")}).to_string();
        let connection = match ending {
            Ending::Silently(_) => "keep-alive",
            Ending::Announced => "close",
        };
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: {connection}\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(answer.as_bytes()).await.unwrap();
        if let Ending::Silently(after) = ending {
            tokio::time::sleep(after).await;
        }
        // Whatever came after the answer (a second request) is left unread: closed on.
    }

    /// Each connection's requests (`METHOD path body`), in the order accepted.
    fn requests(&self) -> Vec<Vec<String>> {
        let all = self.connections.lock().unwrap();
        all.iter().map(|c| c.requests.clone()).collect()
    }

    fn closed(&self) -> usize {
        let all = self.connections.lock().unwrap();
        all.iter().filter(|c| c.closed).count()
    }

    fn routes(&self) -> Routes {
        // One worker, so that every submit could be given the same pooled connection.
        Routes::new()
            .server("workers = 1")
            .provider(tasks_provider("up", &format!("http://{}", self.addr), ""))
            .family(family("f", &["up"], &["m1"]))
    }
}

/// One request's `METHOD path body`, or `None` when the connection ends first.
async fn read_request(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let line = head.lines().next()?.rsplit_once(' ')?.0.to_string();
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]);
    Some(format!("{line} {body}"))
}

const SUBMIT: &str = r#"POST /tasks {"model":"m1","prompt":"p"}"#;

/// The `round`th submit, answered 200.
async fn submit_ok(http: &Http, round: usize) {
    let r = http
        .post_json(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    assert_eq!(r.status, 200, "submit {round}: {:?}", r.text());
}

/// An upstream that closes idle connections (as nginx's `keepalive_timeout` does):
/// the next submit goes out on a new connection and succeeds, sent once.
#[tokio::test]
async fn a_connection_the_upstream_closed_while_idle_is_not_used_again() {
    let up = ClosingUpstream::start(Ending::Silently(Duration::from_millis(50))).await;
    let gw = Gateway::start(up.routes()).await;
    let http = gw.client();
    for round in 1..=3 {
        submit_ok(&http, round).await;
        eventually("the upstream closed the connection", async || {
            up.closed() == round
        })
        .await;
        // Time for the gateway to read the close before the next submit.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(up.requests(), vec![vec![SUBMIT.to_string()]; 3]);
}

/// An answer with `connection: close`: the connection is not pooled, so submits sent
/// back to back each get a new one, and all succeed.
#[tokio::test]
async fn a_connection_the_upstream_announced_closing_is_not_kept() {
    let up = ClosingUpstream::start(Ending::Announced).await;
    let gw = Gateway::start(up.routes()).await;
    let http = gw.client();
    for round in 1..=3 {
        submit_ok(&http, round).await;
    }
    assert_eq!(up.requests(), vec![vec![SUBMIT.to_string()]; 3]);
}

/// A streamed answer (the content route) gives its connection back once read to its
/// end: the submit, the query and two content fetches all go over one connection.
#[tokio::test]
async fn a_streamed_answer_gives_its_connection_back() {
    let (fake, gw) = done_task_with_files("workers = 1").await;
    let http = gw.client();
    fake.on(
        "GET /files/t1",
        Answer::raw(200, "video/mp4", vec![7u8; 100_000]),
    );
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    let done = http.query(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    for _ in 0..2 {
        let r = http
            .get(&format!("{MODEL_CENTER}/{id}/content"), DEMO)
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.body.len(), 100_000);
    }
    let seen = fake.take();
    let lines: Vec<String> = seen.iter().map(|s| s.line()).collect();
    assert_eq!(
        lines,
        [
            "POST /tasks",
            "GET /tasks/t1",
            "GET /files/t1",
            "GET /files/t1"
        ]
    );
    assert!(
        seen.iter().all(|s| s.peer == seen[0].peer),
        "one upstream connection: {:?}",
        seen.iter().map(|s| s.peer).collect::<Vec<_>>()
    );
}
