//! Kubernetes resource quantities (`80Gi`, `1.5`, `500m`, `1e3`), parsed to an exact
//! value so two spellings of one amount compare equal and amounts can be added up, as
//! `k8s.io/apimachinery/pkg/api/resource` does. Needed because the API server stores a
//! quantity in its canonical spelling (`1024Mi` comes back as `1Gi`): comparing strings
//! would make a publisher rewrite forever.

use std::fmt;
use std::str::FromStr;

/// Nano-units per unit: the finest precision a quantity can carry (the `n` suffix).
const NANOS: i128 = 1_000_000_000;

/// A parsed quantity: its value in nano-units, exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Quantity {
    nanos: i128,
}

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{value:?} is not a quantity ({reason}); use a number with an optional suffix, e.g. 80Gi, 512Mi, 4, 500m"
)]
pub struct QuantityError {
    /// The string given (shortened).
    pub value: String,
    /// What is wrong.
    pub reason: &'static str,
}

impl Quantity {
    /// A whole number of units.
    pub fn from_units(units: i64) -> Self {
        Self {
            nanos: i128::from(units) * NANOS,
        }
    }

    /// The value in nano-units.
    pub fn nanos(self) -> i128 {
        self.nanos
    }

    /// The sum, or `None` on overflow.
    pub fn checked_add(self, other: Self) -> Option<Self> {
        self.nanos
            .checked_add(other.nanos)
            .map(|nanos| Self { nanos })
    }

    /// Whether it is zero or more.
    pub fn is_non_negative(self) -> bool {
        self.nanos >= 0
    }
}

/// The factor of a suffix as (multiplier, divisor) of units.
fn suffix_factor(suffix: &str) -> Option<(i128, i128)> {
    Some(match suffix {
        "" => (1, 1),
        "n" => (1, 1_000_000_000),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (1_000_000_000, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        _ => return None,
    })
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, QuantityError> {
        let err = |reason| QuantityError {
            value: s.chars().take(64).collect(),
            reason,
        };
        if s.is_empty() {
            return Err(err("empty"));
        }
        if s.len() > 64 {
            return Err(err("longer than 64 characters"));
        }
        let (negative, rest) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_len);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(err("no digits"));
        }
        if fraction.contains('.') {
            return Err(err("two decimal points"));
        }
        // Decimal exponent (`1e3`, `5E-2`) or a suffix.
        let (multiplier, divisor, exponent) = match suffix.strip_prefix(['e', 'E']) {
            Some(exp) if !exp.is_empty() => {
                let exponent: i32 = exp.parse().map_err(|_| err("bad exponent"))?;
                if !(-9..=18).contains(&exponent) {
                    return Err(err("exponent out of range"));
                }
                (1, 1, exponent)
            }
            _ => {
                let (m, d) = suffix_factor(suffix).ok_or_else(|| err("unknown suffix"))?;
                (m, d, 0)
            }
        };
        if whole.len() + fraction.len() > 30 {
            return Err(err("too many digits"));
        }
        let digits = format!("{whole}{fraction}");
        let mantissa: i128 = digits.parse().map_err(|_| err("no digits"))?;
        // value = mantissa / 10^fraction.len() * 10^exponent * multiplier / divisor, in nanos.
        let scale = i32::try_from(fraction.len()).map_err(|_| err("too many digits"))?;
        let mut numerator = mantissa
            .checked_mul(multiplier)
            .and_then(|v| v.checked_mul(NANOS))
            .ok_or_else(|| err("too large"))?;
        let mut denominator = divisor;
        let power = exponent - scale;
        if power >= 0 {
            numerator = numerator
                .checked_mul(10i128.pow(power.unsigned_abs()))
                .ok_or_else(|| err("too large"))?;
        } else {
            denominator = denominator
                .checked_mul(10i128.pow(power.unsigned_abs()))
                .ok_or_else(|| err("too precise"))?;
        }
        if numerator % denominator != 0 {
            return Err(err("finer than a nano-unit"));
        }
        let nanos = numerator / denominator;
        Ok(Self {
            nanos: if negative { -nanos } else { nanos },
        })
    }
}

impl fmt::Display for Quantity {
    /// A plain decimal number of units (`1073741824`, `0.5`): exact, not canonical.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.nanos < 0 { "-" } else { "" };
        let abs = self.nanos.unsigned_abs();
        let units = abs / NANOS.unsigned_abs();
        let rest = abs % NANOS.unsigned_abs();
        if rest == 0 {
            write!(f, "{sign}{units}")
        } else {
            let fraction = format!("{rest:09}");
            write!(f, "{sign}{units}.{}", fraction.trim_end_matches('0'))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn q(s: &str) -> Quantity {
        s.parse().unwrap()
    }

    #[test]
    fn spellings_of_one_amount_are_equal() {
        assert_eq!(q("1Gi"), q("1024Mi"));
        assert_eq!(q("1Gi"), q("1073741824"));
        assert_eq!(q("1.5Gi"), q("1536Mi"));
        assert_eq!(q("1k"), q("1000"));
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("500m"), q("0.5"));
        assert_eq!(q("5E-1"), q("500m"));
        assert_eq!(q("+2"), q("2"));
        assert_eq!(q(".5"), q("500m"));
        assert_eq!(q("-1"), Quantity::from_units(-1));
        assert!(q("80Gi") > q("40Gi"));
        assert_eq!(q("1n").nanos(), 1);
    }

    #[test]
    fn what_is_not_a_quantity_is_refused_with_the_reason() {
        for (bad, reason) in [
            ("", "empty"),
            ("Gi", "no digits"),
            ("1.2.3", "two decimal points"),
            ("1GB", "unknown suffix"),
            ("1 Gi", "unknown suffix"),
            ("0.5n", "finer than a nano-unit"),
            ("1e99", "exponent out of range"),
            (&"9".repeat(40), "too many digits"),
        ] {
            let e = bad.parse::<Quantity>().unwrap_err();
            assert_eq!(e.reason, reason, "{bad:?}");
            assert!(e.to_string().contains("e.g. 80Gi"), "{e}");
        }
    }

    #[test]
    fn display_is_exact() {
        assert_eq!(q("1Ki").to_string(), "1024");
        assert_eq!(q("250m").to_string(), "0.25");
        assert_eq!(q("-1.5").to_string(), "-1.5");
        assert_eq!(q("1.5Gi").checked_add(q("512Mi")), Some(q("2Gi")));
    }

    proptest! {
        #[test]
        fn display_parses_back_to_the_same_value(units in -1_000_000_000i64..1_000_000_000, millis in 0i64..1000) {
            let v = q(&format!("{units}")).checked_add(q(&format!("{millis}m"))).unwrap();
            prop_assert_eq!(q(&v.to_string()), v);
        }

        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = s.parse::<Quantity>();
        }
    }
}
