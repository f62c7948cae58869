//! An upstream answer's JSON text, turned into jq values only as far as its programs
//! need. Most answers are read with plain field programs (`.id`, `.status`,
//! `.error.code`): those take their field straight from the text, with a parse that
//! skips everything else; the whole answer becomes a jq value (once) only for a
//! program that needs more. Building and dropping the whole value was a tenth of a
//! submit's own work.
//!
//! The short way answers only where it answers as jaq does: the text must be UTF-8,
//! nested no deeper than [`MAX_DEPTH`] and JSON to serde_json, each step an object or
//! null, and the field found is parsed by jaq itself. Anything else goes the long way,
//! so errors and odd inputs get jaq's own answer.

use std::cell::OnceCell;

use bytes::Bytes;
use jaq_json::Val;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::jq::{Jq, JqVars, MAX_DEPTH, nested_deeper_than, parse};

/// An answer body, read lazily.
pub struct Document<'a> {
    text: &'a [u8],
    /// One pass over the text, made at most once: its top-level fields, when
    /// serde_json finds it JSON that may go the short way.
    index: OnceCell<Option<Index<'a>>>,
    /// The whole value, once some program (or the check) needed it.
    whole: OnceCell<Result<Val, String>>,
}

/// The top level of a text that is JSON as jaq reads it.
enum Index<'a> {
    /// `null`: every field of it is null.
    Null,
    /// An object's fields, the text of each value kept.
    Fields(Vec<(std::borrow::Cow<'a, str>, &'a RawValue)>),
    /// Any other value: fields of it are jaq's to answer (as errors).
    Other,
}

impl<'a> Document<'a> {
    pub fn new(text: &'a [u8]) -> Self {
        Self {
            text,
            index: OnceCell::new(),
            whole: OnceCell::new(),
        }
    }

    /// Whether the text is JSON, or why not: what [`parse`] would say, without
    /// building the value when serde_json can tell.
    pub fn check(&self) -> Result<(), String> {
        match self.index() {
            Some(_) => Ok(()),
            None => self.value().map(drop),
        }
    }

    /// The whole value (parsed once).
    pub fn value(&self) -> Result<Val, String> {
        self.whole.get_or_init(|| parse(self.text)).clone()
    }

    /// `jq`'s first output on this answer, as [`Jq::first`] gives it on the whole
    /// value. Call [`Document::check`] first: on text that is not JSON this is the
    /// parse's error.
    pub fn first(&self, jq: &Jq, vars: &JqVars) -> Result<Option<Val>, String> {
        if jq.is_constant() {
            return jq.first(Val::Null, vars);
        }
        if let Some((keys, index)) = jq.field_keys().zip(self.index())
            && let Some(found) = index.pick(keys)
        {
            return Ok(Some(found));
        }
        jq.first(self.value()?, vars)
    }

    fn index(&self) -> Option<&Index<'a>> {
        self.index
            .get_or_init(|| {
                let text = std::str::from_utf8(self.text).ok()?;
                if nested_deeper_than(self.text, MAX_DEPTH) {
                    return None;
                }
                let mut de = serde_json::Deserializer::from_str(text);
                let index = de::Deserializer::deserialize_any(&mut de, TopLevel).ok()?;
                de.end().ok()?;
                // Skipped values are not decoded, so their `\u` escapes were not
                // checked: where there may be one, the whole text is, as jaq would.
                if self.text.contains(&b'\\') && serde_json::from_str::<Checked>(text).is_err() {
                    return None;
                }
                Some(index)
            })
            .as_ref()
    }
}

impl Index<'_> {
    /// `.k1.k2…` as jq answers it on objects and nulls; `None` where this cannot
    /// say.
    fn pick(&self, keys: &[Bytes]) -> Option<Val> {
        let (key, rest) = keys.split_first()?;
        match self {
            Self::Null => Some(Val::Null),
            Self::Other => None,
            // jq keeps the last of equal keys.
            Self::Fields(fields) => match fields.iter().rev().find(|(k, _)| k.as_bytes() == key) {
                None => Some(Val::Null),
                Some((_, raw)) => pick(raw.get(), rest),
            },
        }
    }
}

/// `.k1.k2…` of a JSON value's text (one that passed the index), as jq answers it
/// on objects and nulls; `None` where this cannot say.
fn pick(text: &str, keys: &[Bytes]) -> Option<Val> {
    let Some((key, rest)) = keys.split_first() else {
        return jaq_json::read::parse_single(text.as_bytes()).ok();
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let step = de::Deserializer::deserialize_any(&mut de, FieldOf(key)).ok()?;
    de.end().ok()?;
    match step {
        Step::Null | Step::Field(None) => Some(Val::Null),
        Step::Field(Some(raw)) => pick(raw.get(), rest),
    }
}

/// Reads the top level of a text into an [`Index`], checking the rest.
struct TopLevel;

impl<'de> Visitor<'de> for TopLevel {
    type Value = Index<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Index<'de>, E> {
        Ok(Index::Null)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Index<'de>, E> {
        Ok(Index::Other)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Index<'de>, E> {
        Ok(Index::Other)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Index<'de>, E> {
        Ok(Index::Other)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Index<'de>, E> {
        Ok(Index::Other)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Index<'de>, E> {
        Ok(Index::Other)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Index<'de>, A::Error> {
        Checked.visit_seq(seq).map(|_| Index::Other)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Index<'de>, A::Error> {
        let mut fields = Vec::new();
        while let Some(key) = map.next_key_seed(Key)? {
            fields.push((key, map.next_value::<&'de RawValue>()?));
        }
        Ok(Index::Fields(fields))
    }
}

/// An object key, borrowed from the text when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = std::borrow::Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = std::borrow::Cow<'de, str>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Self::Value, E> {
        Ok(key.into())
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(key.to_owned().into())
    }
}

/// Any JSON value, skipped but checked as jaq's parser checks it: serde_json skips
/// values (`IgnoredAny`, `RawValue`) without decoding their strings, so it lets a
/// lone surrogate escape (`"\ud800"`) pass where jaq refuses the text.
struct Checked;

impl<'de> de::Deserialize<'de> for Checked {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Checked)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = Checked;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_key::<Checked>()?.is_some() {
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

/// What one step of a field path finds.
enum Step<'t> {
    /// The value was null: so is every field of it.
    Null,
    /// An object: its last field of the key (jq keeps the last of equal keys).
    Field(Option<&'t RawValue>),
}

/// Visits an object for the field `key`, skipping the rest.
struct FieldOf<'k>(&'k [u8]);

impl<'de> Visitor<'de> for FieldOf<'_> {
    type Value = Step<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object or null")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Step<'de>, E> {
        Ok(Step::Null)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Step<'de>, A::Error> {
        let mut found = None;
        while let Some(is_key) = map.next_key_seed(IsKey(self.0))? {
            if is_key {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<Checked>()?;
            }
        }
        Ok(Step::Field(found))
    }
}

/// Whether an object key is the one looked for.
struct IsKey<'k>(&'k [u8]);

impl<'de> DeserializeSeed<'de> for IsKey<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for IsKey<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<bool, E> {
        Ok(key.as_bytes() == self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::MediaKind;

    fn vars() -> JqVars {
        JqVars::new("m", "um", MediaKind::Video, None, None)
    }

    /// What jaq answers on the whole text, no short way taken: the parse's error, or
    /// the program's first output, as JSON text.
    fn jaqs(code: &str, text: &[u8]) -> Result<Option<String>, String> {
        let value = parse(text)?;
        let jq = Jq::compile(code).unwrap();
        Ok(jq
            .by_jaq(value, &vars())?
            .map(|v| super::super::jq::to_json(&v).to_string()))
    }

    fn ours(code: &str, text: &[u8]) -> Result<Option<String>, String> {
        let doc = Document::new(text);
        doc.check()?;
        let jq = Jq::compile(code).unwrap();
        Ok(doc
            .first(&jq, &vars())?
            .map(|v| super::super::jq::to_json(&v).to_string()))
    }

    const CODES: [&str; 8] = [
        ".id",
        ".data.id",
        ".a.b",
        ".error.message",
        ".urls",
        ".id | .",
        r#""/v2/tasks""#,
        r#""/t/\($model | @uri)""#,
    ];

    #[test]
    fn fields_are_read_as_jaq_reads_them() {
        for text in [
            r#"{"id":"t-1","status":"queued"}"#,
            r#"{"id":7,"id":"last wins"}"#,
            r#"{"data":{"id":"deep"},"data":null}"#,
            r#"{"data":{"id":"x"}}"#,
            r#"{"data":"a string"}"#,
            r#"{"a":{"b":[1,2,{"c":1e400}]},"urls":["https://x/1"]}"#,
            r#"{"error":{"message":"caf\u00e9 \ud83d\ude00"}}"#,
            r#"{"id":12345678901234567890123}"#,
            r#"null"#,
            r#"[1,2]"#,
            r#""text""#,
            r#"{"id":"x"} trailing"#,
            r#"{"id":"x","#,
            "{\"id\":\"\u{7f}\"}",
            "{\"id\":\"\\ud800\"}",
            "{\"id\": 01}",
            "",
        ] {
            for code in CODES {
                assert_eq!(
                    ours(code, text.as_bytes()),
                    jaqs(code, text.as_bytes()),
                    "{code} on {text}"
                );
            }
        }
        let invalid_utf8 = b"{\"id\":\"\xff\"}";
        assert_eq!(ours(".id", invalid_utf8), jaqs(".id", invalid_utf8));
        let deep = format!("{{\"id\":1,\"x\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert_eq!(ours(".id", deep.as_bytes()), jaqs(".id", deep.as_bytes()));
    }

    #[test]
    fn plain_fields_do_not_build_the_whole_value() {
        let doc = Document::new(br#"{"id":"t-1","status":"queued","other":[1,2,3]}"#);
        doc.check().unwrap();
        let id = doc.first(&Jq::compile(".id").unwrap(), &vars()).unwrap();
        assert!(matches!(id, Some(Val::TStr(_))));
        assert!(doc.whole.get().is_none(), "the whole answer was parsed");
        let status = doc
            .first(&Jq::compile(".status").unwrap(), &vars())
            .unwrap();
        assert!(matches!(status, Some(Val::TStr(_))));
        assert!(doc.whole.get().is_none(), "the whole answer was parsed");
        // Any other program needs it.
        doc.first(&Jq::compile(".other[0]").unwrap(), &vars())
            .unwrap();
        assert!(doc.whole.get().is_some());
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "\\PC{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[ab]|id|data|error|message|urls", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn short_reads_answer_as_jaq_does(
            value in any_json(),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
            byte in proptest::prelude::any::<u8>(),
            how in 0..3u8,
            keys in proptest::collection::vec("[ab]|id|data|error|message|urls", 1..4),
        ) {
            let path = format!(".{}", keys.join("."));
            let mut text = value.to_string().into_bytes();
            // Whole, or broken at one place: one byte changed, cut or inserted.
            let at = cut.index(text.len() + 1);
            match how {
                0 => {}
                1 if at < text.len() => text[at] = byte,
                1 => text.truncate(at.saturating_sub(1)),
                _ => text.insert(at, byte),
            }
            for code in CODES.iter().copied().chain([path.as_str()]) {
                proptest::prop_assert_eq!(ours(code, &text), jaqs(code, &text), "{} on {:?}", code, String::from_utf8_lossy(&text));
            }
        }
    }
}
