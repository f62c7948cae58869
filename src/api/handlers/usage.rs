//! `GET /v2/usage` and `GET /v1/alpha/usage` (`?from=YYYY-MM-DD&to=YYYY-MM-DD`, UTC
//! days, both included; `to` is today by default, `from` the first of `to`'s month; a
//! range that ends before it starts has nothing in it): the calling key's own tasks,
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
    let unavailable = |e: LedgerError| gateway.ledger_failed("usage", &e);
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

/// `from` and `to` (days since the epoch) from the query string: `to` today unless
/// given (or `from` when that is later), `from` the first day of `to`'s month unless
/// given.
fn range(query: Option<&str>, today: i64) -> Result<(i64, i64), ApiError> {
    let (mut from, mut to) = (None, None);
    for (name, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        let day = || {
            days_from_date(&value).ok_or_else(|| {
                let msg = format!("`{value}` is not a date (YYYY-MM-DD)");
                ApiError::invalid_parameter(name.to_string(), msg)
            })
        };
        match &*name {
            "from" => from = Some(day()?),
            "to" => to = Some(day()?),
            _ => {}
        }
    }
    let to = to.unwrap_or_else(|| from.map_or(today, |f| f.max(today)));
    let from = from.unwrap_or_else(|| {
        let (y, m, _) = civil_from_days(to);
        days_from_civil(y, m, 1)
    });
    Ok((from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_is_this_month_so_far_by_default() {
        let day = |d: &str| days_from_date(d).unwrap();
        let today = day("2026-11-25");
        assert_eq!(range(None, today).unwrap(), (day("2026-11-01"), today));
        let asked = range(Some("from=2026-01-01&to=2026-01-31"), today).unwrap();
        assert_eq!(asked, (day("2026-01-01"), day("2026-01-31")));
        // Only `to`: its month; only a future `from`: that day alone.
        let to = range(Some("to=2000-02-10"), today).unwrap();
        assert_eq!(to, (day("2000-02-01"), day("2000-02-10")));
        let from = range(Some("from=2027-03-05"), today).unwrap();
        assert_eq!(from, (day("2027-03-05"), day("2027-03-05")));
        // Backwards is empty, not refused.
        let backwards = range(Some("from=2026-02-01&to=2026-01-01"), today).unwrap();
        assert_eq!(backwards, (day("2026-02-01"), day("2026-01-01")));
        for bad in [
            "from=2026-13-01",
            "to=yesterday",
            "from=99999999999-01-01",
            "to=2026-02-30",
        ] {
            assert!(range(Some(bad), today).is_err(), "{bad}");
        }
    }
}
