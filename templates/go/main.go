// {"name":"Mike"} -> {"message":"Hello, Mike!"}
package main

import (
	"cmp"

	"wasmloop.dev/action"
)

type Args struct {
	Name string `json:"name"`
}

func hello(args Args, _ *action.Context) (map[string]string, error) {
	name := cmp.Or(args.Name, "Stranger")
	return map[string]string{"message": "Hello, " + name + "!"}, nil
}

func main() { action.Serve(hello) }
