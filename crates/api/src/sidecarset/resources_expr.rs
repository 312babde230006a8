//! `resourcesPolicy` of a sidecar: its `resourcesExpr` expressions and its target-name pattern.
//!
//! - [`check`] is the validating webhook's test, as OpenKruise's: the expression is evaluated with its
//!   variable (`cpu` or `memory`) set to the plain number 1, and must parse, use only that variable and
//!   the functions `max(a, b)` / `min(a, b)`, not multiply two quantities, not divide by a quantity or
//!   by zero, and not come out negative.
//! - [`evaluate`] is the injection: the variable is the aggregate (sum or max) of the target containers'
//!   quantity, and the result is the sidecar's quantity.
//!
//! Grammar (the one of upstream's calculator): `+ -` bind weaker than `* /`, both left-associative;
//! unary `-`; parentheses; numbers (`2`, `0.5`, `1e3`, `50%` = 0.5); quantities (`100m`, `512Mi`, units
//! `m k M G T P Ki Mi Gi Ti Pi`). A number is counted in the resource's base unit (cores, bytes) when it
//! meets a quantity. Unlike upstream, a malformed number is an error rather than 0. An expression is
//! at most [`MAX_EXPRESSION_LENGTH`] bytes and nests at most [`MAX_NESTING_DEPTH`] levels, whether
//! checked or evaluated, so that no stored object can exhaust the parser's stack.
//!
//! Arithmetic is exact (rationals), and the result is rounded **up** once, to whole millicores for cpu
//! and whole bytes for memory — the precision Kubernetes keeps (it rounds finer CPU up to 1m too).
//! Upstream truncates every product and quotient to 1m in floating point, so `cpu / 3 * 3` can lose a
//! millicore there and memory can come out in milli-bytes (`354334801920m`); here it cannot.
//!
//! The result prints as Kubernetes prints a quantity (canonical form, [`Quantity::canonical`]) in the
//! suffix family it inherits, as Go's `resource.Quantity` arithmetic does: a product or quotient keeps
//! its quantity's family, a sum its left operand's (the right one's when the left is zero), `max`/`min`
//! the winner's; a plain number is decimal. So a cpu of `1` times 1.5 is `1500m`, a memory of `512Mi`
//! halved is `256Mi`, a memory of `1G` halved is `500M`, and `1Gi * 33%` is `354334802` (bytes).

use std::cmp::Ordering;

use crate::quantity::{Format, Quantity};

/// Why an expression was rejected or could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    #[error("{0}")]
    Syntax(String),
    #[error("undefined variable: {0}")]
    UndefinedVariable(String),
    #[error("unknown function: {0}")]
    UnknownFunction(String),
    #[error("{name} function requires exactly 2 arguments, got {got}")]
    Arity { name: String, got: usize },
    #[error("multiplication of two quantities")]
    QuantityTimesQuantity,
    #[error("division by quantity")]
    DivisionByQuantity,
    #[error("division by zero")]
    DivisionByZero,
    #[error("calculation result is negative")]
    Negative,
    #[error("value out of range")]
    OutOfRange,
    #[error("expression is longer than {max} bytes")]
    TooLong { max: usize },
    #[error(
        "expression is nested deeper than {max} levels (parentheses, function calls and unary minus)"
    )]
    TooDeep { max: usize },
}

/// The longest expression accepted, in bytes (a real one is a few dozen). Checked before anything is
/// parsed, by validation and by evaluation alike, and the CRD's `maxLength` of the fields.
pub const MAX_EXPRESSION_LENGTH: usize = 1024;

/// The deepest nesting of parentheses, function calls and unary minus accepted. The parser recurses
/// once per level, so this bounds its stack: an unbounded chain (`((((…` or `- - - …`) would overflow
/// the stack and abort the process — at validation, and at every injection of a stored object.
pub const MAX_NESTING_DEPTH: usize = 32;

/// The resource an expression computes: it names the expression's variable and sets the precision
/// of the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Cpu,
    Memory,
}

impl Resource {
    /// The variable's name, which is also the resource's key in a `ResourceList`.
    pub fn name(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Memory => "memory",
        }
    }
}

/// `targetContainersNameRegex`, compiled. Like Go's `MatchString` it matches anywhere in the name
/// (anchor it with `^…$` for whole names).
#[derive(Clone, Debug)]
pub struct TargetNamePattern(regex::Regex);

impl TargetNamePattern {
    /// An empty pattern is the API default `.*`.
    pub fn new(pattern: &str) -> Result<Self, String> {
        let pattern = if pattern.is_empty() { ".*" } else { pattern };
        regex::Regex::new(pattern)
            .map(Self)
            .map_err(|e| format!("invalid regex pattern: {e}"))
    }

    pub fn matches(&self, name: &str) -> bool {
        self.0.is_match(name)
    }
}

/// Checks an expression whose variable is `variable` (`cpu` or `memory`).
pub(super) fn check(expression: &str, variable: &str) -> Result<(), String> {
    run(expression, variable, Value::Number(Ratio::ONE)).map_err(|e| e.to_string())?;
    // Upstream stops there, but at injection the variable is a quantity: `cpu * 100m` or
    // `1 / memory` would then fail for every Pod. Reject them now, naming the expression.
    let one = Value::Quantity(Ratio::ONE, Format::DecimalSi);
    match run(expression, variable, one) {
        Err(error @ (ExprError::QuantityTimesQuantity | ExprError::DivisionByQuantity)) => Err(
            format!("invalid expression: {error} (the variable is a quantity)"),
        ),
        _ => Ok(()),
    }
}

/// The value of `expression` for `resource` when its variable is `variable`: rounded up to 1m (cpu) or
/// 1 byte (memory), printed canonically in the inherited suffix family (see the module docs).
pub fn evaluate(
    expression: &str,
    resource: Resource,
    variable: &Quantity,
) -> Result<Quantity, ExprError> {
    let value = Value::Quantity(Ratio::of_quantity(variable)?, variable.format());
    let (amount, format) = match run(expression, resource.name(), value)? {
        Value::Number(amount) => (amount, Format::DecimalSi),
        Value::Quantity(amount, format) => (amount, format),
    };
    let (per_unit, exponent) = match resource {
        Resource::Cpu => (1000, -3),
        Resource::Memory => (1, 0),
    };
    let units = amount.ceil_times(per_unit)?;
    Ok(Quantity::from_decimal(
        units < 0,
        units.unsigned_abs(),
        exponent,
        format,
    ))
}

fn run(expression: &str, variable: &str, value: Value) -> Result<Value, ExprError> {
    if expression.len() > MAX_EXPRESSION_LENGTH {
        return Err(ExprError::TooLong {
            max: MAX_EXPRESSION_LENGTH,
        });
    }
    let mut parser = Parser {
        tokens: lex(expression)?,
        pos: 0,
        depth: 0,
        variable,
        value,
    };
    let result = parser.expr()?;
    if let Some(token) = parser.peek() {
        return Err(ExprError::Syntax(format!(
            "unexpected {token:?} after the expression"
        )));
    }
    if result.amount().is_negative() {
        return Err(ExprError::Negative);
    }
    Ok(result)
}

// ---- exact rationals ----------------------------------------------------------------------------------

/// num/den in lowest terms, den > 0. Every operation is checked: an overflow is [`ExprError::OutOfRange`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ratio {
    num: i128,
    den: i128,
}

/// The greatest common divisor, or 1 where it cannot be represented (only around `i128::MIN`), which
/// merely leaves a fraction unreduced.
fn gcd(mut a: i128, mut b: i128) -> i128 {
    while b != 0 {
        (a, b) = (b, a.checked_rem(b).unwrap_or(0));
    }
    a.checked_abs().filter(|g| *g != 0).unwrap_or(1)
}

fn out_of_range<T>(value: Option<T>) -> Result<T, ExprError> {
    value.ok_or(ExprError::OutOfRange)
}

impl Ratio {
    const ONE: Ratio = Ratio { num: 1, den: 1 };

    fn new(num: i128, den: i128) -> Result<Self, ExprError> {
        if den == 0 {
            return Err(ExprError::DivisionByZero);
        }
        let g = gcd(num, den);
        let (mut num, mut den) = (num / g, den / g);
        if den < 0 {
            num = out_of_range(num.checked_neg())?;
            den = out_of_range(den.checked_neg())?;
        }
        Ok(Self { num, den })
    }

    /// mantissa × 10^exponent.
    fn decimal(negative: bool, mantissa: u128, exponent: i32) -> Result<Self, ExprError> {
        let mut num = out_of_range(i128::try_from(mantissa).ok())?;
        if negative {
            num = -num;
        }
        let power = out_of_range(10i128.checked_pow(exponent.unsigned_abs()))?;
        if exponent >= 0 {
            Self::new(out_of_range(num.checked_mul(power))?, 1)
        } else {
            Self::new(num, power)
        }
    }

    fn of_quantity(quantity: &Quantity) -> Result<Self, ExprError> {
        let (negative, mantissa, exponent) = quantity.decimal_parts();
        Self::decimal(negative, mantissa, exponent)
    }

    fn is_negative(self) -> bool {
        self.num < 0
    }

    fn is_zero(self) -> bool {
        self.num == 0
    }

    fn neg(self) -> Result<Self, ExprError> {
        Ok(Self {
            num: out_of_range(self.num.checked_neg())?,
            den: self.den,
        })
    }

    fn add(self, other: Self) -> Result<Self, ExprError> {
        let g = gcd(self.den, other.den);
        let left = out_of_range(self.num.checked_mul(other.den / g))?;
        let right = out_of_range(other.num.checked_mul(self.den / g))?;
        let den = out_of_range((self.den / g).checked_mul(other.den))?;
        Self::new(out_of_range(left.checked_add(right))?, den)
    }

    fn mul(self, other: Self) -> Result<Self, ExprError> {
        // Cross-reduce first so that products stay small.
        let g1 = gcd(self.num, other.den);
        let g2 = gcd(other.num, self.den);
        let num = out_of_range((self.num / g1).checked_mul(other.num / g2))?;
        let den = out_of_range((self.den / g2).checked_mul(other.den / g1))?;
        Self::new(num, den)
    }

    fn div(self, other: Self) -> Result<Self, ExprError> {
        if other.is_zero() {
            return Err(ExprError::DivisionByZero);
        }
        self.mul(Self::new(other.den, other.num)?)
    }

    fn cmp(self, other: Self) -> Ordering {
        match (
            self.num.checked_mul(other.den),
            other.num.checked_mul(self.den),
        ) {
            (Some(a), Some(b)) => a.cmp(&b),
            // Only values beyond any real resource get here; a float comparison is close enough.
            _ => (self.num as f64 / self.den as f64)
                .total_cmp(&(other.num as f64 / other.den as f64)),
        }
    }

    /// ⌈self × per_unit⌉.
    fn ceil_times(self, per_unit: i128) -> Result<i128, ExprError> {
        let scaled = self.mul(Self::new(per_unit, 1)?)?;
        let floor = scaled.num.div_euclid(scaled.den);
        Ok(if scaled.num.rem_euclid(scaled.den) == 0 {
            floor
        } else {
            out_of_range(floor.checked_add(1))?
        })
    }
}

// ---- values and tokens -----------------------------------------------------------------------------------

/// A plain number, or a quantity in the resource's base unit with the suffix family it prints in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Value {
    Number(Ratio),
    Quantity(Ratio, Format),
}

impl Value {
    fn amount(self) -> Ratio {
        match self {
            Value::Number(v) | Value::Quantity(v, _) => v,
        }
    }

    /// The family this value prints in once it is (or becomes) a quantity.
    fn format(self) -> Format {
        match self {
            Value::Number(_) => Format::DecimalSi,
            Value::Quantity(_, format) => format,
        }
    }

    fn is_quantity(self) -> bool {
        matches!(self, Value::Quantity(..))
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Value(Value),
    Ident(String),
    Punct(char),
}

const UNITS: &[&str] = &["m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi"];

fn lex(input: &str) -> Result<Vec<Token>, ExprError> {
    let chars: Vec<char> = input.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if "+-*/(),".contains(c) {
            tokens.push(Token::Punct(c));
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            let start = i;
            let (mut dot, mut exp, mut percent, mut want_exp_digit) = (false, false, false, false);
            while i < chars.len() {
                let r = chars[i];
                if r.is_ascii_digit() {
                    want_exp_digit = false;
                } else if r == '.' && !(dot || exp || percent) {
                    dot = true;
                } else if (r == 'e' || r == 'E') && !(exp || percent) {
                    exp = true;
                    want_exp_digit = true;
                } else if (r == '+' || r == '-') && want_exp_digit {
                    want_exp_digit = false;
                } else if r == '%' && !percent {
                    percent = true;
                } else if r.is_alphabetic() && !want_exp_digit {
                    while i < chars.len() && chars[i].is_alphabetic() {
                        i += 1;
                    }
                    break;
                } else {
                    break;
                }
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            tokens.push(Token::Value(literal(&text)?));
        } else if c.is_alphabetic() {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else {
            return Err(ExprError::Syntax(format!("unexpected character {c:?}")));
        }
    }
    Ok(tokens)
}

/// A number or quantity literal.
fn literal(text: &str) -> Result<Value, ExprError> {
    let number_end = text.find(|c: char| !(c.is_ascii_digit() || ".eE+-".contains(c)));
    if let Some(end) = number_end
        && end > 0
        && UNITS.contains(&&text[end..])
    {
        let quantity = Quantity::parse(text)
            .map_err(|e| ExprError::Syntax(format!("invalid quantity {text:?}: {e}")))?;
        return Ok(Value::Quantity(
            Ratio::of_quantity(&quantity)?,
            quantity.format(),
        ));
    }
    let invalid = || ExprError::Syntax(format!("invalid number {text:?}"));
    let (digits, percent) = match text.strip_suffix('%') {
        Some(digits) => (digits, true),
        None => (text, false),
    };
    let (mantissa, exponent) = match digits.find(['e', 'E']) {
        Some(at) => (
            &digits[..at],
            digits[at + 1..].parse::<i32>().map_err(|_| invalid())?,
        ),
        None => (digits, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction) {
        return Err(invalid());
    }
    let significant = format!("{whole}{fraction}");
    let significant = significant.trim_start_matches('0');
    let mantissa = if significant.is_empty() {
        0
    } else {
        significant
            .parse::<u128>()
            .map_err(|_| ExprError::OutOfRange)?
    };
    let exponent = out_of_range(exponent.checked_sub(fraction.len() as i32))?;
    let mut value = Ratio::decimal(false, mantissa, exponent)?;
    if percent {
        value = value.div(Ratio::new(100, 1)?)?;
    }
    Ok(Value::Number(value))
}

// ---- parsing and evaluation in one pass ------------------------------------------------------------------

struct Parser<'a> {
    tokens: Vec<Token>,
    pos: usize,
    /// How many parentheses, calls and unary minuses enclose the current position.
    depth: usize,
    variable: &'a str,
    value: Value,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn eat(&mut self, punct: char) -> bool {
        if self.peek() == Some(&Token::Punct(punct)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, punct: char) -> Result<(), ExprError> {
        if self.eat(punct) {
            Ok(())
        } else {
            Err(ExprError::Syntax(format!("expected {punct:?}")))
        }
    }

    fn expr(&mut self) -> Result<Value, ExprError> {
        let mut left = self.term()?;
        loop {
            if self.eat('+') {
                left = add(left, self.term()?)?;
            } else if self.eat('-') {
                left = add(left, negate(self.term()?)?)?;
            } else {
                return Ok(left);
            }
        }
    }

    fn term(&mut self) -> Result<Value, ExprError> {
        let mut left = self.factor()?;
        loop {
            if self.eat('*') {
                left = multiply(left, self.factor()?)?;
            } else if self.eat('/') {
                left = divide(left, self.factor()?)?;
            } else {
                return Ok(left);
            }
        }
    }

    /// Runs `inner` one nesting level deeper, refusing to go past [`MAX_NESTING_DEPTH`].
    fn nested<T>(
        &mut self,
        inner: impl FnOnce(&mut Self) -> Result<T, ExprError>,
    ) -> Result<T, ExprError> {
        if self.depth >= MAX_NESTING_DEPTH {
            return Err(ExprError::TooDeep {
                max: MAX_NESTING_DEPTH,
            });
        }
        self.depth += 1;
        let result = inner(self);
        self.depth -= 1;
        result
    }

    fn factor(&mut self) -> Result<Value, ExprError> {
        let token = self
            .peek()
            .cloned()
            .ok_or_else(|| ExprError::Syntax("unexpected end of expression".into()))?;
        self.pos += 1;
        match token {
            Token::Value(value) => Ok(value),
            Token::Punct('(') => self.nested(|p| {
                let value = p.expr()?;
                p.expect(')')?;
                Ok(value)
            }),
            Token::Punct('-') => negate(self.nested(Self::factor)?),
            Token::Ident(name) if self.eat('(') => {
                let args = self.nested(|p| {
                    let mut args = vec![p.expr()?];
                    if p.eat(',') {
                        args.push(p.expr()?);
                    }
                    p.expect(')')?;
                    Ok(args)
                })?;
                call(&name, &args)
            }
            Token::Ident(name) if name.eq_ignore_ascii_case(self.variable) => Ok(self.value),
            Token::Ident(name) => Err(ExprError::UndefinedVariable(name)),
            Token::Punct(c) => Err(ExprError::Syntax(format!("unexpected {c:?}"))),
        }
    }
}

fn negate(value: Value) -> Result<Value, ExprError> {
    Ok(match value {
        Value::Number(v) => Value::Number(v.neg()?),
        Value::Quantity(v, format) => Value::Quantity(v.neg()?, format),
    })
}

/// A sum is a quantity when either side is; it prints like its left side unless that is zero.
fn add(left: Value, right: Value) -> Result<Value, ExprError> {
    let sum = left.amount().add(right.amount())?;
    if !(left.is_quantity() || right.is_quantity()) {
        return Ok(Value::Number(sum));
    }
    let format = if left.amount().is_zero() {
        right.format()
    } else {
        left.format()
    };
    Ok(Value::Quantity(sum, format))
}

fn multiply(left: Value, right: Value) -> Result<Value, ExprError> {
    let quantity_format = match (left, right) {
        (Value::Quantity(..), Value::Quantity(..)) => {
            return Err(ExprError::QuantityTimesQuantity);
        }
        (Value::Quantity(_, format), _) | (_, Value::Quantity(_, format)) => Some(format),
        (Value::Number(_), Value::Number(_)) => None,
    };
    let product = left.amount().mul(right.amount())?;
    Ok(match quantity_format {
        Some(format) => Value::Quantity(product, format),
        None => Value::Number(product),
    })
}

fn divide(left: Value, right: Value) -> Result<Value, ExprError> {
    let Value::Number(divisor) = right else {
        return Err(ExprError::DivisionByQuantity);
    };
    let quotient = left.amount().div(divisor)?;
    Ok(match left {
        Value::Number(_) => Value::Number(quotient),
        Value::Quantity(_, format) => Value::Quantity(quotient, format),
    })
}

/// `max(a, b)` / `min(a, b)`; ties go to `a`. With a quantity on either side the result is a quantity.
fn call(name: &str, args: &[Value]) -> Result<Value, ExprError> {
    let pick_max = match name.to_lowercase().as_str() {
        "max" => true,
        "min" => false,
        _ => return Err(ExprError::UnknownFunction(name.to_string())),
    };
    let [a, b] = args[..] else {
        return Err(ExprError::Arity {
            name: name.to_string(),
            got: args.len(),
        });
    };
    let order = a.amount().cmp(b.amount());
    let a_wins = if pick_max {
        order != Ordering::Less
    } else {
        order != Ordering::Greater
    };
    let winner = if a_wins { a } else { b };
    Ok(if a.is_quantity() || b.is_quantity() {
        Value::Quantity(winner.amount(), winner.format())
    } else {
        winner
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions() {
        let good = [
            ("cpu", "cpu"),
            ("cpu*50%", "cpu"),
            ("max(cpu*50%, 50m)", "cpu"),
            ("min(memory, 1Gi) + 100Mi", "memory"),
            ("(cpu + 1) / 2", "cpu"),
            ("CPU * 2", "cpu"),
            ("1e3", "cpu"),
            ("cpu - 500m", "cpu"),
        ];
        for (expr, var) in good {
            assert_eq!(check(expr, var), Ok(()), "{expr}");
        }
        let bad = [
            ("memory", "cpu"),
            ("100m * 2Gi", "memory"),
            ("cpu / 0", "cpu"),
            ("cpu / 100m", "cpu"),
            ("max(cpu)", "cpu"),
            ("avg(cpu, 1)", "cpu"),
            ("cpu - 2", "cpu"),
            ("cpu +", "cpu"),
            ("(cpu", "cpu"),
            ("cpu $ 2", "cpu"),
            ("1Ei", "memory"),
            ("1e99", "cpu"),
            // Accepted by upstream's check (variable = 1), impossible once it is a quantity.
            ("cpu * 100m", "cpu"),
            ("cpu * cpu", "cpu"),
            ("1 / memory", "memory"),
        ];
        for (expr, var) in bad {
            assert!(check(expr, var).is_err(), "{expr} should be rejected");
        }
    }

    /// Regression (issue 10, defect 1): 1,000 nested parentheses or a long chain of unary minus
    /// overflowed the recursive parser's stack and aborted the process, at validation and at every
    /// injection. Now both are refused with an error, and so is an over-long expression.
    #[test]
    fn nesting_and_length_are_bounded() {
        let parens = |depth: usize| format!("{}cpu{}", "(".repeat(depth), ")".repeat(depth));
        let minuses = |depth: usize| format!("{}cpu", "- ".repeat(depth));
        let calls = |depth: usize| format!("{}cpu{}", "max(1, ".repeat(depth), ")".repeat(depth));
        let too_deep = ExprError::TooDeep {
            max: MAX_NESTING_DEPTH,
        };
        for deep in [
            parens(400),
            parens(MAX_NESTING_DEPTH + 1),
            minuses(500),
            calls(MAX_NESTING_DEPTH + 1),
        ] {
            let message = check(&deep, "cpu").expect_err("too deep");
            assert!(message.contains("nested deeper than 32"), "{message}");
            assert_eq!(
                evaluate(&deep, Resource::Cpu, &q("1")),
                Err(too_deep.clone())
            );
        }
        // A long chain past the length bound is refused before it is parsed.
        for huge in [parens(1000), parens(100_000), minuses(100_000)] {
            assert_eq!(
                evaluate(&huge, Resource::Cpu, &q("1")),
                Err(ExprError::TooLong {
                    max: MAX_EXPRESSION_LENGTH
                })
            );
            assert!(check(&huge, "cpu").is_err());
        }
        let huge = parens(100_000);
        assert_eq!(
            evaluate(&huge, Resource::Cpu, &q("1")),
            Err(ExprError::TooLong {
                max: MAX_EXPRESSION_LENGTH
            })
        );
        assert!(check(&huge, "cpu").is_err());
        // At the bound, still fine.
        assert_eq!(check(&parens(MAX_NESTING_DEPTH), "cpu"), Ok(()));
        assert_eq!(
            evaluate(&calls(MAX_NESTING_DEPTH), Resource::Cpu, &q("2")).map(|v| v.canonical()),
            Ok("2".to_string())
        );
        let longest = format!("cpu{}", " ".repeat(MAX_EXPRESSION_LENGTH - 3));
        assert_eq!(check(&longest, "cpu"), Ok(()));
        assert!(check(&format!("{longest} "), "cpu").is_err());
    }

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn evaluation_rounds_up_and_prints_like_kubernetes() {
        use Resource::{Cpu, Memory};
        // (expression, resource, variable, result as Kubernetes prints it)
        let cases = [
            // cpu: whole millicores, rounded up
            ("cpu", Cpu, "1", "1"),
            ("cpu * 1.5", Cpu, "1", "1500m"),
            ("cpu*50%", Cpu, "200m", "100m"),
            ("cpu * 33%", Cpu, "1", "330m"),
            ("cpu / 3", Cpu, "1", "334m"),
            ("cpu / 3 * 3", Cpu, "1", "1"),
            ("cpu * 0.1", Cpu, "1m", "1m"),
            ("cpu + 1", Cpu, "500m", "1500m"),
            ("cpu - 500m", Cpu, "2", "1500m"),
            ("2 * cpu", Cpu, "250m", "500m"),
            ("(cpu + 100m) / 2", Cpu, "300m", "200m"),
            ("0.25", Cpu, "4", "250m"),
            ("1e3", Cpu, "1", "1k"),
            ("50%", Cpu, "0", "500m"),
            // max / min, with a number counted in cores
            ("max(cpu*50%, 50m)", Cpu, "200m", "100m"),
            ("max(cpu*50%, 50m)", Cpu, "60m", "50m"),
            ("max(cpu*50%, 50m)", Cpu, "0", "50m"),
            ("min(cpu, 2)", Cpu, "3500m", "2"),
            ("min(cpu, 2)", Cpu, "1", "1"),
            ("MAX(cpu, 0.5)", Cpu, "100m", "500m"),
            // memory: whole bytes, rounded up, in the variable's suffix family
            ("memory", Memory, "512Mi", "512Mi"),
            ("memory * 50%", Memory, "512Mi", "256Mi"),
            ("memory / 2", Memory, "1Gi", "512Mi"),
            ("memory * 1.5", Memory, "1Gi", "1536Mi"),
            ("memory * 33%", Memory, "1Gi", "354334802"),
            ("memory / 3", Memory, "1000", "334"),
            ("memory * 50%", Memory, "1G", "500M"),
            ("memory + 100Mi", Memory, "1Gi", "1124Mi"),
            ("min(memory, 1Gi) + 100Mi", Memory, "2Gi", "1124Mi"),
            ("max(memory * 10%, 64Mi)", Memory, "256Mi", "64Mi"),
            ("max(memory * 10%, 64Mi)", Memory, "1Gi", "107374183"),
            ("memory + 128Mi", Memory, "0", "128Mi"),
            ("memory", Memory, "1e9", "1e9"),
            ("1024", Memory, "1Gi", "1024"),
            ("0.5", Memory, "1Gi", "1"),
        ];
        for (expr, resource, variable, want) in cases {
            let got = evaluate(expr, resource, &q(variable))
                .unwrap_or_else(|e| panic!("{expr} with {variable}: {e}"));
            assert_eq!(got.canonical(), want, "{expr} with {variable}");
        }
    }

    #[test]
    fn evaluation_errors_are_typed() {
        use Resource::{Cpu, Memory};
        let cases = [
            ("cpu - 2", Cpu, "1", ExprError::Negative),
            ("cpu * 100m", Cpu, "1", ExprError::QuantityTimesQuantity),
            ("cpu / 0", Cpu, "1", ExprError::DivisionByZero),
            ("cpu / (1 - 1)", Cpu, "1", ExprError::DivisionByZero),
            ("cpu / 1m", Cpu, "1", ExprError::DivisionByQuantity),
            (
                "memory",
                Cpu,
                "1",
                ExprError::UndefinedVariable("memory".into()),
            ),
            (
                "avg(memory, 1)",
                Memory,
                "1",
                ExprError::UnknownFunction("avg".into()),
            ),
            (
                "max(memory)",
                Memory,
                "1",
                ExprError::Arity {
                    name: "max".into(),
                    got: 1,
                },
            ),
            (
                "cpu +",
                Cpu,
                "1",
                ExprError::Syntax("unexpected end of expression".into()),
            ),
            ("cpu * 1e40", Cpu, "1", ExprError::OutOfRange),
        ];
        for (expr, resource, variable, want) in cases {
            assert_eq!(
                evaluate(expr, resource, &q(variable)),
                Err(want),
                "{expr} with {variable}"
            );
        }
    }

    proptest::proptest! {
        /// Exact arithmetic: dividing and multiplying back gives the variable itself, and the variable
        /// alone prints as Kubernetes prints it (upstream's per-step truncation loses millicores here).
        #[test]
        fn division_then_multiplication_is_exact(milli in 0u64..10_000_000, n in 1u32..1000) {
            let cpu = Quantity::from_decimal(false, u128::from(milli), -3, Format::DecimalSi);
            let round_trip = evaluate(&format!("cpu / {n} * {n}"), Resource::Cpu, &cpu)
                .expect("evaluates");
            proptest::prop_assert_eq!(round_trip.canonical(), cpu.canonical());
            let half = evaluate("cpu * 50%", Resource::Cpu, &cpu).expect("evaluates");
            let (_, mantissa, exponent) = half.decimal_parts();
            let half_milli = mantissa * 10u128.pow((exponent + 3) as u32);
            proptest::prop_assert_eq!(half_milli, u128::from(milli).div_ceil(2));
        }
    }

    #[test]
    fn target_name_patterns_match_anywhere_and_default_to_everything() {
        let cases = [
            ("", "anything", true),
            (".*", "main", true),
            ("main", "main-2", true),
            ("^main$", "main-2", false),
            ("^app-.*", "app-web", true),
            ("^app-.*", "sidecar-app-web", false),
        ];
        for (pattern, name, want) in cases {
            let compiled = TargetNamePattern::new(pattern).expect("valid pattern");
            assert_eq!(compiled.matches(name), want, "{pattern} on {name}");
        }
        assert!(TargetNamePattern::new("(").is_err());
    }
}
