// An action in Go on the wasmloop.dev/action SDK (sdk/go), which runs the request loop:
// {"name":"Mike"} -> {"message":"Hello, Mike!"}. One source, both backends:
//
//	GOOS=wasip1 GOARCH=wasm go build -o hello.wasm .   (a WebAssembly module)
//	CGO_ENABLED=0 go build -o hello .                  (native: native-examples/build.sh)
package main

import (
	"cmp"
	"fmt"
	"os"

	"wasmloop.dev/action"
)

type Args struct {
	Name string `json:"name"`
}

func hello(args Args, _ *action.Context) (map[string]string, error) {
	name := cmp.Or(args.Name, "Stranger")
	fmt.Fprintf(os.Stderr, "hello: greeting %s\n", name) // stderr: stdout carries results
	return map[string]string{"message": "Hello, " + name + "!"}, nil
}

func main() { action.Serve(hello) }
