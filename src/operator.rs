//! Operator commands over the ledger: `mediagate usage` and `mediagate tasks`, plain
//! tables on standard output. They read the ledger the routes file names, beside a
//! running gateway or without one.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::calendar::{date_of_days, days_from_date};
use crate::config::{RoutesFile, TaskStatus, config_dir, read_routes};
use crate::money::Micros;
use crate::snapshot::task_sealer;
use crate::tasks::ledger::{Ledger, LedgerUrl, State, TaskRecord, UsageRow, now_ms};

const DAY_MS: i64 = 86_400_000;

/// The ledger of a routes file, with the file itself: what an id an operator gives
/// is opened with.
pub struct Opened {
    pub ledger: Ledger,
    routes: RoutesFile,
    dir: PathBuf,
}

/// Open the ledger of the routes file at `config`.
pub async fn open(config: &Path) -> Result<Opened, String> {
    let routes = read_routes(config).map_err(|e| e.to_string())?;
    let dir = config_dir(config).to_path_buf();
    let url = LedgerUrl::parse(&routes.ledger.url, &dir)
        .map_err(|e| format!("{}: ledger.url: {e}", config.display()))?;
    let ledger = Ledger::open(&url, 1).await?.ok_or_else(|| {
        format!(
            "{}: the ledger is off (ledger.url = \"none\")",
            config.display()
        )
    })?;
    Ok(Opened {
        ledger,
        routes,
        dir,
    })
}

/// What `mediagate usage --by` sums over: the other two of day, key and model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageBy {
    Model,
    Day,
    Key,
}

/// `mediagate usage`: tasks, seconds and spend per UTC day, key and model since
/// `since` (YYYY-MM-DD; the last 30 days by default), or summed `by` one of them.
pub async fn usage(
    ledger: &Ledger,
    key: Option<&str>,
    since: Option<&str>,
    by: Option<UsageBy>,
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
        .usage(key, since_ms, i64::MAX)
        .await
        .map_err(|e| e.to_string())?;
    Ok(match by {
        None => usage_table(&rows),
        Some(by) => usage_sums(&rows, by),
    })
}

fn usage_table(rows: &[UsageRow]) -> String {
    let mut out = String::from(
        "DAY\tKEY\tMODEL\tSUBMITTED\tCOMPLETED\tFAILED\tVIDEO_SECONDS\tSPENT\tRESERVED\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            date_of_days(r.day),
            r.owner,
            r.model,
            r.submitted,
            r.completed,
            r.failed,
            r.video_seconds,
            Micros(r.spent),
            Micros(r.reserved),
        );
    }
    out
}

/// The rows summed per model, day or key, in that column's order.
fn usage_sums(rows: &[UsageRow], by: UsageBy) -> String {
    let mut sums: std::collections::BTreeMap<String, [i64; 6]> = Default::default();
    for r in rows {
        let name = match by {
            UsageBy::Model => r.model.clone(),
            UsageBy::Day => date_of_days(r.day),
            UsageBy::Key => r.owner.clone(),
        };
        let sum = sums.entry(name).or_default();
        let values = [
            r.submitted,
            r.completed,
            r.failed,
            r.video_seconds,
            r.spent,
            r.reserved,
        ];
        for (total, v) in sum.iter_mut().zip(values) {
            *total = total.saturating_add(v);
        }
    }
    let head = match by {
        UsageBy::Model => "MODEL",
        UsageBy::Day => "DAY",
        UsageBy::Key => "KEY",
    };
    let mut out = format!("{head}\tSUBMITTED\tCOMPLETED\tFAILED\tVIDEO_SECONDS\tSPENT\tRESERVED\n");
    for (name, [submitted, completed, failed, seconds, spent, reserved]) in sums {
        let _ = writeln!(
            out,
            "{name}\t{submitted}\t{completed}\t{failed}\t{seconds}\t{}\t{}",
            Micros(spent),
            Micros(reserved),
        );
    }
    out
}

/// `mediagate tasks resolve ID --completed|--failed`: an `unknown_outcome` task ended
/// as the operator found it went at the provider, its reservation settled (completed:
/// at its estimate, the provider's answer being unknown here; failed: 0).
pub async fn resolve(opened: &Opened, id: &str, completed: bool) -> Result<String, String> {
    let ledger = &opened.ledger;
    let row = match id.parse::<i64>() {
        Ok(row) => ledger.row(row).await.map_err(|e| e.to_string())?,
        Err(_) => find(opened, id).await?,
    }
    .ok_or_else(|| format!("no task `{id}` in the ledger"))?;
    if row.state != State::UnknownOutcome {
        return Err(format!(
            "task {} is {}, not unknown_outcome: only a task whose outcome is unknown is resolved",
            row.id,
            row.state.as_str()
        ));
    }
    let resolved = ledger
        .resolve(row.id, completed, None)
        .await
        .map_err(|e| e.to_string())?;
    if !resolved {
        return Err(format!("task {} changed meanwhile; look again", row.id));
    }
    let after = ledger.row(row.id).await.map_err(|e| e.to_string())?;
    let cost = after
        .and_then(|r| r.cost_settled)
        .map_or("no price".to_string(), |c| {
            format!("settled at {}", Micros(c))
        });
    let state = if completed { "completed" } else { "failed" };
    Ok(format!("task {} resolved as {state}; {cost}\n", row.id))
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

/// One task by the id an operator gives: a sealed task id or an upstream id. Found
/// through the (provider, upstream id) index when the id opens with the task secret
/// of the routes file or is the upstream id of one of its providers' tasks; only
/// otherwise is the whole ledger read for it (gigabytes at 10 M rows).
async fn find(opened: &Opened, id: &str) -> Result<Option<TaskRecord>, String> {
    let ledger = &opened.ledger;
    let sealed = task_sealer(&opened.routes, &opened.dir).and_then(|s| s.open(id));
    let upstream = sealed
        .iter()
        .map(|t| (t.provider.as_str(), t.upstream_id.as_str()));
    let named = opened.routes.providers.keys().map(|p| (p.as_str(), id));
    for (provider, upstream_id) in upstream.chain(named) {
        let row = ledger.by_upstream(provider, upstream_id).await;
        if let Some(row) = row.map_err(|e| e.to_string())? {
            return Ok(Some(row));
        }
    }
    ledger.find(id).await.map_err(|e| e.to_string())
}

/// `mediagate tasks show ID`: one row, by sealed task id or upstream id.
pub async fn show(opened: &Opened, id: &str) -> Result<String, String> {
    let ledger = &opened.ledger;
    let row = find(opened, id).await?;
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
