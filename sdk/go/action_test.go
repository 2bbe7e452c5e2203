package action

import (
	"errors"
	"fmt"
	"path"
	"runtime"
	"strings"
	"testing"
	"time"
)

type helloArgs struct {
	Name *string `json:"name"`
}

// hello's lines are counted on by the panic test: keep the panic where it is.
func hello(args helloArgs, ctx *Context) (map[string]any, error) {
	name := "Stranger"
	if args.Name != nil {
		name = *args.Name
	}
	switch name {
	case "":
		return nil, errors.New("an empty name")
	case "boom":
		panic("asked to")
	case "nil map":
		var m map[string]int
		m[name]++
	case "channel":
		return map[string]any{"c": make(chan int)}, nil
	}
	return map[string]any{
		"message": "Hello, " + name + "!",
		"id":      ctx.ActivationID,
		"host":    ctx.APIHost,
		"left":    !ctx.Deadline.IsZero() && ctx.TimeLeft() > 0,
		"<tag>":   true,
	}, nil
}

// testLoop is a loop as Serve makes one in a main package in this folder.
func testLoop(t *testing.T) *loop[helloArgs, map[string]any] {
	t.Setenv("__OW_API_HOST", "https://api.example")
	_, file, _, _ := runtime.Caller(0)
	return newLoop(hello, path.Dir(file))
}

func answer(l *loop[helloArgs, map[string]any], line string) string {
	l.request([]byte(line))
	return l.answer.String()
}

func TestTheFunctionGetsTheValueAndTheContextOfTheRequestLine(t *testing.T) {
	l := testLoop(t)
	for line, want := range map[string]string{
		`{"value":{"name":"Mike"},"activation_id":"a1","deadline":"4102444800000"}`: `{"<tag>":true,"host":"https://api.example","id":"a1","left":true,"message":"Hello, Mike!"}`,
		`{"value":{"name":"Mike"},"activation_id":"a2","deadline":4102444800000}`:   `{"<tag>":true,"host":"https://api.example","id":"a2","left":true,"message":"Hello, Mike!"}`,
		`{"activation_id":"a3"}`:                 `{"<tag>":true,"host":"https://api.example","id":"a3","left":false,"message":"Hello, Stranger!"}`,
		`{"value":null,"activation_id":7}`:       `{"<tag>":true,"host":"https://api.example","id":"","left":false,"message":"Hello, Stranger!"}`,
		`{"value":{},"deadline":"not a number"}`: `{"<tag>":true,"host":"https://api.example","id":"","left":false,"message":"Hello, Stranger!"}`,
	} {
		if got := answer(l, line); got != want+"\n" {
			t.Errorf("%s\n got %s\nwant %s", line, got, want)
		}
	}
}

func TestTheContextTellsTheTimeLeft(t *testing.T) {
	passed := Context{Deadline: time.Now().Add(-time.Second)}
	soon := Context{Deadline: time.Now().Add(time.Minute)}
	none := Context{}
	if passed.TimeLeft() != 0 || soon.TimeLeft() <= 50*time.Second || soon.TimeLeft() > time.Minute {
		t.Errorf("passed %v, soon %v", passed.TimeLeft(), soon.TimeLeft())
	}
	if none.TimeLeft() < 100*365*24*time.Hour {
		t.Errorf("no deadline leaves %v", none.TimeLeft())
	}
	if got := epochMillis([]byte(`"1700000000123"`)); !got.Equal(time.UnixMilli(1700000000123)) {
		t.Errorf("%v", got)
	}
}

func TestErrorsPanicsAndWrongValuesAnswerAnErrorObject(t *testing.T) {
	l := testLoop(t)
	_, file, _, _ := runtime.Caller(0)
	testFile := path.Base(file)
	for request, want := range map[string]string{
		`{"value":{"name":""}}`:        `{"error":"an empty name"}`,
		`{"value":{"name":"boom"}}`:    fmt.Sprintf(`{"error":"the action panicked at %s:%d: asked to"}`, testFile, panicLine),
		`{"value":{"name":"nil map"}}`: fmt.Sprintf(`{"error":"the action panicked at %s:%d: assignment to entry in nil map"}`, testFile, panicLine+3),
		`{"value":{"name":7}}`:         `{"error":"the request's value does not fit the action's arguments: cannot unmarshal number into Go struct field helloArgs.name of type string"}`,
		`{"value":[1]}`:                `{"error":"the request's value does not fit the action's arguments: cannot unmarshal array into Go value of type action.helloArgs"}`,
		`{"value":{"name":"channel"}}`: `{"error":"the action's result does not marshal to JSON: unsupported type: chan int"}`,
		`[1]`:                          `{"error":"the request line is not a JSON object"}`,
		`{"value":`:                    `{"error":"the request line is not JSON: unexpected end of JSON input"}`,
	} {
		if got := answer(l, request); got != want+"\n" {
			t.Errorf("%s\n got %s\nwant %s", request, got, want)
		}
	}
}

// panicLine is the line of hello's panic("asked to").
const panicLine = 27

func TestArgumentsThatCannotBeAnObjectSayTheValueIsMissing(t *testing.T) {
	l := newLoop(func(n int, _ *Context) (Args, error) { return Args{"n": n + 1}, nil }, "")
	l.request([]byte(`{"value":41}`))
	if got := l.answer.String(); got != `{"n":42}`+"\n" {
		t.Errorf("got %s", got)
	}
	l.request([]byte(`{}`))
	want := `{"error":"the request has no value, and the action's arguments need one: cannot unmarshal object into Go value of type int"}` + "\n"
	if got := l.answer.String(); got != want {
		t.Errorf("got %s", got)
	}
}

func TestServeAnswersEachLineWithOneWriteAndGoesOnAfterAPanic(t *testing.T) {
	l := testLoop(t)
	in := strings.NewReader(
		`{"value":{"name":"boom"}}` + "\n" + `{"value":{"name":"A"},"activation_id":"x"}` + "\n" +
			// The last line may lack its newline.
			`{"value":{"name":"B"}}`)
	var out writes
	l.serve(in, &out, true)
	if len(out) != 4 {
		t.Fatalf("%d writes: %q", len(out), out)
	}
	if out[0] != "{\"ok\":true}\n" || !strings.HasPrefix(out[1], `{"error":"the action panicked at `) ||
		!strings.Contains(out[2], `"message":"Hello, A!"`) || !strings.Contains(out[3], `"message":"Hello, B!"`) {
		t.Errorf("%q", out)
	}
	for _, line := range out {
		if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
			t.Errorf("not one line: %q", line)
		}
	}
}

func TestOnceAnswersItsArgumentWithTheContextOfTheEnvironment(t *testing.T) {
	l := testLoop(t)
	t.Setenv("__OW_ACTIVATION_ID", "from-env")
	var out writes
	if status := l.once(`{"name":"Mike"}`, &out); status != 0 {
		t.Errorf("status %d", status)
	}
	if len(out) != 1 || !strings.Contains(out[0], `"id":"from-env"`) || !strings.Contains(out[0], `"message":"Hello, Mike!"`) {
		t.Errorf("%q", out)
	}
	if status := l.once(`{"name":""}`, &out); status != 1 || out[1] != "{\"error\":\"an empty name\"}\n" {
		t.Errorf("status %d, %q", status, out)
	}
}

// writes keeps each Write apart, to count them.
type writes []string

func (w *writes) Write(p []byte) (int, error) {
	*w = append(*w, string(p))
	return len(p), nil
}
