//! Conversion between v1alpha1 and v1beta1, with nothing lost.
//!
//! Each kind maps the fields both versions share. A field that only one version can express is carried
//! through the other version in an annotation (a JSON object keyed by field name), and restored — and the
//! annotation removed — when the object converts back. So v1beta1 → v1alpha1 → v1beta1 (the path of every
//! v1alpha1 client reading and writing back a stored object) is the identity, and so is the reverse.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Fields of one version carried through the other.
#[derive(Debug, Default)]
pub struct Stash(Map<String, Value>);

impl Stash {
    /// Takes (and removes) the stash annotation `key` from `meta`. An unreadable annotation is ignored:
    /// it was written by someone else, and dropping it loses nothing of ours.
    pub fn take(meta: &mut ObjectMeta, key: &str) -> Self {
        let raw = meta.annotations.as_mut().and_then(|a| a.remove(key));
        if meta.annotations.as_ref().is_some_and(BTreeMap::is_empty) {
            meta.annotations = None;
        }
        match raw.map(|text| serde_json::from_str::<Map<String, Value>>(&text)) {
            Some(Ok(map)) => Self(map),
            _ => Self::default(),
        }
    }

    /// Writes the stash into `meta` under `key` when it holds anything.
    pub fn put(self, meta: &mut ObjectMeta, key: &str) {
        if self.0.is_empty() {
            return;
        }
        let text = Value::Object(self.0).to_string();
        meta.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), text);
    }

    /// Records `value` under `name` unless it equals the type's default (nothing to carry).
    pub fn set<T: Serialize + Default + PartialEq>(&mut self, name: &str, value: &T) {
        if *value != T::default()
            && let Ok(json) = serde_json::to_value(value)
        {
            self.0.insert(name.to_string(), json);
        }
    }

    /// The value recorded under `name`, if any and readable.
    pub fn get<T: DeserializeOwned>(&self, name: &str) -> Option<T> {
        self.0
            .get(name)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
    }

    /// Drops the value recorded under `name` (it has been applied and must not be restored).
    pub fn remove(&mut self, name: &str) {
        self.0.remove(name);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The stash as one JSON object (to carry it inside another stash).
    pub fn into_value(self) -> Value {
        Value::Object(self.0)
    }
}

/// Converts one part of an object with `forward` (`backward` is the conversion the other way) without
/// loss: the part stashed under `name` in `incoming` by the last conversion the other way is restored
/// when it converts back to this very `part`; a part that would not survive the round trip is stashed
/// in `outgoing` for the way back.
pub fn convert_part<S, T>(
    part: S,
    forward: fn(S) -> T,
    backward: fn(T) -> S,
    name: &str,
    incoming: &Stash,
    outgoing: &mut Stash,
) -> T
where
    S: Clone + PartialEq + Serialize,
    T: Clone + DeserializeOwned,
{
    if let Some(stashed) = incoming.get::<T>(name)
        && backward(stashed.clone()) == part
    {
        return stashed;
    }
    let converted = forward(part.clone());
    if backward(converted.clone()) != part {
        outgoing.set(name, &Some(part));
    }
    converted
}

/// `$to { a: $from.a, b: $from.b, …, rest… }`: a struct of one version built from one of the other,
/// the fields both versions declare alike (`a`, `b`, …) moved by name and the fields given after `;`
/// (those that differ). A kind names its shared fields once, in a macro of its own around this one, for
/// both directions of its conversion.
macro_rules! moved_fields {
    ($from:ident => $($to:ident)::+ { $($field:ident),* $(,)? ; $($rest:tt)* }) => {
        $($to)::+ { $($field: $from.$field,)* $($rest)* }
    };
}
pub(crate) use moved_fields;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stash_round_trip_and_cleanup() {
        let mut meta = ObjectMeta::default();
        let mut stash = Stash::default();
        stash.set("flag", &true);
        stash.set("zero", &0i32);
        stash.set("list", &vec!["a".to_string()]);
        stash.put(&mut meta, "k");
        assert_eq!(
            meta.annotations
                .as_ref()
                .and_then(|a| a.get("k"))
                .map(String::as_str),
            Some(r#"{"flag":true,"list":["a"]}"#)
        );
        let back = Stash::take(&mut meta, "k");
        assert_eq!(back.get::<bool>("flag"), Some(true));
        assert_eq!(back.get::<i32>("zero"), None);
        assert_eq!(back.get::<Vec<String>>("list"), Some(vec!["a".to_string()]));
        assert_eq!(
            meta.annotations, None,
            "an emptied annotation map is removed"
        );
    }
}
