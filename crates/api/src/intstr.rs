//! Int-or-percent values (`maxUnavailable: 2`, `partition: "20%"`): parsing, validation and scaling
//! against a total. The one place in kruise-rs that does this arithmetic.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::field::{FieldError, Path};

/// A parsed int-or-percent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i32),
    /// A percentage, e.g. 20 for `"20%"`.
    Percent(i32),
}

/// How a percentage turns into a count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    Up,
    Down,
}

impl IntOrPercent {
    /// Parses a value. A string must be a whole-number percentage (`"20%"`); a bare numeric string such as
    /// `"5"` is rejected, as Kubernetes and OpenKruise do.
    pub fn parse(value: &IntOrString) -> Result<Self, String> {
        match value {
            IntOrString::Int(n) => Ok(Self::Int(*n)),
            IntOrString::String(s) => {
                let Some(number) = s.strip_suffix('%') else {
                    return Err(format!(
                        "{s:?} is neither an integer nor a percentage like \"20%\""
                    ));
                };
                number
                    .parse::<i32>()
                    .map(Self::Percent)
                    .map_err(|_| format!("{s:?} is not a valid percentage"))
            }
        }
    }

    /// The count this value stands for out of `total`.
    pub fn scaled(self, total: i32, round: Round) -> i32 {
        match self {
            Self::Int(n) => n,
            Self::Percent(p) => {
                let product = i64::from(total) * i64::from(p);
                let value = match round {
                    Round::Up => (product + 99).div_euclid(100),
                    Round::Down => product.div_euclid(100),
                };
                value.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
            }
        }
    }

    pub fn is_zero(self) -> bool {
        matches!(self, Self::Int(0) | Self::Percent(0))
    }
}

/// Parses and scales in one go; an unparsable value is an error naming the value.
pub fn scaled_value(value: &IntOrString, total: i32, round: Round) -> Result<i32, String> {
    IntOrPercent::parse(value).map(|v| v.scaled(total, round))
}

/// Validation: a parsable, non-negative int-or-percent; with `max_percent`, percentages above it are
/// rejected. Returns the parsed value when valid.
pub fn validate(
    value: &IntOrString,
    path: &Path,
    max_percent: Option<i32>,
    errors: &mut Vec<FieldError>,
) -> Option<IntOrPercent> {
    let shown = display(value);
    match IntOrPercent::parse(value) {
        Err(message) => {
            errors.push(FieldError::invalid(path, shown, message));
            None
        }
        Ok(IntOrPercent::Int(n)) if n < 0 => {
            errors.push(FieldError::invalid(
                path,
                shown,
                "must be greater than or equal to 0",
            ));
            None
        }
        Ok(IntOrPercent::Percent(p)) if p < 0 => {
            errors.push(FieldError::invalid(
                path,
                shown,
                "must be greater than or equal to 0%",
            ));
            None
        }
        Ok(IntOrPercent::Percent(p)) if max_percent.is_some_and(|max| p > max) => {
            let max = max_percent.unwrap_or(100);
            errors.push(FieldError::invalid(
                path,
                shown,
                format!("must not be greater than {max}%"),
            ));
            None
        }
        Ok(parsed) => Some(parsed),
    }
}

/// The value as a user wrote it.
pub fn display(value: &IntOrString) -> String {
    match value {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

/// [`display`] of an optional value, empty when it is unset (the value errors about an optional field
/// show).
pub fn display_or_empty(value: Option<&IntOrString>) -> String {
    value.map(display).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.into())
    }

    #[test]
    fn parse_cases() {
        assert_eq!(
            IntOrPercent::parse(&IntOrString::Int(3)),
            Ok(IntOrPercent::Int(3))
        );
        assert_eq!(
            IntOrPercent::parse(&s("20%")),
            Ok(IntOrPercent::Percent(20))
        );
        assert!(IntOrPercent::parse(&s("5")).is_err());
        assert!(IntOrPercent::parse(&s("abc%")).is_err());
        assert!(IntOrPercent::parse(&s("1.5%")).is_err());
    }

    #[test]
    fn scaling_table() {
        // (value, total, round, want)
        let cases = [
            (s("20%"), 2, Round::Up, 1),
            (s("20%"), 2, Round::Down, 0),
            (s("99%"), 4, Round::Up, 4),
            (s("99%"), 4, Round::Down, 3),
            (s("50%"), 5, Round::Up, 3),
            (s("100%"), 7, Round::Down, 7),
            (s("0%"), 9, Round::Up, 0),
            (IntOrString::Int(3), 100, Round::Up, 3),
        ];
        for (value, total, round, want) in cases {
            assert_eq!(
                scaled_value(&value, total, round),
                Ok(want),
                "{value:?} of {total} {round:?}"
            );
        }
    }

    #[test]
    fn validation_names_the_field() {
        let path = Path::new("spec").child("partition");
        let mut errors = Vec::new();
        assert_eq!(validate(&s("150%"), &path, Some(100), &mut errors), None);
        assert_eq!(
            errors[0].to_string(),
            r#"spec.partition: Invalid value: "150%": must not be greater than 100%"#
        );
        errors.clear();
        assert_eq!(
            validate(&IntOrString::Int(-1), &path, None, &mut errors),
            None
        );
        assert!(
            errors[0]
                .to_string()
                .starts_with("spec.partition: Invalid value: \"-1\"")
        );
        errors.clear();
        assert_eq!(validate(&s("5"), &path, None, &mut errors), None);
        assert_eq!(
            validate(&s("30%"), &path, Some(100), &mut Vec::new()),
            Some(IntOrPercent::Percent(30))
        );
    }
}
