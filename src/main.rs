//! `mediagate`: serve the gateway, check a routes file, describe its API, or read
//! the task ledger.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mediagate::config::LogFormat;
use mediagate::config::read_routes;
use mediagate::log_format::{AccessLine, PlainFields, Style};
use mediagate::snapshot::{LoadContext, Snapshot};
use mediagate::telemetry::Telemetry;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

// jemalloc rather than glibc's malloc: hyper keeps an 8 KiB read and an 8 KiB write
// buffer per HTTP/1 connection, of which an idle connection has touched a few hundred
// bytes. jemalloc puts such blocks on their own pages, so the untouched pages never
// become resident (glibc's heap interleaves them with live data), and it returns freed
// pages to the system after a load. See docs/reliability.md, "Connections".
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "mediagate",
    version,
    about = "Gateway for asynchronous media-generation providers"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Routes file (when no subcommand is given, `serve` runs).
    #[arg(long, short, default_value = "routes.toml", global = true)]
    config: PathBuf,
    /// Log format, overriding `server.log_format`: text or json (one JSON object per line).
    #[arg(long, value_enum, env = "MEDIAGATE_LOG_FORMAT", global = true)]
    log_format: Option<LogFormatArg>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (the default).
    Serve,
    /// Validate a routes file, like `nginx -t`: exit 0, or print every problem.
    Check {
        /// File to check (defaults to --config).
        file: Option<PathBuf>,
    },
    /// The OpenAPI 3.1 document of the client API, as `/openapi.json` serves it for
    /// the routes file.
    Openapi {
        /// Write it to this file instead of standard output.
        file: Option<PathBuf>,
    },
    /// The models of the routes file with the JSON Schema of their submit bodies.
    Models {
        /// Print the parameter tables of docs/api.md instead.
        #[arg(long)]
        markdown: bool,
    },
    /// Tasks, seconds and spend per UTC day, key and model, from the ledger.
    Usage {
        /// Only this key (its name in routes.toml).
        #[arg(long)]
        key: Option<String>,
        /// From this UTC day on (YYYY-MM-DD); the last 30 days by default.
        #[arg(long)]
        since: Option<String>,
        /// Sum over the others: one line per model, per day or per key.
        #[arg(long, value_enum)]
        by: Option<UsageBy>,
    },
    /// Tasks in the ledger, newest first; `tasks show ID` prints one.
    Tasks {
        #[command(subcommand)]
        show: Option<TasksCommand>,
        /// Only tasks in this state (submitting, submitted, completed, failed,
        /// refused, unknown_outcome).
        #[arg(long)]
        state: Option<String>,
        /// Only this key's tasks.
        #[arg(long)]
        key: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
}

#[derive(Subcommand)]
enum TasksCommand {
    /// One task, by its sealed task id or its upstream id.
    Show { id: String },
    /// End a task whose submit's outcome is unknown, as the provider's records say
    /// it went, and settle its reservation (completed: at its estimate; failed: 0).
    Resolve {
        /// Its row number (`mediagate tasks --state unknown_outcome`), sealed task id
        /// or upstream id.
        id: String,
        #[arg(long, conflicts_with = "failed", required_unless_present = "failed")]
        completed: bool,
        #[arg(long)]
        failed: bool,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum UsageBy {
    Model,
    Day,
    Key,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Check { file }) => check(file.as_deref().unwrap_or(&cli.config)),
        Some(Command::Openapi { file }) => describe(&cli.config, file.as_deref(), |s| {
            let mut text = mediagate::api::openapi::document(s).to_string();
            text.push('\n');
            text
        }),
        Some(Command::Models { markdown }) => describe(&cli.config, None, |s| match markdown {
            true => mediagate::api::openapi::markdown(s),
            false => mediagate::api::openapi::models(s).to_string() + "\n",
        }),
        Some(Command::Usage { key, since, by }) => operator(&cli.config, async |opened| {
            let by = by.map(|b| match b {
                UsageBy::Model => mediagate::operator::UsageBy::Model,
                UsageBy::Day => mediagate::operator::UsageBy::Day,
                UsageBy::Key => mediagate::operator::UsageBy::Key,
            });
            mediagate::operator::usage(&opened.ledger, key.as_deref(), since.as_deref(), by).await
        }),
        Some(Command::Tasks {
            show: Some(TasksCommand::Resolve { id, completed, .. }),
            ..
        }) => operator(&cli.config, async |opened| {
            mediagate::operator::resolve(opened, &id, completed).await
        }),
        Some(Command::Tasks {
            show: Some(TasksCommand::Show { id }),
            ..
        }) => operator(&cli.config, async |opened| {
            mediagate::operator::show(opened, &id).await
        }),
        Some(Command::Tasks {
            show: None,
            state,
            key,
            limit,
        }) => operator(&cli.config, async |opened| {
            mediagate::operator::tasks(&opened.ledger, state.as_deref(), key.as_deref(), limit)
                .await
        }),
        Some(Command::Serve) | None => serve(
            &cli.config,
            cli.log_format.map(|f| match f {
                LogFormatArg::Text => LogFormat::Text,
                LogFormatArg::Json => LogFormat::Json,
            }),
        ),
    }
}

fn check(path: &Path) -> ExitCode {
    let ctx = LoadContext::default();
    match Snapshot::load(path, &ctx) {
        Ok(snapshot) => {
            println!(
                "{}: ok ({} models, {} providers, {} keys)",
                path.display(),
                snapshot.models.len(),
                snapshot.providers.len(),
                snapshot.keys.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            eprintln!("{}: check failed", path.display());
            ExitCode::FAILURE
        }
    }
}

/// Load the routes file as `check` does and print what `render` makes of it, or
/// write it to `out`.
fn describe(
    config: &Path,
    out: Option<&Path>,
    render: impl FnOnce(&Snapshot) -> String,
) -> ExitCode {
    let snapshot = match Snapshot::load(config, &LoadContext::default()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let text = render(&snapshot);
    match out {
        None => print!("{text}"),
        Some(file) => {
            if let Err(e) = std::fs::write(file, text) {
                eprintln!("cannot write {}: {e}", file.display());
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// The runtime `builder` makes, with I/O and timers; `None`, said, when it cannot.
fn runtime(mut builder: tokio::runtime::Builder) -> Option<tokio::runtime::Runtime> {
    builder
        .enable_all()
        .build()
        .inspect_err(|e| eprintln!("cannot start the runtime: {e}"))
        .ok()
}

/// Run an operator command over the ledger and print what it returns.
fn operator(
    config: &Path,
    command: impl AsyncFnOnce(&mediagate::operator::Opened) -> Result<String, String>,
) -> ExitCode {
    let Some(runtime) = runtime(tokio::runtime::Builder::new_current_thread()) else {
        return ExitCode::FAILURE;
    };
    let result = runtime.block_on(async {
        let opened = mediagate::operator::open(config).await?;
        command(&opened).await
    });
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Log lines are formatted on the thread that logs and written by a thread of their
/// own, in batches (`log_output`): workers never wait on each other for standard
/// error's lock, nor make a system call per line. Nothing is dropped; the returned
/// guard writes what is waiting when it is dropped. With `[telemetry]`, spans are
/// also exported (its guard exports what is queued when it is dropped, before the
/// log's).
fn init_logging(
    path: &Path,
    flag: Option<LogFormat>,
) -> (mediagate::log_output::Flushed, Option<Telemetry>) {
    // The format and the telemetry are read before the full load so that load
    // messages use them too; `[telemetry]` is read only here, at start.
    let file = read_routes(path).ok();
    let format = flag.unwrap_or_else(|| {
        file.as_ref()
            .map(|f| f.server.log_format)
            .unwrap_or_default()
    });
    let telemetry = match file.as_ref().map(|f| Telemetry::start(&f.telemetry)) {
        Some(Ok(t)) => t,
        Some(Err(e)) => {
            eprintln!("{e}; traces are not exported");
            None
        }
        None => None,
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let (output, flushed) = mediagate::log_output::start(std::io::stderr());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(output)
        .with_ansi(ansi);
    // The access line and (in text) span fields are written by `log_format`, the same
    // bytes as these formats.
    let text = tracing_subscriber::fmt::format::Format::default().with_ansi(ansi);
    // Sampled traces' spans are made on a dispatcher of their own (`traces.rs`): the
    // log's subscriber only hands them the warnings and errors logged within them.
    let span_events = telemetry.as_ref().map(Telemetry::span_events);
    match format {
        LogFormat::Json => {
            let json = text.json().flatten_event(true);
            let subscriber = builder
                .json()
                .flatten_event(true)
                .event_format(AccessLine::new(json, Style::Json))
                .finish();
            subscriber.with(span_events).init()
        }
        LogFormat::Text => {
            let subscriber = builder
                .fmt_fields(PlainFields::default())
                .event_format(AccessLine::new(text, Style::Text))
                .finish();
            subscriber.with(span_events).init()
        }
    }
    (flushed, telemetry)
}

fn serve(path: &Path, log_format: Option<LogFormat>) -> ExitCode {
    // Dropped in reverse order: spans are exported while the log still writes.
    let (_flushed_at_exit, _exported_at_exit) = init_logging(path, log_format);
    let Some(runtime) = runtime(tokio::runtime::Builder::new_multi_thread()) else {
        return ExitCode::FAILURE;
    };
    runtime.block_on(async {
        // Signals are taken over before the gateway is announced: SIGHUP would end the
        // process, and a SIGTERM must always mean a graceful stop.
        let hangups = mediagate::gateway::reload::hangups();
        let stop = mediagate::edge::shutdown_signal();
        let running = match mediagate::start(path).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        tokio::spawn(mediagate::gateway::reload::on_sighup(
            hangups,
            running.gateway().clone(),
        ));
        match running.until(stop).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("server error: {e}");
                ExitCode::FAILURE
            }
        }
    })
}
