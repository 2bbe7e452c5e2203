package action

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// contract is the contract action of ../contract.json.
func contract(value Args, ctx *Context) (any, error) {
	switch value["do"] {
	case "deadline":
		switch {
		case ctx.Deadline.IsZero():
			return Args{"deadline": "none"}, nil
		case ctx.TimeLeft() == 0:
			return Args{"deadline": "past"}, nil
		}
		return Args{"deadline": "future"}, nil
	case "number":
		return 42, nil
	case "fail":
		return nil, errors.New("asked to fail")
	case "panic":
		panic("asked to panic")
	case "print":
		fmt.Println("printed")
		return Args{"printed": true}, nil
	case "greet":
		// Typed arguments, as an action declares them: the SDK reads the value into them.
		type greet struct {
			Name string `json:"name"`
		}
		typed := newLoop(func(args greet, _ *Context) (Args, error) {
			return Args{"message": "Hello, " + args.Name + "!"}, nil
		}, "")
		line, _ := json.Marshal(Args{"value": value})
		typed.request(line)
		var answer Args
		_ = json.Unmarshal(typed.answer.Bytes(), &answer)
		if failure, ok := answer["error"].(string); ok {
			return nil, errors.New(failure)
		}
		return answer, nil
	}
	return value, nil
}

type contractCase struct {
	Name               string            `json:"name"`
	Input              []json.RawMessage `json:"input"`
	LastWithoutNewline bool              `json:"last_without_newline"`
	Answers            []map[string]any  `json:"answers"`
	Differs            map[string]string `json:"differs"`
}

// inputLine is one entry of a case's input as bytes.
func inputLine(t *testing.T, raw json.RawMessage) []byte {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return []byte(text)
	}
	var entry struct {
		Hex    string `json:"hex"`
		EchoOf int    `json:"echo_of"`
	}
	if err := json.Unmarshal(raw, &entry); err != nil {
		t.Fatal(err)
	}
	if entry.Hex != "" {
		line, err := hex.DecodeString(entry.Hex)
		if err != nil {
			t.Fatal(err)
		}
		return line
	}
	return []byte(`{"value":{"do":"echo","s":"` + strings.Repeat("x", entry.EchoOf) + `"}}`)
}

// matches says whether answer is what expected says.
func matches(expected map[string]any, answer any) bool {
	fields, _ := answer.(map[string]any)
	message, isError := fields["error"].(string)
	isError = isError && len(fields) == 1
	if value, ok := expected["exact"]; ok {
		return reflect.DeepEqual(value, answer)
	}
	if start, ok := expected["error_starts"].(string); ok {
		return isError && strings.HasPrefix(message, start)
	}
	if part, ok := expected["error_has"].(string); ok {
		return isError && strings.Contains(message, part)
	}
	if expected["error"] == true {
		return isError
	}
	size := int(expected["echo_of"].(float64))
	return reflect.DeepEqual(answer, map[string]any{"do": "echo", "s": strings.Repeat("x", size)})
}

func TestTheSDKAnswersEveryCaseOfTheSharedContract(t *testing.T) {
	text, err := os.ReadFile("../contract.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []contractCase `json:"cases"`
	}
	if err := json.Unmarshal(text, &file); err != nil {
		t.Fatal(err)
	}
	for _, c := range file.Cases {
		if _, skip := c.Differs["go"]; skip {
			continue
		}
		var in bytes.Buffer
		for at, raw := range c.Input {
			in.Write(inputLine(t, raw))
			if at+1 < len(c.Input) || !c.LastWithoutNewline {
				in.WriteByte('\n')
			}
		}
		var out bytes.Buffer
		newLoop(contract, "").serve(&in, &out, false)
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if out.Len() == 0 {
			lines = nil
		}
		if len(lines) != len(c.Answers) {
			t.Errorf("%s: %d answers for %d: %q", c.Name, len(lines), len(c.Answers), lines)
			continue
		}
		for at, line := range lines {
			var answer any
			if err := json.Unmarshal([]byte(line), &answer); err != nil {
				t.Errorf("%s: %v", c.Name, err)
				continue
			}
			if !matches(c.Answers[at], answer) {
				shown := line
				if len(shown) > 300 {
					shown = shown[:300]
				}
				t.Errorf("%s: expected %v, got %s", c.Name, c.Answers[at], shown)
			}
		}
	}
}
