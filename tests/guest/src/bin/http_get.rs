//! GETs `{"url":"http://host:port/path"}` through wasi:http and returns the status and the
//! body's length, or the error code. Outside a component there is no wasi:http.

#[cfg(all(target_os = "wasi", target_env = "p2"))]
fn get(url: &str) -> Result<(u16, usize), String> {
    use wasi::http::outgoing_handler;
    use wasi::http::types::{Fields, OutgoingRequest, Scheme};
    use wasi::io::streams::StreamError;

    let (scheme, rest) = match url.split_once("://") {
        Some(("https", rest)) => (Scheme::Https, rest),
        Some((_, rest)) => (Scheme::Http, rest),
        None => (Scheme::Http, url),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    request.set_scheme(Some(&scheme)).unwrap();
    request.set_authority(Some(authority)).unwrap();
    request.set_path_with_query(Some(path)).unwrap();
    let future = outgoing_handler::handle(request, None).map_err(|e| format!("{e:?}"))?;
    let response = loop {
        if let Some(ready) = future.get() {
            break ready.unwrap().map_err(|e| format!("{e:?}"))?;
        }
        future.subscribe().block();
    };
    let status = response.status();
    // Children before parents: the stream, then the body, then the response.
    let body = response.consume().unwrap();
    let mut length = 0;
    {
        let stream = body.stream().unwrap();
        loop {
            match stream.blocking_read(65536) {
                Ok(chunk) => length += chunk.len(),
                Err(StreamError::Closed) => break,
                Err(e) => return Err(format!("{e:?}")),
            }
        }
    }
    drop(body);
    drop(response);
    Ok((status, length))
}

#[cfg(not(all(target_os = "wasi", target_env = "p2")))]
fn get(_url: &str) -> Result<(u16, usize), String> {
    Err("wasi:http is only there for components".to_owned())
}

fn main() {
    wasmloop_test_guest::serve(
        |value| match get(value["url"].as_str().unwrap_or_default()) {
            Ok((status, length)) => {
                wasmloop_test_guest::json!({ "status": status, "length": length })
            }
            Err(error) => wasmloop_test_guest::json!({ "error": error }),
        },
    );
}
