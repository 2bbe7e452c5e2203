//! An action as one function: this crate runs the ActionLoop protocol around it.
//!
//! ```no_run
//! #[derive(serde::Deserialize)]
//! struct Args { name: Option<String> }
//!
//! fn main() {
//!     wasmloop_action::serve(|args: Args, _ctx| {
//!         let name = args.name.as_deref().unwrap_or("Stranger");
//!         Ok::<_, String>(serde_json::json!({ "message": format!("Hello, {name}!") }))
//!     });
//! }
//! ```
//!
//! One source builds for every backend: a WebAssembly module (`wasm32-wasip1`), a component
//! (`wasm32-wasip2`) and a native executable. The crate reads one request per line on
//! stdin, calls the function with the request's `value` and the activation's [`Context`],
//! and writes the answer as one line, flushed, on the backend's result channel (stdout in
//! WebAssembly, fd 3 natively). Logs go to stderr (`eprintln!`): in WebAssembly, stdout is
//! the result channel, and Rust gives a library no way to move `println!` off it (the Go,
//! Python and JavaScript SDKs move prints to the logs; this one cannot), so a line printed
//! there is taken for the answer: the runtime answers 502, says so in the logs, and starts
//! a fresh instance. Natively, `println!` goes to the logs.
//!
//! - `Ok(result)`: the result, which must serialize to a JSON object (or array).
//! - `Err(error)`: `{"error": "<error>"}`, which the platform shows as the activation's
//!   error (wasmloop answers it with a 200, as the platform expects).
//! - A panic: natively, `{"error": "the action panicked at <file:line>: <message>"}` and the
//!   process goes on; in WebAssembly a panic cannot be caught, so its message and location
//!   go to the logs before the instance stops (the next activation gets a fresh one).

use std::borrow::Cow;
use std::fmt::Display;
use std::io::{BufRead, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The activation's context, from its request line (never from the environment, which an
/// instance serving several activations would have from another one), borrowed from it.
/// `api_host` comes from the environment: it is the same for every activation of a
/// container.
#[derive(Debug, Clone, Default)]
pub struct Context<'a> {
    pub activation_id: Cow<'a, str>,
    pub transaction_id: Cow<'a, str>,
    pub action_name: Cow<'a, str>,
    pub action_version: Cow<'a, str>,
    pub namespace: Cow<'a, str>,
    pub api_key: Cow<'a, str>,
    pub api_host: &'a str,
    /// When the platform stops waiting for the answer; `None` without one, or for one
    /// already past when the request came, which the runtime does not enforce either.
    pub deadline: Option<SystemTime>,
}

impl Context<'_> {
    /// What is left until the deadline (zero once it has passed; `None` without one).
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline
            .map(|at| at.duration_since(SystemTime::now()).unwrap_or_default())
    }
}

/// One request line, its strings borrowed where they hold no escapes.
#[derive(Deserialize)]
struct Request<'a, A> {
    #[serde(default = "none")]
    value: Option<A>,
    #[serde(default, borrow)]
    activation_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    transaction_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    action_name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    action_version: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    namespace: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    api_key: Option<Cow<'a, str>>,
    /// Epoch milliseconds, as a string (the platform's) or a number.
    #[serde(default)]
    deadline: Option<serde_json::Value>,
}

fn none<A>() -> Option<A> {
    None
}

/// Serves activations with `action` until stdin ends. `A` is what the request's `value` is
/// read into (a struct of yours, or `serde_json::Value`; a missing `value` reads as `{}`);
/// `R` is the result.
pub fn serve<A, R, E, F>(action: F)
where
    A: DeserializeOwned,
    R: Serialize,
    E: Display,
    F: FnMut(A, &Context<'_>) -> Result<R, E>,
{
    let mut out = ResultChannel::open();
    if std::env::var("__OW_WAIT_FOR_ACK").is_ok_and(|v| !v.is_empty()) {
        out.send(b"{\"ok\":true}");
    }
    serve_lines(std::io::stdin().lock(), action, |answer| out.send(answer));
}

/// Serves the request lines of `input` with `action`, writing each answer and its newline
/// to `output`, until `input` ends: what `serve` does over stdin and the result channel,
/// for testing an action without a runtime.
pub fn serve_from<A, R, E, F>(input: impl BufRead, mut output: impl Write, action: F)
where
    A: DeserializeOwned,
    R: Serialize,
    E: Display,
    F: FnMut(A, &Context<'_>) -> Result<R, E>,
{
    serve_lines(input, action, |answer| {
        output
            .write_all(answer)
            .and_then(|()| output.write_all(b"\n"))
            .and_then(|()| output.flush())
            .is_ok()
    });
}

fn serve_lines<A, R, E, F>(
    mut input: impl BufRead,
    mut action: F,
    mut send: impl FnMut(&[u8]) -> bool,
) where
    A: DeserializeOwned,
    R: Serialize,
    E: Display,
    F: FnMut(A, &Context<'_>) -> Result<R, E>,
{
    panics::report();
    let api_host = std::env::var("__OW_API_HOST").unwrap_or_default();
    let mut line = Vec::new();
    let mut answer = Vec::new();
    loop {
        line.clear();
        // Bytes, not text: a line that is not UTF-8 gets its answer, and the loop goes on.
        match input.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        answer.clear();
        let outcome = match std::str::from_utf8(&line) {
            Ok(text) => answer_for(text, &api_host, &mut action),
            Err(e) => Err(format!(
                "the request line is not UTF-8 (byte {} is not): a request is JSON text",
                e.valid_up_to()
            )),
        };
        match outcome {
            Ok(result) => write_result(&mut answer, &result),
            Err(message) => error_line(&mut answer, &message),
        }
        // The action's own logs are out before its answer, and so before the activation ends.
        let _ = std::io::stderr().flush();
        if !send(&answer) {
            break;
        }
    }
}

/// The result as JSON, or the error saying why it is not one an activation can answer.
fn write_result<R: Serialize>(into: &mut Vec<u8>, result: &R) {
    if serde_json::to_writer(&mut *into, result).is_err() {
        into.clear();
        return error_line(into, "the action's result does not serialize to JSON");
    }
    let kind = match into.first() {
        Some(b'{' | b'[') => return,
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    };
    let shown: String = String::from_utf8_lossy(into).chars().take(80).collect();
    into.clear();
    error_line(
        into,
        &format!("the action returned {kind}, not an object: {shown} (return a map or a struct, such as json!({{\"result\": ...}}))"),
    );
}

/// The result of one request line, or the message of its `{"error": ...}`.
fn answer_for<A, R, E, F>(line: &str, api_host: &str, action: &mut F) -> Result<R, String>
where
    A: DeserializeOwned,
    E: Display,
    F: FnMut(A, &Context<'_>) -> Result<R, E>,
{
    if !line.trim_start().starts_with('{') {
        // serde would take an array's items as the struct's fields, in order.
        return Err(match serde_json::from_str::<serde::de::IgnoredAny>(line) {
            Ok(_) => "the request line is not a JSON object".to_owned(),
            Err(e) => format!("the request line is not JSON: {}", without_position(&e)),
        });
    }
    let request: Request<'_, A> = serde_json::from_str(line).map_err(|e| {
        // Told apart only on this path: a request line that fits costs one parse.
        if serde_json::from_str::<serde::de::IgnoredAny>(line).is_err() {
            format!("the request line is not JSON: {}", without_position(&e))
        } else {
            format!(
                "the request's value does not fit the action's arguments: {}",
                without_position(&e)
            )
        }
    })?;
    let args = match request.value {
        Some(args) => args,
        None => serde_json::from_str("{}").map_err(|e| {
            format!(
                "the request has no value, and the action's arguments need one: {}",
                without_position(&e)
            )
        })?,
    };
    let context = Context {
        activation_id: request.activation_id.unwrap_or_default(),
        transaction_id: request.transaction_id.unwrap_or_default(),
        action_name: request.action_name.unwrap_or_default(),
        action_version: request.action_version.unwrap_or_default(),
        namespace: request.namespace.unwrap_or_default(),
        api_key: request.api_key.unwrap_or_default(),
        api_host,
        // One already past as the request comes (OpenWhisk's tests send "123") is no
        // limit: the runtime does not enforce it, so the context does not claim it.
        deadline: request
            .deadline
            .as_ref()
            .and_then(epoch_millis)
            .filter(|deadline| *deadline > SystemTime::now()),
    };
    panics::catch(|| action(args, &context))?.map_err(|e| e.to_string())
}

/// serde's message without its place in the request line, which the author never sees.
fn without_position(error: &serde_json::Error) -> String {
    let text = error.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

fn epoch_millis(value: &serde_json::Value) -> Option<SystemTime> {
    let millis = match value {
        serde_json::Value::String(text) => text.trim().parse().ok()?,
        other => other.as_u64()?,
    };
    Some(UNIX_EPOCH + Duration::from_millis(millis))
}

fn error_line(into: &mut Vec<u8>, message: &str) {
    #[derive(Serialize)]
    struct Failure<'a> {
        error: &'a str,
    }
    serde_json::to_writer(into, &Failure { error: message })
        .expect("a struct of one string always serializes");
}

/// Where answers go: stdout in WebAssembly, fd 3 natively (stdout when fd 3 is not open,
/// as when the executable is run by hand).
struct ResultChannel(Box<dyn Write>);

impl ResultChannel {
    fn open() -> ResultChannel {
        #[cfg(not(target_os = "wasi"))]
        {
            use std::os::fd::FromRawFd;
            // SAFETY: fd 3 is only taken when it is open, and nothing else here uses it.
            let fd3 = unsafe { std::fs::File::from_raw_fd(3) };
            if fd3.metadata().is_ok() {
                return ResultChannel(Box::new(fd3));
            }
            std::mem::forget(fd3);
        }
        ResultChannel(Box::new(std::io::stdout().lock()))
    }

    /// Writes `line` and its newline in one write, flushed; false once nobody reads.
    fn send(&mut self, line: &[u8]) -> bool {
        let mut whole = Vec::with_capacity(line.len() + 1);
        whole.extend_from_slice(line);
        whole.push(b'\n');
        self.0
            .write_all(&whole)
            .and_then(|()| self.0.flush())
            .is_ok()
    }
}

mod panics {
    use std::cell::RefCell;

    thread_local! {
        /// The last panic's message and location, for the `{"error": ...}` of its activation.
        static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
    }

    /// Every panic's message and location go to the logs as it happens: in WebAssembly
    /// the instance stops right after, and this line is all that tells why.
    pub fn report() {
        std::panic::set_hook(Box::new(|info| {
            let message = match info.payload().downcast_ref::<&str>() {
                Some(text) => (*text).to_owned(),
                None => info
                    .payload()
                    .downcast_ref::<String>()
                    .cloned()
                    .unwrap_or_else(|| "no message".to_owned()),
            };
            let place = info
                .location()
                .map(|at| format!(" at {}:{}:{}", at.file(), at.line(), at.column()))
                .unwrap_or_default();
            let described = format!("the action panicked{place}: {message}");
            eprintln!("{described}");
            LAST.with(|last| *last.borrow_mut() = Some(described));
        }));
    }

    /// Runs `f`, turning a panic into the error its activation answers (natively; in
    /// WebAssembly a panic aborts the instance).
    pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|_| {
            LAST.with(|last| last.borrow_mut().take())
                .unwrap_or_else(|| "the action panicked".to_owned())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Args {
        name: Option<String>,
    }

    fn hello(args: Args, ctx: &Context<'_>) -> Result<serde_json::Value, String> {
        match args.name.as_deref() {
            Some("") => Err("an empty name".to_owned()),
            Some("boom") => panic!("asked to"),
            name => Ok(serde_json::json!({
                "message": format!("Hello, {}!", name.unwrap_or("Stranger")),
                "id": ctx.activation_id,
                "left": ctx.time_left().is_some(),
            })),
        }
    }

    fn answer(line: &str) -> String {
        let mut out = Vec::new();
        match answer_for(line, "", &mut hello) {
            Ok(result) => serde_json::to_writer(&mut out, &result).unwrap(),
            Err(message) => error_line(&mut out, &message),
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_function_gets_the_value_and_the_context_of_the_request_line() {
        assert_eq!(
            answer(r#"{"value":{"name":"Mike"},"activation_id":"a1","deadline":"4102444800000"}"#),
            r#"{"id":"a1","left":true,"message":"Hello, Mike!"}"#
        );
        assert_eq!(
            answer(r#"{"activation_id":"a2"}"#),
            r#"{"id":"a2","left":false,"message":"Hello, Stranger!"}"#
        );
    }

    #[test]
    fn an_error_and_a_panic_answer_an_error_object() {
        assert_eq!(
            answer(r#"{"value":{"name":""}}"#),
            r#"{"error":"an empty name"}"#
        );
        panics::report();
        let panicked = answer(r#"{"value":{"name":"boom"}}"#);
        assert!(
            panicked.starts_with(r#"{"error":"the action panicked at "#)
                && panicked.contains(": asked to"),
            "{panicked}"
        );
        let wrong = answer(r#"{"value":{"name":7}}"#);
        assert!(
            wrong.contains("does not fit the action's arguments"),
            "{wrong}"
        );
    }
}
