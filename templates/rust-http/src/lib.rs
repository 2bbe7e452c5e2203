//! {{name}}: an HTTP handler of the wasi:http/proxy world, served by wasmloop (and by
//! `wasmtime serve` or Spin unchanged). `{"name":"Mike"}` → `{"message":"Hello, Mike!"}`.

use serde_json::{json, Value};
use wasi::http::types::{
    Fields, IncomingBody, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

wasi::http::proxy::export!(Handler);

struct Handler;

impl wasi::exports::http::incoming_handler::Guest for Handler {
    /// One request: a plain `wsk action invoke` arrives as `POST /` with the parameters as
    /// its JSON body; a web action's request as it was sent (method, path, query, headers).
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        // The activation's context comes as headers (x-ow-activation-id, x-ow-deadline, ...).
        let activation = header(&request, "x-ow-activation-id");
        let name = match request.method() {
            Method::Get => query_name(&request.path_with_query().unwrap_or_default()),
            _ => {
                let body: Value = serde_json::from_slice(&read_body(request)).unwrap_or_default();
                body["name"].as_str().map(str::to_owned)
            }
        };
        let name = name.unwrap_or_else(|| "Stranger".to_owned());
        // Logs go to stdout or stderr, attributed to the activation.
        eprintln!(
            "greeting {name} (activation {})",
            activation.as_deref().unwrap_or("-")
        );
        let body = json!({"message": format!("Hello, {name}!")}).to_string();
        respond(out, 200, "application/json", body.as_bytes());
    }
}

fn header(request: &IncomingRequest, name: &str) -> Option<String> {
    let values = request.headers().get(&name.to_owned());
    values
        .first()
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// `name` from a query such as `/?name=Mike` (not percent-decoded: keep it simple).
fn query_name(path: &str) -> Option<String> {
    let (_, query) = path.split_once('?')?;
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("name="))
        .map(str::to_owned)
}

fn read_body(request: IncomingRequest) -> Vec<u8> {
    let mut read = Vec::new();
    let Ok(body) = request.consume() else {
        return read;
    };
    if let Ok(stream) = body.stream() {
        while let Ok(chunk) = stream.blocking_read(64 * 1024) {
            read.extend_from_slice(&chunk);
        }
    }
    IncomingBody::finish(body);
    read
}

fn respond(out: ResponseOutparam, status: u16, content_type: &str, body: &[u8]) {
    let headers = Fields::new();
    let _ = headers.set(
        &"content-type".to_owned(),
        &[content_type.as_bytes().to_vec()],
    );
    let response = OutgoingResponse::new(headers);
    let _ = response.set_status_code(status);
    let Ok(outgoing) = response.body() else {
        return;
    };
    ResponseOutparam::set(out, Ok(response));
    if let Ok(stream) = outgoing.write() {
        // Writes of at most 4096 bytes each: what a blocking write may take at once.
        for chunk in body.chunks(4096) {
            if stream.blocking_write_and_flush(chunk).is_err() {
                return;
            }
        }
    }
    let _ = OutgoingBody::finish(outgoing, None);
}
