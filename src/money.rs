//! Money: amounts and budgets.
//!
//! Amounts are integers of millionths of the currency unit ([`Micros`]) from the
//! moment a price program's number is read (a model's price: `models/price.rs`): the
//! ledger adds and compares them exactly, on SQLite and PostgreSQL alike. A key's
//! [`Budget`] bounds what its tasks cost per UTC day and month; the ledger decides
//! it in the transaction that writes the task's row (docs/ledger.md, "Money").

use serde::Serialize;

/// Millionths of the currency unit.
const PER_UNIT: f64 = 1_000_000.0;

/// The largest amount taken, in units: its millionths and their decimal form stay
/// exact in an `f64` (fewer than 16 digits), as JSON numbers are read.
pub const MAX_UNITS: f64 = 1e9;

/// An amount of money in millionths of the currency unit; never negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Micros(pub i64);

impl Micros {
    pub const ZERO: Self = Self(0);

    /// `units` (a price program's number, a budget of routes.toml) rounded to the
    /// nearest millionth; `None` when it is negative, not finite or absurdly large.
    pub fn from_units(units: f64) -> Option<Self> {
        if !units.is_finite() || !(0.0..=MAX_UNITS).contains(&units) {
            return None;
        }
        Some(Self((units * PER_UNIT).round() as i64))
    }

    /// The amount in units, for JSON and metrics: exact for every amount taken.
    pub fn as_units(self) -> f64 {
        self.0 as f64 / PER_UNIT
    }

    pub fn saturating_sub(self, other: Self) -> Self {
        Self(self.0.saturating_sub(other.0).max(0))
    }
}

impl std::fmt::Display for Micros {
    /// Decimal, without trailing zeros: `12.5`, `0.000001`, `3`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (units, fraction) = (self.0 / 1_000_000, self.0 % 1_000_000);
        if fraction == 0 {
            return write!(f, "{units}");
        }
        let digits = format!("{fraction:06}");
        write!(f, "{units}.{}", digits.trim_end_matches('0'))
    }
}

impl Serialize for Micros {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.as_units())
    }
}

/// A key's budget, in millionths; `None`: that period is not bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Budget {
    pub per_day: Option<Micros>,
    pub per_month: Option<Micros>,
}

/// The period of a budget a submit did not fit in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Day,
    Month,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Day => "per_day",
            Self::Month => "per_month",
        }
    }
}

impl Budget {
    /// The period `cost` does not fit in, given what was spent (and reserved) in the
    /// current day and month; with what remains of it. The month when it fits in
    /// neither: the day's reset would not let it in, so the month's is the one to
    /// wait for.
    pub fn exceeded(
        &self,
        spent_day: Micros,
        spent_month: Micros,
        cost: Micros,
    ) -> Option<(Period, Micros)> {
        for (period, limit, spent) in [
            (Period::Month, self.per_month, spent_month),
            (Period::Day, self.per_day, spent_day),
        ] {
            if let Some(limit) = limit
                && spent.0.saturating_add(cost.0) > limit.0
            {
                return Some((period, limit.saturating_sub(spent)));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_are_millionths_written_back_exactly() {
        assert_eq!(Micros::from_units(0.1), Some(Micros(100_000)));
        assert_eq!(Micros::from_units(12.345_678_9), Some(Micros(12_345_679)));
        assert_eq!(Micros::from_units(-0.01), None);
        assert_eq!(Micros::from_units(f64::NAN), None);
        assert_eq!(Micros::from_units(2e9), None);
        assert_eq!(Micros(12_500_000).to_string(), "12.5");
        assert_eq!(Micros(1).to_string(), "0.000001");
        assert_eq!(Micros(3_000_000).to_string(), "3");
        // The JSON number is the decimal itself.
        for m in [1, 100_000, 12_345_679, 999_999_999_999_999] {
            let json = serde_json::to_string(&Micros(m)).unwrap();
            let back: f64 = json.parse().unwrap();
            assert_eq!(Micros::from_units(back), Some(Micros(m)), "{json}");
        }
    }

    #[test]
    fn a_budget_is_exceeded_by_the_period_whose_reset_lets_the_cost_in() {
        let budget = Budget {
            per_day: Some(Micros(10)),
            per_month: Some(Micros(15)),
        };
        assert_eq!(budget.exceeded(Micros(5), Micros(5), Micros(5)), None);
        assert_eq!(
            budget.exceeded(Micros(6), Micros(6), Micros(5)),
            Some((Period::Day, Micros(4)))
        );
        // In neither: tomorrow it would not fit either, the next month it would.
        assert_eq!(
            budget.exceeded(Micros(8), Micros(14), Micros(5)),
            Some((Period::Month, Micros(1)))
        );
        assert_eq!(
            budget.exceeded(Micros(0), Micros(12), Micros(5)),
            Some((Period::Month, Micros(3)))
        );
        assert_eq!(
            Budget::default().exceeded(Micros(9), Micros(9), Micros(9)),
            None
        );
    }
}
