//! A component action in Rust that calls out: `{"url":"http://host:port/path"}` →
//! `{"status":200,"length":1234}`, fetched through wasi:http.
//!
//! Same contract as a WASI preview 1 action (one JSON request per line on stdin, one result
//! per line on stdout, logs on stderr), built for wasm32-wasip2. wasmloop refuses every
//! request whose host and port its `--allow-outbound` list does not name: the request then
//! fails with `HttpRequestDenied`, which this action returns as its error.

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};
use wasi::http::outgoing_handler;
use wasi::http::types::{ErrorCode, Fields, OutgoingRequest, Scheme};
use wasi::io::streams::StreamError;

#[derive(Deserialize)]
struct Activation {
    #[serde(default)]
    value: Params,
}

#[derive(Default, Deserialize)]
struct Params {
    #[serde(default)]
    url: String,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Answer {
    Fetched { status: u16, length: usize },
    Failed { error: String },
}

fn fetch(url: &str) -> Result<(u16, usize), String> {
    let (scheme, rest) = match url.split_once("://") {
        Some(("https", rest)) => (Scheme::Https, rest),
        Some(("http", rest)) => (Scheme::Http, rest),
        _ => return Err(format!("not an http(s) URL: {url:?}")),
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let request = OutgoingRequest::new(Fields::new());
    let invalid = |what| move |()| format!("invalid {what} in {url:?}");
    request
        .set_scheme(Some(&scheme))
        .map_err(invalid("scheme"))?;
    request
        .set_authority(Some(authority))
        .map_err(invalid("host"))?;
    request
        .set_path_with_query(Some(if path.is_empty() { "/" } else { path }))
        .map_err(invalid("path"))?;
    let failed = |e: ErrorCode| format!("the request failed: {e:?}");
    let future = outgoing_handler::handle(request, None).map_err(failed)?;
    let response = loop {
        if let Some(ready) = future.get() {
            break ready.expect("taken once").map_err(failed)?;
        }
        future.subscribe().block();
    };
    let status = response.status();
    // WASI resources have parents: drop the stream before its body, and the body before
    // the response (the scopes below do), or the instance traps.
    let body = response.consume().expect("consumed once");
    let mut length = 0;
    {
        let stream = body.stream().expect("streamed once");
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => length += chunk.len(),
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(e)) => {
                    return Err(format!("reading the body failed: {}", e.to_debug_string()))
                }
            }
        }
    }
    drop(body);
    Ok((status, length))
}

fn main() {
    let mut stdout = std::io::stdout().lock();
    if std::env::var("__OW_WAIT_FOR_ACK").is_ok_and(|v| !v.is_empty()) {
        writeln!(stdout, r#"{{"ok":true}}"#).unwrap();
        stdout.flush().unwrap();
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let answer = match serde_json::from_str::<Activation>(&line) {
            Ok(Activation { value }) => match fetch(&value.url) {
                Ok((status, length)) => {
                    eprintln!("fetch: {} answered {status}", value.url);
                    Answer::Fetched { status, length }
                }
                Err(error) => Answer::Failed { error },
            },
            Err(e) => Answer::Failed {
                error: format!("bad request: {e}"),
            },
        };
        let mut line = serde_json::to_vec(&answer).expect("always serializes");
        line.push(b'\n');
        stdout.write_all(&line).unwrap();
        stdout.flush().unwrap();
    }
}
