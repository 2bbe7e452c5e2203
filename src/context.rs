//! One activation's context, read once where its request arrives: the ids, names, deadline and trace every layer below takes as they are.

use std::borrow::Cow;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use tokio::time::Instant;

use crate::logs::Labels;

/// What an activation carries beside its value, as the platform sends it on `/run` (or as
/// `--protocol http` makes it for a request), typed once.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Context {
    /// Each field beside `value`, as its text: a string verbatim, any other value as its
    /// JSON text, `null` as none. A launcher puts each in the environment as `__OW_<KEY>`.
    fields: Vec<(String, Option<String>)>,
    /// When it must have ended, if it came with a deadline still ahead.
    pub deadline: Option<Instant>,
}

impl Context {
    /// A context made by the runtime itself (`--protocol http`), from its fields' texts
    /// and its deadline.
    pub fn made(fields: Vec<(&str, String)>, timeout: Option<Duration>) -> Context {
        let mut fields: Vec<(String, Option<String>)> = fields
            .into_iter()
            .map(|(key, text)| (key.to_owned(), Some(text)))
            .collect();
        let deadline = timeout.map(|timeout| {
            let at = SystemTime::now() + timeout;
            let ms = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
            fields.push(("deadline".to_owned(), Some(ms.to_string())));
            Instant::now() + timeout
        });
        // In the order a JSON object's keys come out of serde_json: the environment
        // of an activation made here is the same whichever way it is made.
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        Context { fields, deadline }
    }

    /// A field's text (see `fields`): none when it is absent or `null`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .and_then(|(_, text)| text.as_deref())
    }

    pub fn activation_id(&self) -> &str {
        self.get("activation_id").unwrap_or_default()
    }

    /// The W3C `traceparent` its request came with, as it came.
    pub fn traceparent(&self) -> Option<&str> {
        self.get("traceparent")
    }

    /// Each field beside `value`, in the order it came, as its text.
    pub fn fields(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), v.as_deref()))
    }

    /// The environment an ActionLoop launcher sets from it: `activation_id` as
    /// `__OW_ACTIVATION_ID`, a string verbatim, anything else as its JSON text.
    pub fn env(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.fields.iter().map(|(key, text)| {
            let text = text.clone().unwrap_or_else(|| "null".to_owned());
            (format!("__OW_{}", key.to_uppercase()), text)
        })
    }

    /// What its log lines are filed under.
    pub fn labels(&self) -> Labels {
        let text = |key| self.get(key).unwrap_or_default().to_owned();
        Labels {
            activation_id: text("activation_id"),
            namespace: text("namespace"),
            action: text("action_name"),
            trace_id: self
                .traceparent()
                .and_then(crate::logs::trace_id)
                .unwrap_or_default()
                .to_owned(),
        }
    }
}

/// A `/run` body, read in one pass: its context, and its value where the action takes one
/// (see `read`).
#[derive(Debug)]
pub struct RunBody {
    pub context: Context,
    /// The value, read only when asked for: a `null` or absent value is none.
    pub value: Option<Value>,
    /// A web action's `traceparent` (in `value.__ow_headers`), where the body named none
    /// beside its value: lifted there, as the platform would have sent it.
    pub lifted: Option<String>,
}

/// Reads a `/run` body, which must be one JSON object, in one pass: each field beside
/// `value` into the context; the value itself built only with `keep_value` (an action that
/// takes requests makes one of it), otherwise only checked, and looked into for a web
/// action's `traceparent` header. A deadline already past on arrival is ignored: the
/// platform's own tests send `"deadline":"123"`, and those requests run.
pub fn read(body: &[u8], keep_value: bool) -> Result<RunBody, String> {
    parsed(Parse::RunBody);
    // serde would also take an array for a map; the platform only ever sends objects.
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err("expected a JSON object, found an array".to_owned());
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let read = deserializer
        .deserialize_map(Body { keep_value })
        .and_then(|read| deserializer.end().map(|()| read))
        .map_err(|e| e.to_string())?;
    let mut context = Context {
        deadline: read.deadline_ms.and_then(instant_of),
        fields: read.fields,
    };
    let lifted = match read.header_traceparent {
        Some(given) if !read.has_traceparent => crate::logs::traceparent(&given).map(str::to_owned),
        _ => None,
    };
    if let Some(traceparent) = &lifted {
        context
            .fields
            .insert(0, ("traceparent".to_owned(), Some(traceparent.clone())));
    }
    Ok(RunBody {
        context,
        value: read.value,
        lifted,
    })
}

/// When a deadline in epoch milliseconds falls, if it is still ahead.
fn instant_of(ms: u64) -> Option<Instant> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    (ms > now_ms).then(|| Instant::now() + Duration::from_millis(ms - now_ms))
}

/// The request line a web action's lifted `traceparent` makes (see `RunBody::lifted`):
/// the line with the field added at its top level, where a launcher makes it
/// `__OW_TRACEPARENT`; the rest of the line byte for byte.
pub fn with_traceparent(line: Vec<u8>, traceparent: &str) -> Vec<u8> {
    // Hex and dashes only (`logs::traceparent` checked it): nothing in it needs escaping.
    let field = format!("\"traceparent\":\"{traceparent}\"");
    let open = line.iter().position(|b| *b == b'{').unwrap_or(0);
    let empty = line[open + 1..]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_none_or(|b| *b == b'}');
    let mut lifted = Vec::with_capacity(line.len() + field.len() + 1);
    lifted.extend_from_slice(&line[..=open]);
    lifted.extend_from_slice(field.as_bytes());
    if !empty {
        lifted.push(b',');
    }
    lifted.extend_from_slice(&line[open + 1..]);
    lifted
}

/// What one pass over a `/run` body gathers.
#[derive(Default)]
struct Read {
    fields: Vec<(String, Option<String>)>,
    deadline_ms: Option<u64>,
    has_traceparent: bool,
    value: Option<Value>,
    header_traceparent: Option<String>,
}

struct Body {
    keep_value: bool,
}

impl<'de> Visitor<'de> for Body {
    type Value = Read;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Read, A::Error> {
        let mut read = Read::default();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == "value" {
                if self.keep_value {
                    read.value = map.next_value::<Option<Value>>()?;
                    read.header_traceparent = read
                        .value
                        .as_ref()
                        .and_then(|value| value.get("__ow_headers"))
                        .and_then(|headers| headers.get("traceparent"))
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                } else {
                    // The parameters may be large, and are the action's: only checked.
                    read.header_traceparent = map.next_value_seed(Peek(Depth::Value))?;
                }
                continue;
            }
            let value = map.next_value::<Value>()?;
            if key == "deadline" {
                read.deadline_ms = match &value {
                    Value::String(text) => text.trim().parse().ok(),
                    Value::Number(n) => n.as_u64(),
                    _ => None,
                };
            }
            read.has_traceparent |= key == "traceparent";
            let text = match value {
                Value::Null => None,
                Value::String(text) => Some(text),
                other => Some(other.to_string()),
            };
            read.fields.push((key.into_owned(), text));
        }
        Ok(read)
    }
}

/// Where a `Peek` is in a web action's value: at the value, inside `__ow_headers`, or
/// at the `traceparent` header itself.
#[derive(Clone, Copy, PartialEq)]
enum Depth {
    Value,
    Headers,
    Traceparent,
}

/// Checks a value without building it, keeping only `value.__ow_headers.traceparent`.
struct Peek(Depth);

impl<'de> DeserializeSeed<'de> for Peek {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, from: D) -> Result<Option<String>, D::Error> {
        from.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Peek {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let inner = match (self.0, key.as_ref()) {
                (Depth::Value, "__ow_headers") => Some(Depth::Headers),
                (Depth::Headers, "traceparent") => Some(Depth::Traceparent),
                _ => None,
            };
            match inner {
                Some(depth) => found = map.next_value_seed(Peek(depth))?.or(found),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Option<String>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Option<String>, E> {
        Ok((self.0 == Depth::Traceparent).then(|| text.to_owned()))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<String>, E> {
        Ok(None)
    }
}

/// What a test counts parses of (`parses`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parse {
    /// A whole `/run` body.
    RunBody,
    /// A plain request's JSON body, made a web action's parameters (`plain_http`).
    PlainBody,
}

/// Counts a parse of a request or its context, in tests only: a test reads how many a
/// request cost (`parses`).
#[inline]
pub fn parsed(what: Parse) {
    #[cfg(test)]
    tests::PARSES.with(|parses| parses.borrow_mut().push(what));
    #[cfg(not(test))]
    let _ = what;
}

#[cfg(test)]
pub(crate) use tests::parses;

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        pub(super) static PARSES: std::cell::RefCell<Vec<Parse>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }

    /// The parses counted on this thread since the last call.
    pub(crate) fn parses() -> Vec<Parse> {
        PARSES.with(|parses| std::mem::take(&mut *parses.borrow_mut()))
    }

    const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn a_run_body_gives_the_environment_a_launcher_sets_and_its_labels() {
        let body = br#"{"value":{"big":[1,2]},"activation_id":"a1","deadline":1700000000000,"action_name":"/_/hello","namespace":null,"transaction_id":"t\"x"}"#;
        let read = read(body, false).unwrap();
        assert_eq!(
            read.context.env().collect::<Vec<_>>(),
            [
                ("__OW_ACTIVATION_ID", "a1"),
                ("__OW_DEADLINE", "1700000000000"),
                ("__OW_ACTION_NAME", "/_/hello"),
                ("__OW_NAMESPACE", "null"),
                ("__OW_TRANSACTION_ID", "t\"x"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(read.context.get("namespace"), None);
        assert_eq!(read.value, None);
        let labels = read.context.labels();
        assert_eq!(
            (labels.activation_id.as_str(), labels.action.as_str()),
            ("a1", "/_/hello")
        );
        assert!(read.context.deadline.is_none(), "a deadline in the past");
        assert!(
            super::read(br#"{"value":{}}"#, false)
                .unwrap()
                .context
                .env()
                .next()
                .is_none()
        );
    }

    #[test]
    fn a_deadline_ahead_is_an_instant_and_one_not_a_time_is_none() {
        let ahead = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis()
            + 60_000;
        for body in [
            format!(r#"{{"deadline":"{ahead}"}}"#),
            format!(r#"{{"deadline":{ahead}}}"#),
        ] {
            let at = read(body.as_bytes(), false)
                .unwrap()
                .context
                .deadline
                .unwrap();
            let left = at - Instant::now();
            assert!(left > Duration::from_secs(59) && left <= Duration::from_secs(60));
        }
        for body in [r#"{"deadline":"soon"}"#, r#"{"deadline":null,"value":{}}"#] {
            assert_eq!(read(body.as_bytes(), false).unwrap().context.deadline, None);
        }
    }

    #[test]
    fn run_bodies_must_be_one_json_object() {
        for good in [
            r#"{"value":{"a":1},"deadline":"1"}"#,
            "{}",
            r#"{"value":[1,2]}"#,
        ] {
            assert!(read(good.as_bytes(), false).is_ok(), "{good}");
            assert!(read(good.as_bytes(), true).is_ok(), "{good}");
        }
        for bad in ["[1]", "{\"value\":", "", "5", "{} {}", r#"{"value":[1,}"#] {
            assert!(read(bad.as_bytes(), false).is_err(), "{bad}");
            assert!(read(bad.as_bytes(), true).is_err(), "{bad}");
        }
        assert_eq!(
            read(b"[1]", false).unwrap_err(),
            "expected a JSON object, found an array"
        );
        assert!(
            read(b"5", false)
                .unwrap_err()
                .contains("expected a JSON object"),
            "the message names what was expected, not a type of ours"
        );
    }

    #[test]
    fn a_web_actions_traceparent_header_is_lifted_unless_the_body_has_one() {
        let header = format!(r#"{{"__ow_headers":{{"traceparent":"{TRACEPARENT}"}},"n":[1]}}"#);
        for keep_value in [false, true] {
            let body = format!(r#"{{"value":{header},"activation_id":"a1"}}"#);
            let read = read(body.as_bytes(), keep_value).unwrap();
            assert_eq!(read.lifted.as_deref(), Some(TRACEPARENT));
            assert_eq!(read.context.traceparent(), Some(TRACEPARENT));
            assert_eq!(read.context.labels().trace_id, &TRACEPARENT[3..35]);
            assert_eq!(
                String::from_utf8(with_traceparent(body.clone().into_bytes(), TRACEPARENT))
                    .unwrap(),
                format!(
                    r#"{{"traceparent":"{TRACEPARENT}","value":{header},"activation_id":"a1"}}"#
                )
            );
            // One at the top level, even one that is no traceparent, stays as it came.
            let own = format!(r#"{{"traceparent":"mine","value":{header}}}"#);
            let read = super::read(own.as_bytes(), keep_value).unwrap();
            assert_eq!(
                (read.lifted, read.context.traceparent()),
                (None, Some("mine"))
            );
            // A header that is no W3C traceparent is not lifted; one elsewhere is not read.
            for value in [
                r#"{"__ow_headers":{"traceparent":"nope"}}"#.to_owned(),
                r#"{"name":"traceparent"}"#.to_owned(),
                format!(r#"{{"deeper":{{"__ow_headers":{{"traceparent":"{TRACEPARENT}"}}}}}}"#),
                format!(r#"["{TRACEPARENT}"]"#),
            ] {
                let body = format!(r#"{{"value":{value}}}"#);
                assert_eq!(
                    super::read(body.as_bytes(), keep_value).unwrap().lifted,
                    None
                );
            }
        }
        assert_eq!(
            with_traceparent(b"{}\n".to_vec(), TRACEPARENT),
            format!("{{\"traceparent\":\"{TRACEPARENT}\"}}\n").into_bytes()
        );
    }

    #[test]
    fn a_made_context_has_its_deadline_as_an_instant_and_as_epoch_milliseconds() {
        let made = Context::made(
            vec![("activation_id", "a2".to_owned())],
            Some(Duration::from_secs(5)),
        );
        assert_eq!(made.activation_id(), "a2");
        let ms: u128 = made.get("deadline").unwrap().parse().unwrap();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis();
        assert!(ms > now + 4_000 && ms <= now + 5_000, "{ms} {now}");
        assert!(made.deadline.unwrap() > Instant::now() + Duration::from_secs(4));
    }
}
