/* wasmloop.h: an OpenWhisk action in C as one function; this header runs the ActionLoop
 * protocol around it, for wasmloop (WebAssembly or native) and any ActionLoop runtime.
 *
 *     #include "wasmloop.h"
 *
 *     static const char *hello(const wl_value *args, const wl_context *ctx, wl_writer *result) {
 *         const char *name = wl_get_string(args, "name", "Stranger");
 *         (void)ctx;
 *         fprintf(stderr, "hello: greeting %s\n", name);
 *         wl_object_begin(result);
 *         wl_member_stringf(result, "message", "Hello, %s!", name);
 *         return wl_object_end(result);
 *     }
 *
 *     int main(int argc, char **argv) { return wasmloop_main(argc, argv, hello); }
 *
 * Build and try it (Debian: apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32):
 *
 *     clang --target=wasm32-wasi -O2 -o hello.wasm hello.c    # a WebAssembly module
 *     cc -O2 -o hello hello.c                                  # a native executable
 *     wasmloop run hello.wasm --input '{"name":"Mike"}'        # {"message":"Hello, Mike!"}
 *     ./hello '{"name":"Mike"}'                                # once, no runtime needed
 *     echo '{"value":{"name":"Mike"}}' | ./hello 3>&1          # the serving loop, by hand
 *
 * One source builds for both backends. The loop reads one request per line on stdin, calls
 * the function with the request's `value` (an empty object when it has none) and the
 * activation's context, and writes the answer as one line in one write, on the backend's
 * result channel: stdout in WebAssembly, fd 3 natively (stdout when fd 3 is not open, as
 * when the executable is run by hand). When `__OW_WAIT_FOR_ACK` is set, `{"ok":true}` goes
 * there first.
 *
 * LOG ON STDERR (`fprintf(stderr, ...)`): in WebAssembly, stdout carries the results, and
 * a line printed there is taken for the answer (C gives a library no way to point `stdout`
 * elsewhere, and WASI preview 1 none to duplicate a descriptor): the runtime answers 502,
 * says so in the logs and starts a fresh instance. Natively, stdout is the logs. The loop gives stderr a line buffer, so
 * that each log line costs one write, and flushes stdout and stderr before each answer, so
 * that an activation's logs come out before it ends.
 *
 * What the function returns:
 * - NULL: the result is what it wrote into `result`, which must be one JSON object.
 *   Nothing written answers {"error":"the action returned no error and wrote no
 *   result: a JSON object was expected"}; another value answers {"error":"the action
 *   returned an array, not a JSON object"} (or a string, a number, ...); a misuse of the
 *   writer (a value where a key belongs, an object left open) answers {"error":"the
 *   action's result is not valid JSON: <what>"}.
 * - A message: {"error":"<message>"}, which the platform shows as the activation's error
 *   (wasmloop passes it on with a 200). It must live until the function has returned and
 *   the answer is written: a literal, or `wl_errorf(result, ...)`.
 * - The wl_get_string/number/bool helpers, meeting a value of another type, return your
 *   default and fail the activation: whatever the function returns then, the answer is
 *   {"error":"the argument \"name\" is a number, not a string"}. Check the type yourself
 *   (wl_get, wl_type_of) where a wrong type is not an error.
 * - A request line that is not JSON answers {"error":"the request line is not JSON: <what>,
 *   at byte N"} (one that is not UTF-8, {"error":"the request line is not UTF-8 (byte N is
 *   not): ..."}), without calling the function; blank lines are no requests.
 *
 * C has no way to survive a crash, so there is no catching one: an `assert` that fails,
 * `abort()`, `wl_fail(...)` or a bad pointer stop the instance. The message of an assert
 * or of wl_fail goes to the logs first, with its file and line (in WebAssembly, wasmloop
 * quotes it in the activation's error); the activation fails (400 `command exited: ...`),
 * and the next one meets a fresh instance (a fresh process natively), with none of the
 * memory of this one.
 *
 * Every value, string and context field the function is given, and every wl_errorf
 * message, lives in one arena per request, freed once the answer is written: copy what
 * must outlive the activation. Memory kept across activations (a cache) is yours to
 * malloc; an instance keeps it until it is replaced.
 *
 * Numbers are read with strtod and written with snprintf: keep the "C" locale for
 * LC_NUMERIC (the default unless the program calls setlocale).
 *
 * Every function here is `static`: there is nothing to define before including the header,
 * and a one-file action is the whole program. A project of several files may include it in
 * each; each file gets its own copy of the functions it uses, and values and writers pass
 * between files, as the header keeps no state of its own outside the loop. Only one file
 * runs the loop.
 */
#ifndef WASMLOOP_H
#define WASMLOOP_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#ifndef __wasi__
#include <fcntl.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define WL_API static __attribute__((unused))
#define WL__PRINTF(format_at, args_at) __attribute__((format(printf, format_at, args_at)))
#define WL__NORETURN __attribute__((noreturn))
#else
#define WL_API static
#define WL__PRINTF(format_at, args_at)
#define WL__NORETURN
#endif

/* How deep arrays and objects may nest, in a request and in a result: the reader recurses,
 * and a WebAssembly stack is small (wasm-ld's default is 64 KiB). */
#ifndef WL_MAX_DEPTH
#define WL_MAX_DEPTH 128
#endif

/* ---- Values read from the request ---------------------------------------------------- */

typedef enum wl_type {
    WL_MISSING, /* what wl_type_of says of NULL: a key that is not there */
    WL_NULL,
    WL_BOOL,
    WL_NUMBER,
    WL_STRING,
    WL_ARRAY,
    WL_OBJECT
} wl_type;

typedef struct wl__arena wl__arena;

/* One JSON value. Read it through the functions below; the fields are the header's. */
typedef struct wl_value wl_value;
struct wl_value {
    wl_type type;
    wl_value *next;
    const char *key;
    size_t key_length;
    union {
        int boolean;
        struct {
            double value;
            const char *text;
            size_t length;
        } number;
        struct {
            const char *text;
            size_t length;
        } string;
        struct {
            wl_value *first;
            size_t count;
            wl__arena *arena; /* where a getter's type error is kept */
        } items;
    } as;
};

/* WL_MISSING for NULL, so that wl_type_of(wl_get(args, "x")) needs no check first. */
WL_API wl_type wl_type_of(const wl_value *value);
/* The member `key` of an object (the last one, if the request repeats it), or NULL. */
WL_API const wl_value *wl_get(const wl_value *object, const char *key);
/* The text of a string (UTF-8, NUL-terminated), or NULL if `value` is not a string. */
WL_API const char *wl_string(const wl_value *value);
/* Bytes in a string (it may hold a \u0000), items in an array or object; 0 otherwise. */
WL_API size_t wl_length(const wl_value *value);
WL_API double wl_number(const wl_value *value, double otherwise);
WL_API int wl_bool(const wl_value *value, int otherwise);
WL_API int wl_is_null(const wl_value *value);
/* Iteration over an array's items or an object's members, in the request's order:
 *     for (const wl_value *m = wl_first(obj); m; m = wl_next(m)) use(wl_key_of(m), m);  */
WL_API const wl_value *wl_first(const wl_value *container);
WL_API const wl_value *wl_next(const wl_value *item);
/* The name of an object's member, or NULL for an array's item. */
WL_API const char *wl_key_of(const wl_value *member);
WL_API const wl_value *wl_at(const wl_value *array, size_t index);

/* An argument by name: `otherwise` when it is missing or null; when it has another type,
 * `otherwise` too, and the activation answers that type error whatever it returns. */
WL_API const char *wl_get_string(const wl_value *object, const char *key,
                                 const char *otherwise);
WL_API double wl_get_number(const wl_value *object, const char *key, double otherwise);
WL_API int wl_get_bool(const wl_value *object, const char *key, int otherwise);

/* ---- The activation's context -------------------------------------------------------- */

/* From the request line, never from the environment, which an instance serving several
 * activations would have from another one; api_host alone comes from the environment
 * (`__OW_API_HOST`), being the same for every activation of a container. Strings are ""
 * when the request has none. */
typedef struct wl_context {
    const char *activation_id;
    const char *transaction_id;
    const char *action_name;
    const char *action_version;
    const char *namespace;
    const char *api_key;
    const char *api_host;
    long long deadline; /* epoch milliseconds; 0 without one, or for one already past as
                           the request came (OpenWhisk's tests send "123"), which the
                           runtime does not enforce either */
} wl_context;

/* Milliseconds left until the deadline: 0 once it has passed, -1 without one. */
WL_API long long wl_time_left_ms(const wl_context *ctx);

/* ---- The result ---------------------------------------------------------------------- */

/* A result being written. Its fields are the header's. */
typedef struct wl_writer {
    char *data;
    size_t length, capacity;
    const char *error;
    int done, need_comma;
    unsigned depth;
    char stack[WL_MAX_DEPTH]; /* per level: 'o' wants a key, 'k' its value, 'a' array */
    wl__arena *arena;
} wl_writer;

/* Commas are the writer's: write values and keys in order, and it puts them in.
 * The ends return NULL, or the first misuse of the writer so far, so that an action may end
 * with `return wl_object_end(result);`. */
WL_API void wl_object_begin(wl_writer *w);
WL_API const char *wl_object_end(wl_writer *w);
WL_API void wl_array_begin(wl_writer *w);
WL_API const char *wl_array_end(wl_writer *w);
/* The next member's name, in an object, before its value. */
WL_API void wl_key(wl_writer *w, const char *key);
/* Text as a JSON string, escaped as JSON needs; bytes that are not UTF-8 become U+FFFD.
 * NULL writes null. */
WL_API void wl_string_value(wl_writer *w, const char *text);
WL_API void wl_string_value_n(wl_writer *w, const char *text, size_t length);
/* A string value made with printf's format: the JSON escaping is done on the outcome. */
WL_API void wl_stringf(wl_writer *w, const char *format, ...) WL__PRINTF(2, 3);
/* NaN and infinities, which JSON cannot hold, are written as null. */
WL_API void wl_number_value(wl_writer *w, double number);
WL_API void wl_integer_value(wl_writer *w, long long number);
WL_API void wl_bool_value(wl_writer *w, int truth);
WL_API void wl_null_value(wl_writer *w);
/* A value of the request, copied as it is (numbers keep their text); NULL writes null. */
WL_API void wl_json_value(wl_writer *w, const wl_value *value);
/* A key and its value in one call, for the flat objects most results are. */
WL_API void wl_member_string(wl_writer *w, const char *key, const char *text);
WL_API void wl_member_stringf(wl_writer *w, const char *key, const char *format, ...)
    WL__PRINTF(3, 4);
WL_API void wl_member_number(wl_writer *w, const char *key, double number);
WL_API void wl_member_integer(wl_writer *w, const char *key, long long number);
WL_API void wl_member_bool(wl_writer *w, const char *key, int truth);
WL_API void wl_member_null(wl_writer *w, const char *key);
WL_API void wl_member_json(wl_writer *w, const char *key, const wl_value *value);
/* An error message made with printf's format, kept until the answer is written:
 * `return wl_errorf(result, "no user %s", id);`. */
WL_API const char *wl_errorf(wl_writer *w, const char *format, ...) WL__PRINTF(2, 3);

/* ---- The loop ------------------------------------------------------------------------ */

typedef const char *(*wl_action)(const wl_value *args, const wl_context *ctx,
                                 wl_writer *result);

/* Serves activations until stdin ends: 0 then, 1 if the result channel stopped taking
 * answers. Call it before anything is written on stderr (it sets stderr's buffer). */
WL_API int wasmloop_serve(wl_action action);
/* Answers one `value` (not a whole request line) on stdout, with no runtime: 0 when the
 * answer is a result, 1 when it is an error. */
WL_API int wasmloop_once(const char *value, wl_action action);
/* wasmloop_once(argv[1]) when the program is given an argument, as when testing it by hand
 * or when a runtime runs a process per activation; wasmloop_serve otherwise (wasmloop
 * gives its actions no arguments). */
WL_API int wasmloop_main(int argc, char **argv, wl_action action);

/* Stops the instance, the way an assert does: the message and where it was called go to
 * the logs first. For what must not go on (a broken invariant), not for a bad request,
 * which is better answered with an error. */
#define wl_fail(...) wl__fail(__FILE__, __LINE__, __VA_ARGS__)
WL_API WL__NORETURN void wl__fail(const char *file, int line, const char *format, ...)
    WL__PRINTF(3, 4);

/* ======================================================================================= */
/* The implementation.                                                                      */
/* ======================================================================================= */

#define WL__STRINGIFY(x) #x
#define WL__STRING_OF(x) WL__STRINGIFY(x)
#define WL__TOO_DEEP "arrays and objects nested more than " WL__STRING_OF(WL_MAX_DEPTH) " deep"
#define WL__INVALID "the action's result is not valid JSON: "
/* Buffers grown past this are let go after their request, so that one huge activation does
 * not keep its memory for the instance's life. */
#define WL__KEEP ((size_t)1 << 20)

/* ---- Arena ---------------------------------------------------------------------------- */

typedef struct wl__chunk {
    struct wl__chunk *next;
    size_t size, used;
} wl__chunk;

struct wl__arena {
    wl__chunk *chunks;
    const char *argument_error;
};

#define WL__ALIGN 16
#define WL__HEADER ((sizeof(wl__chunk) + WL__ALIGN - 1) / WL__ALIGN * WL__ALIGN)

static void *wl__alloc(wl__arena *arena, size_t size) {
    wl__chunk *chunk = arena->chunks;
    void *at;
    if (size > ((size_t)-1) / 4) return NULL;
    size = (size + WL__ALIGN - 1) / WL__ALIGN * WL__ALIGN;
    if (!chunk || chunk->size - chunk->used < size) {
        /* Doubling keeps the number of mallocs per request small; the cap keeps what a
         * small allocation after a big one costs bounded. */
        size_t room = chunk ? chunk->size * 2 : 8192;
        if (room > WL__KEEP) room = WL__KEEP;
        if (room < size) room = size;
        chunk = (wl__chunk *)malloc(WL__HEADER + room);
        if (!chunk) return NULL;
        chunk->next = arena->chunks;
        chunk->size = room;
        chunk->used = 0;
        arena->chunks = chunk;
    }
    at = (char *)chunk + WL__HEADER + chunk->used;
    chunk->used += size;
    return at;
}

static void wl__arena_free(wl__arena *arena) {
    while (arena->chunks) {
        wl__chunk *next = arena->chunks->next;
        free(arena->chunks);
        arena->chunks = next;
    }
}

static const char *wl__vformat(wl__arena *arena, const char *format, va_list args) {
    va_list again;
    char *text;
    int n;
    va_copy(again, args);
    n = vsnprintf(NULL, 0, format, args);
    text = n < 0 ? NULL : (char *)wl__alloc(arena, (size_t)n + 1);
    if (text) vsnprintf(text, (size_t)n + 1, format, again);
    va_end(again);
    return text;
}

static const char *wl__format(wl__arena *arena, const char *format, ...) WL__PRINTF(2, 3);
static const char *wl__format(wl__arena *arena, const char *format, ...) {
    va_list args;
    const char *text;
    va_start(args, format);
    text = wl__vformat(arena, format, args);
    va_end(args);
    return text;
}

/* ---- UTF-8 ----------------------------------------------------------------------------- */

/* The length of the well-formed UTF-8 sequence at `s` (no overlong forms, no surrogates,
 * nothing past U+10FFFF), or 0. */
static size_t wl__utf8_length(const char *text, size_t available) {
    const unsigned char *s = (const unsigned char *)text;
    unsigned char c = s[0], low = 0x80, high = 0xBF;
    size_t n, i;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) low = 0xA0;
        if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) low = 0x90;
        if (c == 0xF4) high = 0x8F;
    } else return 0;
    if (available < n || s[1] < low || s[1] > high) return 0;
    for (i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return n;
}

static size_t wl__utf8_encode(unsigned long code, char *out) {
    if (code < 0x80) {
        out[0] = (char)code;
        return 1;
    }
    if (code < 0x800) {
        out[0] = (char)(0xC0 | (code >> 6));
        out[1] = (char)(0x80 | (code & 0x3F));
        return 2;
    }
    if (code < 0x10000) {
        out[0] = (char)(0xE0 | (code >> 12));
        out[1] = (char)(0x80 | ((code >> 6) & 0x3F));
        out[2] = (char)(0x80 | (code & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (code >> 18));
    out[1] = (char)(0x80 | ((code >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((code >> 6) & 0x3F));
    out[3] = (char)(0x80 | (code & 0x3F));
    return 4;
}

/* ---- Reader ----------------------------------------------------------------------------- */

typedef struct wl__parser {
    const char *start, *at, *end;
    wl__arena *arena;
    const char *error;
    size_t error_at;
    int depth;
} wl__parser;

static wl_value *wl__parse_value(wl__parser *p);

static wl_value *wl__parse_failed(wl__parser *p, const char *at, const char *what) {
    if (!p->error) {
        p->error = what;
        p->error_at = (size_t)(at - p->start);
    }
    return NULL;
}

/* The same, for the readers that answer whether they succeeded. */
static int wl__failed(wl__parser *p, const char *at, const char *what) {
    wl__parse_failed(p, at, what);
    return 0;
}

static void wl__skip_space(wl__parser *p) {
    while (p->at < p->end &&
           (*p->at == ' ' || *p->at == '\t' || *p->at == '\n' || *p->at == '\r'))
        p->at++;
}

static wl_value *wl__new_value(wl__parser *p, wl_type type) {
    wl_value *value = (wl_value *)wl__alloc(p->arena, sizeof *value);
    if (!value) return wl__parse_failed(p, p->at, "out of memory");
    memset(value, 0, sizeof *value);
    value->type = type;
    return value;
}

static long wl__hex4(const char *s, const char *end) {
    long code = 0;
    int i;
    if (end - s < 4) return -1;
    for (i = 0; i < 4; i++) {
        char c = s[i];
        code <<= 4;
        if (c >= '0' && c <= '9') code |= c - '0';
        else if (c >= 'a' && c <= 'f') code |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') code |= c - 'A' + 10;
        else return -1;
    }
    return code;
}

/* Reads the string at p->at (its opening quote) into the arena, unescaped and checked. */
static int wl__parse_string(wl__parser *p, const char **text, size_t *length) {
    const char *s = p->at + 1, *close = s;
    char *out;
    size_t n = 0;
    /* Its end first, so that the copy is allocated once: unescaping only shrinks. */
    while (close < p->end && *close != '"') close += (*close == '\\' && close + 1 < p->end) ? 2 : 1;
    if (close >= p->end) return wl__failed(p, p->at, "a string that never ends");
    out = (char *)wl__alloc(p->arena, (size_t)(close - s) + 1);
    if (!out) return wl__failed(p, s, "out of memory");
    while (s < close) {
        unsigned char c = (unsigned char)*s;
        if (c == '\\') {
            long code;
            switch (s[1]) {
            case '"': out[n++] = '"'; break;
            case '\\': out[n++] = '\\'; break;
            case '/': out[n++] = '/'; break;
            case 'b': out[n++] = '\b'; break;
            case 'f': out[n++] = '\f'; break;
            case 'n': out[n++] = '\n'; break;
            case 'r': out[n++] = '\r'; break;
            case 't': out[n++] = '\t'; break;
            case 'u':
                code = wl__hex4(s + 2, close);
                if (code < 0)
                    return wl__failed(p, s, "\\u without four hex digits");
                if (code >= 0xDC00 && code <= 0xDFFF)
                    return wl__failed(p, s, "a \\u escape of a lone surrogate");
                if (code >= 0xD800 && code <= 0xDBFF) {
                    long low = (s + 8 <= close && s[6] == '\\' && s[7] == 'u')
                                   ? wl__hex4(s + 8, close)
                                   : -1;
                    if (low < 0xDC00 || low > 0xDFFF)
                        return wl__failed(p, s, "a \\u escape of a lone surrogate");
                    code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
                    s += 6;
                }
                n += wl__utf8_encode((unsigned long)code, out + n);
                s += 4;
                break;
            default:
                return wl__failed(p, s, "an unknown escape in a string");
            }
            s += 2;
        } else if (c < 0x20) {
            return wl__failed(p, s, "a control character in a string (JSON escapes them)");
        } else if (c < 0x80) {
            out[n++] = (char)c;
            s++;
        } else {
            size_t k = wl__utf8_length(s, (size_t)(close - s));
            if (!k) return wl__failed(p, s, "a string that is not UTF-8");
            memcpy(out + n, s, k);
            n += k;
            s += k;
        }
    }
    out[n] = 0;
    *text = out;
    *length = n;
    p->at = close + 1;
    return 1;
}

static int wl__is_digit(const wl__parser *p, const char *s) {
    return s < p->end && *s >= '0' && *s <= '9';
}

static wl_value *wl__parse_number(wl__parser *p) {
    const char *s = p->at;
    char local[64], *copy = local;
    size_t length;
    wl_value *value;
    if (*s == '-') s++;
    if (wl__is_digit(p, s) && *s == '0') s++;
    else if (wl__is_digit(p, s)) while (wl__is_digit(p, s)) s++;
    else return wl__parse_failed(p, s, "a number without digits");
    if (s < p->end && *s == '.') {
        if (!wl__is_digit(p, ++s))
            return wl__parse_failed(p, s, "a number without digits after its '.'");
        while (wl__is_digit(p, s)) s++;
    }
    if (s < p->end && (*s == 'e' || *s == 'E')) {
        s++;
        if (s < p->end && (*s == '+' || *s == '-')) s++;
        if (!wl__is_digit(p, s))
            return wl__parse_failed(p, s, "a number without digits in its exponent");
        while (wl__is_digit(p, s)) s++;
    }
    length = (size_t)(s - p->at);
    /* strtod reads up to a NUL, and would take more than JSON allows ("0x1"), so it is
     * given the number alone. */
    if (length >= sizeof local && !(copy = (char *)wl__alloc(p->arena, length + 1)))
        return wl__parse_failed(p, p->at, "out of memory");
    memcpy(copy, p->at, length);
    copy[length] = 0;
    if (!(value = wl__new_value(p, WL_NUMBER))) return NULL;
    value->as.number.value = strtod(copy, NULL);
    if (value->as.number.value - value->as.number.value != 0)
        return wl__parse_failed(p, p->at, "a number too large for a double");
    value->as.number.text = p->at;
    value->as.number.length = length;
    p->at = s;
    return value;
}

static wl_value *wl__parse_word(wl__parser *p, const char *word, wl_type type, int truth) {
    size_t n = strlen(word);
    wl_value *value;
    if ((size_t)(p->end - p->at) < n || memcmp(p->at, word, n) != 0)
        return wl__parse_failed(p, p->at, "a value was expected");
    if (!(value = wl__new_value(p, type))) return NULL;
    value->as.boolean = truth;
    p->at += n;
    return value;
}

static wl_value *wl__parse_container(wl__parser *p, int object) {
    char close = object ? '}' : ']';
    wl_value *container, *last = NULL;
    if (++p->depth > WL_MAX_DEPTH) return wl__parse_failed(p, p->at, WL__TOO_DEEP);
    if (!(container = wl__new_value(p, object ? WL_OBJECT : WL_ARRAY))) return NULL;
    container->as.items.arena = p->arena;
    p->at++;
    wl__skip_space(p);
    if (p->at < p->end && *p->at == close) {
        p->at++;
        p->depth--;
        return container;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_length = 0;
        wl_value *item;
        if (object) {
            if (p->at >= p->end || *p->at != '"')
                return wl__parse_failed(p, p->at, "a key (a string) was expected");
            if (!wl__parse_string(p, &key, &key_length)) return NULL;
            wl__skip_space(p);
            if (p->at >= p->end || *p->at != ':')
                return wl__parse_failed(p, p->at, "':' was expected after a key");
            p->at++;
        }
        if (!(item = wl__parse_value(p))) return NULL;
        item->key = key;
        item->key_length = key_length;
        if (last) last->next = item;
        else container->as.items.first = item;
        last = item;
        container->as.items.count++;
        wl__skip_space(p);
        if (p->at < p->end && *p->at == ',') {
            p->at++;
            wl__skip_space(p);
        } else if (p->at < p->end && *p->at == close) {
            p->at++;
            p->depth--;
            return container;
        } else {
            return wl__parse_failed(p, p->at, object ? "',' or '}' was expected"
                                                     : "',' or ']' was expected");
        }
    }
}

static wl_value *wl__parse_value(wl__parser *p) {
    wl__skip_space(p);
    if (p->at >= p->end) return wl__parse_failed(p, p->at, "a value was expected");
    switch (*p->at) {
    case '{': return wl__parse_container(p, 1);
    case '[': return wl__parse_container(p, 0);
    case 't': return wl__parse_word(p, "true", WL_BOOL, 1);
    case 'f': return wl__parse_word(p, "false", WL_BOOL, 0);
    case 'n': return wl__parse_word(p, "null", WL_NULL, 0);
    case '"': {
        wl_value *value = wl__new_value(p, WL_STRING);
        if (!value || !wl__parse_string(p, &value->as.string.text, &value->as.string.length))
            return NULL;
        return value;
    }
    default:
        if (*p->at == '-' || (*p->at >= '0' && *p->at <= '9')) return wl__parse_number(p);
        return wl__parse_failed(p, p->at, "a value was expected");
    }
}

/* The value `text` holds, or NULL with what is wrong (and where) in `message`. */
static wl_value *wl__parse(wl__arena *arena, const char *text, size_t length, const char *what,
                           char *message, size_t message_size) {
    wl__parser p;
    wl_value *root;
    memset(&p, 0, sizeof p);
    p.start = p.at = text;
    p.end = text + length;
    p.arena = arena;
    root = wl__parse_value(&p);
    if (root) {
        wl__skip_space(&p);
        if (p.at < p.end) root = wl__parse_failed(&p, p.at, "more follows the value");
    }
    if (!root) {
        if (p.error_at >= length)
            snprintf(message, message_size, "%s is not JSON: %s, at its end", what, p.error);
        else
            snprintf(message, message_size, "%s is not JSON: %s, at byte %lu", what,
                     p.error, (unsigned long)p.error_at);
    }
    return root;
}

/* ---- Reading values --------------------------------------------------------------------- */

WL_API wl_type wl_type_of(const wl_value *value) { return value ? value->type : WL_MISSING; }

WL_API const wl_value *wl_get(const wl_value *object, const char *key) {
    const wl_value *member, *found = NULL;
    size_t n;
    if (!object || object->type != WL_OBJECT || !key) return NULL;
    n = strlen(key);
    for (member = object->as.items.first; member; member = member->next)
        if (member->key_length == n && memcmp(member->key, key, n) == 0) found = member;
    return found;
}

WL_API const char *wl_string(const wl_value *value) {
    return value && value->type == WL_STRING ? value->as.string.text : NULL;
}

WL_API size_t wl_length(const wl_value *value) {
    if (!value) return 0;
    if (value->type == WL_STRING) return value->as.string.length;
    if (value->type == WL_ARRAY || value->type == WL_OBJECT) return value->as.items.count;
    return 0;
}

WL_API double wl_number(const wl_value *value, double otherwise) {
    return value && value->type == WL_NUMBER ? value->as.number.value : otherwise;
}

WL_API int wl_bool(const wl_value *value, int otherwise) {
    return value && value->type == WL_BOOL ? value->as.boolean : otherwise;
}

WL_API int wl_is_null(const wl_value *value) { return value && value->type == WL_NULL; }

WL_API const wl_value *wl_first(const wl_value *container) {
    if (!container || (container->type != WL_ARRAY && container->type != WL_OBJECT)) return NULL;
    return container->as.items.first;
}

WL_API const wl_value *wl_next(const wl_value *item) { return item ? item->next : NULL; }

WL_API const char *wl_key_of(const wl_value *member) { return member ? member->key : NULL; }

WL_API const wl_value *wl_at(const wl_value *array, size_t index) {
    const wl_value *item = array && array->type == WL_ARRAY ? array->as.items.first : NULL;
    while (item && index--) item = item->next;
    return item;
}

static const char *wl__type_name(wl_type type) {
    switch (type) {
    case WL_NULL: return "null";
    case WL_BOOL: return "a boolean";
    case WL_NUMBER: return "a number";
    case WL_STRING: return "a string";
    case WL_ARRAY: return "an array";
    case WL_OBJECT: return "an object";
    default: return "missing";
    }
}

/* The member `key` when it has the type wanted, NULL when it is missing or null; a member
 * of another type fails the activation (the first such failure is the one answered). */
static const wl_value *wl__argument(const wl_value *object, const char *key, wl_type wanted) {
    const wl_value *found = wl_get(object, key);
    wl__arena *arena;
    if (!found || found->type == WL_NULL) return NULL;
    if (found->type == wanted) return found;
    arena = object->as.items.arena;
    if (arena && !arena->argument_error) {
        arena->argument_error = wl__format(arena, "the argument \"%s\" is %s, not %s", key,
                                           wl__type_name(found->type), wl__type_name(wanted));
        if (!arena->argument_error) arena->argument_error = "an argument has the wrong type";
    }
    return NULL;
}

WL_API const char *wl_get_string(const wl_value *object, const char *key, const char *otherwise) {
    const wl_value *found = wl__argument(object, key, WL_STRING);
    return found ? found->as.string.text : otherwise;
}

WL_API double wl_get_number(const wl_value *object, const char *key, double otherwise) {
    const wl_value *found = wl__argument(object, key, WL_NUMBER);
    return found ? found->as.number.value : otherwise;
}

WL_API int wl_get_bool(const wl_value *object, const char *key, int otherwise) {
    const wl_value *found = wl__argument(object, key, WL_BOOL);
    return found ? found->as.boolean : otherwise;
}

static long long wl__now_ms(void) {
    struct timeval now;
    gettimeofday(&now, NULL);
    return (long long)now.tv_sec * 1000 + now.tv_usec / 1000;
}

WL_API long long wl_time_left_ms(const wl_context *ctx) {
    long long left;
    if (!ctx || ctx->deadline <= 0) return -1;
    left = ctx->deadline - wl__now_ms();
    return left > 0 ? left : 0;
}

/* ---- Writer ------------------------------------------------------------------------------ */

static const char *wl__misuse(wl_writer *w, const char *message) {
    if (!w->error) w->error = message;
    return w->error;
}

/* Room for `more` bytes and the answer's newline. */
static int wl__grow(wl_writer *w, size_t more) {
    size_t need = w->length + more + 1, capacity = w->capacity ? w->capacity : 256;
    char *data;
    if (need <= w->capacity) return 1;
    if (more > ((size_t)-1) / 4) return 0;
    while (capacity < need) capacity *= 2;
    if (!(data = (char *)realloc(w->data, capacity))) return 0;
    w->data = data;
    w->capacity = capacity;
    return 1;
}

static int wl__put(wl_writer *w, const char *bytes, size_t n) {
    if (w->error) return 0;
    if (!wl__grow(w, n)) return !wl__misuse(w, "out of memory while writing the result");
    memcpy(w->data + w->length, bytes, n);
    w->length += n;
    return 1;
}

static int wl__put_escaped(wl_writer *w, const char *text, size_t length) {
    static const char hex[] = "0123456789abcdef";
    const char *s = text, *end = text + length;
    if (!wl__put(w, "\"", 1)) return 0;
    while (s < end) {
        const char *run = s;
        char escape[6];
        size_t n = 2;
        unsigned char c;
        /* What JSON takes as it is goes out in runs, one copy each. */
        while (s < end) {
            size_t k;
            c = (unsigned char)*s;
            if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') k = 1;
            else if (c >= 0x80) k = wl__utf8_length(s, (size_t)(end - s));
            else k = 0;
            if (!k) break;
            s += k;
        }
        if (s > run && !wl__put(w, run, (size_t)(s - run))) return 0;
        if (s >= end) break;
        c = (unsigned char)*s++;
        escape[0] = '\\';
        switch (c) {
        case '"': escape[1] = '"'; break;
        case '\\': escape[1] = '\\'; break;
        case '\n': escape[1] = 'n'; break;
        case '\r': escape[1] = 'r'; break;
        case '\t': escape[1] = 't'; break;
        case '\b': escape[1] = 'b'; break;
        case '\f': escape[1] = 'f'; break;
        default:
            /* Not UTF-8: the replacement character keeps the answer valid JSON. */
            if (c >= 0x80) {
                memcpy(escape, "\\ufffd", 6);
            } else {
                memcpy(escape, "\\u00", 4);
                escape[4] = hex[c >> 4];
                escape[5] = hex[c & 15];
            }
            n = 6;
        }
        if (!wl__put(w, escape, n)) return 0;
    }
    return wl__put(w, "\"", 1);
}

/* Whether a value may go here; puts the comma that separates it from the one before. */
static int wl__begin_value(wl_writer *w) {
    char level;
    if (w->error) return 0;
    if (w->depth == 0) {
        if (w->done) return !wl__misuse(w, WL__INVALID "a second value after the result");
        return 1;
    }
    level = w->stack[w->depth - 1];
    if (level == 'o')
        return !wl__misuse(w, WL__INVALID "a value where an object needs a key (wl_key)");
    if (level == 'a' && w->need_comma) return wl__put(w, ",", 1);
    return 1;
}

static void wl__end_value(wl_writer *w) {
    if (w->depth == 0) {
        w->done = 1;
        return;
    }
    if (w->stack[w->depth - 1] == 'k') w->stack[w->depth - 1] = 'o';
    w->need_comma = 1;
}

static void wl__open(wl_writer *w, char level, const char *bracket) {
    if (!wl__begin_value(w)) return;
    if (w->depth >= WL_MAX_DEPTH) {
        wl__misuse(w, WL__INVALID WL__TOO_DEEP);
        return;
    }
    if (!wl__put(w, bracket, 1)) return;
    w->stack[w->depth++] = level;
    w->need_comma = 0;
}

static const char *wl__close(wl_writer *w, char level, const char *bracket) {
    char open = w->depth ? w->stack[w->depth - 1] : 0;
    if (w->error) return w->error;
    if (open == 'k') return wl__misuse(w, WL__INVALID "a key without its value");
    if (level == 'o' && open != 'o')
        return wl__misuse(w, WL__INVALID "wl_object_end without an open object");
    if (level == 'a' && open != 'a')
        return wl__misuse(w, WL__INVALID "wl_array_end without an open array");
    if (!wl__put(w, bracket, 1)) return w->error;
    w->depth--;
    wl__end_value(w);
    return NULL;
}

WL_API void wl_object_begin(wl_writer *w) { wl__open(w, 'o', "{"); }
WL_API const char *wl_object_end(wl_writer *w) { return wl__close(w, 'o', "}"); }
WL_API void wl_array_begin(wl_writer *w) { wl__open(w, 'a', "["); }
WL_API const char *wl_array_end(wl_writer *w) { return wl__close(w, 'a', "]"); }

static void wl__key(wl_writer *w, const char *key, size_t length) {
    if (w->error) return;
    if (!w->depth || w->stack[w->depth - 1] == 'a') {
        wl__misuse(w, WL__INVALID "a key outside an object");
        return;
    }
    if (w->stack[w->depth - 1] == 'k') {
        wl__misuse(w, WL__INVALID "a key where the value of the key before it belongs");
        return;
    }
    if (w->need_comma && !wl__put(w, ",", 1)) return;
    if (wl__put_escaped(w, key, length) && wl__put(w, ":", 1)) w->stack[w->depth - 1] = 'k';
}

WL_API void wl_key(wl_writer *w, const char *key) {
    if (!key) wl__misuse(w, WL__INVALID "a NULL key");
    else wl__key(w, key, strlen(key));
}

WL_API void wl_string_value_n(wl_writer *w, const char *text, size_t length) {
    if (!text) {
        wl_null_value(w);
        return;
    }
    if (wl__begin_value(w) && wl__put_escaped(w, text, length)) wl__end_value(w);
}

WL_API void wl_string_value(wl_writer *w, const char *text) {
    wl_string_value_n(w, text, text ? strlen(text) : 0);
}

static void wl__vstringf(wl_writer *w, const char *format, va_list args) {
    char local[256], *text = local;
    va_list again;
    int n;
    va_copy(again, args);
    n = vsnprintf(local, sizeof local, format, args);
    if (n < 0) wl__misuse(w, WL__INVALID "a wl_stringf format that printf refused");
    else if ((size_t)n >= sizeof local && !(text = (char *)malloc((size_t)n + 1)))
        wl__misuse(w, "out of memory while writing the result");
    else {
        if (text != local) vsnprintf(text, (size_t)n + 1, format, again);
        wl_string_value_n(w, text, (size_t)n);
        if (text != local) free(text);
    }
    va_end(again);
}

WL_API void wl_stringf(wl_writer *w, const char *format, ...) {
    va_list args;
    va_start(args, format);
    wl__vstringf(w, format, args);
    va_end(args);
}

static void wl__put_value(wl_writer *w, const char *text, size_t length) {
    if (wl__begin_value(w) && wl__put(w, text, length)) wl__end_value(w);
}

WL_API void wl_number_value(wl_writer *w, double number) {
    char text[32];
    int n;
    /* NaN and infinities: x - x is NaN for them, 0 for every finite x. */
    if (number - number != 0) {
        wl_null_value(w);
        return;
    }
    if (number > -1e15 && number < 1e15 && (double)(long long)number == number) {
        wl_integer_value(w, (long long)number);
        return;
    }
    /* The shortest precision that reads back as the same double (17 digits always do). */
    n = snprintf(text, sizeof text, "%.15g", number);
    if (strtod(text, NULL) != number) n = snprintf(text, sizeof text, "%.16g", number);
    if (strtod(text, NULL) != number) n = snprintf(text, sizeof text, "%.17g", number);
    wl__put_value(w, text, (size_t)n);
}

WL_API void wl_integer_value(wl_writer *w, long long number) {
    char text[24];
    int n = snprintf(text, sizeof text, "%lld", number);
    wl__put_value(w, text, (size_t)n);
}

WL_API void wl_bool_value(wl_writer *w, int truth) {
    if (truth) wl__put_value(w, "true", 4);
    else wl__put_value(w, "false", 5);
}

WL_API void wl_null_value(wl_writer *w) { wl__put_value(w, "null", 4); }

WL_API void wl_json_value(wl_writer *w, const wl_value *value) {
    const wl_value *item;
    switch (wl_type_of(value)) {
    case WL_BOOL: wl_bool_value(w, value->as.boolean); break;
    case WL_NUMBER: wl__put_value(w, value->as.number.text, value->as.number.length); break;
    case WL_STRING: wl_string_value_n(w, value->as.string.text, value->as.string.length); break;
    case WL_ARRAY:
        wl_array_begin(w);
        for (item = value->as.items.first; item; item = item->next) wl_json_value(w, item);
        wl_array_end(w);
        break;
    case WL_OBJECT:
        wl_object_begin(w);
        for (item = value->as.items.first; item; item = item->next) {
            wl__key(w, item->key, item->key_length);
            wl_json_value(w, item);
        }
        wl_object_end(w);
        break;
    default: wl_null_value(w); break;
    }
}

WL_API void wl_member_string(wl_writer *w, const char *key, const char *text) {
    wl_key(w, key);
    wl_string_value(w, text);
}

WL_API void wl_member_stringf(wl_writer *w, const char *key, const char *format, ...) {
    va_list args;
    wl_key(w, key);
    va_start(args, format);
    wl__vstringf(w, format, args);
    va_end(args);
}

WL_API void wl_member_number(wl_writer *w, const char *key, double number) {
    wl_key(w, key);
    wl_number_value(w, number);
}

WL_API void wl_member_integer(wl_writer *w, const char *key, long long number) {
    wl_key(w, key);
    wl_integer_value(w, number);
}

WL_API void wl_member_bool(wl_writer *w, const char *key, int truth) {
    wl_key(w, key);
    wl_bool_value(w, truth);
}

WL_API void wl_member_null(wl_writer *w, const char *key) {
    wl_key(w, key);
    wl_null_value(w);
}

WL_API void wl_member_json(wl_writer *w, const char *key, const wl_value *value) {
    wl_key(w, key);
    wl_json_value(w, value);
}

WL_API const char *wl_errorf(wl_writer *w, const char *format, ...) {
    va_list args;
    const char *text = NULL;
    va_start(args, format);
    if (w->arena) text = wl__vformat(w->arena, format, args);
    va_end(args);
    return text ? text : "out of memory while writing the action's error";
}

/* ---- The loop ------------------------------------------------------------------------------ */

WL_API void wl__fail(const char *file, int line, const char *format, ...) {
    va_list args;
    fprintf(stderr, "the action failed at %s:%d: ", file, line);
    va_start(args, format);
    vfprintf(stderr, format, args);
    va_end(args);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

static int wl__result_fd(void) {
#ifdef __wasi__
    return 1;
#else
    return fcntl(3, F_GETFD) != -1 ? 3 : 1;
#endif
}

static int wl__write_all(int fd, const char *data, size_t length) {
    while (length) {
        ssize_t n = write(fd, data, length);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0;
        data += n;
        length -= (size_t)n;
    }
    return 1;
}

static const char *wl__context_string(const wl_value *request, const char *key) {
    const char *text = wl_string(wl_get(request, key));
    return text ? text : "";
}

/* Epoch milliseconds, given as a string (the platform's way) or a number; 0 otherwise. */
static long long wl__epoch_ms(const wl_value *deadline) {
    long long millis = 0;
    const char *s = wl_string(deadline);
    if (wl_type_of(deadline) == WL_NUMBER) {
        double number = deadline->as.number.value;
        return number > 0 && number < 9e18 ? (long long)number : 0;
    }
    if (!s) return 0;
    while (*s == ' ') s++;
    if (*s < '0' || *s > '9') return 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (millis > 922337203685477579LL) return 0;
        millis = millis * 10 + (*s - '0');
    }
    while (*s == ' ') s++;
    return *s ? 0 : millis;
}

/* The request's deadline if it is still to come, else 0. */
static long long wl__deadline(const wl_value *deadline) {
    long long millis = wl__epoch_ms(deadline);
    return millis > 0 && millis > wl__now_ms() ? millis : 0;
}

static const char *wl__not_an_object(char first) {
    switch (first) {
    case '[': return "the action returned an array, not a JSON object";
    case '"': return "the action returned a string, not a JSON object";
    case 't': case 'f': return "the action returned a boolean, not a JSON object";
    case 'n': return "the action returned null, not a JSON object";
    default: return "the action returned a number, not a JSON object";
    }
}

/* Calls the action for one request (a whole request line, or a bare value) and checks
 * what it wrote: NULL when the writer holds a result, or the error to answer. */
static const char *wl__call(wl_action action, wl_writer *w, const char *text, size_t length,
                            int whole_request, const char *api_host, char *message,
                            size_t message_size) {
    wl_context ctx;
    const wl_value *root, *args;
    const char *error;
    size_t at;
    /* Checked first: JSON is UTF-8, and a string's bytes are passed on as they are. */
    for (at = 0; at < length;) {
        size_t n = wl__utf8_length(text + at, length - at);
        if (!n) {
            snprintf(message, message_size, "%s is not UTF-8 (byte %lu is not): JSON is text in UTF-8",
                     whole_request ? "the request line" : "the input", (unsigned long)at);
            return message;
        }
        at += n;
    }
    root = wl__parse(w->arena, text, length, whole_request ? "the request line" : "the input",
                     message, message_size);
    if (!root) return message;
    memset(&ctx, 0, sizeof ctx);
    ctx.activation_id = ctx.transaction_id = ctx.action_name = "";
    ctx.action_version = ctx.namespace = ctx.api_key = "";
    ctx.api_host = api_host;
    args = root;
    if (whole_request) {
        if (root->type != WL_OBJECT) return "the request line is not a JSON object";
        args = wl_get(root, "value");
        ctx.activation_id = wl__context_string(root, "activation_id");
        ctx.transaction_id = wl__context_string(root, "transaction_id");
        ctx.action_name = wl__context_string(root, "action_name");
        ctx.action_version = wl__context_string(root, "action_version");
        ctx.namespace = wl__context_string(root, "namespace");
        ctx.api_key = wl__context_string(root, "api_key");
        ctx.deadline = wl__deadline(wl_get(root, "deadline"));
    }
    if (!args || args->type == WL_NULL) {
        wl_value *empty = (wl_value *)wl__alloc(w->arena, sizeof *empty);
        if (!empty) return "out of memory reading the request";
        memset(empty, 0, sizeof *empty);
        empty->type = WL_OBJECT;
        empty->as.items.arena = w->arena;
        args = empty;
    }
    error = action(args, &ctx, w);
    /* A type error comes first: what the action did after it rests on a default. */
    if (w->arena->argument_error) return w->arena->argument_error;
    if (error) return error;
    if (w->error) return w->error;
    if (w->length == 0)
        return "the action returned no error and wrote no result: a JSON object was expected";
    if (w->depth) return WL__INVALID "an object or array left open";
    if (w->data[0] != '{') return wl__not_an_object(w->data[0]);
    return NULL;
}

/* Puts the whole answer line, its newline included, in w->data (or *line, when even an
 * error line finds no memory). Returns 1 when the answer is an error. */
static int wl__answer(wl_action action, wl_writer *w, const char *text, size_t length,
                      int whole_request, const char *api_host, const char **line,
                      size_t *line_length) {
    wl__arena arena;
    char message[256];
    const char *error;
    memset(&arena, 0, sizeof arena);
    w->length = 0;
    w->error = NULL;
    w->done = w->need_comma = 0;
    w->depth = 0;
    w->arena = &arena;
    error = wl__call(action, w, text, length, whole_request, api_host, message, sizeof message);
    if (error) {
        w->length = 0;
        w->error = NULL;
        w->depth = 0;
        if (!(wl__put(w, "{\"error\":", 9) && wl__put_escaped(w, error, strlen(error)) &&
              wl__put(w, "}", 1)))
            w->length = 0;
    }
    wl__arena_free(&arena);
    w->arena = NULL;
    if (w->length == 0) {
        *line = "{\"error\":\"out of memory while writing the answer\"}\n";
        *line_length = strlen(*line);
        return 1;
    }
    w->data[w->length++] = '\n'; /* wl__grow always leaves room for it */
    *line = w->data;
    *line_length = w->length;
    return error != NULL;
}

/* stdin, a line at a time, read in big blocks rather than through stdio. */
typedef struct wl__input {
    char *data;
    size_t start, scanned, length, capacity;
    int ended;
} wl__input;

/* The next line, NUL-terminated, without its newline; NULL at the end of input. */
static char *wl__next_line(wl__input *in, size_t *length) {
    if (in->start == in->length) {
        in->start = in->scanned = in->length = 0;
        if (in->capacity > WL__KEEP) {
            free(in->data);
            in->data = NULL;
            in->capacity = 0;
        }
    }
    for (;;) {
        char *newline = in->length > in->scanned
                            ? (char *)memchr(in->data + in->scanned, '\n', in->length - in->scanned)
                            : NULL;
        char *line;
        ssize_t n;
        if (newline) {
            line = in->data + in->start;
            *length = (size_t)(newline - line);
            *newline = 0;
            in->start = in->scanned = (size_t)(newline - in->data) + 1;
            return line;
        }
        in->scanned = in->length;
        if (in->ended) {
            if (in->start == in->length) return NULL;
            /* A last request without its newline is still a request. */
            line = in->data + in->start;
            *length = in->length - in->start;
            in->data[in->length] = 0;
            in->start = in->scanned = in->length;
            return line;
        }
        if (in->start > 0) {
            memmove(in->data, in->data + in->start, in->length - in->start);
            in->length -= in->start;
            in->scanned -= in->start;
            in->start = 0;
        }
        /* One byte is always kept for the NUL after the line. */
        if (in->capacity - in->length < 4096) {
            size_t capacity = in->capacity ? in->capacity * 2 : 65536;
            char *data = (char *)realloc(in->data, capacity);
            if (!data) {
                fprintf(stderr, "wasmloop.h: out of memory reading a request of %lu bytes\n",
                        (unsigned long)in->length);
                return NULL;
            }
            in->data = data;
            in->capacity = capacity;
        }
        n = read(0, in->data + in->length, in->capacity - in->length - 1);
        if (n > 0) in->length += (size_t)n;
        else if (n < 0 && errno == EINTR) continue;
        else in->ended = 1;
    }
}

WL_API int wasmloop_serve(wl_action action) {
    static char log_buffer[4096];
    int fd = wl__result_fd(), status = 0;
    const char *ack = getenv("__OW_WAIT_FOR_ACK");
    const char *api_host = getenv("__OW_API_HOST");
    wl_writer w;
    wl__input in;
    setvbuf(stderr, log_buffer, _IOLBF, sizeof log_buffer);
    if (!api_host) api_host = "";
    if (ack && *ack && !wl__write_all(fd, "{\"ok\":true}\n", 12)) return 1;
    memset(&w, 0, sizeof w);
    memset(&in, 0, sizeof in);
    for (;;) {
        size_t length, line_length;
        const char *line;
        char *request = wl__next_line(&in, &length);
        size_t blank = 0;
        if (!request) break;
        /* A blank line is no request (a writer that sends a line and its newline apart). */
        while (blank < length && (request[blank] == ' ' || request[blank] == '\t' ||
                                  request[blank] == '\r'))
            blank++;
        if (blank == length) continue;
        wl__answer(action, &w, request, length, 1, api_host, &line, &line_length);
        /* The activation's logs are out before its answer, and so before it ends. */
        fflush(stdout);
        fflush(stderr);
        if (!wl__write_all(fd, line, line_length)) {
            status = 1;
            break;
        }
        if (w.capacity > WL__KEEP) {
            free(w.data);
            w.data = NULL;
            w.capacity = 0;
        }
    }
    free(w.data);
    free(in.data);
    return status;
}

WL_API int wasmloop_once(const char *value, wl_action action) {
    const char *api_host = getenv("__OW_API_HOST"), *line;
    size_t line_length;
    wl_writer w;
    int failed, written;
    memset(&w, 0, sizeof w);
    failed = wl__answer(action, &w, value, strlen(value), 0, api_host ? api_host : "", &line,
                        &line_length);
    fflush(stdout);
    fflush(stderr);
    written = wl__write_all(1, line, line_length);
    free(w.data);
    return failed || !written;
}

WL_API int wasmloop_main(int argc, char **argv, wl_action action) {
    return argc > 1 ? wasmloop_once(argv[1], action) : wasmloop_serve(action);
}

#endif /* WASMLOOP_H */
