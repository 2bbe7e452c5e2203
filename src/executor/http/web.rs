//! OpenWhisk's web-action convention both ways: an activation's value as an HTTP request, an HTTP response as the result the controller renders.

// The controller (core/controller/.../WebActions.scala) hands a web action its request as
// `__ow_method` (lower case), `__ow_path`, `__ow_headers` and, in raw mode, `__ow_query`
// and `__ow_body`; a body it does not parse into the value's own fields comes as
// `__ow_body`, base64 where its type is binary (or exactly application/json, for legacy).
// It renders `{"statusCode", "headers", "body"}`: a string body with a binary type it
// decodes from base64, any other string it sends as text (text/html when no type is set).

use axum::http::{self, HeaderMap, HeaderName, HeaderValue, Method};
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Map, Value};

/// What an activation carries beside its value, given to the component as these headers
/// (any of them the caller sent is replaced): the names the environment uses, as
/// `x-ow-<name>`. The API key is left out: a component that forwards its request's headers
/// would send it on.
const CONTEXT: [(&str, HeaderName); 6] = [
    ("activation_id", HeaderName::from_static("x-ow-activation-id")),
    ("transaction_id", HeaderName::from_static("x-ow-transaction-id")),
    ("deadline", HeaderName::from_static("x-ow-deadline")),
    ("action_name", HeaderName::from_static("x-ow-action-name")),
    ("action_version", HeaderName::from_static("x-ow-action-version")),
    ("namespace", HeaderName::from_static("x-ow-namespace")),
];

/// Headers that belong to one connection, not to a message (RFC 9110 7.6.1): never passed
/// on, either way.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
];

/// The statuses an action's response may have: a final one (a 1xx only comes before a
/// final one) of HTTP's classes. Any other is the action's mistake, a 502.
pub const RESPONSE_STATUSES: std::ops::Range<u16> = 200..600;

/// An activation turned into the request an HTTP component handles.
#[derive(Debug)]
pub struct Incoming {
    pub method: Method,
    /// The path with its query, from `/`.
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Why an activation's value is no request: the caller's mistake, told as a 400.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

/// The request an activation's request line stands for. A value without `__ow_method` (a
/// plain invoke, not a web request) is `POST /` with the value as its JSON body.
pub fn request(line: &[u8]) -> Result<Incoming, BadRequest> {
    let mut line: Map<String, Value> = serde_json::from_slice(line)
        .map_err(|e| BadRequest(format!("the request is not a JSON object: {e}")))?;
    let value = match line.remove("value") {
        Some(Value::Object(value)) => value,
        None | Some(Value::Null) => Map::new(),
        Some(_) => {
            return Err(BadRequest(
                "the activation's value must be a JSON object".to_owned(),
            ));
        }
    };
    let mut incoming = if value.contains_key("__ow_method") {
        web_request(value)?
    } else {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Incoming {
            method: Method::POST,
            path: "/".to_owned(),
            headers,
            body: Bytes::from(Value::Object(value).to_string()),
        }
    };
    set_context(&mut incoming.headers, &line);
    if !incoming.headers.contains_key(http::header::HOST) {
        incoming
            .headers
            .insert(http::header::HOST, HeaderValue::from_static("localhost"));
    }
    Ok(incoming)
}

/// Gives a request its activation's context as `x-ow-*` headers, taken from the
/// activation's request line: any of them the caller sent is replaced.
pub fn set_context(headers: &mut HeaderMap, line: &Map<String, Value>) {
    for (key, name) in CONTEXT {
        headers.remove(&name);
        let text = match line.get(key) {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Null) | None => continue,
            Some(other) => other.to_string(),
        };
        // A value no header can carry (a newline in an action's name) is left out.
        if let Ok(value) = HeaderValue::try_from(text) {
            headers.insert(name, value);
        }
    }
}

/// Removes the headers of a response that belong to one connection, telling `say` which:
/// the runtime's connection to the client is not the action's.
pub fn drop_hop_by_hop(headers: &mut HeaderMap, say: &dyn Fn(&str)) {
    for name in HOP_BY_HOP {
        if headers.remove(*name).is_some() {
            say(&dropped_hop_by_hop(name));
        }
    }
}

fn dropped_hop_by_hop(name: &str) -> String {
    format!(
        "wasmloop: dropped the response header `{name}`: it belongs to one connection, and \
         the runtime's connection is not the action's"
    )
}

/// A web request, as the controller delivers it.
fn web_request(mut value: Map<String, Value>) -> Result<Incoming, BadRequest> {
    let text = |value: &mut Map<String, Value>, key: &str| match value.remove(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(other) => Err(BadRequest(format!(
            "{key} must be a string, not {}",
            kind(&other)
        ))),
    };
    let method = text(&mut value, "__ow_method")?.unwrap_or_default();
    let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes())
        .map_err(|_| BadRequest(format!("__ow_method is no HTTP method: {method:?}")))?;
    let mut path = text(&mut value, "__ow_path")?.unwrap_or_default();
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    let raw = value.contains_key("__ow_query");
    if let Some(query) = text(&mut value, "__ow_query")?.filter(|q| !q.is_empty()) {
        path.push('?');
        path.push_str(query.trim_start_matches('?'));
    }
    http::uri::PathAndQuery::try_from(path.as_str())
        .map_err(|e| BadRequest(format!("__ow_path and __ow_query make no path: {e}")))?;
    let headers = match value.remove("__ow_headers") {
        None | Some(Value::Null) => HeaderMap::new(),
        Some(Value::Object(given)) => headers(&given)?,
        Some(other) => {
            return Err(BadRequest(format!(
                "__ow_headers must be an object of header names and values, not {}",
                kind(&other)
            )));
        }
    };
    let body = match text(&mut value, "__ow_body")? {
        Some(body) if is_base64_on_the_wire(headers.get(http::header::CONTENT_TYPE)) => {
            Bytes::from(decode_base64(&body).map_err(|e| {
                BadRequest(format!(
                    "__ow_body is not valid base64 ({e}), and its content-type ({}) is one \
                     OpenWhisk sends base64-encoded: encode the body, or send it with a \
                     textual content-type",
                    content_type(&headers).unwrap_or("none")
                ))
            })?)
        }
        Some(body) => Bytes::from(body),
        // In raw mode the body is `__ow_body` or nothing; otherwise the value's own fields
        // (parameters, a JSON body's fields) are the body.
        None if raw => Bytes::new(),
        None => {
            value.retain(|key, _| !key.starts_with("__ow_"));
            if value.is_empty() {
                Bytes::new()
            } else {
                Bytes::from(Value::Object(value).to_string())
            }
        }
    };
    let mut headers = headers;
    if !body.is_empty() && !headers.contains_key(http::header::CONTENT_TYPE) && !raw {
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    Ok(Incoming {
        method,
        path,
        headers,
        body,
    })
}

/// `__ow_headers` as a header map. Hop-by-hop headers and `content-length` (the body's
/// own length is sent) are dropped.
fn headers(given: &Map<String, Value>) -> Result<HeaderMap, BadRequest> {
    let connection_level =
        |h: &HeaderName| HOP_BY_HOP.contains(&h.as_str()) || h == http::header::CONTENT_LENGTH;
    header_map(given, connection_level).map_err(|bad| {
        BadRequest(match bad {
            BadHeader::Name(name) => {
                format!("__ow_headers has a name no header can have: {name:?}")
            }
            BadHeader::Value { name, .. } => format!(
                "__ow_headers[{name:?}] holds a character no header value can (a newline?)"
            ),
        })
    })
}

/// A header of a web action's JSON that no HTTP header can be.
#[derive(Debug)]
pub enum BadHeader {
    Name(String),
    Value { name: String, text: String },
}

/// A JSON object of header names and values as a header map, the way web actions write
/// headers both ways: a value is a string or, for a repeated header, an array (other JSON
/// as its text). Headers `skip` names are left out, unchecked.
pub fn header_map(
    given: &Map<String, Value>,
    skip: impl Fn(&HeaderName) -> bool,
) -> Result<HeaderMap, BadHeader> {
    let mut headers = HeaderMap::new();
    for (name, value) in given {
        let header =
            HeaderName::try_from(name.as_str()).map_err(|_| BadHeader::Name(name.clone()))?;
        if skip(&header) {
            continue;
        }
        let values = match value {
            Value::Array(values) => values.as_slice(),
            single => std::slice::from_ref(single),
        };
        for value in values {
            let text = match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            let value = HeaderValue::try_from(text.as_str()).map_err(|_| BadHeader::Value {
                name: name.clone(),
                text: text.clone(),
            })?;
            headers.append(header.clone(), value);
        }
    }
    Ok(headers)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A base64 body as web actions send it both ways.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    // The controller encodes with padding; some clients wrap lines.
    let compact: String = text.split_ascii_whitespace().collect();
    base64::engine::general_purpose::STANDARD.decode(compact)
}

fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}

/// The media type of a `content-type` value, lower case, without its parameters.
pub fn media_type(value: &str) -> String {
    value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Whether a body of this type is text to the controller (Akka's non-binary media types):
/// sent and rendered as a string; any other is binary, and travels as base64.
pub fn is_textual(content_type: &str) -> bool {
    let media = media_type(content_type);
    let Some((main, sub)) = media.split_once('/') else {
        return false;
    };
    main == "text"
        || sub.ends_with("+json")
        || sub.ends_with("+xml")
        || matches!(
            (main, sub),
            (
                "application",
                "json"
                    | "xml"
                    | "javascript"
                    | "ecmascript"
                    | "x-www-form-urlencoded"
                    | "xhtml+xml"
            )
        )
}

/// Whether the controller base64-encodes a request body of this type in `__ow_body`: a
/// binary one, and application/json itself (for legacy, in raw mode). Both directions
/// read it: a value made into a request, and (`--protocol http`) a request made into one.
pub fn is_base64_on_the_wire(content_type: Option<&HeaderValue>) -> bool {
    match content_type.and_then(|v| v.to_str().ok()) {
        // Without a type the controller takes the body as text.
        None => false,
        Some(value) => media_type(value) == "application/json" || !is_textual(value),
    }
}

/// The web-action result of a component's response, as one line: `statusCode`, the
/// `headers` (a repeated one as an array), and the `body` as text for a textual type (a
/// body that is not UTF-8 as base64, typed as binary), base64 for any other. Each header
/// left out is told through `say`.
pub fn result(
    status: http::StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    say: &dyn Fn(&str),
) -> Vec<u8> {
    let mut out = Map::new();
    let mut typed_binary = false;
    for (name, value) in headers {
        if HOP_BY_HOP.contains(&name.as_str()) || name == http::header::CONTENT_LENGTH {
            if name != http::header::CONTENT_LENGTH {
                say(&dropped_hop_by_hop(name.as_str()));
            }
            continue;
        }
        let Ok(text) = value.to_str() else {
            say(&format!(
                "wasmloop: dropped the response header `{name}`: its value is not text (a \
                 web action's headers are JSON strings); send it percent- or base64-encoded"
            ));
            continue;
        };
        if name == http::header::CONTENT_TYPE {
            typed_binary = !is_textual(text);
        }
        let text = Value::String(text.to_owned());
        match out.get_mut(name.as_str()) {
            None => {
                out.insert(name.as_str().to_owned(), text);
            }
            Some(Value::Array(values)) => values.push(text),
            Some(first) => {
                let first = first.take();
                out.insert(name.as_str().to_owned(), Value::Array(vec![first, text]));
            }
        }
    }
    let body = match std::str::from_utf8(body) {
        Ok(text) if !typed_binary => Value::String(text.to_owned()),
        not_text => {
            if not_text.is_err() && !typed_binary {
                // Text to the controller (its default is text/html), yet not text: sent as
                // binary, which the controller decodes.
                out.insert(
                    "content-type".to_owned(),
                    Value::String("application/octet-stream".to_owned()),
                );
            }
            Value::String(base64::engine::general_purpose::STANDARD.encode(body))
        }
    };
    let mut result = Map::new();
    result.insert("statusCode".to_owned(), Value::from(status.as_u16()));
    result.insert("headers".to_owned(), Value::Object(out));
    if !body.as_str().is_some_and(str::is_empty) {
        result.insert("body".to_owned(), body);
    }
    let mut line = Value::Object(result).to_string().into_bytes();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(value: Value) -> Vec<u8> {
        serde_json::json!({"value": value, "activation_id": "a1", "deadline": "123", "action_name": "/ns/hello", "api_key": "secret"})
            .to_string()
            .into_bytes()
    }

    fn header<'a>(incoming: &'a Incoming, name: &str) -> Option<&'a str> {
        incoming.headers.get(name).and_then(|v| v.to_str().ok())
    }

    #[test]
    fn a_plain_invoke_is_a_post_of_its_value_as_json() {
        let incoming = request(&line(serde_json::json!({"name": "Mike"}))).unwrap();
        assert_eq!(incoming.method, Method::POST);
        assert_eq!(incoming.path, "/");
        assert_eq!(header(&incoming, "content-type"), Some("application/json"));
        assert_eq!(&incoming.body[..], br#"{"name":"Mike"}"#);
        assert_eq!(header(&incoming, "x-ow-activation-id"), Some("a1"));
        assert_eq!(header(&incoming, "x-ow-action-name"), Some("/ns/hello"));
        assert_eq!(header(&incoming, "x-ow-deadline"), Some("123"));
        assert_eq!(header(&incoming, "x-ow-api-key"), None);
        assert_eq!(header(&incoming, "host"), Some("localhost"));
    }

    #[test]
    fn a_raw_web_request_keeps_its_method_path_query_headers_and_body() {
        let incoming = request(&line(serde_json::json!({
            "__ow_method": "put",
            "__ow_path": "/items/7",
            "__ow_query": "a=1&b=2",
            "__ow_headers": {"content-type": "text/plain", "x-many": ["1", "2"], "connection": "close", "x-ow-activation-id": "forged"},
            "__ow_body": "hello",
        })))
        .unwrap();
        assert_eq!(incoming.method, Method::PUT);
        assert_eq!(incoming.path, "/items/7?a=1&b=2");
        assert_eq!(&incoming.body[..], b"hello");
        let many: Vec<_> = incoming.headers.get_all("x-many").iter().collect();
        assert_eq!(many, ["1", "2"]);
        assert_eq!(header(&incoming, "connection"), None);
        assert_eq!(header(&incoming, "x-ow-activation-id"), Some("a1"));
    }

    #[test]
    fn a_binary_body_is_decoded_and_bad_base64_is_the_callers_mistake() {
        let incoming = request(&line(serde_json::json!({
            "__ow_method": "post", "__ow_query": "",
            "__ow_headers": {"content-type": "image/png"},
            "__ow_body": "AAEC/w==",
        })))
        .unwrap();
        assert_eq!(&incoming.body[..], &[0, 1, 2, 255]);
        let bad = request(&line(serde_json::json!({
            "__ow_method": "post", "__ow_query": "",
            "__ow_headers": {"content-type": "application/octet-stream"},
            "__ow_body": "not base64!",
        })))
        .unwrap_err();
        assert!(bad.0.contains("__ow_body is not valid base64"), "{bad}");
        assert!(bad.0.contains("application/octet-stream"), "{bad}");
    }

    #[test]
    fn a_parsed_web_request_sends_its_fields_as_the_json_body() {
        let incoming = request(&line(serde_json::json!({
            "__ow_method": "post", "__ow_path": "", "__ow_headers": {"content-type": "application/json"},
            "name": "Mike",
        })))
        .unwrap();
        assert_eq!(incoming.path, "/");
        assert_eq!(&incoming.body[..], br#"{"name":"Mike"}"#);
    }

    #[test]
    fn bad_values_are_told_as_what_to_change() {
        let cases = [
            (serde_json::json!({"__ow_method": "get", "__ow_headers": "x"}), "__ow_headers must be an object"),
            (serde_json::json!({"__ow_method": "g e t"}), "__ow_method is no HTTP method"),
            (serde_json::json!({"__ow_method": "get", "__ow_headers": {"bad name": "1"}}), "name no header can have"),
            (serde_json::json!({"__ow_method": "get", "__ow_headers": {"x": "a\nb"}}), "no header value can"),
            (serde_json::json!({"__ow_method": "get", "__ow_path": "/a b"}), "make no path"),
        ];
        for (value, told) in cases {
            let error = request(&line(value)).unwrap_err();
            assert!(error.0.contains(told), "{error} should say {told}");
        }
    }

    #[test]
    fn text_is_a_string_binary_is_base64_and_hop_by_hop_headers_are_dropped() {
        let said = std::cell::RefCell::new(Vec::new());
        let say = |m: &str| said.borrow_mut().push(m.to_owned());
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain; charset=utf-8"));
        headers.append("set-cookie", HeaderValue::from_static("a=1"));
        headers.append("set-cookie", HeaderValue::from_static("b=2"));
        headers.insert("connection", HeaderValue::from_static("close"));
        headers.insert("x-bytes", HeaderValue::from_bytes(&[0xff]).unwrap());
        let text = result(http::StatusCode::CREATED, &headers, "héllo".as_bytes(), &say);
        let text: Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(
            text,
            serde_json::json!({"statusCode": 201, "headers": {"content-type": "text/plain; charset=utf-8", "set-cookie": ["a=1", "b=2"]}, "body": "héllo"})
        );
        let said = said.into_inner();
        assert!(said.iter().any(|m| m.contains("`connection`")), "{said:?}");
        assert!(said.iter().any(|m| m.contains("`x-bytes`")), "{said:?}");

        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("image/png"));
        let image: Value = serde_json::from_slice(&result(http::StatusCode::OK, &headers, &[0, 1, 2, 255], &|_| {})).unwrap();
        assert_eq!(image["body"], "AAEC/w==");
        let untyped: Value = serde_json::from_slice(&result(http::StatusCode::OK, &HeaderMap::new(), &[0xff], &|_| {})).unwrap();
        assert_eq!(untyped["headers"]["content-type"], "application/octet-stream");
        assert_eq!(untyped["body"], "/w==");
        let empty: Value = serde_json::from_slice(&result(http::StatusCode::NO_CONTENT, &HeaderMap::new(), b"", &|_| {})).unwrap();
        assert_eq!(empty, serde_json::json!({"statusCode": 204, "headers": {}}));
    }

    #[test]
    fn textual_types_are_those_the_controller_renders_as_text() {
        for textual in ["text/html", "application/json", "application/problem+json; charset=utf-8", "application/xml", "TEXT/PLAIN"] {
            assert!(is_textual(textual), "{textual}");
        }
        for binary in ["image/png", "application/octet-stream", "application/pdf", "font/woff2", "nonsense"] {
            assert!(!is_textual(binary), "{binary}");
        }
    }
}
