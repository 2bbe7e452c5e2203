// A WebAssembly ActionLoop action in Go: {"name":"Mike"} -> {"message":"Hello, Mike!"}.
//
// Guest contract (wasmloop's docs/protocol.md Part 2): one JSON request per line on stdin, one
// JSON result per line on stdout, logs on stderr. Build with the standard toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -o hello.wasm .
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

type request struct {
	Value struct {
		Name string `json:"name"`
	} `json:"value"`
}

func main() {
	out := bufio.NewWriter(os.Stdout)
	if os.Getenv("__OW_WAIT_FOR_ACK") != "" {
		out.WriteString("{\"ok\":true}\n")
		out.Flush()
	}
	in := bufio.NewReaderSize(os.Stdin, 64*1024)
	encoder := json.NewEncoder(out)
	for {
		line, err := in.ReadBytes('\n')
		if err != nil {
			return
		}
		var req request
		if err := json.Unmarshal(line, &req); err != nil {
			encoder.Encode(map[string]string{"error": "the request is not JSON: " + err.Error()})
			out.Flush()
			continue
		}
		name := req.Value.Name
		if name == "" {
			name = "Stranger"
		}
		fmt.Fprintf(os.Stderr, "hello: greeting %s\n", name)
		encoder.Encode(map[string]string{"message": "Hello, " + name + "!"})
		out.Flush()
	}
}
