//! `/init`, `/run` and every other path: read the request, call the runtime, map the answer.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::error::{Error, json_response};
use crate::protocol;
use crate::runtime::Runtime;

pub async fn init(State(runtime): State<Arc<Runtime>>, body: Body) -> Result<Response, Error> {
    let _admitted = runtime.admit()?;
    runtime.refuse_second_init()?;
    let body = read_body(body, runtime.config().max_init_bytes, "init").await?;
    // Its own buffer again (no copy when the body came with a Content-Length, as uploads
    // do): the code is decoded over its base64.
    runtime.init(bytes::BytesMut::from(body)).await?;
    Ok(json_response(StatusCode::OK, protocol::OK_BODY))
}

pub async fn run(State(runtime): State<Arc<Runtime>>, body: Body) -> Result<Response, Error> {
    let admitted = runtime.admit()?;
    let action = runtime.action().ok_or(Error::NoAction)?;
    let body = read_body(body, runtime.config().max_run_bytes, "run").await?;
    let result = action.activate_to_completion(body, admitted).await?;
    Ok(json_response(StatusCode::OK, result))
}

/// The reference answers any other path with an empty 200; health probes rely on it.
pub async fn other() -> Response {
    StatusCode::OK.into_response()
}

/// Reads the whole body, refusing it as soon as it passes `limit` bytes.
async fn read_body(body: Body, limit: usize, route: &'static str) -> Result<Bytes, Error> {
    // A Content-Length over the cap is refused before a byte of the body is read.
    let size = http_body::Body::size_hint(&body);
    if size.lower() > limit as u64 {
        return Err(Error::BodyTooLarge { limit, route });
    }
    // With a Content-Length, each piece is copied once into a buffer of the final size, and
    // dropped as it arrives: collecting them all first (to_bytes) holds the body twice at
    // its peak, and a 27 MB upload's fresh pages cost more than the copy (measured: with
    // the borrowed base64, this took a cached /init of a 20 MB component from 63-110 ms to
    // 56-61).
    if let Some(length) = size.exact() {
        return read_exact_length(body, length as usize).await;
    }
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let source = e.into_inner();
        if source
            .downcast_ref::<http_body_util::LengthLimitError>()
            .is_some()
        {
            Error::BodyTooLarge { limit, route }
        } else {
            Error::BodyRead(source.to_string())
        }
    })
}

/// Reads a body whose length is known (and within the cap) into one buffer of that length.
async fn read_exact_length(body: Body, length: usize) -> Result<Bytes, Error> {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut buffer = bytes::BytesMut::with_capacity(length);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Error::BodyRead(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            // hyper holds the peer to its Content-Length; this only guards the buffer.
            if buffer.len() + data.len() > length {
                return Err(Error::BodyRead(
                    "more bytes than its Content-Length".to_owned(),
                ));
            }
            buffer.extend_from_slice(&data);
        }
    }
    Ok(buffer.freeze())
}
