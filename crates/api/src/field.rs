//! Field-addressed validation errors, printed the way Kubernetes prints them
//! (`spec.updateStrategy.partition: Invalid value: "150%": must be ...`), so that every rejection names
//! the field at fault.

use std::fmt;

/// A path into an object: `spec.template.spec.containers[0].image`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    pub fn new(root: &str) -> Self {
        Self(root.to_string())
    }

    /// `self.name`
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Self(name.to_string())
        } else {
            Self(format!("{}.{name}", self.0))
        }
    }

    /// `self[index]`
    pub fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    /// `self[key]`
    pub fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The kinds of field errors Kubernetes reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// `Invalid value: <value>: <detail>`
    Invalid(String),
    /// `Required value: <detail>`
    Required,
    /// `Forbidden: <detail>`
    Forbidden,
    /// `Unsupported value: <value>: supported values: "a", "b"`
    NotSupported {
        value: String,
        supported: Vec<String>,
    },
    /// `Duplicate value: <value>`
    Duplicate(String),
    /// `Too long: may not be more than <max> bytes` (the value is not repeated: it is long).
    TooLong { max: usize },
}

/// One validation failure at one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: Path,
    pub kind: ErrorKind,
    pub detail: String,
}

impl FieldError {
    pub fn invalid(path: &Path, value: impl fmt::Display, detail: impl Into<String>) -> Self {
        Self {
            path: path.clone(),
            kind: ErrorKind::Invalid(value.to_string()),
            detail: detail.into(),
        }
    }

    pub fn required(path: &Path, detail: impl Into<String>) -> Self {
        Self {
            path: path.clone(),
            kind: ErrorKind::Required,
            detail: detail.into(),
        }
    }

    pub fn forbidden(path: &Path, detail: impl Into<String>) -> Self {
        Self {
            path: path.clone(),
            kind: ErrorKind::Forbidden,
            detail: detail.into(),
        }
    }

    pub fn not_supported(path: &Path, value: impl fmt::Display, supported: &[&str]) -> Self {
        Self {
            path: path.clone(),
            kind: ErrorKind::NotSupported {
                value: value.to_string(),
                supported: supported.iter().map(|s| s.to_string()).collect(),
            },
            detail: String::new(),
        }
    }

    pub fn too_long(path: &Path, max: usize) -> Self {
        Self {
            path: path.clone(),
            kind: ErrorKind::TooLong { max },
            detail: String::new(),
        }
    }

    pub fn duplicate(path: &Path, value: impl fmt::Display) -> Self {
        Self {
            path: path.clone(),
            kind: ErrorKind::Duplicate(value.to_string()),
            detail: String::new(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let with_detail = |f: &mut fmt::Formatter<'_>, head: String| {
            if self.detail.is_empty() {
                write!(f, "{head}")
            } else {
                write!(f, "{head}: {}", self.detail)
            }
        };
        match &self.kind {
            ErrorKind::Invalid(value) => {
                with_detail(f, format!("{}: Invalid value: {value:?}", self.path))
            }
            ErrorKind::Required => with_detail(f, format!("{}: Required value", self.path)),
            ErrorKind::Forbidden => with_detail(f, format!("{}: Forbidden", self.path)),
            ErrorKind::Duplicate(value) => {
                with_detail(f, format!("{}: Duplicate value: {value:?}", self.path))
            }
            ErrorKind::TooLong { max } => with_detail(
                f,
                format!("{}: Too long: may not be more than {max} bytes", self.path),
            ),
            ErrorKind::NotSupported { value, supported } => {
                let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
                write!(
                    f,
                    "{}: Unsupported value: {value:?}: supported values: {}",
                    self.path,
                    list.join(", ")
                )
            }
        }
    }
}

/// Joins errors into one message, as the apiserver does for an invalid object.
pub fn join(errors: &[FieldError]) -> String {
    match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_field() {
        let spec = Path::new("spec");
        let partition = spec.child("updateStrategy").child("partition");
        let cases = [
            (
                FieldError::invalid(&partition, "150%", "must be between 0% and 100%"),
                r#"spec.updateStrategy.partition: Invalid value: "150%": must be between 0% and 100%"#,
            ),
            (
                FieldError::required(&spec.child("selector"), ""),
                "spec.selector: Required value",
            ),
            (
                FieldError::not_supported(&spec.child("type"), "Foo", &["A", "B"]),
                r#"spec.type: Unsupported value: "Foo": supported values: "A", "B""#,
            ),
            (
                FieldError::duplicate(&spec.child("podsToDelete").index(1), "p"),
                r#"spec.podsToDelete[1]: Duplicate value: "p""#,
            ),
            (
                FieldError::too_long(&spec.child("expr"), 1024),
                "spec.expr: Too long: may not be more than 1024 bytes",
            ),
            (
                FieldError::forbidden(&spec.child("x").key("k"), "no"),
                "spec.x[k]: Forbidden: no",
            ),
        ];
        for (error, want) in cases {
            assert_eq!(error.to_string(), want);
        }
    }
}
