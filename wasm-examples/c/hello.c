/* A WebAssembly ActionLoop action in C: {"name":"Mike"} -> {"message":"Hello, Mike!"}.
 *
 * Guest contract (wasmloop's docs/protocol.md Part 2): one JSON request per line on stdin, one
 * JSON result per line on stdout, logs on stderr. Build with Debian's clang and wasi-libc:
 *   clang --target=wasm32-wasi -O2 -o hello.wasm hello.c
 * To stay dependency-free it reads only the string "name" inside "value" (escapes kept as
 * they are, so the answer stays valid JSON); a real action would use a JSON library. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The string value of "name" in the object after "value", or NULL. Writes into out. */
static const char *name_in(const char *request, char *out, size_t size) {
    const char *value = strstr(request, "\"value\"");
    const char *key = value ? strstr(value, "\"name\"") : NULL;
    if (!key) return NULL;
    const char *p = strchr(key + 6, ':');
    if (!p) return NULL;
    p += strspn(p + 1, " \t\r") + 1;
    if (*p != '"') return NULL;
    size_t n = 0;
    for (p++; *p && *p != '"' && n + 2 < size; p++) {
        if (*p == '\\' && p[1]) out[n++] = *p++;
        out[n++] = *p;
    }
    out[n] = 0;
    return *p == '"' ? out : NULL;
}

int main(void) {
    const char *ack = getenv("__OW_WAIT_FOR_ACK");
    if (ack && *ack) {
        puts("{\"ok\":true}");
        fflush(stdout);
    }
    char *line = NULL;
    size_t cap = 0;
    char buffer[4096];
    while (getline(&line, &cap, stdin) > 0) {
        const char *name = name_in(line, buffer, sizeof buffer);
        if (!name) name = "Stranger";
        fprintf(stderr, "hello: greeting %s\n", name);
        printf("{\"message\":\"Hello, %s!\"}\n", name);
        fflush(stdout);
    }
    free(line);
    return 0;
}
