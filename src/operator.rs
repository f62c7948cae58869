//! Operator commands over the ledger: `mediagate usage` and `mediagate tasks`, plain
//! tables on standard output. They read the ledger the routes file names, beside a
//! running gateway or without one.

use std::fmt::Write as _;
use std::path::Path;

use crate::calendar::{civil_from_days, days_from_civil};
use crate::config::{TaskStatus, config_dir, read_routes};
use crate::tasks::ledger::{Ledger, LedgerUrl, State, TaskRecord, UsageRow, now_ms};

const DAY_MS: i64 = 86_400_000;

/// Open the ledger of the routes file at `config`.
pub async fn open(config: &Path) -> Result<Ledger, String> {
    let file = read_routes(config).map_err(|e| e.to_string())?;
    let url = LedgerUrl::parse(&file.ledger.url, config_dir(config))
        .map_err(|e| format!("{}: ledger.url: {e}", config.display()))?;
    Ledger::open(&url, 1).await?.ok_or_else(|| {
        format!(
            "{}: the ledger is off (ledger.url = \"none\")",
            config.display()
        )
    })
}

/// `mediagate usage`: tasks per key, model and UTC day since `since` (YYYY-MM-DD;
/// the last 30 days by default).
pub async fn usage(
    ledger: &Ledger,
    key: Option<&str>,
    since: Option<&str>,
) -> Result<String, String> {
    let since_ms = match since {
        Some(date) => {
            days_from_date(date)
                .ok_or_else(|| format!("--since: `{date}` is not a date (YYYY-MM-DD)"))?
                * DAY_MS
        }
        None => (now_ms() / DAY_MS - 29) * DAY_MS,
    };
    let rows = ledger
        .usage(key, since_ms)
        .await
        .map_err(|e| e.to_string())?;
    Ok(usage_table(&rows))
}

fn usage_table(rows: &[UsageRow]) -> String {
    let mut out = String::from("DAY\tKEY\tMODEL\tSUBMITTED\tCOMPLETED\tFAILED\tVIDEO_SECONDS\n");
    for r in rows {
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}",
            date_of_days(r.day),
            r.owner,
            r.model,
            r.submitted,
            r.completed,
            r.failed,
            r.video_seconds
        );
    }
    out
}

/// `mediagate tasks`: rows newest first, optionally of one state and one key.
pub async fn tasks(
    ledger: &Ledger,
    state: Option<&str>,
    key: Option<&str>,
    limit: i64,
) -> Result<String, String> {
    let state = match state {
        None => None,
        Some(s) => Some(State::parse(s).ok_or_else(|| {
            let all: Vec<&str> = State::ALL.iter().map(|s| s.as_str()).collect();
            format!("--state: `{s}` is not one of {}", all.join(", "))
        })?),
    };
    let rows = ledger
        .tasks(state, key, limit)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = String::from("ROW\tCREATED\tSTATE\tKEY\tMODEL\tPROVIDER\tUPSTREAM_ID\tTASK_ID\n");
    for r in &rows {
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            r.id,
            timestamp(r.created_ms),
            r.state.as_str(),
            r.owner,
            r.model,
            r.provider.as_deref().unwrap_or("-"),
            r.upstream_id.as_deref().unwrap_or("-"),
            r.task_id.as_deref().unwrap_or("-"),
        );
    }
    Ok(out)
}

/// `mediagate tasks show ID`: one row, by sealed task id or upstream id.
pub async fn show(ledger: &Ledger, id: &str) -> Result<String, String> {
    let row = ledger.find(id).await.map_err(|e| e.to_string())?;
    let row = row.ok_or_else(|| format!("no task `{id}` in the ledger"))?;
    let mut text = describe(&row);
    // The webhook owed for it, if any: where it stands.
    if let Some((state, attempts, status, error)) = ledger
        .delivery_of(row.id)
        .await
        .map_err(|e| e.to_string())?
    {
        let status = status.map_or("-".into(), |s| s.to_string());
        let error = error.unwrap_or_else(|| "-".into());
        text.push_str(&format!(
            "webhook: {state}, {attempts} attempts, last answer {status}, last error {error}\n"
        ));
    }
    // The results kept in storage, if any.
    for r in ledger.results_of(row.id).await.map_err(|e| e.to_string())? {
        let kept = match r.deleted_ms {
            Some(at) => format!("deleted {}", timestamp(at)),
            None => format!("kept until {}", timestamp(r.expires_ms)),
        };
        text.push_str(&format!(
            "result {}: {}, {} bytes, {}, sha256 {}, stored {}, {kept}\n",
            r.n,
            r.object_key,
            r.bytes,
            r.content_type.as_deref().unwrap_or("-"),
            r.sha256,
            timestamp(r.stored_ms),
        ));
    }
    Ok(text)
}

fn describe(r: &TaskRecord) -> String {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let fields = [
        ("row", r.id.to_string()),
        ("state", r.state.as_str().into()),
        ("status", r.status.map_or("-", TaskStatus::as_str).into()),
        ("key", r.owner.clone()),
        ("endpoint", r.endpoint.as_str().into()),
        ("model", r.model.clone()),
        ("kind", r.kind.as_str().into()),
        ("provider", opt(&r.provider)),
        ("upstream_id", opt(&r.upstream_id)),
        ("task_id", opt(&r.task_id)),
        ("idempotency_key", opt(&r.idempotency_key)),
        ("video_seconds", r.video_seconds.to_string()),
        ("created", timestamp(r.created_ms)),
        ("updated", timestamp(r.updated_ms)),
        ("finished", r.finished_ms.map_or("-".into(), timestamp)),
        ("urls", opt(&r.urls)),
        ("error_code", opt(&r.error_code)),
        ("error_message", opt(&r.error_message)),
        (
            "answer_status",
            r.answer_status.map_or("-".into(), |s| s.to_string()),
        ),
    ];
    fields.iter().map(|(k, v)| format!("{k}: {v}\n")).collect()
}

/// `2026-11-22T04:35:34Z`.
fn timestamp(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
    format!("{}T{h:02}:{m:02}:{s:02}Z", date_of_days(days))
}

/// Days since 1970-01-01 → `YYYY-MM-DD`.
fn date_of_days(days: i64) -> String {
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `YYYY-MM-DD` → days since 1970-01-01.
fn days_from_date(date: &str) -> Option<i64> {
    let mut parts = date.splitn(3, '-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let d: i64 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let days = days_from_civil(y, m, d);
    (date_of_days(days) == date).then_some(days)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip() {
        assert_eq!(date_of_days(0), "1970-01-01");
        assert_eq!(days_from_date("1970-01-01"), Some(0));
        assert_eq!(days_from_date("2000-03-01"), Some(11_017));
        assert_eq!(date_of_days(20_414), "2025-11-22");
        for d in [-1000, 0, 59, 60, 11_016, 20_000, 40_000] {
            assert_eq!(days_from_date(&date_of_days(d)), Some(d));
        }
        for bad in ["2025-02-30", "2025-13-01", "yesterday", "2025-1"] {
            assert_eq!(days_from_date(bad), None, "{bad}");
        }
        assert_eq!(timestamp(1_763_700_000_000), "2025-11-21T04:40:00Z");
    }
}
