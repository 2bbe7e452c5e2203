//! A wasi:http/proxy component for the tests: the request's path chooses what it does.

use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{json, Value};
use wasi::http::types::{
    Fields, IncomingBody, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

wasi::http::proxy::export!(Guest);

struct Guest;

/// Requests this instance has handled: 1 in a fresh instance, more in a reused one.
static HANDLED: AtomicU32 = AtomicU32::new(0);

impl wasi::exports::http::incoming_handler::Guest for Guest {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let handled = HANDLED.fetch_add(1, Ordering::Relaxed) + 1;
        let path = request.path_with_query().unwrap_or_default();
        let authority = request.authority();
        let (route, query) = path.split_once('?').unwrap_or((&path, ""));
        let headers = request.headers().entries();
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        let method = match request.method() {
            Method::Get => "GET".to_owned(),
            Method::Post => "POST".to_owned(),
            Method::Put => "PUT".to_owned(),
            Method::Delete => "DELETE".to_owned(),
            Method::Patch => "PATCH".to_owned(),
            Method::Head => "HEAD".to_owned(),
            Method::Options => "OPTIONS".to_owned(),
            other => format!("{other:?}"),
        };
        if route == "/stream" {
            return stream_back(request, out);
        }
        let body = read_body(request);
        match route {
            "/" => {
                let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let name = value["name"].as_str().unwrap_or("stranger");
                let text = json!({"message": format!("Hello, {name}!")}).to_string();
                respond(
                    out,
                    200,
                    &[("content-type", b"application/json")],
                    text.as_bytes(),
                );
            }
            "/echo" => {
                let headers: serde_json::Map<String, Value> = headers
                    .iter()
                    .map(|(n, v)| (n.clone(), Value::from(String::from_utf8_lossy(v))))
                    .collect();
                let text = json!({
                    "method": method,
                    "path": path,
                    "authority": authority,
                    "headers": headers,
                    "body": String::from_utf8_lossy(&body),
                    "handled": handled,
                    "env_activation_id": std::env::var("__OW_ACTIVATION_ID").ok(),
                })
                .to_string();
                respond(
                    out,
                    200,
                    &[("content-type", b"application/json")],
                    text.as_bytes(),
                );
            }
            // The body back, typed as the request was.
            "/raw" => {
                let kind = header("content-type").unwrap_or_default();
                respond(out, 200, &[("content-type", kind.as_bytes())], &body);
            }
            "/status" => {
                let code = query.parse().unwrap_or(500);
                let text = format!("status {code}");
                respond(
                    out,
                    code,
                    &[("content-type", b"text/plain")],
                    text.as_bytes(),
                );
            }
            "/big" => {
                let size: usize = query.parse().unwrap_or(0);
                respond(
                    out,
                    200,
                    &[("content-type", b"text/plain")],
                    &vec![b'x'; size],
                );
            }
            "/headers" => respond(
                out,
                200,
                &[
                    ("content-type", b"text/plain"),
                    ("connection", b"close"),
                    ("x-bytes", &[0xff, 0xfe]),
                    ("x-fine", b"yes"),
                ],
                b"ok",
            ),
            "/log" => {
                println!("a line on stdout");
                eprintln!("a line on stderr");
                respond(out, 200, &[("content-type", b"text/plain")], b"logged");
            }
            "/trap" => {
                eprintln!("about to trap");
                panic!("asked to trap")
            }
            "/no-response" => drop(out),
            // Neither finished nor dropped: the response never ends.
            "/unfinished" => std::mem::forget(half_a_response(out)),
            // Dropped unfinished: wasmtime fails the body.
            "/dropped" => drop(half_a_response(out)),
            // Waits the query's milliseconds, blocking its instance: the I/O-bound handler a
            // WASI 0.3 instance serves many of at once (scripts/bench-p3.sh).
            "/sleep" => {
                let ms: u64 = query.parse().unwrap_or(100);
                wasi::clocks::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
                respond(out, 200, &[("content-type", b"text/plain")], b"slept\n");
            }
            "/spin" => loop {
                std::hint::spin_loop();
            },
            "/grow" => {
                let mib: usize = query.parse().unwrap_or(1);
                let held = vec![1u8; mib << 20];
                let text = format!(
                    "held {} bytes",
                    held.iter().map(|b| *b as usize).sum::<usize>()
                );
                respond(
                    out,
                    200,
                    &[("content-type", b"text/plain")],
                    text.as_bytes(),
                );
            }
            "/fetch" => {
                let answer = fetch(query);
                respond(
                    out,
                    200,
                    &[("content-type", b"text/plain")],
                    answer.as_bytes(),
                );
            }
            _ => respond(
                out,
                404,
                &[("content-type", b"text/plain")],
                b"no such route",
            ),
        }
    }
}

/// Answers at once with `ready`, then sends back each piece of the request's body as it
/// reads it: what only a host that streams both ways can serve.
fn stream_back(request: IncomingRequest, out: ResponseOutparam) {
    let fields = Fields::new();
    fields
        .append(&"content-type".to_owned(), &b"text/plain".to_vec())
        .unwrap();
    let response = OutgoingResponse::new(fields);
    let outgoing = response.body().unwrap();
    ResponseOutparam::set(out, Ok(response));
    let body = request.consume().unwrap();
    {
        let written = outgoing.write().unwrap();
        written.blocking_write_and_flush(b"ready\n").unwrap();
        let read = body.stream().unwrap();
        while let Ok(chunk) = read.blocking_read(64 * 1024) {
            written.blocking_write_and_flush(&chunk).unwrap();
        }
    }
    IncomingBody::finish(body);
    OutgoingBody::finish(outgoing, None).unwrap();
}

fn read_body(request: IncomingRequest) -> Vec<u8> {
    let mut read = Vec::new();
    let Ok(body) = request.consume() else {
        return read;
    };
    {
        let stream = body.stream().unwrap();
        while let Ok(chunk) = stream.blocking_read(64 * 1024) {
            read.extend_from_slice(&chunk);
        }
    }
    IncomingBody::finish(body);
    read
}

fn respond(out: ResponseOutparam, status: u16, headers: &[(&str, &[u8])], body: &[u8]) {
    let fields = Fields::new();
    for (name, value) in headers {
        // WASI refuses some (hop-by-hop ones): the response goes without them.
        if let Err(e) = fields.append(&(*name).to_owned(), &value.to_vec()) {
            eprintln!("header {name} refused: {e:?}");
        }
    }
    let response = OutgoingResponse::new(fields);
    response.set_status_code(status).unwrap();
    let outgoing = response.body().unwrap();
    ResponseOutparam::set(out, Ok(response));
    {
        let stream = outgoing.write().unwrap();
        for chunk in body.chunks(4096) {
            stream.blocking_write_and_flush(chunk).unwrap();
        }
    }
    OutgoingBody::finish(outgoing, None).unwrap();
}

/// GETs `http://<to>` and tells what came back, or how it failed.
fn fetch(to: &str) -> String {
    use wasi::http::outgoing_handler;
    use wasi::http::types::{OutgoingRequest, Scheme};
    let (authority, path) = to.split_once('/').unwrap_or((to, ""));
    let request = OutgoingRequest::new(Fields::new());
    request.set_scheme(Some(&Scheme::Http)).unwrap();
    request.set_authority(Some(authority)).unwrap();
    request
        .set_path_with_query(Some(&format!("/{path}")))
        .unwrap();
    let future = match outgoing_handler::handle(request, None) {
        Ok(future) => future,
        Err(e) => return format!("refused: {e:?}"),
    };
    future.subscribe().block();
    match future.get() {
        Some(Ok(Ok(response))) => format!("status {}", response.status()),
        Some(Ok(Err(e))) => format!("failed: {e:?}"),
        other => format!("failed: {other:?}"),
    }
}

/// A response set, `half` of its body written, and the body left to the caller unfinished.
fn half_a_response(out: ResponseOutparam) -> OutgoingBody {
    let response = OutgoingResponse::new(Fields::new());
    let body = response.body().unwrap();
    ResponseOutparam::set(out, Ok(response));
    let stream = body.write().unwrap();
    stream.blocking_write_and_flush(b"half").unwrap();
    drop(stream);
    body
}
