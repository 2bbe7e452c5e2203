//! Returns the `__OW_TRACEPARENT` its activation's context put in the environment, and
//! logs a line on stderr (a record the json logs file under its trace).
use wasmloop_test_guest::{env, json, log_stderr, serve};
fn main() {
    serve(|_| {
        log_stderr("tracing");
        json!({ "traceparent": env("__OW_TRACEPARENT") })
    });
}
