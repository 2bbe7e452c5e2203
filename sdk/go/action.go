// Package action runs the OpenWhisk ActionLoop protocol around one function: an action is
// that function, and this package owns the rest.
//
//	package main
//
//	import (
//		"fmt"
//		"os"
//
//		"wasmloop.dev/action"
//	)
//
//	type Args struct {
//		Name string `json:"name"`
//	}
//
//	func hello(args Args, ctx *action.Context) (map[string]string, error) {
//		if args.Name == "" {
//			args.Name = "Stranger"
//		}
//		fmt.Fprintln(os.Stderr, "greeting", args.Name, "in", ctx.ActivationID)
//		return map[string]string{"message": "Hello, " + args.Name + "!"}, nil
//	}
//
//	func main() { action.Serve(hello) }
//
// One source builds a WebAssembly module (GOOS=wasip1 GOARCH=wasm go build) and a native
// executable (go build). Serve reads one request per line on stdin, calls the function with
// the request's value and the activation's [Context], and writes the answer as one line on
// the backend's result channel: stdout in WebAssembly, fd 3 natively.
//
// Log on stderr (fmt.Fprintln(os.Stderr, ...), or the log package), never on stdout: in
// WebAssembly stdout is the result channel, and a line printed there is taken for the answer.
//
//   - A result is the answer; it must marshal to a JSON object (or array).
//   - An error answers {"error": "<err.Error()>"}, which the platform shows as the
//     activation's error.
//   - A panic answers {"error": "the action panicked at main.go:12: <message>"}, logs the
//     same line, and the next request is served as usual, on both backends. A panic in
//     another goroutine, or a fatal error of the runtime (out of memory, concurrent map
//     writes), still ends the process: its activation fails, and the next one meets a
//     fresh instance.
//   - A value that does not unmarshal into the function's argument type answers
//     {"error": "the request's value does not fit the action's arguments: ..."}.
//
// Given one argument, the program answers it once on stdout instead of serving, for a try
// without a runtime: ./hello '{"name":"Mike"}' (the context then comes from the __OW_*
// variables, and the exit status is 1 when the answer is an error).
package action

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Args is an argument type for a function that takes the value as a JSON object without
// a struct of its own.
type Args = map[string]any

// Context is the activation's, read from its request line: never from the environment,
// which an instance serving several activations holds from another one, or not at all.
// APIHost is the exception, being the same for every activation of a container.
type Context struct {
	ActivationID  string
	TransactionID string
	ActionName    string
	ActionVersion string
	Namespace     string
	APIKey        string
	APIHost       string
	// When the platform stops waiting for the answer; zero when the request has none.
	Deadline time.Time
}

// TimeLeft is the time until Deadline: zero once it has passed, and the longest Duration
// when there is no deadline, so that "is there time for this?" reads the same either way.
func (c *Context) TimeLeft() time.Duration {
	if c.Deadline.IsZero() {
		return math.MaxInt64
	}
	return max(time.Until(c.Deadline), 0)
}

// Serve serves activations with fn until stdin ends. A is what each request's value is
// read into (a struct of yours, [Args], or any; a missing value reads as {}), and R is the
// result, marshalled with encoding/json.
func Serve[A any, R any](fn func(args A, ctx *Context) (R, error)) {
	root := ""
	// Panics are placed relative to the main package's folder, where the author's files are.
	if _, file, _, ok := runtime.Caller(1); ok {
		root = path.Dir(file)
	}
	if snapshotting {
		// The loop starts in each instance of the snapshot (snapshot_wasip1.go), which
		// reads its own environment first. What a first request would set up besides
		// (encoding/json's codecs of the request and of A and R: 0.3 ms of reflection
		// in WebAssembly) is set up now, once, into the snapshot.
		l := newLoop(fn, root)
		l.warm()
		results := resultChannel()
		served = func() {
			l.apiHost = os.Getenv("__OW_API_HOST")
			l.serve(os.Stdin, results, os.Getenv("__OW_WAIT_FOR_ACK") != "")
		}
		return
	}
	serveLoop(fn, root)
}

// warm runs a request's decoding and an answer's encoding through encoding/json, without
// calling fn, so that their codecs are made.
func (l *loop[A, R]) warm() {
	line := []byte(`{"value":{},"activation_id":"","deadline":"0"}`)
	var fast typed[A]
	_ = json.Unmarshal(line, &fast)
	var req request
	_ = json.Unmarshal(line, &req)
	var result R
	_ = l.encoder.Encode(result)
	_ = l.encoder.Encode(map[string]string{"error": ""})
	l.answer.Reset()
}

// Set while a snapshot's start-up runs main; served is the loop it kept.
var (
	snapshotting bool
	served       func()
)

func serveLoop[A, R any](fn func(A, *Context) (R, error), root string) {
	l := newLoop(fn, root)
	if len(os.Args) == 2 {
		os.Exit(l.once(os.Args[1], os.Stdout))
	}
	l.serve(os.Stdin, resultChannel(), os.Getenv("__OW_WAIT_FOR_ACK") != "")
}

type loop[A, R any] struct {
	fn      func(A, *Context) (R, error)
	apiHost string
	root    string
	// The answer being made, its newline included, so that it leaves in one write.
	answer  bytes.Buffer
	encoder *json.Encoder
}

func newLoop[A, R any](fn func(A, *Context) (R, error), root string) *loop[A, R] {
	l := &loop[A, R]{fn: fn, apiHost: os.Getenv("__OW_API_HOST"), root: root}
	l.encoder = json.NewEncoder(&l.answer)
	// Answers are read by programs, not pasted into HTML: "<" can stay "<".
	l.encoder.SetEscapeHTML(false)
	return l
}

// serve answers each line of in with one line on out, until in ends or out fails.
func (l *loop[A, R]) serve(in io.Reader, out io.Writer, ack bool) {
	if ack {
		if _, err := io.WriteString(out, "{\"ok\":true}\n"); err != nil {
			return
		}
	}
	// ReadBytes, not a Scanner: a request line has no size limit.
	reader := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := reader.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			return
		}
		// A blank line is no request (a writer that sends a line and its newline apart).
		if len(bytes.TrimSpace(line)) == 0 {
			if err != nil {
				return
			}
			continue
		}
		l.request(line)
		// os.Stderr has no buffer, so the function's logs are out before its answer.
		if _, err := out.Write(l.answer.Bytes()); err != nil {
			return
		}
		if err != nil {
			return
		}
	}
}

// once answers value, given on the command line, on out and returns the exit status. The
// context comes from the environment: a process that serves one activation has its own.
func (l *loop[A, R]) once(value string, out io.Writer) int {
	ctx := Context{
		ActivationID:  os.Getenv("__OW_ACTIVATION_ID"),
		TransactionID: os.Getenv("__OW_TRANSACTION_ID"),
		ActionName:    os.Getenv("__OW_ACTION_NAME"),
		ActionVersion: os.Getenv("__OW_ACTION_VERSION"),
		Namespace:     os.Getenv("__OW_NAMESPACE"),
		APIKey:        os.Getenv("__OW_API_KEY"),
		APIHost:       l.apiHost,
		Deadline:      ahead(epochMillis([]byte(os.Getenv("__OW_DEADLINE")))),
	}
	failed := l.respond(json.RawMessage(value), &ctx)
	if _, err := out.Write(l.answer.Bytes()); err != nil || failed {
		return 1
	}
	return 0
}

// envelope is what a request line carries beside its value: the activation's context.
type envelope struct {
	ActivationID  string `json:"activation_id"`
	TransactionID string `json:"transaction_id"`
	ActionName    string `json:"action_name"`
	ActionVersion string `json:"action_version"`
	Namespace     string `json:"namespace"`
	APIKey        string `json:"api_key"`
	// Epoch milliseconds, as a string (the platform's) or a number.
	Deadline json.RawMessage `json:"deadline"`
}

// typed is a request line with its value read into A in the same pass: a second
// json.Unmarshal of the value cost ~20 µs an activation in WebAssembly.
type typed[A any] struct {
	Value *A `json:"value"`
	envelope
}

// request is a request line with its value left as it is: read again when the typed
// pass fails, to say what is wrong in the author's terms.
type request struct {
	Value json.RawMessage `json:"value"`
	envelope
}

func (l *loop[A, R]) context(e *envelope) Context {
	return Context{
		ActivationID:  e.ActivationID,
		TransactionID: e.TransactionID,
		ActionName:    e.ActionName,
		ActionVersion: e.ActionVersion,
		Namespace:     e.Namespace,
		APIKey:        e.APIKey,
		APIHost:       l.apiHost,
		Deadline:      ahead(epochMillis(e.Deadline)),
	}
}

// request puts the answer to one request line in l.answer.
func (l *loop[A, R]) request(line []byte) {
	// encoding/json would read bytes that are not UTF-8 as U+FFFD, silently.
	if !utf8.Valid(line) {
		l.fail(fmt.Sprintf("the request line is not UTF-8 (byte %d is not): a request is JSON text", validUpTo(line)))
		return
	}
	var fast typed[A]
	if json.Unmarshal(line, &fast) == nil && fast.Value != nil {
		ctx := l.context(&fast.envelope)
		l.answer.Reset()
		if failure, failed := l.call(*fast.Value, &ctx); failed {
			l.fail(failure)
		}
		return
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		var wrongType *json.UnmarshalTypeError
		// A context key of another type reads as absent, but the line must be an object.
		if !errors.As(err, &wrongType) || wrongType.Field == "" {
			if json.Valid(line) {
				l.fail("the request line is not a JSON object")
			} else {
				l.fail("the request line is not JSON: " + jsonMessage(err))
			}
			return
		}
	}
	ctx := l.context(&req.envelope)
	l.respond(req.Value, &ctx)
}

// respond puts the answer of fn to value (read into A; none or null reads as {}) in
// l.answer, and says whether it is an error.
func (l *loop[A, R]) respond(value json.RawMessage, ctx *Context) bool {
	l.answer.Reset()
	var args A
	if len(value) == 0 || string(value) == "null" {
		if err := json.Unmarshal([]byte("{}"), &args); err != nil {
			l.fail("the request has no value, and the action's arguments need one: " + jsonMessage(err))
			return true
		}
	} else if err := json.Unmarshal(value, &args); err != nil {
		l.fail("the request's value does not fit the action's arguments: " + jsonMessage(err))
		return true
	}
	failure, failed := l.call(args, ctx)
	if failed {
		l.fail(failure)
	}
	return failed
}

// call runs fn on args, its panics included, with the result going to l.answer; or
// returns the message of the error to answer instead.
func (l *loop[A, R]) call(args A, ctx *Context) (failure string, failed bool) {
	defer func() {
		if p := recover(); p != nil {
			failure, failed = l.panicked(p), true
			fmt.Fprintln(os.Stderr, failure)
		}
	}()
	result, err := l.fn(args, ctx)
	if err != nil {
		return err.Error(), true
	}
	// Inside the recover: a MarshalJSON of the author's may panic too.
	if err := l.encoder.Encode(result); err != nil {
		return "the action's result does not marshal to JSON: " + jsonMessage(err), true
	}
	if kind := notAnObject(l.answer.Bytes()); kind != "" {
		shown := strings.TrimSpace(l.answer.String())
		if len(shown) > 80 {
			shown = shown[:80] + "..."
		}
		return fmt.Sprintf("the action returned %s, not an object: %s (return a map or a struct)", kind, shown), true
	}
	return "", false
}

// notAnObject names the JSON type of an encoded result that an activation cannot answer
// with (the platform takes only an object or an array), or is empty.
func notAnObject(encoded []byte) string {
	if len(encoded) == 0 {
		return "nothing"
	}
	switch encoded[0] {
	case '{', '[':
		return ""
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// validUpTo is where the first byte that is not UTF-8 is in line.
func validUpTo(line []byte) int {
	for at := 0; at < len(line); {
		r, size := utf8.DecodeRune(line[at:])
		if r == utf8.RuneError && size == 1 {
			return at
		}
		at += size
	}
	return len(line)
}

// fail makes l.answer the error object of message.
func (l *loop[A, R]) fail(message string) {
	l.answer.Reset()
	// One string always encodes.
	_ = l.encoder.Encode(struct {
		Error string `json:"error"`
	}{message})
}

func (l *loop[A, R]) panicked(p any) string {
	return fmt.Sprintf("the action panicked at %s: %v", l.place(), p)
}

// place is where the panic being recovered began: the first frame under the runtime's
// panicking (gopanic, and sigpanic or panicIndex when the runtime raised it), as a file
// relative to the main package's folder when it is in there, and a line.
func (l *loop[A, R]) place() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(1, pcs)])
	inRuntime := false
	for {
		frame, more := frames.Next()
		if strings.HasPrefix(frame.Function, "runtime.") {
			inRuntime = true
		} else if inRuntime {
			file := frame.File
			if l.root != "" {
				file = strings.TrimPrefix(file, l.root+"/")
			}
			return fmt.Sprintf("%s:%d", file, frame.Line)
		}
		if !more {
			return "an unknown place"
		}
	}
}

// jsonMessage is err's text without the package's name, which tells the author nothing.
func jsonMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "json: ")
}

// ahead is deadline if it is still to come, else none: one already past as the request
// comes (OpenWhisk's tests send "123") is no limit, and the runtime does not enforce it.
func ahead(deadline time.Time) time.Time {
	if deadline.IsZero() || !deadline.After(time.Now()) {
		return time.Time{}
	}
	return deadline
}

// epochMillis reads a deadline, quoted or not; anything else reads as none.
func epochMillis(raw []byte) time.Time {
	// Digits, maybe quoted: read as they are, not through json.Unmarshal, which costs
	// microseconds an activation in WebAssembly (and an error when there is no deadline).
	if len(raw) == 0 {
		return time.Time{}
	}
	text := strings.Trim(strings.TrimSpace(string(raw)), `"`)
	millis, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(millis)
}
