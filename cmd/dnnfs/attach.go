package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	dfs "github.com/dnnfs/dnnfs/fs"
)

// runAttach names the objects under an S3 prefix in a cluster mount's
// namespace, read-only, through the daemon's XattrAttach on the directory
// (DESIGN §Attach and warm-up).
func runAttach(args []string) error {
	fl := newFlags("attach")
	if err := parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() != 2 || !strings.HasPrefix(fl.Arg(0), "s3://") {
		return usageError{"want s3://BUCKET/PREFIX and a DIR on a cluster mount"}
	}
	src, dir := fl.Arg(0), fl.Arg(1)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Setxattr(dir, dfs.XattrAttach, []byte(src), 0); err != nil {
		switch err {
		case unix.EOPNOTSUPP:
			return fmt.Errorf("%s: not on a dnnfs cluster mount (--etcd)", dir)
		case unix.EINVAL:
			return fmt.Errorf("%s: want s3://BUCKET/PREFIX", src)
		}
		return fmt.Errorf("attach %s at %s: %w (the daemon's log says why)", src, dir, err)
	}
	files, bytes := 0, int64(0)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				files++
				bytes += fi.Size()
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d files, %d bytes (read-only)\n", dir, files, bytes)
	return nil
}
