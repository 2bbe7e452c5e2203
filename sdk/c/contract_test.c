/* The SDKs' shared contract (sdk/contract.json), served by wasmloop.h: each case's input
 * goes to wasmloop_serve in a child process, on its stdin, and its answers come back on its
 * fd 3, as a runtime would see them. Run: cc -o t contract_test.c && ./t ../contract.json
 * (the file is read with the header's own JSON reader, which the cases exercise too). */
#include "wasmloop.h"

#include <sys/wait.h>

/* The contract action, as sdk/contract.json describes it. */
static const char *contract(const wl_value *args, const wl_context *ctx, wl_writer *result) {
    const char *what = wl_get_string(args, "do", "echo");
    if (strcmp(what, "deadline") == 0) {
        long long left = wl_time_left_ms(ctx);
        wl_object_begin(result);
        wl_member_string(result, "deadline", left < 0 ? "none" : left == 0 ? "past" : "future");
        return wl_object_end(result);
    }
    if (strcmp(what, "number") == 0) {
        wl_integer_value(result, 42);
        return NULL;
    }
    if (strcmp(what, "fail") == 0) return "asked to fail";
    if (strcmp(what, "print") == 0) {
        printf("printed\n");
        wl_object_begin(result);
        wl_member_bool(result, "printed", 1);
        return wl_object_end(result);
    }
    if (strcmp(what, "greet") == 0) {
        wl_object_begin(result);
        wl_member_stringf(result, "message", "Hello, %s!", wl_get_string(args, "name", ""));
        return wl_object_end(result);
    }
    wl_json_value(result, args);
    return NULL;
}

/* A growing byte buffer. */
typedef struct {
    char *data;
    size_t length, capacity;
} buffer;

static void put(buffer *b, const char *bytes, size_t n) {
    if (b->length + n + 1 > b->capacity) {
        b->capacity = (b->length + n + 1) * 2;
        b->data = (char *)realloc(b->data, b->capacity);
        if (!b->data) abort();
    }
    memcpy(b->data + b->length, bytes, n);
    b->length += n;
    b->data[b->length] = 0;
}

static void put_repeated(buffer *b, char c, size_t n) {
    while (n--) put(b, &c, 1);
}

static int hex_digit(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

/* One entry of a case's input, as the line it stands for. */
static void input_line(buffer *b, const wl_value *entry) {
    const wl_value *hex = wl_get(entry, "hex");
    if (wl_type_of(entry) == WL_STRING) {
        put(b, wl_string(entry), wl_length(entry));
    } else if (hex) {
        const char *s = wl_string(hex);
        size_t at;
        for (at = 0; at + 1 < wl_length(hex); at += 2) {
            char byte = (char)(hex_digit(s[at]) * 16 + hex_digit(s[at + 1]));
            put(b, &byte, 1);
        }
    } else {
        const char *open = "{\"value\":{\"do\":\"echo\",\"s\":\"", *close = "\"}}";
        put(b, open, strlen(open));
        put_repeated(b, 'x', (size_t)wl_number(wl_get(entry, "echo_of"), 0));
        put(b, close, strlen(close));
    }
}

/* Whether two values are the same JSON (members in any order). */
static int same(const wl_value *a, const wl_value *b) {
    const wl_value *x, *y;
    if (wl_type_of(a) != wl_type_of(b)) return 0;
    switch (wl_type_of(a)) {
    case WL_BOOL: return wl_bool(a, 0) == wl_bool(b, 0);
    case WL_NUMBER: return wl_number(a, 0) == wl_number(b, 0);
    case WL_STRING:
        return wl_length(a) == wl_length(b) && memcmp(wl_string(a), wl_string(b), wl_length(a)) == 0;
    case WL_ARRAY:
        if (wl_length(a) != wl_length(b)) return 0;
        for (x = wl_first(a), y = wl_first(b); x && y; x = wl_next(x), y = wl_next(y))
            if (!same(x, y)) return 0;
        return 1;
    case WL_OBJECT:
        if (wl_length(a) != wl_length(b)) return 0;
        for (x = wl_first(a); x; x = wl_next(x))
            if (!same(x, wl_get(b, wl_key_of(x)))) return 0;
        return 1;
    default: return 1;
    }
}

/* Whether `answer` is what `expected` says. */
static int matches(const wl_value *expected, const wl_value *answer) {
    const wl_value *error = wl_length(answer) == 1 ? wl_get(answer, "error") : NULL;
    const char *message = wl_string(error);
    const char *start = wl_string(wl_get(expected, "error_starts"));
    const char *part = wl_string(wl_get(expected, "error_has"));
    const wl_value *size = wl_get(expected, "echo_of"), *s;
    size_t at;
    if (wl_get(expected, "exact")) return same(wl_get(expected, "exact"), answer);
    if (start) return message && strncmp(message, start, strlen(start)) == 0;
    if (part) return message && strstr(message, part) != NULL;
    if (wl_get(expected, "error")) return message != NULL;
    s = wl_get(answer, "s");
    if (wl_length(answer) != 2 || !wl_string(s) || wl_length(s) != (size_t)wl_number(size, 0))
        return 0;
    for (at = 0; at < wl_length(s); at++)
        if (wl_string(s)[at] != 'x') return 0;
    return 1;
}

/* Serves `input` with the contract action in a child process; its answers, in `output`. */
static void serve_in_child(const buffer *input, buffer *output) {
    int in[2], out[2], status;
    pid_t child;
    char chunk[65536];
    ssize_t n;
    if (pipe(in) || pipe(out)) abort();
    child = fork();
    if (child < 0) abort();
    if (child == 0) {
        /* Out of the way first: pipe() may have handed out fd 3 itself. */
        int request = dup(in[0]), results = dup(out[1]);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        dup2(request, 0);
        dup2(results, 3);
        close(request);
        close(results);
        _exit(wasmloop_serve(contract));
    }
    close(in[0]);
    close(out[1]);
    /* The child answers each line once it has read it whole: the one long line is read
     * before its long answer is written, and the short answers fit the pipe meanwhile. */
    if (input->length && write(in[1], input->data, input->length) != (ssize_t)input->length)
        abort();
    close(in[1]);
    while ((n = read(out[0], chunk, sizeof chunk)) > 0) put(output, chunk, (size_t)n);
    close(out[0]);
    waitpid(child, &status, 0);
}

int main(int argc, char **argv) {
    wl__arena arena;
    buffer file = {0, 0, 0};
    char message[256], chunk[65536];
    const wl_value *root, *c;
    int passed = 0, failed = 0;
    size_t n;
    FILE *f = fopen(argc > 1 ? argv[1] : "../contract.json", "rb");
    if (!f) {
        perror("contract.json");
        return 2;
    }
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) put(&file, chunk, n);
    fclose(f);
    memset(&arena, 0, sizeof arena);
    root = wl__parse(&arena, file.data, file.length, "contract.json", message, sizeof message);
    if (!root) {
        fprintf(stderr, "%s\n", message);
        return 2;
    }
    for (c = wl_first(wl_get(root, "cases")); c; c = wl_next(c)) {
        const char *name = wl_string(wl_get(c, "name"));
        const wl_value *inputs = wl_get(c, "input"), *entry, *expected;
        buffer input = {0, 0, 0}, output = {0, 0, 0};
        size_t start = 0, at, answers = 0;
        int ok = 1;
        if (wl_get(wl_get(c, "differs"), "c")) continue;
        for (entry = wl_first(inputs); entry; entry = wl_next(entry)) {
            input_line(&input, entry);
            if (wl_next(entry) || !wl_bool(wl_get(c, "last_without_newline"), 0)) put(&input, "\n", 1);
        }
        serve_in_child(&input, &output);
        expected = wl_first(wl_get(c, "answers"));
        for (at = 0; at < output.length; at++) {
            const wl_value *answer;
            if (output.data[at] != '\n') continue;
            answers++;
            answer = wl__parse(&arena, output.data + start, at - start, "an answer", message,
                               sizeof message);
            if (!answer || !expected || !matches(expected, answer)) {
                ok = 0;
                fprintf(stderr, "%s: answer %lu is not the expected one: %.300s\n", name,
                        (unsigned long)answers, output.data + start);
            }
            expected = wl_next(expected);
            start = at + 1;
        }
        if (answers != wl_length(wl_get(c, "answers"))) {
            ok = 0;
            fprintf(stderr, "%s: %lu answers for %lu requests\n", name, (unsigned long)answers,
                    (unsigned long)wl_length(wl_get(c, "answers")));
        }
        if (ok) passed++;
        else failed++;
        free(input.data);
        free(output.data);
    }
    wl__arena_free(&arena);
    free(file.data);
    printf("contract: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
