//! The hello as an HTTP component (the wasi:http/proxy world): a JSON body with a `name`
//! in, `{"message": "Hello, <name>!"}` out. It runs unchanged under `wasmtime serve`.

use std::io::{Read, Write};

use wasi::http::types::{
    Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

wasi::http::proxy::export!(Hello);

struct Hello;

impl wasi::exports::http::incoming_handler::Guest for Hello {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let mut body = Vec::new();
        if let Ok(incoming) = request.consume() {
            if let Ok(mut stream) = incoming.stream() {
                let _ = stream.read_to_end(&mut body);
            }
        }
        let args: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let name = args["name"].as_str().unwrap_or("Stranger");
        eprintln!("hello: greeting {name}");
        let answer = serde_json::json!({ "message": format!("Hello, {name}!") }).to_string();

        let headers =
            Fields::from_list(&[("content-type".to_owned(), b"application/json".to_vec())])
                .expect("a valid header");
        let response = OutgoingResponse::new(headers);
        let outgoing = response.body().expect("the body, taken once");
        ResponseOutparam::set(out, Ok(response));
        {
            // The stream goes before the body is finished: its child.
            let mut stream = outgoing.write().expect("the stream, taken once");
            let _ = stream.write_all(answer.as_bytes());
            let _ = stream.flush();
        }
        let _ = OutgoingBody::finish(outgoing, None);
    }
}
