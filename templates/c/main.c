/* {{name}}: {"name":"Mike"} -> {"message":"Hello, Mike!"}. sdk/wasmloop.h runs the rest. */
#include "sdk/wasmloop.h"

static const char *hello(const wl_value *args, const wl_context *ctx, wl_writer *result) {
    const char *name = wl_get_string(args, "name", "Stranger");
    (void)ctx; /* the activation's id, deadline, ...: see wl_context in sdk/wasmloop.h */
    fprintf(stderr, "greeting %s\n", name); /* logs on stderr: stdout carries results */
    wl_object_begin(result);
    wl_member_stringf(result, "message", "Hello, %s!", name);
    return wl_object_end(result); /* NULL, or what is wrong with the result */
}

int main(int argc, char **argv) { return wasmloop_main(argc, argv, hello); }
