//! Kubernetes quantities as apimachinery's `resource.Quantity` keeps them: an exact
//! value (here in nano-units, the finest scale the API keeps) and the format it was
//! written in, which decides how it is written back (`Quantity.String`, the canonical
//! form every API server answers with: `1024Mi` comes back as `1Gi`).

use std::fmt;

use crate::cluster::node_fit::parse_quantity;

const NANO: i128 = 1_000_000_000;
const MILLI_PER_NANO: i128 = 1_000_000;

/// How a quantity is written (`resource.Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `Ki`, `Mi`, … (powers of 1024).
    BinarySI,
    /// `m`, ``, `k`, `M`, … (powers of 1000).
    DecimalSI,
    /// `e3`, `E6`, …
    DecimalExponent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

impl Quantity {
    /// `None` when `text` is no quantity (or one too large to hold).
    pub fn parse(text: &str) -> Option<Self> {
        let nanos = parse_quantity(text)?;
        let suffix = text
            .trim()
            .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '+' || c == '-');
        let format = if suffix.ends_with('i') {
            Format::BinarySI
        } else if suffix.len() > 1 && suffix.starts_with(['e', 'E']) {
            Format::DecimalExponent
        } else {
            Format::DecimalSI
        };
        Some(Self { nanos, format })
    }

    pub fn from_nanos(nanos: i128, format: Format) -> Self {
        Self { nanos, format }
    }

    pub fn nanos(self) -> i128 {
        self.nanos
    }

    pub fn format(self) -> Format {
        self.format
    }

    /// `Quantity.Value()`: rounded up to a whole unit.
    pub fn value(self) -> i128 {
        ceil_div(self.nanos, NANO)
    }

    /// `Quantity.MilliValue()`: rounded up to a milli-unit.
    pub fn milli_value(self) -> i128 {
        ceil_div(self.nanos, MILLI_PER_NANO)
    }

    /// Whether the value is a whole number of milli-units (upstream's `safeMilliValue`
    /// succeeds: lossless and within int64).
    pub fn is_exact_milli(self) -> bool {
        self.nanos % MILLI_PER_NANO == 0 && i64::try_from(self.milli_value()).is_ok()
    }
}

fn ceil_div(n: i128, d: i128) -> i128 {
    let q = n.div_euclid(d);
    if n.rem_euclid(d) == 0 { q } else { q + 1 }
}

/// The canonical form (`Quantity.CanonicalizeBytes`): decimal with an exponent that is
/// a multiple of 3, or a power of 1024 for a whole `BinarySI` value of at least 1024.
impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let whole_binary = self.format == Format::BinarySI
            && self.nanos.abs() >= 1024 * NANO
            && self.nanos % NANO == 0;
        if whole_binary {
            const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
            let mut amount = self.nanos / NANO;
            let mut power = 0;
            while amount % 1024 == 0 && power + 1 < SUFFIXES.len() {
                amount /= 1024;
                power += 1;
            }
            return write!(f, "{amount}{}", SUFFIXES[power]);
        }
        let mut mantissa = self.nanos;
        let mut exponent: i32 = -9;
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        match exponent.rem_euclid(3) {
            1 => {
                mantissa *= 10;
                exponent -= 1;
            }
            2 => {
                mantissa *= 100;
                exponent -= 2;
            }
            _ => {}
        }
        let decimal_suffix = match exponent {
            -9 => Some("n"),
            -6 => Some("u"),
            -3 => Some("m"),
            0 => Some(""),
            3 => Some("k"),
            6 => Some("M"),
            9 => Some("G"),
            12 => Some("T"),
            15 => Some("P"),
            18 => Some("E"),
            _ => None,
        };
        match (self.format, decimal_suffix) {
            (Format::DecimalExponent, _) | (_, None) if exponent != 0 => {
                write!(f, "{mantissa}e{exponent}")
            }
            (_, suffix) => write!(f, "{mantissa}{}", suffix.unwrap_or_default()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        Quantity::parse(text).unwrap().to_string()
    }

    #[test]
    fn quantities_come_back_in_apimachinerys_canonical_form() {
        for (written, canonical_form) in [
            ("0", "0"),
            ("0Gi", "0"),
            ("80Gi", "80Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("512", "512"),
            ("1000Ki", "1000Ki"),
            ("0.5Ki", "512"),
            ("1500", "1500"),
            ("2000", "2k"),
            ("0.5", "500m"),
            ("100m", "100m"),
            ("1.5", "1500m"),
            ("0.1m", "100u"),
            ("5n", "5n"),
            ("1e3", "1e3"),
            ("1E6", "1e6"),
            ("1500e0", "1500"),
            ("12e2", "1200"),
            ("1000e-3", "1"),
            ("3G", "3G"),
            ("2E", "2E"),
        ] {
            assert_eq!(canonical(written), canonical_form, "{written}");
        }
    }

    #[test]
    fn value_and_milli_value_round_up_as_apimachinery_does() {
        let q = Quantity::parse("1500m").unwrap();
        assert_eq!((q.value(), q.milli_value()), (2, 1500));
        let q = Quantity::parse("1u").unwrap();
        assert_eq!((q.value(), q.milli_value()), (1, 1));
        assert!(!q.is_exact_milli());
        assert!(Quantity::parse("250m").unwrap().is_exact_milli());
        assert!(Quantity::parse("x").is_none());
    }
}
