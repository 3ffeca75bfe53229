//! Kubernetes resource quantities (`80Gi`, `1.5`, `500m`, `1e3`): kept as written and
//! compared by their exact value, as `k8s.io/apimachinery/pkg/api/resource` does. Needed
//! because the API server stores a quantity in its canonical spelling (`1024Mi` comes back
//! as `1Gi`): comparing strings would make a publisher rewrite forever.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// Nano-units per unit: the finest precision a quantity can carry (the `n` suffix).
const NANOS: i128 = 1_000_000_000;

/// A Kubernetes quantity, kept as written (`80Gi`) with its exact value. Two spellings of
/// one amount are equal (`1Gi == 1024Mi`) and order by value.
///
/// `From<&str>` takes any text, so a device's capacities read as plainly as the API's
/// YAML; text that is not a quantity has no value ([`Quantity::nanos`] is `None`) and is
/// refused, naming the device, before anything is published. [`Quantity::parse`] refuses
/// it at once.
///
/// ```
/// use dra_kubelet_plugin::Quantity;
///
/// let memory = Quantity::from("80Gi");
/// assert_eq!(memory, Quantity::from("81920Mi"));
/// assert_eq!(memory.as_str(), "80Gi");
/// assert!(Quantity::parse("80GB").is_err());
/// assert_eq!(Quantity::from("1Gi").checked_add(&Quantity::from("512Mi")), Some(Quantity::from("1.5Gi")));
/// ```
#[derive(Debug, Clone)]
pub struct Quantity {
    text: String,
    nanos: Option<i128>,
}

/// Why a string is not a quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{value:?} is not a quantity ({reason}); use a number with an optional suffix, e.g. 80Gi, 512Mi, 4, 500m"
)]
#[non_exhaustive]
pub struct QuantityError {
    /// The string given (shortened).
    pub value: String,
    /// What is wrong.
    pub reason: &'static str,
}

impl Quantity {
    /// `text` as a quantity; see the type's docs for text that is not one.
    pub fn new(text: impl Into<String>) -> Self {
        let text = text.into();
        let nanos = parse_nanos(&text).ok();
        Self { text, nanos }
    }

    /// `text`, refused unless it is a quantity.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let nanos = parse_nanos(text)?;
        Ok(Self {
            text: text.to_owned(),
            nanos: Some(nanos),
        })
    }

    /// A whole number of units.
    pub fn from_units(units: i64) -> Self {
        Self {
            text: units.to_string(),
            nanos: Some(i128::from(units) * NANOS),
        }
    }

    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The exact value in nano-units; `None` if the text is not a quantity.
    pub fn nanos(&self) -> Option<i128> {
        self.nanos
    }

    /// Why the text is not a quantity, if it is not.
    pub fn check(&self) -> Result<(), QuantityError> {
        parse_nanos(&self.text).map(|_| ())
    }

    /// The sum, written as a plain decimal number of units; `None` if either is not a
    /// quantity or the sum overflows.
    pub fn checked_add(&self, other: &Self) -> Option<Self> {
        let nanos = self.nanos?.checked_add(other.nanos?)?;
        Some(Self {
            text: decimal(nanos),
            nanos: Some(nanos),
        })
    }

    /// Whether it is a quantity of zero or more.
    pub fn is_non_negative(&self) -> bool {
        self.nanos.is_some_and(|n| n >= 0)
    }
}

impl Default for Quantity {
    /// Zero.
    fn default() -> Self {
        Self::from_units(0)
    }
}

/// By value when both are quantities, else by text.
impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        match (self.nanos, other.nanos) {
            (Some(a), Some(b)) => a == b,
            _ => self.text == other.text,
        }
    }
}

impl Eq for Quantity {}

impl Hash for Quantity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self.nanos {
            Some(n) => n.hash(state),
            None => self.text.hash(state),
        }
    }
}

/// By value; text that is not a quantity orders after every quantity, by text.
impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self.nanos, other.nanos) {
            (Some(a), Some(b)) => a.cmp(&b),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => self.text.cmp(&other.text),
        }
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl From<&str> for Quantity {
    fn from(text: &str) -> Self {
        Self::new(text)
    }
}

impl From<String> for Quantity {
    fn from(text: String) -> Self {
        Self::new(text)
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, QuantityError> {
        Self::parse(s)
    }
}

impl fmt::Display for Quantity {
    /// The text as written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A plain decimal number of units (`1073741824`, `0.5`): exact, not canonical.
fn decimal(nanos: i128) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let abs = nanos.unsigned_abs();
    let units = abs / NANOS.unsigned_abs();
    let rest = abs % NANOS.unsigned_abs();
    if rest == 0 {
        format!("{sign}{units}")
    } else {
        let fraction = format!("{rest:09}");
        format!("{sign}{units}.{}", fraction.trim_end_matches('0'))
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

/// The exact value of `s` in nano-units.
fn parse_nanos(s: &str) -> Result<i128, QuantityError> {
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
    Ok(if negative { -nanos } else { nanos })
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
        assert_eq!(q("1n").nanos(), Some(1));
        assert_eq!(q("1Gi").as_str(), "1Gi", "kept as written");
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
    fn sums_are_exact_decimals() {
        let sum = q("1Ki").checked_add(&q("250m")).unwrap();
        assert_eq!(sum.as_str(), "1024.25");
        assert_eq!(q("-1.5").checked_add(&q("0")).unwrap().as_str(), "-1.5");
        assert_eq!(q("1.5Gi").checked_add(&q("512Mi")), Some(q("2Gi")));
        assert_eq!(Quantity::from("x").checked_add(&q("1")), None);
    }

    #[test]
    fn text_that_is_not_a_quantity_compares_as_text() {
        let bad = Quantity::from("80GB");
        assert_eq!(bad.nanos(), None);
        assert_eq!(bad.check().unwrap_err().reason, "unknown suffix");
        assert_eq!(bad, Quantity::from("80GB"));
        assert_ne!(bad, q("80G"));
        assert!(q("1E") < bad, "quantities order before the rest");
        assert_eq!(Quantity::default(), q("0"));
    }

    proptest! {
        #[test]
        fn display_parses_back_to_the_same_value(units in -1_000_000_000i64..1_000_000_000, millis in 0i64..1000) {
            let v = q(&format!("{units}")).checked_add(&q(&format!("{millis}m"))).unwrap();
            prop_assert_eq!(q(&v.to_string()), v);
        }

        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = s.parse::<Quantity>();
        }
    }
}
