package pmem

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// imageFile is an anonymous in-memory file for a crash image (memfd).
func imageFile() (int, error) {
	fd, err := unix.MemfdCreate("pmem-crash-image", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	return fd, nil
}
