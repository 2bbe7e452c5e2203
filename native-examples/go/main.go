// A native ActionLoop action in Go: {"name":"Mike"} -> {"message":"Hello, Mike!"}.
//
// Protocol (wasmloop's docs/protocol.md 1.8): acknowledge on fd 3 when __OW_WAIT_FOR_ACK is set,
// then read one JSON request per line on stdin, export the context as __OW_* variables,
// log on stdout/stderr and write one JSON result per line on fd 3.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

func hello(args map[string]any) map[string]any {
	name, ok := args["name"].(string)
	if !ok {
		name = "Stranger"
	}
	fmt.Fprintf(os.Stderr, "hello: greeting %s\n", name)
	return map[string]any{"message": "Hello, " + name + "!"}
}

func main() {
	// Given the JSON as first argument, run once and print the result on stdout.
	if len(os.Args) > 1 {
		var args map[string]any
		_ = json.Unmarshal([]byte(os.Args[1]), &args)
		out, _ := json.Marshal(hello(args))
		fmt.Println(string(out))
		return
	}
	results := os.NewFile(3, "results")
	if os.Getenv("__OW_WAIT_FOR_ACK") != "" {
		fmt.Fprintln(results, `{"ok":true}`)
	}
	reader := bufio.NewReaderSize(os.Stdin, 64*1024)
	for {
		line, err := reader.ReadBytes('\n')
		if err != nil {
			return
		}
		var request map[string]any
		var result map[string]any
		if err := json.Unmarshal(line, &request); err != nil {
			result = map[string]any{"error": "the request is not a JSON object"}
		} else {
			for key, value := range request {
				if key == "value" {
					continue
				}
				text, ok := value.(string)
				if !ok {
					raw, _ := json.Marshal(value)
					text = string(raw)
				}
				os.Setenv("__OW_"+strings.ToUpper(key), text)
			}
			args, _ := request["value"].(map[string]any)
			result = hello(args)
		}
		out, _ := json.Marshal(result)
		os.Stdout.Sync()
		os.Stderr.Sync()
		results.Write(append(out, '\n'))
	}
}
