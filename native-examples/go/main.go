// A native action in Go on the wasmloop.dev/action SDK (sdk/go), which runs the request
// loop and answers on fd 3: {"name":"Mike"} -> {"message":"Hello, Mike!"}. Given its input
// as an argument, it answers once on stdout: ./hello '{"name":"Mike"}'.
//
//	CGO_ENABLED=0 go build -o hello .
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
	fmt.Fprintf(os.Stderr, "hello: greeting %s\n", name)
	return map[string]string{"message": "Hello, " + name + "!"}, nil
}

func main() { action.Serve(hello) }
