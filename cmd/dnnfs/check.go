package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

// openPoolError explains why an existing pool could not be opened. A file
// smaller than a pool can be (a text file, an empty file) is not a pool:
// mkfs never makes one that small, so "too small" would only mislead.
func openPoolError(path string, err error) error {
	if !errors.Is(err, pmem.ErrTooSmall) {
		return err
	}
	st, serr := os.Stat(path)
	if serr != nil || !st.Mode().IsRegular() {
		return err
	}
	what := fmt.Sprintf("%d bytes", st.Size())
	if st.Size() == 0 {
		what = "the file is empty"
	}
	return poolError(path, fmt.Errorf("%w (%s; a pool is made by dnnfs mkfs --pool %s --size SIZE, at least %d MiB)",
		core.ErrNotPool, what, path, format.MinPoolSize>>20))
}

// spaceWarning returns a warning when the pool file at path may grow
// (it is sparse) past the free space of the file system under it: a
// store into a hole then fails for want of space. "" when it fits, or
// for a device.
func spaceWarning(path string) string {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ""
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return ""
	}
	unallocated := st.Size - st.Blocks*512
	free := int64(fs.Bavail) * fs.Bsize
	if unallocated <= free {
		return ""
	}
	return fmt.Sprintf("pool %s is %s, of which %s are not allocated yet, but only %s are free under it: writes fail with 'no space' once that is used up (free space, or make a smaller pool)",
		path, human(st.Size), human(unallocated), human(free))
}

// human formats a byte count with a binary unit.
func human(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}

// dnnfsFSType is the file-system type of a dnnfs mount in mountinfo
// (FUSE's "fuse." and the name fs.MountOptions gives).
const dnnfsFSType = "fuse.dnnfs"

// onDnnfs returns nil if path (or, for a path that does not exist yet, its
// directory) is on a dnnfs mount, else an error saying what it is on.
func onDnnfs(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	dir := abs
	if _, err := os.Lstat(abs); err != nil {
		dir = filepath.Dir(abs)
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	mnt, fstype, err := mountOf(dir)
	if err != nil {
		return err
	}
	if fstype != dnnfsFSType {
		return fmt.Errorf("%s is not on a dnnfs mount (it is under %s, of type %s): use a path under a dnnfs mountpoint", path, mnt, fstype)
	}
	return nil
}

// mountOf returns the mount point holding dir (the longest mountinfo
// mount point that is dir or a parent of it) and its file-system type.
func mountOf(dir string) (mnt, fstype string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<16), 1<<20)
	for s.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(s.Text())
		if len(fields) < 7 {
			continue
		}
		mp := unescapeMount(fields[4])
		if !(dir == mp || mp == "/" || strings.HasPrefix(dir, mp+"/")) || len(mp) < len(mnt) {
			continue
		}
		for i := 6; i+1 < len(fields); i++ {
			if fields[i] == "-" {
				mnt, fstype = mp, fields[i+1]
				break
			}
		}
	}
	if err := s.Err(); err != nil {
		return "", "", err
	}
	if mnt == "" {
		return "", "", fmt.Errorf("%s: no mount holds it in /proc/self/mountinfo", dir)
	}
	return mnt, fstype, nil
}
