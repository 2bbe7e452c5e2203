//go:build unix

package action

import (
	"os"
	"syscall"
)

// resultChannel is fd 3, where the runtime reads a native action's answers; stdout when fd
// 3 is not open, as when the executable is run by hand without 3>&1.
func resultChannel() *os.File {
	var stat syscall.Stat_t
	// Asked before os.NewFile: a File of a descriptor that is not open would, once
	// collected, close whatever the action opens as fd 3 later.
	if syscall.Fstat(3, &stat) != nil {
		return os.Stdout
	}
	return os.NewFile(3, "results")
}
