//! `--protocol http`: a plain HTTP request as an OpenWhisk web action's activation, and its result as the response, as OpenWhisk's controller makes and renders them.

// The controller (WebActions.scala) gives a web action `__ow_method` (lower case),
// `__ow_path`, `__ow_headers` (lower-case names), and either the parameters as fields (a
// JSON object or form body, the query) or, raw, `__ow_query` and `__ow_body` (base64 for a
// binary type, and for application/json itself). The value made here carries both, so a
// web action of either kind runs unchanged. It renders a result with `statusCode`,
// `headers` or `body` as the response (a string body of a binary type decoded from base64;
// text/html when no type is given; a JSON body as application/json), and any other result
// as application/json.

use axum::http::{self, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Map, Value};

use crate::context::Context;
use crate::protocol::json_response;
use crate::web_action::{
    BadHeader, RESPONSE_STATUSES, decode_base64, drop_hop_by_hop, header_map,
    is_base64_on_the_wire, is_json_family, media_type, result_body_is_base64,
};

/// The request line of one activation (with its `\n`): the request as its value, and its
/// `context`.
pub fn activation(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
    context: &Context,
) -> Vec<u8> {
    let mut value = Map::new();
    let query = uri.query().unwrap_or_default();
    for (name, field) in form_urlencoded::parse(query.as_bytes()) {
        value.insert(name.into_owned(), Value::String(field.into_owned()));
    }
    let given = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let media = given.map(media_type);
    match media.as_deref() {
        Some(_) if given.is_some_and(is_json_family) && !body.is_empty() => {
            crate::context::parsed(crate::context::Parse::PlainBody);
            if let Ok(Value::Object(fields)) = serde_json::from_slice(body) {
                value.extend(fields);
            }
        }
        Some("application/x-www-form-urlencoded") => {
            for (name, field) in form_urlencoded::parse(body) {
                value.insert(name.into_owned(), Value::String(field.into_owned()));
            }
        }
        _ => {}
    }
    value.insert(
        "__ow_method".to_owned(),
        Value::String(method.as_str().to_ascii_lowercase()),
    );
    value.insert("__ow_path".to_owned(), Value::String(uri.path().to_owned()));
    value.insert("__ow_query".to_owned(), Value::String(query.to_owned()));
    let mut given = Map::new();
    for name in headers.keys() {
        let values: Vec<String> = headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        given.insert(name.as_str().to_owned(), Value::String(values.join(", ")));
    }
    value.insert("__ow_headers".to_owned(), Value::Object(given));
    if !body.is_empty() {
        // The rule the HTTP backend decodes by; a body that is no text travels as base64
        // whatever its type says.
        let text = match std::str::from_utf8(body) {
            Ok(text) if !is_base64_on_the_wire(headers.get(http::header::CONTENT_TYPE)) => {
                text.to_owned()
            }
            _ => base64::engine::general_purpose::STANDARD.encode(body),
        };
        value.insert("__ow_body".to_owned(), Value::String(text));
    }
    let mut line: Map<String, Value> = context
        .fields()
        .map(|(key, text)| (key.to_owned(), text.map_or(Value::Null, Value::from)))
        .collect();
    line.insert("value".to_owned(), Value::Object(value));
    // Compact JSON has no newline of its own: the one the line ends with is all.
    let mut line = serde_json::to_vec(&line).expect("a JSON map always serializes");
    line.push(b'\n');
    line
}

/// What an activation made here carries beside its value, as the platform would send it:
/// its id, the action's name (if it has one), the W3C `traceparent` its request came with
/// (which the logs read its trace id from, and a launcher makes `__OW_TRACEPARENT`; none
/// is invented where none came), and its deadline `timeout` from now. Made as it is
/// taken: nothing reads it back from JSON.
pub fn context(
    activation_id: String,
    action: &str,
    traceparent: Option<&str>,
    timeout: Option<std::time::Duration>,
) -> Context {
    let mut fields = vec![("activation_id", activation_id)];
    if !action.is_empty() {
        fields.push(("action_name", action.to_owned()));
    }
    if let Some(traceparent) = traceparent {
        fields.push(("traceparent", traceparent.to_owned()));
    }
    Context::made(fields, timeout)
}

/// Why a result cannot be the response: the action's mistake, a 502 naming it.
#[derive(Debug, thiserror::Error)]
#[error("the action's result is no HTTP response: {0}")]
pub struct NotAResponse(String);

/// The response a result line stands for: a web action's (`statusCode`, `headers`,
/// `body`), or any other result as application/json. Each header left out is told
/// through `say`.
pub fn response(result: &[u8], say: &dyn Fn(&str)) -> Result<Response, NotAResponse> {
    let parsed: Value =
        serde_json::from_slice(result).map_err(|e| NotAResponse(format!("not JSON ({e})")))?;
    let Value::Object(fields) = &parsed else {
        return Ok(json_response(
            StatusCode::OK,
            Bytes::copy_from_slice(result),
        ));
    };
    if !["statusCode", "headers", "body"]
        .iter()
        .any(|key| fields.contains_key(*key))
    {
        return Ok(json_response(
            StatusCode::OK,
            Bytes::copy_from_slice(result),
        ));
    }
    let status = match fields.get("statusCode") {
        None | Some(Value::Null) => StatusCode::OK,
        Some(code) => code
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .and_then(|c| StatusCode::from_u16(c).ok())
            .filter(|c| RESPONSE_STATUSES.contains(&c.as_u16()))
            .ok_or_else(|| {
                NotAResponse(format!(
                    "statusCode {code} is no HTTP status: answer a whole number from 200 to 599"
                ))
            })?,
    };
    let mut headers = match fields.get("headers") {
        None | Some(Value::Null) => HeaderMap::new(),
        Some(Value::Object(given)) => header_map(given, |_| false).map_err(|bad| {
            NotAResponse(match bad {
                BadHeader::Name(name) => format!("{name:?} is no header name"),
                BadHeader::Value { name, text } => format!(
                    "the header {name} holds a character no header value can (a newline?): \
                     {text:?}"
                ),
            })
        })?,
        Some(_) => {
            return Err(NotAResponse(
                "headers must be an object of header names and values".to_owned(),
            ));
        }
    };
    let typed = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = match fields.get("body") {
        None | Some(Value::Null) => Bytes::new(),
        Some(Value::String(text)) => match typed.as_deref() {
            Some(given) if result_body_is_base64(Some(given), text) => {
                let decoded = decode_base64(text).map_err(|e| {
                    NotAResponse(format!(
                        "its body is not base64 ({e}), which a binary content-type \
                             ({}) needs",
                        media_type(given)
                    ))
                })?;
                Bytes::from(decoded)
            }
            Some(_) => Bytes::from(text.clone()),
            None => {
                headers.insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                );
                Bytes::from(text.clone())
            }
        },
        Some(json) => {
            if typed.is_none() {
                headers.insert(
                    http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
            }
            Bytes::from(json.to_string())
        }
    };
    let mut response = (status, body).into_response();
    // Connection-level headers are the server's, not the action's; so is the length.
    drop_hop_by_hop(&mut headers, say);
    headers.remove(http::header::CONTENT_LENGTH);
    response.headers_mut().extend(headers);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(line: &[u8]) -> Value {
        serde_json::from_slice::<Value>(line).unwrap()["value"].clone()
    }

    /// An activation's line with the id `id`, of the action `hello`, no trace and no limit.
    fn line_of(method: &Method, uri: &Uri, headers: &HeaderMap, body: &[u8], id: &str) -> Vec<u8> {
        let context = context(id.to_owned(), "hello", None, None);
        activation(method, uri, headers, body, &context)
    }

    #[test]
    fn a_request_is_a_web_actions_value_both_parsed_and_raw() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert("traceparent", HeaderValue::from_static("00-ab-cd-01"));
        let uri: Uri = "/greet/me?name=Mike&x=1".parse().unwrap();
        let line = line_of(&Method::POST, &uri, &headers, br#"{"age":7}"#, "id1");
        let got = value(&line);
        assert_eq!(got["name"], "Mike");
        assert_eq!(got["age"], 7);
        assert_eq!(got["__ow_method"], "post");
        assert_eq!(got["__ow_path"], "/greet/me");
        assert_eq!(got["__ow_query"], "name=Mike&x=1");
        assert_eq!(got["__ow_headers"]["traceparent"], "00-ab-cd-01");
        // As the controller sends application/json raw: base64.
        assert_eq!(got["__ow_body"], "eyJhZ2UiOjd9");
        let line: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(line["activation_id"], "id1");
        assert_eq!(
            line["action_name"], "hello",
            "what the logs file its lines under"
        );
    }

    #[test]
    fn text_stays_text_and_binary_travels_as_base64() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        let uri: Uri = "/".parse().unwrap();
        let text = value(&line_of(&Method::PUT, &uri, &headers, b"hello", "a"));
        assert_eq!(text["__ow_body"], "hello");
        headers.insert("content-type", HeaderValue::from_static("image/png"));
        let png = value(&line_of(&Method::PUT, &uri, &headers, &[0, 255], "a"));
        assert_eq!(png["__ow_body"], "AP8=");
    }

    #[test]
    fn a_web_result_is_the_response_and_any_other_is_json() {
        let teapot = response(
            br#"{"statusCode":418,"headers":{"x-a":["1","2"]},"body":"short"}"#,
            &|_| {},
        )
        .unwrap();
        assert_eq!(teapot.status(), 418);
        assert_eq!(teapot.headers()["content-type"], "text/html; charset=utf-8");
        assert_eq!(teapot.headers().get_all("x-a").iter().count(), 2);
        let image = response(
            br#"{"headers":{"content-type":"image/png"},"body":"AP8="}"#,
            &|_| {},
        )
        .unwrap();
        assert_eq!(image.status(), 200);
        let plain = response(b"{\"message\":\"hi\"}\n", &|_| {}).unwrap();
        assert_eq!(plain.headers()["content-type"], "application/json");
        let json_body = response(br#"{"body":{"a":1}}"#, &|_| {}).unwrap();
        assert_eq!(json_body.headers()["content-type"], "application/json");
    }

    #[tokio::test]
    async fn a_json_types_body_that_looks_like_base64_is_decoded_as_the_controller_does() {
        async fn body(result: &[u8]) -> Bytes {
            let response = response(result, &|_| {}).unwrap();
            axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap()
        }
        let decoded =
            body(br#"{"headers":{"content-type":"application/json"},"body":"dHJ1ZQ=="}"#).await;
        assert_eq!(&decoded[..], b"true");
        let text =
            body(br#"{"headers":{"content-type":"application/json"},"body":"{\"a\":1}"}"#).await;
        assert_eq!(&text[..], br#"{"a":1}"#);
        let svg = body(br#"{"headers":{"content-type":"image/svg+xml"},"body":"PHN2Zy8+"}"#).await;
        assert_eq!(&svg[..], b"<svg/>");
    }

    #[test]
    fn headers_of_one_connection_are_dropped_and_told() {
        let said = std::cell::RefCell::new(Vec::new());
        let response = response(
            br#"{"headers":{"connection":"close","transfer-encoding":"chunked","upgrade":"h2c","content-length":"99","x-a":"1"},"body":"hi"}"#,
            &|m| said.borrow_mut().push(m.to_owned()),
        )
        .unwrap();
        for gone in ["connection", "transfer-encoding", "upgrade"] {
            assert!(!response.headers().contains_key(gone), "{gone} kept");
            assert!(
                said.borrow()
                    .iter()
                    .any(|m| m.contains(&format!("`{gone}`"))),
                "{gone} dropped without a word: {said:?}"
            );
        }
        assert_eq!(response.headers()["x-a"], "1");
        // The server sets the length of the body it sends.
        assert!(
            response
                .headers()
                .get("content-length")
                .is_none_or(|v| v != "99")
        );
    }

    #[test]
    fn a_result_no_response_can_be_is_told_what_to_change() {
        for (result, told) in [
            (
                &br#"{"statusCode":99}"#[..],
                "statusCode 99 is no HTTP status",
            ),
            (br#"{"statusCode":"x"}"#, "is no HTTP status"),
            (br#"{"statusCode":600}"#, "from 200 to 599"),
            (br#"{"headers":{"x":"a\nb"}}"#, "no header value can"),
            (br#"{"headers":{"bad name":"1"}}"#, "is no header name"),
            (br#"{"headers":"x"}"#, "headers must be an object"),
            (
                br#"{"headers":{"content-type":"image/png"},"body":"!!"}"#,
                "is not base64",
            ),
        ] {
            let error = response(result, &|_| {}).unwrap_err().to_string();
            assert!(error.contains(told), "{error} should say {told}");
        }
    }
}
