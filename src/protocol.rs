//! The OpenWhisk ActionLoop wire format: request shapes, fixed messages and the log sentinel.

use std::io::Write;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Written on stdout and stderr after every activation, so the platform knows where its logs end.
pub const SENTINEL: &str = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX\n";

pub const MSG_ALREADY_INITIALIZED: &str = "Cannot initialize the action more than once.";
pub const MSG_MISSING_CODE: &str = "Missing main/no code to execute.";
pub const MSG_NO_ACTION: &str = "no action defined yet";
pub const MSG_COMMAND_EXITED: &str = "command exited";
pub const MSG_NOT_AN_OBJECT: &str = "The action did not return a dictionary or array.";
pub const MSG_INIT_LOGGED_PREPARE: &str =
    "The action failed to generate or locate a binary. See logs for details.";
pub const MSG_INIT_LOGGED_START: &str = "Cannot start action. Check logs for details.";
pub const MSG_ABRUPT_EXIT: &str = "Command exited abruptly during initialization.";
pub const MSG_NOT_INITIALIZED_PROPERLY: &str = "The action did not initialize properly.";
pub const MSG_EXEC_ENV_MISMATCH: &str =
    "Execution environment version mismatch. See logs for details.";
pub const MSG_CANNOT_COMPILE: &str = "cannot compile";

/// The body of a successful `/init`.
pub const OK_BODY: &[u8] = b"{\"ok\":true}\n";

/// `POST /init` body. Every field may be absent or `null`; unknown fields are ignored.
#[derive(Debug, Default, Deserialize)]
pub struct InitRequest<'a> {
    #[serde(default, borrow)]
    pub value: Option<InitValue<'a>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct InitValue<'a> {
    #[serde(default, borrow)]
    pub code: Option<CodeField<'a>>,
    #[serde(default)]
    pub binary: Option<bool>,
    #[serde(default)]
    pub main: Option<String>,
    #[serde(default)]
    pub env: Option<Map<String, Value>>,
    #[serde(default)]
    pub name: Option<String>,
}

/// The action's code, borrowed from the body unless it holds escapes: a 20 MB component is
/// 27 MB of base64, and a copy costs its fresh pages as well as the copy (a share even of
/// the Go hello's cold /init). serde borrows a `Cow<str>` only as a field of its own: inside an
/// `Option` it always copies, hence this wrapper.
#[derive(Debug, Deserialize)]
pub struct CodeField<'a>(#[serde(borrow)] pub std::borrow::Cow<'a, str>);

/// The init `env` as variables: strings verbatim, anything else as its compact JSON text.
/// A variable of an action's environment, as the action will see it (the last one wins).
pub fn env_value<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

pub fn env_pairs(env: &Map<String, Value>) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), text)
        })
        .collect()
}

/// `{"error":"<message>"}` followed by a newline, as every error response is.
pub fn error_body(message: &str) -> Bytes {
    let mut body = serde_json::to_vec(&serde_json::json!({ "error": message }))
        .expect("a map with one string value always serializes");
    body.push(b'\n');
    Bytes::from(body)
}

/// Marks the end of an activation's logs: stdout first, then stderr, as the reference does.
pub fn write_sentinels() {
    write_stdout_sentinel();
    write_stderr(SENTINEL.as_bytes());
}

/// The stdout half of `write_sentinels`, for those who write the stderr half themselves.
pub fn write_stdout_sentinel() {
    // Errors are ignored on purpose: with a closed stdout the platform is gone anyway.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(SENTINEL.as_bytes());
    let _ = stdout.flush();
}

/// Writes `bytes` to stderr, in one write (none for no bytes).
pub fn write_stderr(bytes: &[u8]) {
    crate::logs::Stream::Stderr.write(bytes);
}

/// The environment variables that name one activation, as an ActionLoop launcher sets
/// them from each request line: never given to a worker from `/init`'s `env`.
pub const PER_ACTIVATION_ENV: [&str; 3] =
    ["__OW_ACTIVATION_ID", "__OW_DEADLINE", "__OW_TRANSACTION_ID"];

/// Writes one line of our own on stderr (the few messages docs/protocol.md allows), in
/// the log format the action's lines are in.
pub fn log_stderr(format: crate::logs::LogFormat, message: &str) {
    crate::logs::runtime_line(format, None, message);
}

/// An id shaped as the platform's (32 hex digits), different for every activation.
pub fn fresh_activation_id(made: u64) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&std::process::id().to_le_bytes());
    hasher.update(&made.to_le_bytes());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    hasher.update(&now.map_or(0, |d| d.as_nanos()).to_le_bytes());
    crate::hex(&hasher.finalize().as_bytes()[..16])
}

/// A JSON response with an exact `Content-Length` (a full body is never chunked).
pub fn json_response(
    status: axum::http::StatusCode,
    body: impl Into<axum::body::Bytes>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.into(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_that_are_not_strings_become_json_text() {
        let env: Map<String, Value> =
            serde_json::from_str(r#"{"S":"x=y","N":42,"O":{"a":[1]},"E":"","B":true}"#).unwrap();
        let pairs = env_pairs(&env);
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).unwrap().1.clone();
        assert_eq!(get("S"), "x=y");
        assert_eq!(get("N"), "42");
        assert_eq!(get("O"), r#"{"a":[1]}"#);
        assert_eq!(get("E"), "");
        assert_eq!(get("B"), "true");
    }

    #[test]
    fn error_bodies_are_json_with_a_newline() {
        assert_eq!(&error_body("a \"q\"")[..], b"{\"error\":\"a \\\"q\\\"\"}\n");
    }

    #[test]
    fn init_code_is_borrowed_from_the_body_unless_it_holds_escapes() {
        use std::borrow::Cow;
        let code = |body: &'static [u8]| {
            let request: InitRequest = serde_json::from_slice(body).unwrap();
            request.value.unwrap().code.map(|code| code.0)
        };
        assert!(matches!(
            code(br#"{"value":{"code":"AGFzbQ=="}}"#),
            Some(Cow::Borrowed("AGFzbQ=="))
        ));
        assert!(matches!(code(br#"{"value":{"code":"a\/b"}}"#), Some(Cow::Owned(c)) if c == "a/b"));
        assert!(code(br#"{"value":{"code":null}}"#).is_none());
        assert!(code(br#"{"value":{}}"#).is_none());
        assert!(serde_json::from_slice::<InitRequest>(br#"{"value":{"code":5}}"#).is_err());
    }
}
