//go:build !unix

package action

import "os"

// resultChannel is stdout: a WebAssembly guest (GOOS=wasip1) answers there, and its fd 3,
// when it has one, is a preopened folder. What the action itself prints goes to the logs
// instead: os.Stdout becomes stderr, so that a stray fmt.Println cannot pass for the
// answer (and cost the instance its state when the runtime replaces it).
func resultChannel() *os.File {
	results := os.Stdout
	os.Stdout = os.Stderr
	return results
}
