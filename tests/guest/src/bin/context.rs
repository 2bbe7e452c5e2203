//! Returns the activation context the runtime and the request put in the environment.
use wasmloop_test_guest::{env, json, serve};
fn main() {
    serve(|_| {
        json!({
            "api_host": env("__OW_API_HOST"),
            "api_key": env("__OW_API_KEY"),
            "namespace": env("__OW_NAMESPACE"),
            "action_name": env("__OW_ACTION_NAME"),
            "action_version": env("__OW_ACTION_VERSION"),
            "activation_id": env("__OW_ACTIVATION_ID"),
            "deadline": env("__OW_DEADLINE"),
            "proxy_version": env("__OW_PROXY_VERSION"),
        })
    });
}
