//! `GET /v2/usage` and `GET /v1/alpha/usage` (`?from=YYYY-MM-DD&to=YYYY-MM-DD`, UTC
//! days, both included; this month so far by default): the calling key's own tasks,
//! video seconds and spend per day and model, their totals, and what remains of its
//! budgets. The same on both paths: usage is the key's, not an endpoint's.

use http::request::Parts;
use http::{Response, StatusCode};

use crate::api::context::RequestContext;
use crate::api::shapes::{BudgetPeriod, BudgetView, UsageLine, UsageReport};
use crate::calendar::{civil_from_days, date_of_days, days_from_civil, days_from_date};
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::money::Micros;
use crate::response::{ResponseBody, json};
use crate::tasks::ledger::{LedgerError, now_ms};

const DAY_MS: i64 = 86_400_000;

/// The longest range one request may ask for, in days.
const MAX_DAYS: i64 = 366;

pub(super) async fn usage(
    gateway: &Gateway,
    ctx: &RequestContext,
    req: &Parts,
) -> Result<Response<ResponseBody>, ApiError> {
    let key = ctx.key()?;
    let Some(ledger) = gateway.tasks.ledger() else {
        return Err(ApiError::ledger_off());
    };
    let today = now_ms().div_euclid(DAY_MS);
    let (from, to) = range(req.uri.query(), today)?;
    let unavailable = |e: LedgerError| {
        gateway.metrics.ledger_errors.inc();
        tracing::warn!(error = %e, "ledger read failed: usage");
        ApiError::ledger_unavailable()
    };
    let rows = ledger
        .usage(Some(&key.name), from * DAY_MS, (to + 1) * DAY_MS)
        .await
        .map_err(unavailable)?;
    let data: Vec<UsageLine> = rows.iter().map(UsageLine::of).collect();
    let total = UsageLine::total(&data);
    let budget = match key.budget {
        None => None,
        Some(budget) => {
            let (day, month) = ledger.spent(&key.name).await.map_err(unavailable)?;
            let (y, m, _) = civil_from_days(today);
            let next_month = match m {
                12 => days_from_civil(y + 1, 1, 1),
                _ => days_from_civil(y, m + 1, 1),
            };
            let period = |limit: Option<Micros>, spent: Micros, resets_day: i64| {
                limit.map(|limit| BudgetPeriod {
                    limit,
                    spent,
                    remaining: limit.saturating_sub(spent),
                    resets_at: (resets_day * DAY_MS / 1000) as u64,
                })
            };
            Some(BudgetView {
                per_day: period(budget.per_day, day, today + 1),
                per_month: period(budget.per_month, month, next_month),
            })
        }
    };
    let report = UsageReport {
        object: "usage",
        key: &key.name,
        currency: &ctx.snapshot.billing.currency,
        from: date_of_days(from),
        to: date_of_days(to),
        data,
        total,
        budget,
    };
    Ok(json(StatusCode::OK, &report))
}

/// `from` and `to` (days since the epoch) from the query string: this month's first
/// day and today by default; `to` not before `from`, at most [`MAX_DAYS`] apart.
fn range(query: Option<&str>, today: i64) -> Result<(i64, i64), ApiError> {
    let (y, m, _) = civil_from_days(today);
    let (mut from, mut to) = (days_from_civil(y, m, 1), today);
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        let day = || {
            days_from_date(&value).ok_or_else(|| {
                let msg = format!("`{value}` is not a date (YYYY-MM-DD)");
                ApiError::invalid_parameter(name.to_string(), msg)
            })
        };
        match &*name {
            "from" => from = day()?,
            "to" => to = day()?,
            _ => {}
        }
    }
    if to < from {
        let msg = "`to` must not be before `from`".to_string();
        return Err(ApiError::invalid_parameter("to", msg));
    }
    if to - from >= MAX_DAYS {
        let msg = format!("at most {MAX_DAYS} days at once");
        return Err(ApiError::invalid_parameter("to", msg));
    }
    Ok((from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_is_this_month_by_default_and_bounded() {
        let today = days_from_date("2026-11-25").unwrap();
        let first = days_from_date("2026-11-01").unwrap();
        assert_eq!(range(None, today).unwrap(), (first, today));
        let asked = range(Some("from=2026-01-01&to=2026-01-31"), today).unwrap();
        assert_eq!(
            asked,
            (
                days_from_date("2026-01-01").unwrap(),
                days_from_date("2026-01-31").unwrap()
            )
        );
        for bad in [
            "from=2026-13-01",
            "to=yesterday",
            "from=2026-02-01&to=2026-01-01",
            "from=2020-01-01&to=2026-01-01",
        ] {
            assert!(range(Some(bad), today).is_err(), "{bad}");
        }
    }
}
