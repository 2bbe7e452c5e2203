/* An ActionLoop action in C: {"name":"Mike"} -> {"message":"Hello, Mike!"}.
 *
 * sdk/c/wasmloop.h runs the contract (wasmloop's docs/protocol.md): one JSON request per
 * line on stdin, one JSON result per line on the backend's result channel (stdout in
 * WebAssembly, fd 3 natively), logs on stderr. One source, both backends:
 *   clang --target=wasm32-wasi -O2 -o hello.wasm hello.c    (Debian's clang and wasi-libc)
 *   cc -O2 -o hello hello.c                                  (native-examples/build.sh) */
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
