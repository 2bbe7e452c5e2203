//! The hello as a WASI 0.3 HTTP component (the wasi:http/service@0.3.0 world): a JSON body
//! with a `name` in, `{"message": "Hello, <name>!"}` out. It runs on a wasmloop started
//! with --wasip3, and unchanged under `wasmtime serve`.

use wasip3::http::types::{ErrorCode, Fields, Request, Response};
use wasip3::{wit_bindgen, wit_future, wit_stream};

wasip3::http::service::export!(Hello);

struct Hello;

impl wasip3::exports::http::handler::Guest for Hello {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let (_, done) = wit_future::new(|| Ok(()));
        let (mut stream, _trailers) = Request::consume_body(request, done);
        let mut body = Vec::new();
        loop {
            let (status, chunk) = stream.read(Vec::with_capacity(16 * 1024)).await;
            body.extend_from_slice(&chunk);
            if !matches!(status, wit_bindgen::StreamResult::Complete(_)) {
                break;
            }
        }
        let args: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let name = args["name"].as_str().unwrap_or("Stranger");
        eprintln!("hello: greeting {name}");
        let answer = serde_json::json!({ "message": format!("Hello, {name}!") }).to_string();

        let headers = Fields::new();
        let _ = headers.set("content-type", &[b"application/json".to_vec()]);
        let (mut body_tx, body_rx) = wit_stream::new();
        let (trailers_tx, trailers_rx) = wit_future::new(|| Ok(None));
        let (response, _sent) = Response::new(headers, Some(body_rx), trailers_rx);
        drop(trailers_tx);
        // The body is written as the host reads it, by a task of its own.
        wit_bindgen::spawn_local(async move {
            let _ = body_tx.write_all(answer.into_bytes()).await;
        });
        Ok(response)
    }
}
