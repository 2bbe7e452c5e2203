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
    runtime.refuse_second_init()?;
    let body = read_body(body, runtime.config().max_init_bytes, "init").await?;
    runtime.init(&body).await?;
    Ok(json_response(StatusCode::OK, protocol::OK_BODY))
}

pub async fn run(State(runtime): State<Arc<Runtime>>, body: Body) -> Result<Response, Error> {
    let action = runtime.action().ok_or(Error::NoAction)?;
    let body = read_body(body, runtime.config().max_run_bytes, "run").await?;
    let result = action.activate_to_completion(body).await?;
    Ok(json_response(StatusCode::OK, result))
}

/// The reference answers any other path with an empty 200; health probes rely on it.
pub async fn other() -> Response {
    StatusCode::OK.into_response()
}

/// Reads the whole body, refusing it as soon as it passes `limit` bytes.
async fn read_body(body: Body, limit: usize, route: &'static str) -> Result<Bytes, Error> {
    // A Content-Length over the cap is refused before a byte of the body is read.
    if http_body::Body::size_hint(&body).lower() > limit as u64 {
        return Err(Error::BodyTooLarge { limit, route });
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
