//! The text Go's `encoding/json` and apimachinery write, which upstream hashes: kruise-rs must
//! hash the same bytes to name the same revisions and record the same SidecarSet hashes.

/// A JSON string as Go's `encoding/json` writes it: HTML-significant characters and the
/// JavaScript line separators escaped as `\u00XX`, like control characters.
pub fn write_string(text: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' | '\u{0}'..='\u{1f}' => {
                let code = c as u32;
                out.push_str("\\u");
                for shift in [12, 8, 4, 0] {
                    out.push(HEX[((code >> shift) & 0xf) as usize] as char);
                }
            }
            other => out.push(other),
        }
    }
    out.push('"');
}

/// apimachinery's `rand.SafeEncodeString`: each character becomes `alphabet[code point % 27]`, an
/// alphabet without vowels (no words in generated names).
pub fn safe_encode(text: &str) -> String {
    const ALPHABET: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";
    text.chars()
        .map(|c| char::from(ALPHABET[(c as usize) % ALPHABET.len()]))
        .collect()
}

/// Drops nulls, empty lists and empty objects, at every depth, as Go's `omitempty` would not have
/// written them: an unset field and an empty one then compare alike.
pub(crate) fn prune_empty(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let is_empty = |v: &Value| match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, prune_empty(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(list) => Value::Array(list.into_iter().map(prune_empty).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_as_go_writes_them() {
        let cases = [
            ("plain", "\"plain\""),
            ("a\"b\\c", "\"a\\\"b\\\\c\""),
            ("<a&b>", "\"\\u003ca\\u0026b\\u003e\""),
            ("\n\r\t\u{8}\u{c}", "\"\\n\\r\\t\\b\\f\""),
            ("\u{1}\u{1f}", "\"\\u0001\\u001f\""),
            ("\u{2028}\u{2029}", "\"\\u2028\\u2029\""),
            ("héllo", "\"héllo\""),
        ];
        for (text, want) in cases {
            let mut out = String::new();
            write_string(text, &mut out);
            assert_eq!(out, want, "{text:?}");
        }
    }

    #[test]
    fn safe_encoding_as_apimachinery() {
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
        assert_eq!(safe_encode("2f94d"), "64f8z");
        assert_eq!(safe_encode(""), "");
    }
}
