//! The hello on the SDK: `{"name":"Mike"}` -> `{"message":"Hello, Mike!"}`. Build it for
//! any backend: `cargo build --release --example hello --target wasm32-wasip1` (a module),
//! `--target wasm32-wasip2` (a component), or without `--target` (native).

#[derive(serde::Deserialize)]
struct Args {
    name: Option<String>,
}

fn main() {
    wasmloop_action::serve(|args: Args, _ctx| {
        let name = args.name.as_deref().unwrap_or("Stranger");
        eprintln!("hello: greeting {name}");
        Ok::<_, String>(serde_json::json!({ "message": format!("Hello, {name}!") }))
    });
}
