//! A JSON `null` read as the kubelet's decoder reads it (docs/lint.md, "What it reads").
//!
//! Go's encoding/json (sigs.k8s.io/json's copy, which the kubelet's codec uses) stores a
//! `null` by the kind of its target: an interface, a map, a pointer or a slice is set to nil;
//! any other target is left alone, so it keeps its zero value (`""`, `0`, `false`, a struct of
//! zeros). A type with its own `UnmarshalJSON` reads the `null` itself: apimachinery's
//! `Quantity` makes it the zero quantity, `IntOrString` reads any non-string as its integer,
//! and the integer is left 0. serde has no such mode: `String`'s, `i32`'s and a struct's
//! `Deserialize` refuse a null (`invalid type: null, expected a string`), so a manifest with
//! an empty Helm value (`labels: {app: }`) that runs on the kubelet was refused here.
//!
//! [`GoNull`] is the deserializer of a `&serde_json::Value` that differs from serde_json's only
//! where the value is `null` and the type asked for is not optional: it then hands the type its
//! zero. Everything else is serde_json's own (its error texts included); lists and maps are
//! walked here so that their items and values are read so too. It sits under
//! serde_ignored and serde_path_to_error, which see it as any deserializer.

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Error, Map, Value};

/// The deserializer of `&Value` that reads a `null` as Go's decoder does (module doc).
#[derive(Clone, Copy)]
pub(crate) struct GoNull<'a>(pub(crate) &'a Value);

/// What k8s-openapi's `IntOrString` says it expects: its `Deserialize` asks for any value
/// (`deserialize_any`), so this is how a `null` for it is told from one for a type that takes
/// anything. apimachinery's `IntOrString.UnmarshalJSON` reads a non-string as its integer,
/// which Go leaves 0 for a `null`.
const INT_OR_STRING: &str = "IntOrString";

/// The name k8s-openapi's `Quantity` gives `deserialize_newtype_struct`: apimachinery's
/// `Quantity.UnmarshalJSON` reads `null` as the zero quantity, written `0`.
const QUANTITY: &str = "Quantity";

/// Whether `visitor` says it expects `what`.
fn expects<'de, V: Visitor<'de>>(visitor: &V, what: &str) -> bool {
    struct Expecting<'v, V>(&'v V);
    impl<'de, V: Visitor<'de>> std::fmt::Display for Expecting<'_, V> {
        fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            self.0.expecting(f)
        }
    }
    Expecting(visitor).to_string() == what
}

/// A `null`'s zero for a number or a boolean, else serde_json's own reading of the value.
macro_rules! zero_or_json {
    ($($method:ident => $zero:ident($value:expr);)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match self.0 {
                Value::Null => visitor.$zero($value),
                value => value.$method(visitor),
            }
        }
    )*};
}

impl<'de> Deserializer<'de> for GoNull<'de> {
    type Error = Error;

    zero_or_json! {
        deserialize_bool => visit_bool(false);
        deserialize_i8 => visit_i64(0);
        deserialize_i16 => visit_i64(0);
        deserialize_i32 => visit_i64(0);
        deserialize_i64 => visit_i64(0);
        deserialize_i128 => visit_i64(0);
        deserialize_u8 => visit_u64(0);
        deserialize_u16 => visit_u64(0);
        deserialize_u32 => visit_u64(0);
        deserialize_u64 => visit_u64(0);
        deserialize_u128 => visit_u64(0);
        deserialize_f32 => visit_f64(0.0);
        deserialize_f64 => visit_f64(0.0);
        deserialize_char => visit_borrowed_str("");
        deserialize_str => visit_borrowed_str("");
        deserialize_string => visit_borrowed_str("");
    }

    /// A type that takes any value gets a `null` as serde's unit, as serde_json gives it, except
    /// `IntOrString`, which gets Go's 0.
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null if expects(&visitor, INT_OR_STRING) => visitor.visit_i64(0),
            Value::Array(items) => visit_seq(items, visitor),
            Value::Object(fields) => visit_map(fields, visitor),
            value => value.deserialize_any(visitor),
        }
    }

    /// Go's nil pointer.
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null if name == QUANTITY => visitor.visit_borrowed_str("0"),
            _ => visitor.visit_newtype_struct(self),
        }
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Array(items) => visit_seq(items, visitor),
            value => value.deserialize_bytes(visitor),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(visitor)
    }

    /// A `null` list is Go's nil slice: no items.
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visit_seq(&[], visitor),
            Value::Array(items) => visit_seq(items, visitor),
            value => value.deserialize_seq(visitor),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    /// A `null` map is Go's nil map: no entries.
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_map(ZeroFields(&[])),
            Value::Object(fields) => visit_map(fields, visitor),
            value => value.deserialize_map(visitor),
        }
    }

    /// A `null` struct is Go's struct of zeros: each of its fields read from a `null`, so a
    /// required one is its own zero (a container's `name` is `""`) and validation then says
    /// what it says of an empty field (`spec.containers[0].name: Required value`), as the
    /// kubelet's does.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_map(ZeroFields(fields)),
            Value::Array(items) => visit_seq(items, visitor),
            Value::Object(entries) => visit_map(entries, visitor),
            value => value.deserialize_struct(name, fields, visitor),
        }
    }

    // The rest are serde_json's: a unit reads only a `null`, and no type of the API is an enum.
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.0.deserialize_unit(visitor)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.0.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.0.deserialize_identifier(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.0.deserialize_ignored_any(visitor)
    }
}

/// `items` to `visitor`, each read by [`GoNull`]; all of them must be taken, as serde_json
/// requires (its words for a visitor that stops short).
fn visit_seq<'de, V: Visitor<'de>>(items: &'de [Value], visitor: V) -> Result<V::Value, Error> {
    let mut seq = Items(items.iter());
    let value = visitor.visit_seq(&mut seq)?;
    match seq.0.len() {
        0 => Ok(value),
        _ => Err(de::Error::invalid_length(items.len(), &"fewer elements in array")),
    }
}

/// `fields` to `visitor`, each value read by [`GoNull`]; all of them must be taken, as
/// serde_json requires.
fn visit_map<'de, V: Visitor<'de>>(fields: &'de Map<String, Value>, visitor: V) -> Result<V::Value, Error> {
    let mut map = Entries { entries: fields.iter(), value: None };
    let value = visitor.visit_map(&mut map)?;
    match map.entries.len() {
        0 => Ok(value),
        _ => Err(de::Error::invalid_length(fields.len(), &"fewer elements in map")),
    }
}

struct Items<'de>(std::slice::Iter<'de, Value>);

impl<'de> SeqAccess<'de> for Items<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Error> {
        self.0.next().map(|item| seed.deserialize(GoNull(item))).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Entries<'de> {
    entries: serde_json::map::Iter<'de>,
    value: Option<&'de Value>,
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else { return Ok(None) };
        self.value = Some(value);
        seed.deserialize(BorrowedStrDeserializer::new(key)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(GoNull(value)),
            None => Err(de::Error::custom("value is missing")),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

static NULL: Value = Value::Null;

/// The fields of a struct read from a `null`: each a `null`, which [`GoNull`] makes its zero.
struct ZeroFields(&'static [&'static str]);

impl<'de> MapAccess<'de> for ZeroFields {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Error> {
        let Some((field, rest)) = self.0.split_first() else { return Ok(None) };
        self.0 = rest;
        seed.deserialize(BorrowedStrDeserializer::new(field)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(GoNull(&NULL))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use serde::Deserialize;
    use serde::de::DeserializeOwned;
    use serde_json::json;

    use super::*;

    fn read<T: DeserializeOwned>(value: &Value) -> Result<T, Error> {
        T::deserialize(GoNull(value))
    }

    /// Each kind of type gets Go's zero from a `null`, in a list and in a map alike; an
    /// optional one gets nothing (Go's nil pointer).
    #[test]
    fn a_null_is_the_zero_of_its_type() {
        let null = &Value::Null;
        assert_eq!(read::<String>(null).unwrap(), "");
        assert_eq!(read::<i32>(null).unwrap(), 0);
        assert_eq!(read::<u64>(null).unwrap(), 0);
        assert_eq!(read::<f64>(null).unwrap(), 0.0);
        assert!(!read::<bool>(null).unwrap());
        assert_eq!(read::<Vec<String>>(null).unwrap(), Vec::<String>::new());
        assert_eq!(read::<BTreeMap<String, String>>(null).unwrap(), BTreeMap::new());
        assert_eq!(read::<Option<String>>(null).unwrap(), None);
        assert_eq!(read::<Quantity>(null).unwrap(), Quantity("0".into()));
        assert_eq!(read::<IntOrString>(null).unwrap(), IntOrString::Int(0));
        let items = &json!(["a", null, 1]);
        assert_eq!(read::<Vec<Option<i32>>>(&json!([null, 2])).unwrap(), [None, Some(2)]);
        assert_eq!(
            read::<Vec<IntOrString>>(&json!([null, "http"])).unwrap(),
            [IntOrString::Int(0), IntOrString::String("http".into())]
        );
        let map = read::<BTreeMap<String, String>>(&json!({"a": null, "b": "c"})).unwrap();
        assert_eq!(map, BTreeMap::from([("a".into(), String::new()), ("b".into(), "c".into())]));
        // Not a null: serde_json's own words.
        let error = read::<Vec<String>>(items).unwrap_err();
        assert_eq!(error.to_string(), "invalid type: integer `1`, expected a string");
        assert_eq!(
            read::<String>(&json!([1])).unwrap_err().to_string(),
            "invalid type: sequence, expected a string"
        );
    }

    /// A struct read from a `null` is Go's struct of zeros: its required fields are their own
    /// zeros, not missing.
    #[test]
    fn a_null_struct_is_a_struct_of_zeros() {
        #[derive(Deserialize, Debug, PartialEq)]
        struct Port {
            name: String,
            number: i32,
            protocol: Option<String>,
        }
        let port = read::<Vec<Port>>(&json!([null])).unwrap();
        assert_eq!(port, [Port { name: String::new(), number: 0, protocol: None }]);
    }

    /// A type that takes anything gets a `null` as serde_json gives it, unit.
    #[test]
    fn a_null_for_any_value_is_unit() {
        assert_eq!(read::<Value>(&json!({"a": [null]})).unwrap(), json!({"a": [null]}));
        read::<()>(&Value::Null).unwrap();
    }
}
