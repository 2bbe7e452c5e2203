//go:build wasip1

package action

import (
	"os"
	"strings"
	"unsafe"
)

// A snapshot of the start-up (wasmloop's docs/protocol.md). Built as a reactor
// (-buildmode=c-shared), a module runs Go's runtime start and the package inits in
// _initialize, not main. wasmloop runs _initialize and wizer-initialize once, where it
// compiles the module, and keeps the memory they leave: wizer-initialize runs main, whose
// Serve keeps the loop and returns. Each instance then starts in wasmloop-serve, with the
// runtime up and the action's own start-up done, half a millisecond and more saved per
// instance. A command build (no -buildmode) never calls these and serves from main.

//go:linkname mainMain main.main
func mainMain()

//go:wasmexport wizer-initialize
func wizerInitialize() {
	snapshotting = true
	mainMain()
	snapshotting = false
}

//go:wasmexport wasmloop-serve
func wasmloopServe() {
	if served == nil {
		os.Stderr.WriteString("wasmloop: wasmloop-serve was called before wizer-initialize, or main did not call action.Serve\n")
		os.Exit(70)
	}
	// Go read its environment as its runtime started, in the snapshot: the action's and
	// this activation's variables are the instance's, read again here.
	readEnviron()
	served()
}

//go:wasmimport wasi_snapshot_preview1 environ_sizes_get
func environSizesGet(count, size unsafe.Pointer) uint32

//go:wasmimport wasi_snapshot_preview1 environ_get
func environGet(pointers, buffer unsafe.Pointer) uint32

// readEnviron replaces the process's environment with the instance's.
func readEnviron() {
	var count, size uint32
	if environSizesGet(unsafe.Pointer(&count), unsafe.Pointer(&size)) != 0 {
		return
	}
	os.Clearenv()
	if count == 0 {
		return
	}
	// WASI writes pointers of its own width (32 bits) into a buffer in linear memory.
	pointers := make([]uint32, count)
	buffer := make([]byte, size)
	if environGet(unsafe.Pointer(&pointers[0]), unsafe.Pointer(&buffer[0])) != 0 {
		return
	}
	for _, entry := range strings.Split(strings.TrimRight(string(buffer), "\x00"), "\x00") {
		if key, value, ok := strings.Cut(entry, "="); ok {
			os.Setenv(key, value)
		}
	}
}
