//! Kubernetes resource quantities (`100m`, `1.5Gi`, `1e3`) parsed and re-emitted exactly as Go's
//! `resource.Quantity` does. Shared by the SidecarSet hash (computed over Go's JSON encoding of the
//! containers, which writes every quantity in Go's form), StatefulSet volume expansion and the
//! simulated kubelet. Go's form:
//! - a string that Go parses on its fast path and finds already canonical is kept verbatim (`"+1"` and
//!   `"007"` stay as written);
//! - everything else is written in canonical form: no fraction, the largest suffix that loses nothing
//!   (`1.5` → `1500m`, `1.5Gi` → `1536Mi`, `1000` → `1k`, `12e2` → `1200`).
//!
//! Values are exact decimals (mantissa × 10^exponent); precision below 1n is rounded up to 1n, as Go does.

use std::cmp::Ordering;

/// The suffix family a quantity was written with; Go re-emits in the same family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    DecimalSi,
    BinarySi,
    DecimalExponent,
}

/// A parsed quantity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    /// Magnitude = mantissa × 10^exponent, mantissa without trailing zeros (or 0).
    mantissa: u128,
    exponent: i32,
    format: Format,
    /// The input, when Go keeps it verbatim (already canonical on Go's int64 fast path).
    verbatim: Option<String>,
}

const NANO: i32 = -9;

/// The largest decimal exponent of a parsed quantity: far beyond any resource, and small enough that no
/// sum or difference of two exponents overflows.
const MAX_EXPONENT: i32 = 1 << 29;

fn decimal_suffix(exponent: i32) -> Option<&'static str> {
    Some(match exponent {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => return None,
    })
}

const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

fn pow10(n: u32) -> Option<u128> {
    10u128.checked_pow(n)
}

/// mantissa × 10^exponent as an integer when the exponent is not negative.
fn scale_up(mantissa: u128, exponent: i32) -> Option<u128> {
    if exponent < 0 {
        return None;
    }
    mantissa.checked_mul(pow10(exponent.unsigned_abs())?)
}

fn normalize(mut mantissa: u128, mut exponent: i32) -> (u128, i32) {
    if mantissa == 0 {
        return (0, 0);
    }
    while mantissa.is_multiple_of(10) {
        mantissa /= 10;
        exponent += 1;
    }
    (mantissa, exponent)
}

/// Splits Go's way: sign, numerator digits (leading zeros stripped), denominator digits, suffix.
fn split(text: &str) -> Result<(bool, &str, &str, &str), String> {
    let bytes = text.as_bytes();
    let mut pos = 0;
    let mut negative = false;
    if let Some(&first) = bytes.first() {
        if first == b'-' {
            negative = true;
            pos += 1;
        } else if first == b'+' {
            pos += 1;
        }
    }
    while pos < bytes.len() && bytes[pos] == b'0' {
        pos += 1;
    }
    let num_start = pos;
    while pos < bytes.len() && bytes[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = &text[num_start..pos];
    let mut denom = "";
    if pos < bytes.len() && bytes[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &text[start..pos];
    }
    let suffix_start = pos;
    while pos < bytes.len() && b"eEinumkKMGTP".contains(&bytes[pos]) {
        pos += 1;
    }
    if pos < bytes.len() && (bytes[pos] == b'-' || bytes[pos] == b'+') {
        pos += 1;
    }
    while pos < bytes.len() && bytes[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < bytes.len() {
        return Err(format!(
            "quantity {text:?} must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        ));
    }
    Ok((negative, num, denom, &text[suffix_start..]))
}

/// (base, exponent, format) of a suffix: 10^exponent or 2^exponent.
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    if let Some(exp) = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    } {
        return Some((2, exp, Format::BinarySi));
    }
    for e in [-9, -6, -3, 0, 3, 6, 9, 12, 15, 18] {
        if decimal_suffix(e) == Some(suffix) {
            return Some((10, e, Format::DecimalSi));
        }
    }
    let rest = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))?;
    let exponent = rest.parse::<i32>().ok()?;
    Some((10, exponent, Format::DecimalExponent))
}

impl Quantity {
    /// Parses a quantity (surrounding whitespace is ignored, as Go's JSON decoding does).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err(
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'".into()
            );
        }
        let (negative, num, denom, suffix) = split(text)?;
        let num = if num.is_empty() { "0" } else { num };
        let Some((base, exponent, format)) = interpret(suffix) else {
            return Err(format!("unable to parse quantity's suffix in {text:?}"));
        };
        let verbatim = fast_path_verbatim(text, num, denom, base, exponent, format);

        // Exact value: digits × 10^-len(denom) × multiplier.
        let digits = format!("{num}{denom}");
        let too_big = || format!("quantity {text:?} is too large");
        let mut mantissa: u128 = digits.parse().map_err(|_| too_big())?;
        let mut exp10 = -(denom.len() as i32);
        if base == 10 {
            exp10 = exp10.checked_add(exponent).ok_or_else(too_big)?;
        } else {
            mantissa = mantissa
                .checked_mul(1u128 << exponent)
                .ok_or_else(too_big)?;
        }
        // Beyond this the exponent arithmetic (normalising, differences of two exponents) could
        // overflow; no resource comes near 10^(2^29). (Tiny values round up to 1n below.)
        if exp10 > MAX_EXPONENT {
            return Err(too_big());
        }
        let (mut mantissa, mut exp10) = normalize(mantissa, exp10);
        // Round anything finer than 1n up to 1n (away from zero).
        if exp10 < NANO {
            let drop = (NANO - exp10).unsigned_abs();
            let divisor = pow10(drop);
            let (quotient, exact) = match divisor {
                Some(d) => (mantissa / d, mantissa.is_multiple_of(d)),
                None => (0, false),
            };
            mantissa = if exact { quotient } else { quotient + 1 };
            (mantissa, exp10) = normalize(mantissa, NANO);
        }
        let mut format = format;
        if format == Format::BinarySi {
            // Go caps binary quantities at 2^63-1 and shows fractions below 1 in decimal.
            let max = i64::MAX as u128;
            if scale_up(mantissa, exp10).is_none_or(|v| v > max) && exp10 >= 0 {
                (mantissa, exp10) = normalize(max, 0);
            }
            if exp10 < 0 && mantissa != 0 && scale_down_lt_one(mantissa, exp10) {
                format = Format::DecimalSi;
            }
        }
        Ok(Self {
            negative: negative && mantissa != 0,
            mantissa,
            exponent: exp10,
            format,
            verbatim,
        })
    }

    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// The quantity mantissa × 10^exponent (`negative` ignored for zero), written in `format`'s family.
    /// Never kept verbatim: it prints in canonical form.
    pub fn from_decimal(negative: bool, mantissa: u128, exponent: i32, format: Format) -> Self {
        let (mantissa, exponent) = normalize(mantissa, exponent);
        Self {
            negative: negative && mantissa != 0,
            mantissa,
            exponent,
            format,
            verbatim: None,
        }
    }

    /// The exact value as (negative, mantissa, exponent): mantissa × 10^exponent, the mantissa without
    /// trailing zeros.
    pub fn decimal_parts(&self) -> (bool, u128, i32) {
        (self.negative, self.mantissa, self.exponent)
    }

    /// The suffix family the quantity prints in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The exact sum, `None` when it does not fit. As Go's `Quantity.Add`, the sum keeps `self`'s
    /// format, or takes `other`'s when `self` is zero.
    pub fn checked_add(&self, other: &Self) -> Option<Self> {
        let common = self.exponent.min(other.exponent);
        let signed = |q: &Self| -> Option<i128> {
            let magnitude = i128::try_from(scale_up(q.mantissa, q.exponent - common)?).ok()?;
            Some(if q.negative { -magnitude } else { magnitude })
        };
        let sum = signed(self)?.checked_add(signed(other)?)?;
        let format = if self.is_zero() {
            other.format
        } else {
            self.format
        };
        Some(Self::from_decimal(
            sum < 0,
            sum.unsigned_abs(),
            common,
            format,
        ))
    }

    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// Go's `RoundUp(Milli)` as applied by `SetDefaults_ResourceList`: precision finer than 1m is rounded
    /// up (away from zero) to 1m.
    pub fn round_up_to_milli(&mut self) {
        if self.exponent >= -3 || self.mantissa == 0 {
            return;
        }
        self.verbatim = None;
        let drop = (-3 - self.exponent).unsigned_abs();
        let (quotient, exact) = match pow10(drop) {
            Some(d) => (self.mantissa / d, self.mantissa.is_multiple_of(d)),
            None => (0, false),
        };
        let mantissa = if exact { quotient } else { quotient + 1 };
        (self.mantissa, self.exponent) = normalize(mantissa, -3);
    }

    /// The string Go's JSON encoding writes for this quantity.
    pub fn go_string(&self) -> String {
        if let Some(text) = &self.verbatim {
            return text.clone();
        }
        self.canonical()
    }

    /// Go's canonical form.
    pub fn canonical(&self) -> String {
        if self.mantissa == 0 {
            return "0".into();
        }
        let sign = if self.negative { "-" } else { "" };
        if self.format == Format::BinarySi
            && let Some(value) = scale_up(self.mantissa, self.exponent)
            && value >= 1024
        {
            let (mut value, mut power) = (value, 0);
            while power < 6 && value.is_multiple_of(1024) {
                value /= 1024;
                power += 1;
            }
            return format!("{sign}{value}{}", BINARY_SUFFIXES[power]);
        }
        // Decimal: lower the exponent to a multiple of three.
        let (mut mantissa, mut exponent) = (self.mantissa, self.exponent);
        while exponent.rem_euclid(3) != 0 {
            match mantissa.checked_mul(10) {
                Some(m) => mantissa = m,
                None => break,
            }
            exponent -= 1;
        }
        let format = if self.format == Format::BinarySi {
            Format::DecimalSi
        } else {
            self.format
        };
        let suffix = match (format, decimal_suffix(exponent)) {
            (Format::DecimalSi, Some(suffix)) => suffix.to_string(),
            // Go has no suffix beyond E (it would print a wrong value); write an exponent instead.
            (_, _) if exponent == 0 => String::new(),
            _ => format!("e{exponent}"),
        };
        format!("{sign}{mantissa}{suffix}")
    }

    /// The value as a float (for expression checks and comparisons of huge values).
    pub fn as_f64(&self) -> f64 {
        let value = self.mantissa as f64 * 10f64.powi(self.exponent);
        if self.negative { -value } else { value }
    }

    /// Exact comparison of values.
    pub fn cmp_value(&self, other: &Self) -> Ordering {
        let sign = |q: &Self| {
            if q.mantissa == 0 {
                0
            } else if q.negative {
                -1
            } else {
                1
            }
        };
        match sign(self).cmp(&sign(other)) {
            Ordering::Equal if sign(self) == 0 => Ordering::Equal,
            Ordering::Equal => {
                let common = self.exponent.min(other.exponent);
                let a = scale_up(self.mantissa, self.exponent - common);
                let b = scale_up(other.mantissa, other.exponent - common);
                let magnitude = match (a, b) {
                    (Some(a), Some(b)) => a.cmp(&b),
                    _ => self.as_f64().abs().total_cmp(&other.as_f64().abs()),
                };
                if self.negative {
                    magnitude.reverse()
                } else {
                    magnitude
                }
            }
            unequal => unequal,
        }
    }
}

/// Whether mantissa × 10^exponent (exponent < 0) is below 1.
fn scale_down_lt_one(mantissa: u128, exponent: i32) -> bool {
    match pow10(exponent.unsigned_abs()) {
        Some(d) => mantissa < d,
        None => true,
    }
}

/// Go's int64 fast path keeps the input string when it is already canonical.
fn fast_path_verbatim(
    text: &str,
    num: &str,
    denom: &str,
    base: u32,
    exponent: i32,
    format: Format,
) -> Option<String> {
    let (scale, precision) = match format {
        Format::DecimalSi | Format::DecimalExponent => {
            (exponent, 18 - (num.len() + denom.len()) as i64)
        }
        Format::BinarySi if denom.is_empty() => {
            let digits = (exponent as f32 * 3.0 / 10.0) as i64;
            (0, 15 - num.len() as i64 - digits - 1)
        }
        Format::BinarySi => (0, -1),
    };
    if precision < 0 {
        return None;
    }
    let scale = scale.checked_sub(denom.len() as i32)?;
    if scale < NANO {
        return None;
    }
    let shifted = format!("{num}{denom}");
    let value: i64 = shifted.parse().ok()?;
    let multiplier: i64 = if base == 2 {
        1i64.checked_shl(exponent.unsigned_abs())?
    } else {
        1
    };
    value.checked_mul(multiplier)?;
    let keep = match format {
        Format::BinarySi => exponent % 10 == 0 && value & 0x07 != 0,
        _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
    };
    keep.then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_strings() {
        // (input, what Go's json.Marshal writes)
        let cases = [
            ("100m", "100m"),
            ("0.1", "100m"),
            ("1.5", "1500m"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("1000m", "1"),
            ("2000m", "2"),
            ("1k", "1k"),
            ("512Mi", "512Mi"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Ki", "512"),
            ("3Mi", "3Mi"),
            ("1e3", "1e3"),
            ("12e2", "1200"),
            ("129e6", "129e6"),
            ("0", "0"),
            ("0Mi", "0"),
            ("+1", "+1"),
            ("007", "007"),
            ("0.5", "500m"),
            ("1n", "1n"),
            ("0.1n", "1n"),
            ("-100m", "-100m"),
            ("123456789", "123456789"),
            ("1G", "1G"),
            ("1000M", "1G"),
            ("30Mi", "30Mi"),
            ("10m", "10m"),
        ];
        for (input, want) in cases {
            let q = Quantity::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(q.go_string(), want, "{input}");
        }
    }

    /// Regression (issue 10, audit): an exponent near `i32::MAX` overflowed the exponent arithmetic
    /// (a panic in a debug build, a wrong value in a release build).
    #[test]
    fn extreme_exponents_are_errors_or_exact() {
        let one_nano = Quantity::parse("1n").expect("1n");
        for text in [
            "10e2147483647",
            "1e2147483647",
            "100e2147483600",
            "1e536870913",
        ] {
            assert!(Quantity::parse(text).is_err(), "{text}");
        }
        for text in [
            "1e536870912",
            "1e-2147483648",
            "10e-2147483600",
            "123456789e536870903",
        ] {
            let q = Quantity::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            let _ = (
                q.canonical(),
                q.cmp_value(&one_nano),
                q.checked_add(&one_nano),
            );
            let mut rounded = q.clone();
            rounded.round_up_to_milli();
        }
        assert_eq!(
            Quantity::parse("1e-2147483648").map(|q| q.canonical()),
            Ok("1e-9".to_string())
        );
    }

    #[test]
    fn invalid_quantities() {
        for input in ["", "abc", "1Qi", "1.2.3", "1 m", "--1", "1e"] {
            assert!(
                Quantity::parse(input).is_err(),
                "{input:?} should not parse"
            );
        }
    }

    #[test]
    fn exact_sums_keep_the_first_non_zero_format() {
        // (left, right, sum as Go's Quantity.Add then String() print it)
        let cases = [
            ("1", "500m", "1500m"),
            ("512Mi", "512Mi", "1Gi"),
            ("0", "512Mi", "512Mi"),
            ("500Mi", "524288000", "1000Mi"),
            ("524288000", "500Mi", "1048576k"),
            ("1", "-250m", "750m"),
            ("100m", "-100m", "0"),
            ("1n", "1", "1000000001n"),
        ];
        for (left, right, want) in cases {
            let sum = Quantity::parse(left)
                .expect("left")
                .checked_add(&Quantity::parse(right).expect("right"))
                .expect("fits");
            assert_eq!(sum.canonical(), want, "{left} + {right}");
        }
        assert_eq!(
            Quantity::from_decimal(false, 1500, -3, Format::DecimalSi).canonical(),
            "1500m"
        );
        assert_eq!(
            Quantity::from_decimal(false, 268435456, 0, Format::BinarySi).canonical(),
            "256Mi"
        );
        assert_eq!(
            Quantity::from_decimal(true, 0, 5, Format::BinarySi).decimal_parts(),
            (false, 0, 0)
        );
    }

    #[test]
    fn milli_round_up_and_compare() {
        let mut q = Quantity::parse("0.1m").expect("parse");
        q.round_up_to_milli();
        assert_eq!(q.go_string(), "1m");
        let mut q = Quantity::parse("1.5").expect("parse");
        q.round_up_to_milli();
        assert_eq!(q.go_string(), "1500m");
        let a = Quantity::parse("500m").expect("a");
        let b = Quantity::parse("1").expect("b");
        assert_eq!(a.cmp_value(&b), Ordering::Less);
        assert_eq!(
            Quantity::parse("1Gi")
                .expect("g")
                .cmp_value(&Quantity::parse("1024Mi").expect("m")),
            Ordering::Equal
        );
        assert_eq!(
            Quantity::parse("-1")
                .expect("n")
                .cmp_value(&Quantity::parse("0").expect("z")),
            Ordering::Less
        );
    }
}
