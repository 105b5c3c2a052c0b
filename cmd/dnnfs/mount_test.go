package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCPUProfile: --cpuprofile into a path that cannot be created is an
// error the mount tells (it used to be dropped, leaving no profile and no
// word why); one that can be written holds a profile after stop.
func TestCPUProfile(t *testing.T) {
	dir := t.TempDir()
	if stop, err := startCPUProfile(filepath.Join(dir, "missing", "cpu.prof")); err == nil {
		stop()
		t.Errorf("a profile in a missing directory started without an error")
	}
	path := filepath.Join(dir, "cpu.prof")
	stop, err := startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A second profile at once cannot start (the runtime has one), and
	// its file is closed, not left open.
	if stop2, err := startCPUProfile(filepath.Join(dir, "second.prof")); err == nil {
		stop2()
		t.Errorf("a second CPU profile started while one runs")
	}
	stop()
	if st, err := os.Stat(path); err != nil || st.Size() == 0 {
		t.Errorf("profile %s after stop: %v, %v", path, st, err)
	}
}
