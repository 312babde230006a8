//! Syntax and sanity of `resourcesPolicy.resourcesExpr` expressions, as OpenKruise's webhook checks them:
//! the expression is evaluated with its variable (`cpu` or `memory`) set to the plain number 1, and must
//! parse, use only that variable and the functions `max(a, b)` / `min(a, b)`, not multiply two quantities,
//! not divide by a quantity or by zero, and not come out negative.
//!
//! Grammar (the one of upstream's calculator): `+ -` bind weaker than `* /`, both left-associative;
//! unary `-`; parentheses; numbers (`2`, `0.5`, `1e3`, `50%` = 0.5); quantities (`100m`, `512Mi`, units
//! `m k M G T P Ki Mi Gi Ti Pi`). Unlike upstream, a malformed number is an error rather than 0.

use super::quantity::Quantity;

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Number(f64),
    Quantity(f64),
    Ident(String),
    Punct(char),
}

#[derive(Clone, Copy, Debug)]
enum Value {
    Number(f64),
    Quantity(f64),
}

impl Value {
    fn amount(self) -> f64 {
        match self {
            Value::Number(v) | Value::Quantity(v) => v,
        }
    }

    fn is_quantity(self) -> bool {
        matches!(self, Value::Quantity(_))
    }
}

const UNITS: &[&str] = &["m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi"];

fn lex(input: &str) -> Result<Vec<Token>, String> {
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
            tokens.push(number_token(&text)?);
        } else if c.is_alphabetic() {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else {
            return Err(format!("unexpected character {c:?}"));
        }
    }
    Ok(tokens)
}

fn number_token(text: &str) -> Result<Token, String> {
    let number_end = text.find(|c: char| !(c.is_ascii_digit() || ".eE+-".contains(c)));
    if let Some(end) = number_end
        && end > 0
        && UNITS.contains(&&text[end..])
    {
        let quantity =
            Quantity::parse(text).map_err(|e| format!("invalid quantity {text:?}: {e}"))?;
        return Ok(Token::Quantity(quantity.as_f64()));
    }
    let (digits, scale) = match text.strip_suffix('%') {
        Some(digits) => (digits, 0.01),
        None => (text, 1.0),
    };
    digits
        .parse::<f64>()
        .map(|v| Token::Number(v * scale))
        .map_err(|_| format!("invalid number {text:?}"))
}

struct Parser<'a> {
    tokens: Vec<Token>,
    pos: usize,
    variable: &'a str,
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

    fn expect(&mut self, punct: char) -> Result<(), String> {
        if self.eat(punct) {
            Ok(())
        } else {
            Err(format!("expected {punct:?}"))
        }
    }

    fn expr(&mut self) -> Result<Value, String> {
        let mut left = self.term()?;
        loop {
            if self.eat('+') {
                left = add(left, self.term()?, 1.0);
            } else if self.eat('-') {
                left = add(left, self.term()?, -1.0);
            } else {
                return Ok(left);
            }
        }
    }

    fn term(&mut self) -> Result<Value, String> {
        let mut left = self.factor()?;
        loop {
            if self.eat('*') {
                let right = self.factor()?;
                left = match (left, right) {
                    (Value::Quantity(_), Value::Quantity(_)) => {
                        return Err("multiplication of two quantities".into());
                    }
                    (Value::Number(a), Value::Number(b)) => Value::Number(a * b),
                    (a, b) => Value::Quantity(a.amount() * b.amount()),
                };
            } else if self.eat('/') {
                let right = self.factor()?;
                let Value::Number(divisor) = right else {
                    return Err("division by quantity".into());
                };
                if divisor == 0.0 {
                    return Err("division by zero".into());
                }
                left = match left {
                    Value::Number(a) => Value::Number(a / divisor),
                    Value::Quantity(a) => Value::Quantity(a / divisor),
                };
            } else {
                return Ok(left);
            }
        }
    }

    fn factor(&mut self) -> Result<Value, String> {
        let token = self.peek().cloned().ok_or("unexpected end of expression")?;
        self.pos += 1;
        match token {
            Token::Number(v) => Ok(Value::Number(v)),
            Token::Quantity(v) => Ok(Value::Quantity(v)),
            Token::Punct('(') => {
                let value = self.expr()?;
                self.expect(')')?;
                Ok(value)
            }
            Token::Punct('-') => Ok(match self.factor()? {
                Value::Number(v) => Value::Number(-v),
                Value::Quantity(v) => Value::Quantity(-v),
            }),
            Token::Ident(name) if self.eat('(') => {
                let mut args = vec![self.expr()?];
                if self.eat(',') {
                    args.push(self.expr()?);
                }
                self.expect(')')?;
                let pick_max = match name.to_lowercase().as_str() {
                    "max" => true,
                    "min" => false,
                    _ => return Err(format!("unknown function: {name}")),
                };
                let [a, b] = args[..] else {
                    return Err(format!(
                        "{name} function requires exactly 2 arguments, got {}",
                        args.len()
                    ));
                };
                let a_wins = if pick_max {
                    a.amount() >= b.amount()
                } else {
                    a.amount() <= b.amount()
                };
                let winner = if a_wins { a } else { b };
                Ok(if a.is_quantity() || b.is_quantity() {
                    Value::Quantity(winner.amount())
                } else {
                    winner
                })
            }
            Token::Ident(name) if name.eq_ignore_ascii_case(self.variable) => {
                Ok(Value::Number(1.0))
            }
            Token::Ident(name) => Err(format!("undefined variable: {name}")),
            Token::Punct(c) => Err(format!("unexpected {c:?}")),
        }
    }
}

fn add(left: Value, right: Value, sign: f64) -> Value {
    let sum = left.amount() + sign * right.amount();
    if left.is_quantity() || right.is_quantity() {
        Value::Quantity(sum)
    } else {
        Value::Number(sum)
    }
}

/// Checks an expression whose variable is `variable` (`cpu` or `memory`).
pub(super) fn check(expression: &str, variable: &str) -> Result<(), String> {
    let tokens = lex(expression)?;
    let mut parser = Parser {
        tokens,
        pos: 0,
        variable,
    };
    let value = parser.expr()?;
    if let Some(token) = parser.peek() {
        return Err(format!("unexpected {token:?} after the expression"));
    }
    if value.amount() < 0.0 {
        return Err("calculation result is negative".into());
    }
    Ok(())
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
        ];
        for (expr, var) in bad {
            assert!(check(expr, var).is_err(), "{expr} should be rejected");
        }
    }
}
