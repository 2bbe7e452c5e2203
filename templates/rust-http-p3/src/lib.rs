//! {{name}}: an HTTP handler of WASI 0.3's wasi:http/service world, served by wasmloop
//! started with --wasip3 (and by `wasmtime serve` or Spin 4 unchanged). `{"name":"Mike"}`
//! → `{"message":"Hello, Mike!"}`. Its handler is async: while one request waits, the
//! same instance serves others.

use serde_json::{json, Value};
use wasip3::http::types::{ErrorCode, Fields, Method, Request, Response};
use wasip3::{wit_bindgen, wit_future, wit_stream};

wasip3::http::service::export!(Handler);

struct Handler;

impl wasip3::exports::http::handler::Guest for Handler {
    /// One request: a plain `wsk action invoke` arrives as `POST /` with the parameters as
    /// its JSON body; a web action's request as it was sent (method, path, query, headers).
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        // The activation's context comes as headers (x-ow-activation-id, x-ow-deadline, ...).
        let activation = header(&request, "x-ow-activation-id");
        let name = match request.get_method() {
            Method::Get => query_name(&request.get_path_with_query().unwrap_or_default()),
            _ => {
                let body: Value =
                    serde_json::from_slice(&read_body(request).await).unwrap_or_default();
                body["name"].as_str().map(str::to_owned)
            }
        };
        let name = name.unwrap_or_else(|| "Stranger".to_owned());
        // Logs go to stdout or stderr. Requests sharing the instance write to the same
        // streams: say which one a line is about.
        eprintln!(
            "greeting {name} (activation {})",
            activation.as_deref().unwrap_or("-")
        );
        let body = json!({"message": format!("Hello, {name}!")}).to_string();
        Ok(respond(200, "application/json", body.into_bytes()))
    }
}

fn header(request: &Request, name: &str) -> Option<String> {
    let values = request.get_headers().get(name);
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

/// The request's body, whole.
async fn read_body(request: Request) -> Vec<u8> {
    let (_, done) = wit_future::new(|| Ok(()));
    let (mut body, _trailers) = Request::consume_body(request, done);
    let mut all = Vec::new();
    loop {
        let (status, chunk) = body.read(Vec::with_capacity(16 * 1024)).await;
        all.extend_from_slice(&chunk);
        if !matches!(status, wit_bindgen::StreamResult::Complete(_)) {
            return all;
        }
    }
}

/// A response with `body`, written by a task of its own as the host reads it.
fn respond(status: u16, content_type: &str, body: Vec<u8>) -> Response {
    let headers = Fields::new();
    let _ = headers.set("content-type", &[content_type.as_bytes().to_vec()]);
    let (mut body_tx, body_rx) = wit_stream::new();
    let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
    let (response, _sent) = Response::new(headers, Some(body_rx), trailers_rx);
    drop(trailers_tx);
    let _ = response.set_status_code(status);
    wit_bindgen::spawn_local(async move {
        let _ = body_tx.write_all(body).await;
    });
    response
}
