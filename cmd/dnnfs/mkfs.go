package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/units"
	"github.com/dnnfs/dnnfs/pmem"
)

// bigPool is the size from which mkfs of a pool file shows a progress bar.
const bigPool = 64 << 30

func runMkfs(args []string) error {
	fl := newFlags("mkfs")
	poolPath := fl.String("pool", "", "pool file or DAX device (required)")
	sizeStr := fl.String("size", "", "pool size, e.g. 8GiB (required for a file; a DAX device uses its whole size)")
	force := fl.Bool("force", false, "overwrite an existing pool")
	if err := parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fl.Arg(0))}
	}
	if *poolPath == "" {
		return usageError{"--pool is required"}
	}
	var size int64
	if *sizeStr != "" {
		var err error
		if size, err = parseSize(*sizeStr); errors.Is(err, units.ErrZero) {
			return usageError{fmt.Sprintf("--size %s: the minimum pool size is %d MiB", *sizeStr, format.MinPoolSize>>20)}
		} else if err != nil {
			return usageError{"--size: " + err.Error()}
		}
		if size < format.MinPoolSize {
			return fmt.Errorf("--size %s: %w: the minimum is %d MiB", *sizeStr, pmem.ErrTooSmall, format.MinPoolSize>>20)
		}
		size = size / format.BlockSize * format.BlockSize
	} else if st, err := os.Stat(*poolPath); err != nil || st.Mode().IsRegular() {
		return usageError{"--size is required for a pool file"}
	}
	// An existing dnnfs pool is only overwritten with --force; say so
	// before touching anything.
	undo, err := pmem.CreatePool(*poolPath, size, *force)
	if err != nil {
		return err
	}
	// A pool file this run created is removed again if formatting fails:
	// a failed mkfs leaves nothing behind.
	if err := formatPool(*poolPath); err != nil {
		if undo != nil {
			undo()
		}
		return err
	}
	if w := spaceWarning(*poolPath); w != "" {
		fmt.Fprintln(os.Stderr, "dnnfs mkfs: warning:", w)
	}
	return nil
}

// formatPool writes a fresh file system into the pool at path and reports it.
func formatPool(path string) error {
	m, err := pmem.Open(path)
	if err != nil {
		return err
	}
	defer m.Close()
	// A bar for what takes a while: a DAX device's metadata is stored and
	// flushed byte by byte, and a big pool has much of it.
	var bar *bar
	if m.Kind() != pmem.Emulated || m.Size() >= bigPool {
		bar = newBar("mkfs", 1, true)
	}
	err = core.FormatProgress(m, uint32(os.Getuid()), uint32(os.Getgid()), func(step string, done, total int64) { bar.set(step, done, total) })
	bar.done(err == nil)
	if err != nil {
		if errors.Is(err, pmem.ErrTooSmall) {
			return fmt.Errorf("%s: %w", path, err)
		}
		return err
	}
	sb, size, kind := mustSB(m), m.Size(), m.Kind()
	if err := m.Close(); err != nil {
		return err
	}
	fmt.Printf("created dnnfs pool %s: %d MiB (%s), %d inodes, %d data blocks of %d bytes\n",
		path, size>>20, kind, sb.InodeCount-1, sb.Blocks-uint64(sb.DataStart), format.BlockSize)
	return nil
}

func mustSB(m pmem.Medium) format.Superblock {
	sb, _, _ := core.ReadSuperblock(m)
	return sb
}
