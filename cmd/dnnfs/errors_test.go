package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/pmem"
)

// TestNotPoolMessages: a file that is not a pool is said to be one in the
// command's words, "PATH: not a dnnfs pool", whether it is too small to be
// one (openPoolError) or a pool-sized file without a superblock (what
// core.Open says, through poolError); errors.Is still sees core.ErrNotPool.
func TestNotPoolMessages(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	zero := filepath.Join(dir, "zero.pool")
	if err := os.WriteFile(text, []byte("notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(zero, make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := pmem.OpenReadOnly(text)
	if err == nil {
		t.Fatalf("%s opened as a pool", text)
	}
	check := func(err error, want string) {
		t.Helper()
		if !errors.Is(err, core.ErrNotPool) {
			t.Errorf("%q does not wrap core.ErrNotPool", err)
		}
		if !strings.HasPrefix(err.Error(), want) {
			t.Errorf("message %q, want it to start %q", err, want)
		}
	}
	check(openPoolError(text, err), text+": not a dnnfs pool (6 bytes; a pool is made by dnnfs mkfs")
	m, err := pmem.OpenReadOnly(zero)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, _, err := core.Open(m, core.Options{})
	if err == nil {
		p.Close()
		t.Fatalf("%s (zeros) opened as a pool", zero)
	}
	check(poolError(zero, err), zero+": not a dnnfs pool")
	if got := poolError(zero, err).Error(); got != zero+": not a dnnfs pool" {
		t.Errorf("message %q, want %q", got, zero+": not a dnnfs pool")
	}
}
