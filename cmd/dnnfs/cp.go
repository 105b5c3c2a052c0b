package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/dnnfs/dnnfs/client"
)

// runCp copies a file onto a dnnfs mount through a segmented write
// session (client.Save): an interrupted cp, run again, writes only what
// the session's persisted tails say is missing.
func runCp(args []string) error {
	fl := newFlags("cp")
	threads := fl.Int("threads", client.DefaultThreads, "threads (= segments) writing DST in parallel")
	if err := parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() != 2 {
		return usageError{"want SRC and DST arguments"}
	}
	if *threads < 1 || *threads > client.MaxThreads {
		return usageError{fmt.Sprintf("--threads %d: want 1 to %d", *threads, client.MaxThreads)}
	}
	srcPath, dst := fl.Arg(0), fl.Arg(1)
	src, err := os.Open(srcPath)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("source %s is not a regular file", srcPath)
	}
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		dst = filepath.Join(dst, filepath.Base(srcPath))
	}
	// The source's identity: an open session left by a cp of something
	// else is abandoned instead of resumed into a mix of two files.
	abs, _ := filepath.Abs(srcPath)
	ident := fmt.Sprintf("cp %s size=%d mtime=%d", abs, fi.Size(), fi.ModTime().UnixNano())
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		ident += fmt.Sprintf(" dev=%d ino=%d", sys.Dev, sys.Ino)
	}
	// The bar counts the source bytes read: on a resumed cp, what was
	// still missing.
	bar := newBar("cp", fi.Size(), true)
	var from io.ReaderAt = src
	if bar != nil {
		from = countingReader{src, bar}
	}
	st, err := client.SaveWith(dst, from, fi.Size(), client.Options{Threads: *threads, Source: ident})
	bar.done(err == nil)
	if err != nil {
		var se *client.SegmentError
		if errors.As(err, &se) || errors.Is(err, client.ErrSessionConflict) {
			return fmt.Errorf("%w (%d bytes copied before the failure; run the same cp again to resume)", err, st.Bytes)
		}
		return err
	}
	secs := st.Elapsed.Seconds()
	how := ""
	if st.Resumed {
		how = "resumed: "
	}
	fmt.Printf("%s%s -> %s: copied %d bytes, skipped %d already done, %d threads, %.2fs, %.1f MB/s\n",
		how, srcPath, dst, st.Bytes, st.Skipped, st.Threads, secs, float64(st.Bytes)/1e6/max(secs, 1e-9))
	return nil
}

// countingReader advances a bar by what is read through it (from the
// session's threads at once: bar.add is safe for that).
type countingReader struct {
	r   io.ReaderAt
	bar *bar
}

func (c countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.bar.add(int64(n))
	return n, err
}
