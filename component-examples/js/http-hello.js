// The hello as an HTTP component (componentize-js builds the wasi:http/proxy world from a
// `fetch` event handler): a JSON body with a `name` in, {"message": "Hello, <name>!"} out.
// It runs unchanged under `wasmtime serve`.

async function hello(request) {
  let args = {};
  try {
    args = await request.json();
  } catch {
    // No body, or not JSON: a stranger.
  }
  const name = typeof args?.name === "string" ? args.name : "Stranger";
  console.error(`hello: greeting ${name}`);
  return new Response(JSON.stringify({ message: `Hello, ${name}!` }), {
    headers: { "content-type": "application/json" },
  });
}

addEventListener("fetch", (event) => event.respondWith(hello(event.request)));
