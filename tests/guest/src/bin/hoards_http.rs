//! Makes `{"requests": N}` outgoing HTTP requests, each with a body it writes as much into
//! as the host takes, and `{"headers": N}` header sets of 12 KiB, and keeps them all, never sending
//! one: what a guest can make the host hold without the network. Answers how many it made.
//! Outside a component there is no wasi:http.

#[cfg(all(target_os = "wasi", target_env = "p2"))]
fn hoard(requests: u64, headers: u64) -> wasmloop_test_guest::Value {
    use wasi::http::types::{Fields, OutgoingRequest};
    let mut kept = Vec::new();
    let mut header_sets = Vec::new();
    let value = vec![b'v'; 1024];
    for _ in 0..headers {
        let fields = Fields::new();
        // 12 KiB: as much as a set may hold (past the host's limit, appending traps).
        for n in 0..12 {
            fields.append(&format!("x-{n}"), &value).unwrap();
        }
        header_sets.push(fields);
    }
    let chunk = vec![b'b'; 1 << 20];
    for _ in 0..requests {
        let request = OutgoingRequest::new(Fields::new());
        let body = request.body().unwrap();
        let stream = body.write().unwrap();
        // Only what the host says it takes: writing more traps by the rules.
        while let Ok(room @ 1..) = stream.check_write() {
            let room = (room as usize).min(chunk.len());
            if stream.write(&chunk[..room]).is_err() {
                break;
            }
        }
        kept.push((stream, body, request));
    }
    let made = wasmloop_test_guest::json!({ "requests": kept.len(), "headers": header_sets.len() });
    // Whatever it made goes with the instance (children first, as WASI wants).
    std::mem::forget(kept);
    std::mem::forget(header_sets);
    made
}

#[cfg(not(all(target_os = "wasi", target_env = "p2")))]
fn hoard(_: u64, _: u64) -> wasmloop_test_guest::Value {
    wasmloop_test_guest::json!({ "error": "no wasi:http here" })
}

fn main() {
    wasmloop_test_guest::serve(|value| {
        hoard(
            value["requests"].as_u64().unwrap_or(0),
            value["headers"].as_u64().unwrap_or(0),
        )
    });
}
