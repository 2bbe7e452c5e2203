/* A native ActionLoop action in C: {"name":"Mike"} -> {"message":"Hello, Mike!"}.
 *
 * sdk/c/wasmloop.h runs the protocol (wasmloop's docs/protocol.md 1.8): the ack on fd 3 when
 * __OW_WAIT_FOR_ACK is set, one JSON request per line on stdin, one JSON result per line on
 * fd 3; logs go to stderr. Given a JSON value as its argument, it answers it once on stdout.
 *   cc -O2 -o hello hello.c */
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
