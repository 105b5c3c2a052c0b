package e2e_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDeviceNodesOpen: a mount by root honours device nodes and setuid
// bits, as ext4 or tmpfs mounted by root do (go-fuse's own default is
// nodev,nosuid); --nodev and --nosuid restore the restrictions.
func TestDeviceNodesOpen(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a device node needs root (mknod) and a mount by root")
	}
	for _, tc := range []struct {
		name string
		args []string
		dev  bool
	}{
		{"default", nil, true},
		{"nodev-nosuid", []string{"--nodev", "--nosuid"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFS(t, "64MiB", tc.args...)
			flags := statfs(t, f.Mnt).Flags
			if got := flags&unix.ST_NODEV == 0; got != tc.dev {
				t.Errorf("statfs flags %#x: device nodes honoured %v, want %v", flags, got, tc.dev)
			}
			if got := flags&unix.ST_NOSUID == 0; got != tc.dev {
				t.Errorf("statfs flags %#x: setuid honoured %v, want %v", flags, got, tc.dev)
			}
			null := filepath.Join(f.Mnt, "null")
			must(t, retry(func() error { return unix.Mknod(null, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) }))
			fd, err := unix.Open(null, unix.O_RDWR, 0)
			if !tc.dev {
				wantErrno(t, "open a device node on a nodev mount", err, syscall.EACCES)
				if err == nil {
					unix.Close(fd)
				}
				return
			}
			must(t, err)
			defer closeFd(t, fd)
			// /dev/null: a write is swallowed, a read is at end of file.
			if n, err := unix.Write(fd, []byte("into the void")); err != nil || n != 13 {
				t.Errorf("write to the null device: %d, %v", n, err)
			}
			buf := make([]byte, 8)
			if n, err := unix.Read(fd, buf); err != nil || n != 0 {
				t.Errorf("read from the null device: %d, %v; want end of file", n, err)
			}
		})
	}
}
