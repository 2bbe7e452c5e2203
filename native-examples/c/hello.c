/* A native ActionLoop action in C: {"name":"Mike"} -> {"message":"Hello, Mike!"}.
 *
 * Protocol (wasmloop's docs/protocol.md 1.8): acknowledge on fd 3 when __OW_WAIT_FOR_ACK is set,
 * then read one JSON request per line on stdin and write one JSON result per line on fd 3;
 * logs go to stdout/stderr. To stay dependency-free this only looks for the string field
 * "name" inside "value"; a real action would use a JSON library such as cJSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies the string value of "name" found after `from` into out (JSON escapes kept as they
 * are, so the result stays valid JSON). Returns 0 when there is none. */
static int find_name(const char *from, char *out, size_t size) {
    const char *p = strstr(from, "\"name\"");
    if (!p) return 0;
    p += 6;
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (*p++ != ':') return 0;
    while (*p == ' ' || *p == '\t' || *p == '\r') p++;
    if (*p++ != '"') return 0;
    size_t n = 0;
    while (*p && *p != '"' && n + 2 < size) {
        if (*p == '\\' && p[1]) out[n++] = *p++;
        out[n++] = *p++;
    }
    if (*p != '"') return 0;
    out[n] = 0;
    return 1;
}

static void hello(const char *request, FILE *out) {
    char name[4096] = "Stranger";
    const char *value = strstr(request, "\"value\"");
    if (value && !find_name(value, name, sizeof name)) strcpy(name, "Stranger");
    if (!value) find_name(request, name, sizeof name);
    fprintf(stderr, "hello: greeting %s\n", name);
    fprintf(out, "{\"message\":\"Hello, %s!\"}\n", name);
}

int main(int argc, char **argv) {
    /* Given the JSON as first argument, run once and print the result on stdout. */
    if (argc > 1) {
        hello(argv[1], stdout);
        return 0;
    }
    FILE *results = fdopen(3, "w");
    if (!results) {
        perror("hello: fd 3 is not open (run me under an ActionLoop runtime)");
        return 1;
    }
    const char *ack = getenv("__OW_WAIT_FOR_ACK");
    if (ack && *ack) {
        fputs("{\"ok\":true}\n", results);
        fflush(results);
    }
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        hello(line, results);
        fflush(stdout);
        fflush(stderr);
        fflush(results);
    }
    free(line);
    return 0;
}
