package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	dfs "github.com/dnnfs/dnnfs/fs"
)

// runTableInfo: dnnfs table info PATH
func runTableInfo(args []string) error {
	fl := newFlags("table info")
	if err := parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() != 1 {
		return usageError{"want exactly one PATH argument"}
	}
	path := fl.Arg(0)
	if err := onDnnfs(path); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(path, dfs.XattrTable, buf)
	if errors.Is(err, unix.ENODATA) {
		return fmt.Errorf("%s is not an embedding table", path)
	}
	if err != nil {
		return fmt.Errorf("%s: %v (is it on a dnnfs mount?)", path, err)
	}
	fmt.Println(string(buf[:n]))
	return nil
}

// runTableCreate: dnnfs table create PATH --rows R --dim D --dtype f32|f16|bf16 [--shard SIZE]
func runTableCreate(args []string) error {
	fl := newFlags("table create")
	rows := fl.Uint64("rows", 0, "rows of the table (required)")
	dim := fl.Uint32("dim", 0, "values per row (required)")
	dtype := fl.String("dtype", "f32", "element type: f32, f16 or bf16")
	shard := fl.String("shard", "", "target shard size, e.g. 4MiB (default: the mount's --shard-size)")
	if err := parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() != 1 {
		return usageError{"want exactly one PATH argument"}
	}
	path := fl.Arg(0)
	if *rows == 0 || *dim == 0 {
		return usageError{"--rows and --dim are required"}
	}
	v := fmt.Sprintf("rows=%d,dim=%d,dtype=%s", *rows, *dim, *dtype)
	if *shard != "" {
		v += ",shard=" + *shard
	}
	if _, err := dfs.ParseTableSpec(v); err != nil {
		// Name the flag: the spec's keys are the flags' names.
		msg := err.Error()
		for _, k := range []string{"rows", "dim", "dtype", "shard"} {
			if rest, ok := strings.CutPrefix(msg, k+"="); ok {
				msg = "--" + k + " " + rest
			}
		}
		return usageError{msg}
	}
	if err := onDnnfs(path); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %v (a table is made from a new file)", path, unwrapPathErr(err))
	}
	f.Close()
	if err := unix.Setxattr(path, dfs.XattrTable, []byte(v), 0); err != nil {
		os.Remove(path)
		switch {
		case errors.Is(err, unix.EOPNOTSUPP):
			return fmt.Errorf("%s: the mount has no SSD tier (mount with --ssd DIR)", path)
		case errors.Is(err, unix.ENOSPC):
			return fmt.Errorf("%s: no SSD-tier device has room for the table", path)
		}
		return fmt.Errorf("%s: creating the table: %v (see the daemon log)", path, err)
	}
	fmt.Printf("%s: %s\n", path, v)
	return nil
}
