//! A WASI 0.3 HTTP component for the tests: `/hello`, `/sleep?ms=N` (waits, then answers
//! how long), `/context` (the `x-ow-*` headers it was given), `/echo` (the body back),
//! `/spin` (never yields), `/trap`, `/log?line=L` (L on stderr), `/state` (a counter
//! kept between requests), `/bytes` (a binary body), `/overlap?ms=N` (waits, then answers
//! the most requests it saw in its instance at once meanwhile), `/alloc?mb=N` (grows its
//! memory by N MiB).

use wasip3::http::types::{ErrorCode, Fields, Request, Response};
use wasip3::{wit_bindgen, wit_future, wit_stream};

wasip3::http::service::export!(Service);

struct Service;

static mut SERVED: u64 = 0;
static mut IN_FLIGHT: u64 = 0;
static mut MOST_IN_FLIGHT: u64 = 0;
static mut HELD: Vec<Vec<u8>> = Vec::new();

impl wasip3::exports::http::handler::Guest for Service {
    async fn handle(request: Request) -> Result<Response, ErrorCode> {
        let path = request.get_path_with_query().unwrap_or_default();
        let (route, query) = path.split_once('?').unwrap_or((&path, ""));
        let param = |name: &str| {
            query
                .split('&')
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or("")
                .to_owned()
        };
        // SAFETY: one thread; the counter is what a test reads to see instances shared.
        let served = unsafe {
            SERVED += 1;
            SERVED
        };
        match route {
            "/hello" => Ok(answer(200, "text/plain", b"hello from p3\n".to_vec())),
            "/sleep" => {
                let ms: u64 = param("ms").parse().unwrap_or(100);
                wasip3::clocks::monotonic_clock::wait_for(ms * 1_000_000).await;
                Ok(answer(
                    200,
                    "text/plain",
                    format!("slept {ms}\n").into_bytes(),
                ))
            }
            "/context" => {
                let headers = request.get_headers();
                let mut seen = String::new();
                for (name, value) in headers.copy_all() {
                    if name.starts_with("x-ow-") {
                        seen.push_str(&format!("{name}={}\n", String::from_utf8_lossy(&value)));
                    }
                }
                Ok(answer(200, "text/plain", seen.into_bytes()))
            }
            "/echo" => {
                let (_, done) = wit_future::new(|| Ok(()));
                let (mut body, _trailers) = Request::consume_body(request, done);
                let mut all = Vec::new();
                loop {
                    let (status, chunk) = body.read(Vec::with_capacity(16 * 1024)).await;
                    all.extend_from_slice(&chunk);
                    if !matches!(status, wit_bindgen::StreamResult::Complete(_)) {
                        break;
                    }
                }
                Ok(answer(200, "application/octet-stream", all))
            }
            "/spin" => {
                let mut x: u64 = served;
                loop {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
            "/trap" => panic!("asked to trap"),
            "/log" => {
                eprintln!("{}", param("line"));
                Ok(answer(200, "text/plain", b"logged\n".to_vec()))
            }
            "/overlap" => {
                let ms: u64 = param("ms").parse().unwrap_or(300);
                // SAFETY: one thread; tasks interleave only at the wait.
                unsafe {
                    IN_FLIGHT += 1;
                    MOST_IN_FLIGHT = MOST_IN_FLIGHT.max(IN_FLIGHT);
                }
                wasip3::clocks::monotonic_clock::wait_for(ms * 1_000_000).await;
                let most = unsafe {
                    IN_FLIGHT -= 1;
                    MOST_IN_FLIGHT
                };
                Ok(answer(200, "text/plain", format!("{most}\n").into_bytes()))
            }
            "/alloc" => {
                let mb: usize = param("mb").parse().unwrap_or(1);
                // SAFETY: one thread.
                #[allow(static_mut_refs)]
                unsafe {
                    HELD.push(vec![1u8; mb << 20]);
                }
                Ok(answer(
                    200,
                    "text/plain",
                    format!("held {mb} MiB more\n").into_bytes(),
                ))
            }
            "/state" => Ok(answer(
                200,
                "text/plain",
                format!("{served}\n").into_bytes(),
            )),
            "/bytes" => Ok(answer(
                200,
                "image/png",
                vec![0x89, b'P', b'N', b'G', 0, 1, 2, 255],
            )),
            _ => Ok(answer(
                404,
                "text/plain",
                format!("no route {route}\n").into_bytes(),
            )),
        }
    }
}

/// A response with `body`, written as the host reads it.
fn answer(status: u16, content_type: &str, body: Vec<u8>) -> Response {
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
