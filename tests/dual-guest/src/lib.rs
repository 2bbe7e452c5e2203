//! Both HTTP handlers in one component, WASI 0.2's and WASI 0.3's, each answering which
//! one it is.

use wasi::http::types::{
    Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

wasi::http::proxy::export!(Preview2);

struct Preview2;

impl wasi::exports::http::incoming_handler::Guest for Preview2 {
    fn handle(_request: IncomingRequest, out: ResponseOutparam) {
        let response = OutgoingResponse::new(Fields::new());
        let body = response.body().expect("the body, taken once");
        ResponseOutparam::set(out, Ok(response));
        {
            let stream = body.write().expect("the stream, taken once");
            let _ = stream.blocking_write_and_flush(b"wasi 0.2\n");
        }
        let _ = OutgoingBody::finish(body, None);
    }
}

wasip3::http::service::export!(Preview3);

struct Preview3;

impl wasip3::exports::http::handler::Guest for Preview3 {
    async fn handle(
        _request: wasip3::http::types::Request,
    ) -> Result<wasip3::http::types::Response, wasip3::http::types::ErrorCode> {
        let (mut body_tx, body_rx) = wasip3::wit_stream::new();
        let (trailers_tx, trailers_rx) = wasip3::wit_future::new(|| Ok(None));
        let fields = wasip3::http::types::Fields::new();
        let (response, _sent) =
            wasip3::http::types::Response::new(fields, Some(body_rx), trailers_rx);
        drop(trailers_tx);
        wasip3::wit_bindgen::spawn_local(async move {
            let _ = body_tx.write_all(b"wasi 0.3\n".to_vec()).await;
        });
        Ok(response)
    }
}
