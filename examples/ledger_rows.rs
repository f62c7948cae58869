//! Ledger rows for `benches/ledger_rows.sh`: a history of N tasks written straight
//! into a ledger the gateway has migrated, in its own schema, much faster than N
//! submits could make it.
//!
//! ```text
//! ledger_rows --rows 1000000 --sqlite ledger.db        # into a SQLite ledger
//! ledger_rows --rows 1000000 | psql -c 'COPY tasks (…) FROM STDIN'   # PostgreSQL
//! ```
//!
//! With `--sqlite` it drops the indexes and triggers of `tasks`, inserts the rows in
//! one transaction, creates them again (as the migrations wrote them) and fills
//! `spend` as the triggers would have; without it, it prints the rows in COPY's text
//! format (`--columns` prints the column list) and the bench does the rest in psql.
//!
//! The rows, spread deterministically (the same N gives the same ledger): ids 1..N,
//! created over `--days` days up to a minute ago, in id order; `--owners` keys
//! (`key-0000`…) equally often; three endpoints (80 % model-center); six models, two
//! of images; 85 % completed, 8 % failed, 4 % refused, 0.02 % unknown_outcome, the
//! rest completed unless younger than an hour (then submitted); an idempotency key on
//! 30 % of the rows of the last 24 hours (older ones were forgotten by the sweep);
//! 0.5 % deleted by their owner; a price on every task. Task ids are sealed with
//! `MEDIAGATE_TASK_SECRET`, so that listings and cursors open them.

use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Parser;
use mediagate::tasks::{MediaKind, TaskId, TaskSealer};

#[derive(Parser)]
struct Args {
    /// Rows to write.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Keys the rows are spread over.
    #[arg(long, default_value_t = 1_000)]
    owners: u64,
    /// Days of history.
    #[arg(long, default_value_t = 180)]
    days: u64,
    /// The SQLite ledger to write into; without it, COPY text on standard output.
    #[arg(long)]
    sqlite: Option<std::path::PathBuf>,
    /// Print the column list of the COPY text and stop.
    #[arg(long)]
    columns: bool,
    /// The secret task ids are sealed with.
    #[arg(long, env = "MEDIAGATE_TASK_SECRET", hide_env_values = true)]
    secret: String,
}

const COLUMNS: [&str; 27] = [
    "id",
    "owner",
    "endpoint",
    "model",
    "kind",
    "fingerprint",
    "idempotency_key",
    "video_seconds",
    "state",
    "status",
    "provider",
    "upstream_id",
    "task_id",
    "answer_status",
    "answer_body",
    "urls",
    "error_code",
    "error_message",
    "created_ms",
    "updated_ms",
    "finished_ms",
    "next_poll_ms",
    "poll_interval_ms",
    "progress",
    "deleted_ms",
    "cost_estimate",
    "cost_settled",
];

/// Models of the bench's routes: (name, kind).
const MODELS: [(&str, MediaKind); 6] = [
    ("bench-video", MediaKind::Video),
    ("bench-video-hd", MediaKind::Video),
    ("bench-video-lite", MediaKind::Video),
    ("bench-clip", MediaKind::Video),
    ("bench-image", MediaKind::Image),
    ("bench-image-hd", MediaKind::Image),
];

const HOUR_MS: i64 = 3_600_000;

/// One value of a row: text, an integer or NULL.
enum V {
    T(String),
    I(i64),
    N,
}

/// A well-mixed 64-bit hash of `x` (splitmix64's finaliser): every column's choice
/// is read from its own bits of the row's hash.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

struct Spread {
    rows: u64,
    owners: u64,
    first_ms: i64,
    span_ms: i64,
    now_ms: i64,
    sealer: TaskSealer,
}

impl Spread {
    fn row(&self, n: u64) -> Vec<V> {
        let h = mix(n);
        let h2 = mix(h);
        let created = self.first_ms + (self.span_ms as u128 * n as u128 / self.rows as u128) as i64;
        let age = self.now_ms - created;
        let owner = format!("key-{:04}", h % self.owners);
        let (endpoint, openai) = match (h >> 12) % 100 {
            0..80 => ("model-center", false),
            80..95 => ("alpha-videos", false),
            _ => ("openai-videos", true),
        };
        let mut m = ((h >> 20) % MODELS.len() as u64) as usize;
        if endpoint != "model-center" {
            m %= 4; // video models only
        }
        let (model, kind) = MODELS[m];
        let seconds = match kind {
            MediaKind::Video => 5 + 5 * ((h >> 28) % 2) as i64,
            MediaKind::Image => 0,
        };
        let estimate = match kind {
            MediaKind::Video => seconds * 100_000,
            MediaKind::Image => 40_000,
        };
        let state = match (h >> 32) % 10_000 {
            0..8_500 => "completed",
            8_500..9_300 => "failed",
            9_300..9_700 => "refused",
            9_700..9_702 => "unknown_outcome",
            _ if age < HOUR_MS => "submitted",
            _ => "completed",
        };
        let finished = matches!(state, "completed" | "failed" | "refused");
        let ended = created + 30_000 + (h2 % 270_000) as i64;
        let key = (age < 24 * HOUR_MS && (h2 >> 20) % 10 < 3)
            .then(|| format!("idem-{n:x}-{:08x}", h2 >> 32));
        let fingerprint = format!("{:016x}{:016x}{:016x}{:016x}", h, h2, mix(h2), mix(h2 ^ n));
        let created_upstream = !matches!(state, "refused" | "unknown_outcome");
        let upstream_id =
            created_upstream.then(|| format!("sim-{created}-{}o-{n:012x}", &kind.as_str()[..1]));
        let task_id = upstream_id.as_ref().map(|up| {
            self.sealer
                .seal(&TaskId {
                    provider: "fast".into(),
                    upstream_id: up.clone(),
                    model: model.into(),
                    kind,
                    owner: owner.clone(),
                    created: (created / 1000) as u64,
                    openai,
                })
                .expect("short fields")
        });
        let (answer_status, answer_body) = match (&task_id, state) {
            (Some(id), _) => (V::I(200), V::T(answer(id, model, kind, created))),
            (None, "refused") => (
                V::I(400),
                V::T(r#"{"error":{"code":"provider_rejected","message":"The provider refused the request: prompt_rejected","type":"invalid_request_error"}}"#.into()),
            ),
            _ => (V::N, V::N),
        };
        let status = match state {
            "completed" => V::T("completed".into()),
            "failed" => V::T("failed".into()),
            "submitted" => V::T("queued".into()),
            _ => V::N,
        };
        let ext = if kind == MediaKind::Video {
            "mp4"
        } else {
            "png"
        };
        let urls = match (state, &upstream_id) {
            ("completed", Some(up)) => V::T(format!(
                r#"["https://media.example.com/mediagate-sim/{up}.{ext}"]"#
            )),
            _ => V::N,
        };
        let (error_code, error_message) = match state {
            "failed" => (
                V::T("content_policy".into()),
                V::T("The generated video did not pass the provider's content review.".into()),
            ),
            _ => (V::N, V::N),
        };
        let (updated, finished_ms) = match finished {
            true => (ended, V::I(ended)),
            false => (created, V::N),
        };
        let polled = created_upstream.then_some(created + 5_000);
        let deleted = finished && (h2 >> 40) % 1_000 < 5;
        let settled = match state {
            "completed" => V::I(estimate),
            "failed" | "refused" => V::I(0),
            _ => V::N,
        };
        let opt = |v: Option<String>| v.map_or(V::N, V::T);
        vec![
            V::I(n as i64 + 1),
            V::T(owner),
            V::T(endpoint.into()),
            V::T(model.into()),
            V::T(kind.as_str().into()),
            V::T(fingerprint),
            opt(key),
            V::I(seconds),
            V::T(state.into()),
            status,
            V::T("fast".into()),
            opt(upstream_id),
            opt(task_id),
            answer_status,
            answer_body,
            urls,
            error_code,
            error_message,
            V::I(created),
            V::I(updated),
            finished_ms,
            polled.map_or(V::N, V::I),
            polled.map_or(V::N, |_| V::I(5_000)),
            if state == "completed" {
                V::I(100)
            } else {
                V::N
            },
            if deleted { V::I(ended + HOUR_MS) } else { V::N },
            V::I(estimate),
            settled,
        ]
    }
}

/// The submit's answer as the gateway keeps it for a replay.
fn answer(id: &str, model: &str, kind: MediaKind, created_ms: i64) -> String {
    format!(
        r#"{{"id":"{id}","object":"{}","model":"{model}","status":"queued","created":{}}}"#,
        kind.as_str(),
        created_ms / 1000
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.columns {
        println!("{}", COLUMNS.join(", "));
        return Ok(());
    }
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
    let span_ms = args.days as i64 * 24 * HOUR_MS;
    let spread = Spread {
        rows: args.rows.max(1),
        owners: args.owners.max(1),
        first_ms: now_ms - 60_000 - span_ms,
        span_ms,
        now_ms,
        sealer: TaskSealer::new(args.secret.as_bytes(), &[]),
    };
    match &args.sqlite {
        Some(path) => into_sqlite(path, &spread),
        None => copy_text(&spread),
    }
}

/// The rows in COPY's text format: tab-separated, `\N` for NULL (no value holds a
/// tab, a newline or a backslash).
fn copy_text(spread: &Spread) -> Result<(), Box<dyn std::error::Error>> {
    let mut out = BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let mut line = String::with_capacity(1024);
    for n in 0..spread.rows {
        line.clear();
        for (i, v) in spread.row(n).into_iter().enumerate() {
            if i > 0 {
                line.push('\t');
            }
            match v {
                V::T(s) => line.push_str(&s),
                V::I(x) => write!(line, "{x}")?,
                V::N => line.push_str("\\N"),
            }
        }
        line.push('\n');
        out.write_all(line.as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

fn into_sqlite(path: &std::path::Path, spread: &Spread) -> Result<(), Box<dyn std::error::Error>> {
    let mut conn = rusqlite::Connection::open(path)?;
    // The load alone is not worth a journal: a failed run is started again.
    conn.execute_batch(
        "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -1000000;",
    )?;
    let schema: Vec<(String, String, String)> = conn
        .prepare("SELECT type, name, sql FROM sqlite_master WHERE tbl_name = 'tasks' AND type IN ('index', 'trigger') AND sql IS NOT NULL")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    let tx = conn.transaction()?;
    for (kind, name, _) in &schema {
        tx.execute_batch(&format!("DROP {kind} {name}"))?;
    }
    {
        let marks = vec!["?"; COLUMNS.len()].join(", ");
        let sql = format!(
            "INSERT INTO tasks ({}) VALUES ({marks})",
            COLUMNS.join(", ")
        );
        let mut insert = tx.prepare(&sql)?;
        for n in 0..spread.rows {
            let row = spread.row(n);
            let params = row.iter().map(|v| match v {
                V::T(s) => rusqlite::types::Value::Text(s.clone()),
                V::I(x) => rusqlite::types::Value::Integer(*x),
                V::N => rusqlite::types::Value::Null,
            });
            insert.execute(rusqlite::params_from_iter(params))?;
        }
    }
    for (_, _, sql) in &schema {
        tx.execute_batch(sql)?;
    }
    tx.execute_batch(SPEND)?;
    tx.commit()?;
    conn.execute_batch("PRAGMA journal_mode = WAL;")?;
    Ok(())
}

/// What the triggers of the money migration would have made of the rows: per owner
/// and day of submission, the settled costs and the reservations of the others.
pub const SPEND: &str = "INSERT INTO spend (owner, day, micros) SELECT owner, created_ms / 86400000, SUM(COALESCE(cost_settled, cost_estimate)) FROM tasks WHERE cost_estimate IS NOT NULL GROUP BY owner, created_ms / 86400000 ON CONFLICT (owner, day) DO UPDATE SET micros = spend.micros + excluded.micros";
