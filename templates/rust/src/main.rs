//! {"name":"Mike"} -> {"message":"Hello, Mike!"}

use serde_json::{json, Value};
use wasmloop_action::Context;

#[derive(serde::Deserialize)]
struct Args {
    name: Option<String>,
}

fn hello(args: Args, _ctx: &Context) -> Result<Value, String> {
    let name = args.name.as_deref().unwrap_or("Stranger");
    Ok(json!({ "message": format!("Hello, {name}!") }))
}

fn main() {
    wasmloop_action::serve(hello);
}
