//! Returns the variables the init `env` set.
use wasmloop_test_guest::{env, json, serve};
fn main() {
    serve(
        |_| json!({ "SOME_VAR": env("SOME_VAR"), "ANOTHER_VAR": env("ANOTHER_VAR"), "PATH": env("PATH") }),
    );
}
