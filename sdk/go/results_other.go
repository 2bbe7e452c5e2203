//go:build !unix

package action

import "os"

// resultChannel is stdout: a WebAssembly guest (GOOS=wasip1) answers there, and its fd 3,
// when it has one, is a preopened folder.
func resultChannel() *os.File {
	return os.Stdout
}
