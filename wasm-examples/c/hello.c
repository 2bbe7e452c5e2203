/* A WebAssembly ActionLoop action in C: {"name":"Mike"} -> {"message":"Hello, Mike!"}.
 *
 * sdk/c/wasmloop.h runs the guest contract (wasmloop's docs/protocol.md Part 2): one JSON
 * request per line on stdin, one JSON result per line on stdout, logs on stderr. Build with
 * Debian's clang and wasi-libc:
 *   clang --target=wasm32-wasi -O2 -o hello.wasm hello.c */
#include "../../sdk/c/wasmloop.h"

static const char *hello(const wl_value *args, const wl_context *ctx, wl_writer *result) {
    const char *name = wl_get_string(args, "name", "Stranger");
    (void)ctx;
    fprintf(stderr, "hello: greeting %s\n", name);
    wl_object_begin(result);
    wl_member_stringf(result, "message", "Hello, %s!", name);
    return wl_object_end(result);
}

int main(int argc, char **argv) { return wasmloop_main(argc, argv, hello); }
