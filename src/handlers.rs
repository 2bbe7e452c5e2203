//! `/init`, `/run` and every other path: read the request, call the runtime, map the answer.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::error::Error;
use crate::executor::RunError;
use crate::executor::intake::{Intake, IntakeError};
use crate::protocol;
use crate::protocol::json_response;
use crate::runtime::{Input, Runtime};

pub async fn init(
    State(runtime): State<Arc<Runtime>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Error> {
    let limit = runtime.config().limits.max_init_bytes;
    let early = runtime
        .admit()
        .and_then(|admitted| runtime.refuse_second_init().map(|()| admitted));
    let (_admitted, body) = before_body(early, &headers, body, limit).await?;
    let body = read_body(&runtime, body, limit, "init").await?;
    // Its own buffer again (no copy when the body came with a Content-Length, as uploads
    // do): the code is decoded over its base64.
    runtime.init(bytes::BytesMut::from(body)).await?;
    Ok(json_response(StatusCode::OK, protocol::OK_BODY))
}

pub async fn run(
    State(runtime): State<Arc<Runtime>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Error> {
    let (action, admitted, body) = activation_body(&runtime, &headers, body).await?;
    let answered = action
        .activate_to_completion(Input::Body(body), admitted)
        .await?;
    Ok(json_response(StatusCode::OK, answered.result))
}

/// What every activation's request is checked for before and while its body is read: the
/// server not draining, an action there, and the body within its size and time.
async fn activation_body(
    runtime: &Arc<Runtime>,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Arc<crate::runtime::Action>, crate::runtime::Admitted, Bytes), Error> {
    let limit = runtime.config().limits.max_run_bytes;
    let early = runtime
        .admit()
        .and_then(|admitted| Ok((runtime.action().ok_or(Error::NoAction)?, admitted)));
    let ((action, admitted), body) = before_body(early, headers, body, limit).await?;
    let body = read_body(runtime, body, limit, "run").await?;
    Ok((action, admitted, body))
}

/// Liveness: the server answers (under either protocol).
pub async fn health() -> Response {
    json_response(StatusCode::OK, &b"{\"status\":\"ok\"}\n"[..])
}

/// Readiness: an action is there and the server is not draining; 503 otherwise, so that a
/// platform sends it nothing until it is ready and nothing more once it stops.
pub async fn ready(State(runtime): State<Arc<Runtime>>) -> Response {
    if runtime.is_ready() {
        return json_response(StatusCode::OK, &b"{\"status\":\"ready\"}\n"[..]);
    }
    let why = if runtime.action().is_none() {
        "no action yet: it is ready once /init (or --action) has started one"
    } else {
        "the server is draining: it is stopping"
    };
    json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        protocol::error_body(&format!("not ready: {why}")),
    )
}

/// `--protocol http`: any request on any path is one activation of the built-in action:
/// the request itself for an action that takes requests (an HTTP component), a web
/// action's value for the others, whose result is the response.
pub async fn web(State(runtime): State<Arc<Runtime>>, request: axum::extract::Request) -> Response {
    let response = answer_plainly(runtime.clone(), request).await;
    if let Some(metrics) = runtime.metrics() {
        metrics.http_request(response.status().as_u16());
    }
    response
}

async fn answer_plainly(runtime: Arc<Runtime>, request: axum::extract::Request) -> Response {
    let (mut parts, body) = request.into_parts();
    if let Err(refused) = authority(&mut parts) {
        return refused.into_response();
    }
    let format = runtime.config().logs.format;
    let limit = runtime.config().limits.max_run_bytes;
    // What every line about this activation is filed under (in json): the id made for it,
    // the action's name, the trace its request came in.
    let traceparent = parts
        .headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(crate::logs::traceparent)
        .map(str::to_owned);
    let context = crate::plain_http::context(
        crate::protocol::fresh_activation_id(runtime.next_activation()),
        runtime.config().action.name.as_deref().unwrap_or_default(),
        traceparent.as_deref(),
        runtime.config().pool.timeout,
    );
    let about = context.labels();
    let say = |m: &str| crate::logs::runtime_line(format, Some(&about), m);
    let answered = async {
        let early = runtime
            .admit()
            .and_then(|admitted| Ok((runtime.action().ok_or(Error::NoAction)?, admitted)));
        let ((action, admitted), body) = before_body(early, &parts.headers, body, limit).await?;
        if action.takes_requests() {
            let served = pass_through(&runtime, &action, parts, body, context, admitted).await;
            if let Err(Error::Run(RunError::Stopped)) = &served {
                action.stopped(&about);
            }
            return served;
        }
        let body = read_body(&runtime, body, limit, "run").await?;
        let line = crate::plain_http::activation(
            &parts.method,
            &parts.uri,
            &parts.headers,
            &body,
            &context,
        );
        let input = Input::Made { line, context };
        let answered = action.activate_to_completion(input, admitted).await?;
        Ok(
            crate::plain_http::response(&answered.result, &say).unwrap_or_else(|e| {
                let message = e.to_string();
                say(&format!("wasmloop: {message}"));
                json_response(StatusCode::BAD_GATEWAY, protocol::error_body(&message))
            }),
        )
    }
    .await;
    match answered {
        Ok(response) => response,
        // What the action did wrong is the gateway's 502 here, not the reference's 400
        // (which tells the platform a /run was refused); no platform's log has it, so ours does.
        Err(Error::Run(RunError::Exited(detail))) => {
            let message = RunError::Exited(detail).to_string();
            say(&format!("wasmloop: the action failed: {message}"));
            json_response(StatusCode::BAD_GATEWAY, protocol::error_body(&message))
        }
        Err(error) => error.into_response(),
    }
}

/// Every request the action gets names its authority, as HTTP/1.1 requires of a client:
/// one without `Host` is the client's mistake (400) under HTTP/1.1; HTTP/1.0 needs none,
/// and gets the address its connection was made to.
fn authority(parts: &mut axum::http::request::Parts) -> Result<(), Error> {
    use axum::http::{Version, header::HOST};
    if parts.headers.contains_key(HOST) || parts.uri.authority().is_some() {
        return Ok(());
    }
    let local = parts.extensions.get::<crate::linger::LocalAddr>();
    match (parts.version, local) {
        (Version::HTTP_09 | Version::HTTP_10, Some(local)) => {
            let host = axum::http::HeaderValue::from_str(&local.0.to_string())
                .map_err(|e| Error::Internal(e.to_string()))?;
            parts.headers.insert(HOST, host);
            Ok(())
        }
        _ => Err(Error::NoHost),
    }
}

/// The request handed to an action that takes requests themselves, its body read as the
/// action reads it (within the same cap and time as any body); the response as soon as
/// its head is there. A body the runtime's limits stopped gets the runtime's answer,
/// whatever the action made of a body cut short.
async fn pass_through(
    runtime: &Runtime,
    action: &crate::runtime::Action,
    parts: axum::http::request::Parts,
    body: Body,
    context: crate::context::Context,
    admitted: crate::runtime::Admitted,
) -> Result<Response, Error> {
    let limits = &runtime.config().limits;
    let limit = limits.max_run_bytes;
    refuse_announced_past(&body, limit, "run")?;
    let (intake, stopped) = Intake::new(body, limit, limits.body_read_timeout);
    let request = axum::http::Request::from_parts(parts, Body::new(intake));
    let served = action.serve(request, context, admitted).await;
    match stopped.get() {
        Some(IntakeError::TooLarge(limit)) => Err(Error::BodyTooLarge {
            limit,
            route: "run",
        }),
        Some(IntakeError::TimedOut(within)) => Err(Error::BodyTimedOut(within)),
        Some(IntakeError::Read(_)) | None => served,
    }
}

/// A probe path with another method than GET or HEAD: 405, and never the action's.
pub async fn probe_method(method: Method, uri: Uri) -> Error {
    Error::ProbeMethod {
        path: uri.path().to_owned(),
        method: method.to_string(),
    }
}

/// A path under the runtime's own prefix that is none of its probes.
pub async fn no_such_probe(uri: Uri) -> Error {
    Error::NoSuchProbe(uri.path().to_owned())
}

/// `/init` or `/run` with another method than POST: refused before anything is read, so
/// nothing reaches the action or its logs.
pub async fn post_only(method: Method, uri: Uri) -> Error {
    Error::MethodNotAllowed {
        path: uri.path().to_owned(),
        method: method.to_string(),
    }
}

/// Any other path. A GET (or HEAD) is 404, so that no HTTP probe takes the runtime for
/// healthy by mistake (OpenWhisk's invoker checks a container with a TCP connection, and
/// sends it nothing but POST /init and POST /run); any other method gets the reference's
/// empty 200.
pub async fn other(method: Method, uri: Uri) -> Response {
    if method == Method::GET || method == Method::HEAD {
        return Error::NotFound(uri.path().to_owned()).into_response();
    }
    StatusCode::OK.into_response()
}

/// How long a refused request's body may take to arrive before the answer goes out anyway
/// (the connection's lingering close still lets the client read it).
const DRAIN_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// What the checks made before the body is read (`early`) gave, with the body still to read;
/// or their refusal, answered as `refuse` says.
async fn before_body<T>(
    early: Result<T, Error>,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<(T, Body), Error> {
    match early {
        Ok(passed) => Ok((passed, body)),
        Err(error) => Err(refuse(error, headers, body, limit).await),
    }
}

/// Answers `error` to a request refused before its body was read. A client sending a body
/// reads the answer only once it has sent it, and a connection closed on unread bytes is
/// reset, answer and all: so a body within `limit` is read (and dropped) first, and the
/// connection is kept. A larger one, or a client waiting for `100 Continue` before it
/// sends, gets the answer at once, and the connection's lingering close (server.rs)
/// keeps the answer from being reset away.
async fn refuse(error: Error, headers: &HeaderMap, body: Body, limit: usize) -> Error {
    let waits = headers
        .get(axum::http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if waits || http_body::Body::size_hint(&body).lower() > limit as u64 {
        return error;
    }
    let _ = tokio::time::timeout(DRAIN_FOR, drain(body, limit)).await;
    error
}

/// Reads and drops a body, up to `limit` bytes.
async fn drain(mut body: Body, limit: usize) {
    use http_body_util::BodyExt;
    let mut read = 0;
    while let Some(Ok(frame)) = body.frame().await {
        read += frame.data_ref().map_or(0, Bytes::len);
        if read > limit {
            return;
        }
    }
}

/// Reads the whole body, refusing it as soon as it passes `limit` bytes, or once it has
/// taken longer than `--body-read-timeout` to arrive.
async fn read_body(
    runtime: &Runtime,
    body: Body,
    limit: usize,
    route: &'static str,
) -> Result<Bytes, Error> {
    let within = runtime.config().limits.body_read_timeout;
    tokio::time::timeout(within, read_body_capped(body, limit, route))
        .await
        .unwrap_or(Err(Error::BodyTimedOut(within)))
}

/// A body whose Content-Length is over the cap: refused before a byte of it is read.
fn refuse_announced_past(body: &Body, limit: usize, route: &'static str) -> Result<(), Error> {
    if http_body::Body::size_hint(body).lower() > limit as u64 {
        return Err(Error::BodyTooLarge { limit, route });
    }
    Ok(())
}

async fn read_body_capped(body: Body, limit: usize, route: &'static str) -> Result<Bytes, Error> {
    refuse_announced_past(&body, limit, route)?;
    let size = http_body::Body::size_hint(&body);
    // With a Content-Length, each piece is copied once into a buffer of the final size, and
    // dropped as it arrives: collecting them all first (to_bytes) holds the body twice at
    // its peak, and a large upload's fresh pages cost more than the copy (measured: with
    // the borrowed base64, this made a cached /init of a large component faster and
    // steadier).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Protocol};
    use crate::context::{Parse, parses};

    /// A native action: each request line answered `{"ok":1}` on fd 3.
    const ANSWERS: &[u8] = b"#!/bin/sh\nwhile read -r line; do echo '{\"ok\":1}' >&3; done\n";

    const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    async fn initialized(config: Config) -> Arc<Runtime> {
        use base64::Engine as _;
        let runtime = Arc::new(Runtime::new(config, None));
        let code = base64::engine::general_purpose::STANDARD.encode(ANSWERS);
        let init = serde_json::json!({"value": {"code": code, "binary": true}});
        let body = bytes::BytesMut::from(init.to_string().as_bytes());
        runtime.init(body).await.unwrap();
        runtime
    }

    #[tokio::test]
    async fn a_run_is_read_once_and_a_plain_request_reads_no_context() {
        let runtime = initialized(Config::default()).await;
        let body = serde_json::json!({
            "value": {"__ow_headers": {"traceparent": TRACEPARENT}, "n": [1, 2]},
            "activation_id": "a1",
            "namespace": "ns",
            "deadline": "99999999999999",
        });
        for _ in 0..3 {
            parses();
            let response = run(
                State(runtime.clone()),
                HeaderMap::new(),
                Body::from(body.to_string()),
            )
            .await
            .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(parses(), [Parse::RunBody], "one read of each /run");
        }

        let mut config = Config {
            protocol: Protocol::Http,
            ..Config::default()
        };
        config.serve_plain_http(None, false);
        let runtime = initialized(config).await;
        for (content_type, body, read) in [
            ("text/plain", "hi", &[][..]),
            ("application/json", "{\"n\":1}", &[Parse::PlainBody][..]),
        ] {
            parses();
            let request = axum::http::Request::post("/greet?x=1")
                .header("host", "example.com")
                .header("traceparent", TRACEPARENT)
                .header("content-type", content_type)
                .body(Body::from(body))
                .unwrap();
            let response = web(State(runtime.clone()), request).await;
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .unwrap();
            assert_eq!(status, StatusCode::OK, "{body:?}");
            assert_eq!(
                parses(),
                read,
                "only a JSON body is read, never the context"
            );
        }
    }
}
