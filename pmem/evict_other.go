//go:build !linux

package pmem

import (
	"os"
	"syscall"
)

// imageFile is a removed temporary file for a crash image (no memfd here).
func imageFile() (int, error) {
	f, err := os.CreateTemp("", "pmem-crash-image")
	if err != nil {
		return -1, err
	}
	defer f.Close()
	os.Remove(f.Name())
	return syscall.Dup(int(f.Fd()))
}
