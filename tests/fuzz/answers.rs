//! Upstream answers read by the shipped and documented jq programs (routes.toml and
//! every block of docs/providers.md): any answer, JSON or not, is read into one of the
//! four statuses with bounded URLs and messages, or refused as unusable; never a panic.

use std::sync::OnceLock;

use mediagate::config::{Problems, ProviderConfig};
use mediagate::providers::document::Document;
use mediagate::providers::jq::{Jq, JqVars, from_json, parse};
use mediagate::providers::redact::{MAX_MESSAGE_CHARS, Redactor};
use mediagate::providers::status::{MAX_CODE_CHARS, MAX_URL_BYTES, MAX_URLS, StatusReader};
use mediagate::tasks::MediaKind;
use prometheus_client::metrics::counter::Counter;
use proptest::prelude::*;
use serde_json::Value;

/// Every provider block shipped or documented.
fn providers() -> Vec<(String, ProviderConfig)> {
    let root = env!("CARGO_MANIFEST_DIR");
    let routes = std::fs::read_to_string(format!("{root}/routes.toml")).unwrap();
    let guide = std::fs::read_to_string(format!("{root}/docs/providers.md")).unwrap();
    let blocks = guide
        .split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block.to_string()));
    let mut all = Vec::new();
    for text in std::iter::once(routes).chain(blocks) {
        let value: toml::Value = toml::from_str(&text).expect("valid TOML");
        if let Some(providers) = value.get("providers").and_then(toml::Value::as_table) {
            for (name, block) in providers {
                let cfg: ProviderConfig = block.clone().try_into().expect("a provider block");
                all.push((name.clone(), cfg));
            }
        }
    }
    assert!(all.len() >= 9, "{} provider blocks", all.len());
    all
}

/// The programs that read answers, compiled once.
struct Readers {
    status: Vec<(String, StatusReader)>,
    /// submit.id, submit.success, submit.status, submit.refusal, submit.error_message,
    /// result.urls of every provider.
    others: Vec<(String, Jq)>,
}

fn readers() -> &'static Readers {
    static READERS: OnceLock<Readers> = OnceLock::new();
    READERS.get_or_init(|| {
        let mut status = Vec::new();
        let mut others = Vec::new();
        for (name, cfg) in providers() {
            let mut problems = Problems::default();
            let reader =
                StatusReader::compile(&cfg.query, &mut problems.at(&name), &Counter::default());
            status.push((name.clone(), reader.expect("compiles")));
            let s = &cfg.submit;
            let programs = [
                Some(&s.id),
                s.success.as_ref(),
                s.status.as_ref(),
                s.refusal.as_ref(),
                s.error_message.as_ref(),
            ]
            .into_iter()
            .flatten()
            .chain(cfg.result.as_ref().map(|r| &r.urls));
            for code in programs {
                others.push((
                    format!("{name}: {code}"),
                    Jq::compile(code).expect("compiles"),
                ));
            }
        }
        Readers { status, others }
    })
}

/// JSON shaped like upstream answers: the keys their programs look for, nested.
fn answer() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        prop::sample::select(vec![
            "id",
            "task_id",
            "name",
            "status",
            "state",
            "task_status",
            "data",
            "output",
            "result",
            "results",
            "urls",
            "url",
            "video_url",
            "videos",
            "images",
            "content",
            "error",
            "message",
            "msg",
            "code",
            "done",
            "response",
            "progress",
            "base_resp",
            "status_code",
            "status_msg",
            "file_id",
            "generateVideoResponse",
            "generatedSamples",
            "video",
            "uri",
            "task_result",
            "reason",
            "detail",
            "file",
            "download_url",
        ])
        .prop_map(str::to_string),
        "[a-z_]{1,8}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(vec![
            "queued",
            "running",
            "succeeded",
            "SUCCEEDED",
            "Success",
            "failed",
            "PENDING",
            "IN_QUEUE",
            "processing",
            "completed",
            "done",
            "error",
            "cancelled",
            "expired",
        ])
        .prop_map(Value::from),
        "\\PC{0,40}".prop_map(Value::from),
        "https://[a-z]{1,10}\\.example/[a-z0-9/]{0,30}".prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn vars() -> JqVars {
    JqVars::new("m", "up-model", MediaKind::Video, Some("task/1"), None)
}

fn check_reads(value: &Value) -> Result<(), TestCaseError> {
    let r = readers();
    let redactor = Redactor::new(["acme".to_string()], []);
    let text = value.to_string();
    let answer = Document::new(text.as_bytes());
    prop_assert!(answer.check().is_ok());
    for (name, reader) in &r.status {
        if let Ok(state) = reader.read(name, &answer, &vars(), &redactor) {
            prop_assert!(state.urls.len() <= MAX_URLS);
            prop_assert!(
                state
                    .urls
                    .iter()
                    .all(|u| !u.is_empty() && u.len() <= MAX_URL_BYTES)
            );
            prop_assert!(state.progress.is_none_or(|p| p <= 100));
            if let Some(e) = &state.error {
                prop_assert!(e.code.chars().count() <= MAX_CODE_CHARS);
                prop_assert!(e.message.chars().count() <= MAX_MESSAGE_CHARS);
            }
        }
    }
    for (_, jq) in &r.others {
        let _ = jq.json(from_json(value), &vars());
    }
    Ok(())
}

proptest! {
    #[test]
    fn any_json_answer_is_read_or_refused(value in answer()) {
        check_reads(&value)?;
        // The same answer as the bytes an upstream sends, whole or cut short.
        let text = value.to_string();
        for cut in [text.len(), text.len() / 2, text.len().saturating_sub(1)] {
            if let Some(prefix) = text.get(..cut) {
                let answer = Document::new(prefix.as_bytes());
                if answer.check().is_ok() {
                    let r = readers();
                    for (name, reader) in &r.status {
                        let _ = reader.read(name, &answer, &vars(), &Redactor::default());
                    }
                }
            }
        }
    }

    #[test]
    fn any_bytes_are_parsed_or_refused(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse(&bytes);
    }
}

/// Nesting that would overflow jaq's recursive reader is refused before it is read.
#[test]
fn regression_deep_nesting_is_refused() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(parse(deep.as_bytes()).is_err());
}
