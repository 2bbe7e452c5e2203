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

use crate::context::Context;

/// What an activation carries beside its value, given to the component as these headers
/// (any of them the caller sent is replaced): the names the environment uses, as
/// `x-ow-<name>`. The API key is left out: a component that forwards its request's headers
/// would send it on.
const CONTEXT: [(&str, HeaderName); 6] = [
    (
        "activation_id",
        HeaderName::from_static("x-ow-activation-id"),
    ),
    (
        "transaction_id",
        HeaderName::from_static("x-ow-transaction-id"),
    ),
    ("deadline", HeaderName::from_static("x-ow-deadline")),
    ("action_name", HeaderName::from_static("x-ow-action-name")),
    (
        "action_version",
        HeaderName::from_static("x-ow-action-version"),
    ),
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
pub fn request(value: Option<Value>, context: &Context) -> Result<Incoming, BadRequest> {
    let value = match value {
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
    set_context(&mut incoming.headers, context);
    if !incoming.headers.contains_key(http::header::HOST) {
        incoming
            .headers
            .insert(http::header::HOST, HeaderValue::from_static("localhost"));
    }
    Ok(incoming)
}

/// Gives a request its activation's context as `x-ow-*` headers: any of them the caller
/// sent is replaced.
pub fn set_context(headers: &mut HeaderMap, context: &Context) {
    for (key, name) in CONTEXT {
        headers.remove(&name);
        // A value no header can carry (a newline in an action's name) is left out.
        if let Some(value) = context
            .get(key)
            .and_then(|text| HeaderValue::from_str(text).ok())
        {
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
    let typed = content_type(&headers).map(str::to_owned);
    let body = match value.remove("__ow_body") {
        // Not raw, a JSON body that is no object comes as the JSON value itself.
        Some(json) if !raw && typed.as_deref().is_some_and(is_json_family) => {
            Bytes::from(json.to_string())
        }
        None | Some(Value::Null) => {
            if raw {
                // In raw mode the body is `__ow_body` or nothing.
                Bytes::new()
            } else {
                // Otherwise the value's own fields (parameters, a JSON or form body's
                // fields) are the body.
                value.retain(|key, _| !key.starts_with("__ow_"));
                if value.is_empty() {
                    Bytes::new()
                } else {
                    Bytes::from(Value::Object(value).to_string())
                }
            }
        }
        Some(Value::String(body)) => {
            let base64 = if raw {
                is_base64_on_the_wire(headers.get(http::header::CONTENT_TYPE))
            } else {
                typed.as_deref().is_some_and(is_binary)
            };
            if base64 {
                Bytes::from(decode_base64(&body).map_err(|e| {
                    BadRequest(format!(
                        "__ow_body is not valid base64 ({e}), and its content-type ({}) is one \
                         OpenWhisk sends base64-encoded: encode the body, or send it with a \
                         textual content-type",
                        typed.as_deref().unwrap_or("none")
                    ))
                })?)
            } else {
                Bytes::from(body)
            }
        }
        Some(other) => {
            return Err(BadRequest(format!(
                "__ow_body must be a string (or, for a JSON content-type without \
                 __ow_query, any JSON value), not {}",
                kind(&other)
            )));
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
            BadHeader::Value { name, .. } => {
                format!("__ow_headers[{name:?}] holds a character no header value can (a newline?)")
            }
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

// Akka HTTP's registry of media types (akka.http.scaladsl.model.MediaTypes), which the
// controller reads a content-type against: the registered types that are not binary
// (text, and those with an open or fixed charset), then the registered binary ones. A type
// it does not know is binary unless a charset is given. Sorted, for binary search.
const AKKA_NOT_BINARY: &[&str] = &[
    "application/atom+xml",
    "application/base64",
    "application/javascript",
    "application/json",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/problem+json",
    "application/problem+xml",
    "application/rss+xml",
    "application/soap+xml",
    "application/vnd.api+json",
    "application/vnd.google-earth.kml+xml",
    "application/x-latex",
    "application/x-vrml",
    "application/x-www-form-urlencoded",
    "application/xhtml+xml",
    "application/xml",
    "application/xml-dtd",
    "text/asp",
    "text/cache-manifest",
    "text/calendar",
    "text/css",
    "text/csv",
    "text/event-stream",
    "text/html",
    "text/markdown",
    "text/mcf",
    "text/plain",
    "text/richtext",
    "text/tab-separated-values",
    "text/uri-list",
    "text/vnd.wap.wml",
    "text/vnd.wap.wmlscript",
    "text/x-asm",
    "text/x-c",
    "text/x-component",
    "text/x-h",
    "text/x-java-source",
    "text/x-pascal",
    "text/x-script",
    "text/x-scriptcsh",
    "text/x-scriptelisp",
    "text/x-scriptksh",
    "text/x-scriptlisp",
    "text/x-scriptperl",
    "text/x-scriptperl-module",
    "text/x-scriptphyton",
    "text/x-scriptrexx",
    "text/x-scriptscheme",
    "text/x-scriptsh",
    "text/x-scripttcl",
    "text/x-scripttcsh",
    "text/x-scriptzsh",
    "text/x-server-parsed-html",
    "text/x-setext",
    "text/x-sgml",
    "text/x-speech",
    "text/x-uuencode",
    "text/x-vcalendar",
    "text/x-vcard",
    "text/xml",
];
const AKKA_BINARY: &[&str] = &[
    "application/cbor",
    "application/excel",
    "application/font-woff",
    "application/gnutar",
    "application/grpc+proto",
    "application/java-archive",
    "application/lha",
    "application/lzx",
    "application/mspowerpoint",
    "application/msword",
    "application/octet-stream",
    "application/pdf",
    "application/postscript",
    "application/vnd.google-earth.kmz",
    "application/vnd.ms-excel",
    "application/vnd.ms-excel.addin.macroenabled.12",
    "application/vnd.ms-excel.sheet.binary.macroenabled.12",
    "application/vnd.ms-excel.sheet.macroenabled.12",
    "application/vnd.ms-excel.template.macroenabled.12",
    "application/vnd.ms-fontobject",
    "application/vnd.ms-powerpoint",
    "application/vnd.ms-powerpoint.addin.macroenabled.12",
    "application/vnd.ms-powerpoint.presentation.macroenabled.12",
    "application/vnd.ms-powerpoint.slideshow.macroenabled.12",
    "application/vnd.ms-word.document.macroenabled.12",
    "application/vnd.ms-word.template.macroenabled.12",
    "application/vnd.oasis.opendocument.chart",
    "application/vnd.oasis.opendocument.database",
    "application/vnd.oasis.opendocument.formula",
    "application/vnd.oasis.opendocument.graphics",
    "application/vnd.oasis.opendocument.image",
    "application/vnd.oasis.opendocument.presentation",
    "application/vnd.oasis.opendocument.spreadsheet",
    "application/vnd.oasis.opendocument.text",
    "application/vnd.oasis.opendocument.text-master",
    "application/vnd.oasis.opendocument.text-web",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "application/vnd.openxmlformats-officedocument.presentationml.slide",
    "application/vnd.openxmlformats-officedocument.presentationml.slideshow",
    "application/vnd.openxmlformats-officedocument.presentationml.template",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.template",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.template",
    "application/x-7z-compressed",
    "application/x-ace-compressed",
    "application/x-apple-diskimage",
    "application/x-arc-compressed",
    "application/x-bzip",
    "application/x-bzip2",
    "application/x-chrome-extension",
    "application/x-compress",
    "application/x-compressed",
    "application/x-debian-package",
    "application/x-dvi",
    "application/x-font-opentype",
    "application/x-font-truetype",
    "application/x-gtar",
    "application/x-gzip",
    "application/x-rar-compressed",
    "application/x-redhat-package-manager",
    "application/x-shockwave-flash",
    "application/x-tar",
    "application/x-tex",
    "application/x-texinfo",
    "application/x-x509-ca-cert",
    "application/x-xpinstall",
    "application/zip",
    "audio/aiff",
    "audio/basic",
    "audio/midi",
    "audio/mod",
    "audio/mpeg",
    "audio/ogg",
    "audio/voc",
    "audio/vorbis",
    "audio/voxware",
    "audio/wav",
    "audio/webm",
    "audio/x-pn-realaudio",
    "audio/x-psid",
    "audio/xm",
    "font/woff",
    "font/woff2",
    "image/gif",
    "image/jpeg",
    "image/pict",
    "image/png",
    "image/svg+xml",
    "image/tiff",
    "image/webp",
    "image/x-icon",
    "image/x-ms-bmp",
    "image/x-pcx",
    "image/x-pict",
    "image/x-quicktime",
    "image/x-rgb",
    "image/x-xbitmap",
    "image/x-xpixmap",
    "message/delivery-status",
    "message/http",
    "message/rfc822",
    "video/avs-video",
    "video/divx",
    "video/gl",
    "video/mp4",
    "video/mpeg",
    "video/ogg",
    "video/quicktime",
    "video/webm",
    "video/x-dv",
    "video/x-flv",
    "video/x-motion-jpeg",
    "video/x-ms-asf",
    "video/x-msvideo",
    "video/x-sgi-movie",
];

/// Whether the controller takes a body of this content-type as binary, as Akka HTTP does:
/// a registered type by its registration (`image/svg+xml` is binary, `text/csv` is not),
/// multipart always, any other unless a charset is given (`application/hal+json` is
/// binary, `application/hal+json; charset=utf-8` is not). Binary bodies travel as base64.
pub fn is_binary(content_type: &str) -> bool {
    let media = media_type(content_type);
    let Some((main, _)) = media.split_once('/') else {
        // No media type at all: the controller refuses it; the runtime keeps its bytes.
        return true;
    };
    if AKKA_NOT_BINARY.binary_search(&media.as_str()).is_ok() {
        return false;
    }
    if main == "multipart" || AKKA_BINARY.binary_search(&media.as_str()).is_ok() {
        return true;
    }
    !parameter_names(content_type).any(|name| name.eq_ignore_ascii_case("charset"))
}

/// The names of a content-type's parameters, trimmed.
fn parameter_names(content_type: &str) -> impl Iterator<Item = &str> {
    content_type.split(';').skip(1).map(|parameter| {
        parameter
            .split_once('=')
            .map_or(parameter, |(name, _)| name)
            .trim()
    })
}

/// Whether the controller's media type is exactly `media`: Akka keeps a type's parameters
/// in it, all but the charset (`application/json; v=2` is not application/json to it).
fn is_exactly(content_type: &str, media: impl Fn(&str) -> bool) -> bool {
    media(&media_type(content_type))
        && parameter_names(content_type).all(|name| name.eq_ignore_ascii_case("charset"))
}

/// application/json and any `+json` type, without parameters but a charset: the
/// controller parses such a request body as JSON (unless raw), and takes such a result
/// body's string as base64 when it looks like base64.
pub fn is_json_family(content_type: &str) -> bool {
    is_exactly(content_type, |media| {
        media == "application/json" || media.ends_with("+json")
    })
}

/// Whether the controller reads `text` as base64 (its `Exec.isBinaryCode`): trimmed, a
/// non-empty multiple of four characters of the base64 alphabet, padded at most at its end.
pub fn looks_like_base64(text: &str) -> bool {
    // Java's trim: every character up to the space.
    let text = text.trim_matches(|c: char| c <= ' ').as_bytes();
    let alphabet = |b: &u8| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/';
    let body = match text {
        [body @ .., a, b'=', b'='] if alphabet(a) => body,
        [body @ .., b'='] => body,
        all => all,
    };
    !text.is_empty() && text.len() % 4 == 0 && body.iter().all(alphabet)
}

/// Whether a result's string `body` under this content-type is base64 to the controller:
/// a binary type's always; a JSON type's when it looks like base64 (a legacy the controller
/// keeps); without a type (text/html to it) never.
pub fn result_body_is_base64(content_type: Option<&str>, body: &str) -> bool {
    content_type.is_some_and(|t| is_binary(t) || (is_json_family(t) && looks_like_base64(body)))
}

/// Whether the controller base64-encodes a raw request body of this type in `__ow_body`:
/// a binary one, and application/json itself (for legacy). Both directions read it: a
/// value made into a request, and (`--protocol http`) a request made into one.
pub fn is_base64_on_the_wire(content_type: Option<&HeaderValue>) -> bool {
    match content_type.and_then(|v| v.to_str().ok()) {
        // Without a type the controller takes the body as text.
        None => false,
        Some(value) => is_exactly(value, |media| media == "application/json") || is_binary(value),
    }
}

/// The web-action result of a component's response, as one line: `statusCode`, the
/// `headers` (a repeated one as an array), and the `body` as text where the controller
/// takes it as text, base64 where it decodes it (a binary type; a JSON type's body that
/// would look like base64 to it, such as `true`; a body that is not UTF-8, typed as binary
/// if its type was text). Each header left out is told through `say`.
pub fn result(
    status: http::StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    say: &dyn Fn(&str),
) -> Vec<u8> {
    let mut out = Map::new();
    let mut typed = None;
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
        // The first, as the controller reads it.
        if name == http::header::CONTENT_TYPE && typed.is_none() {
            typed = Some(text);
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
    let text = std::str::from_utf8(body).ok();
    let body = match text {
        Some(text) if !result_body_is_base64(typed, text) => Value::String(text.to_owned()),
        _ => {
            if text.is_none() && !typed.is_some_and(|t| is_binary(t) || is_json_family(t)) {
                // Text to the controller (its default is text/html), yet not text: sent as
                // binary, which the controller decodes. A JSON type's base64 it decodes too.
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

    /// The request a `/run` body stands for, read as the runtime reads it.
    fn request(line: &[u8]) -> Result<Incoming, BadRequest> {
        let read = crate::context::read(line, true).unwrap();
        super::request(read.value, &read.context)
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
            (
                serde_json::json!({"__ow_method": "get", "__ow_headers": "x"}),
                "__ow_headers must be an object",
            ),
            (
                serde_json::json!({"__ow_method": "g e t"}),
                "__ow_method is no HTTP method",
            ),
            (
                serde_json::json!({"__ow_method": "get", "__ow_headers": {"bad name": "1"}}),
                "name no header can have",
            ),
            (
                serde_json::json!({"__ow_method": "get", "__ow_headers": {"x": "a\nb"}}),
                "no header value can",
            ),
            (
                serde_json::json!({"__ow_method": "get", "__ow_path": "/a b"}),
                "make no path",
            ),
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
        headers.insert(
            "content-type",
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        headers.append("set-cookie", HeaderValue::from_static("a=1"));
        headers.append("set-cookie", HeaderValue::from_static("b=2"));
        headers.insert("connection", HeaderValue::from_static("close"));
        headers.insert("x-bytes", HeaderValue::from_bytes(&[0xff]).unwrap());
        let text = result(
            http::StatusCode::CREATED,
            &headers,
            "héllo".as_bytes(),
            &say,
        );
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
        let image: Value = serde_json::from_slice(&result(
            http::StatusCode::OK,
            &headers,
            &[0, 1, 2, 255],
            &|_| {},
        ))
        .unwrap();
        assert_eq!(image["body"], "AAEC/w==");
        let untyped: Value = serde_json::from_slice(&result(
            http::StatusCode::OK,
            &HeaderMap::new(),
            &[0xff],
            &|_| {},
        ))
        .unwrap();
        assert_eq!(
            untyped["headers"]["content-type"],
            "application/octet-stream"
        );
        assert_eq!(untyped["body"], "/w==");
        let empty: Value = serde_json::from_slice(&result(
            http::StatusCode::NO_CONTENT,
            &HeaderMap::new(),
            b"",
            &|_| {},
        ))
        .unwrap();
        assert_eq!(empty, serde_json::json!({"statusCode": 204, "headers": {}}));
    }

    #[test]
    fn binary_types_are_those_akka_registers_as_binary_or_does_not_know_without_a_charset() {
        for text in [
            "text/html",
            "TEXT/PLAIN",
            "application/json",
            "application/problem+json; charset=utf-8",
            "application/xml",
            "text/csv",
            // Not registered, but given a charset.
            "application/hal+json; charset=utf-8",
            "text/x-unknown; Charset=UTF-8",
        ] {
            assert!(!is_binary(text), "{text}");
        }
        for binary in [
            "image/png",
            "image/svg+xml",
            "application/octet-stream",
            "application/pdf",
            "font/woff2",
            "multipart/form-data; boundary=x",
            // Registered as binary: a charset changes nothing.
            "image/png; charset=utf-8",
            // Not registered and no charset.
            "application/hal+json",
            "text/x-unknown",
            "nonsense",
        ] {
            assert!(is_binary(binary), "{binary}");
        }
        for list in [AKKA_NOT_BINARY, AKKA_BINARY] {
            assert!(
                list.is_sorted(),
                "the registry lists are searched as sorted"
            );
        }
    }

    #[test]
    fn a_json_type_with_parameters_but_a_charset_is_no_json_to_the_controller() {
        assert!(is_json_family("application/json"));
        assert!(is_json_family("Application/Problem+JSON; Charset=utf-8"));
        assert!(!is_json_family("application/json; v=2"));
        assert!(!is_json_family("application/problem+json; profile=x"));
        let versioned = HeaderValue::from_static("application/json; v=2");
        assert!(!is_base64_on_the_wire(Some(&versioned)), "raw, it is text");
        assert!(is_base64_on_the_wire(Some(&HeaderValue::from_static(
            "application/json; charset=utf-8"
        ))));
        assert!(!result_body_is_base64(
            Some("application/json; v=2"),
            "true"
        ));
        // Repeated, the first type is the one the controller reads.
        let mut headers = HeaderMap::new();
        headers.append("content-type", HeaderValue::from_static("image/png"));
        headers.append("content-type", HeaderValue::from_static("text/plain"));
        let first: Value =
            serde_json::from_slice(&result(http::StatusCode::OK, &headers, b"ab", &|_| {}))
                .unwrap();
        assert_eq!(first["body"], "YWI=");
    }

    #[test]
    fn base64_is_what_the_controller_takes_for_it() {
        for yes in ["true", "null", "1234", " dHJ1ZQ== ", "abc=", "ab+/"] {
            assert!(looks_like_base64(yes), "{yes}");
        }
        for no in [
            "",
            "tru",
            "{\"a\":1}",
            "a===",
            "ab=c",
            "====",
            "hello world!",
        ] {
            assert!(!looks_like_base64(no), "{no}");
        }
    }

    #[test]
    fn a_json_body_the_controller_would_take_for_base64_goes_as_base64() {
        let json = |body: &[u8], content_type: &'static str| -> Value {
            let mut headers = HeaderMap::new();
            headers.insert("content-type", HeaderValue::from_static(content_type));
            serde_json::from_slice(&result(http::StatusCode::OK, &headers, body, &|_| {})).unwrap()
        };
        // `true` reads as base64 to the controller, which would decode it to 3 bytes.
        let truth = json(b"true", "application/json");
        assert_eq!(truth["body"], "dHJ1ZQ==");
        assert_eq!(truth["headers"]["content-type"], "application/json");
        assert_eq!(
            json(br#"{"a":1}"#, "application/json")["body"],
            r#"{"a":1}"#
        );
        // No JSON type, no such reading: text stays text.
        assert_eq!(json(b"true", "text/plain")["body"], "true");
        // A JSON type's bytes that are no UTF-8 keep their type: the controller decodes them.
        let bytes = json(&[0xff, 0xfe], "application/json");
        assert_eq!(bytes["headers"]["content-type"], "application/json");
        assert_eq!(bytes["body"], "//4=");
        // Akka's binary types, even those that look like text.
        assert_eq!(json(b"<svg/>", "image/svg+xml")["body"], "PHN2Zy8+");
        assert_eq!(
            json(br#"{"a":1}"#, "application/hal+json")["body"],
            "eyJhIjoxfQ=="
        );
    }

    #[test]
    fn a_parsed_json_body_that_is_no_object_comes_as_its_json_value() {
        for (given, sent) in [
            (serde_json::json!([1, 2]), &b"[1,2]"[..]),
            (serde_json::json!("hello"), b"\"hello\""),
            (serde_json::json!(7), b"7"),
        ] {
            let incoming = request(&line(serde_json::json!({
                "__ow_method": "post", "__ow_headers": {"content-type": "application/json"},
                "__ow_body": given,
            })))
            .unwrap();
            assert_eq!(&incoming.body[..], sent);
        }
        // Raw, the same type's body is base64, as the controller sends it.
        let raw = request(&line(serde_json::json!({
            "__ow_method": "post", "__ow_query": "", "__ow_headers": {"content-type": "application/json"},
            "__ow_body": "WzEsMl0=",
        })))
        .unwrap();
        assert_eq!(&raw.body[..], b"[1,2]");
        // And SVG is binary to it either way.
        let svg = request(&line(serde_json::json!({
            "__ow_method": "post", "__ow_headers": {"content-type": "image/svg+xml"},
            "__ow_body": "PHN2Zy8+",
        })))
        .unwrap();
        assert_eq!(&svg.body[..], b"<svg/>");
        let not_a_string = request(&line(serde_json::json!({
            "__ow_method": "post", "__ow_query": "", "__ow_headers": {"content-type": "text/plain"},
            "__ow_body": [1],
        })))
        .unwrap_err();
        assert!(
            not_a_string.0.contains("__ow_body must be a string"),
            "{not_a_string}"
        );
    }
}
