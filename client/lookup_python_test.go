package client_test

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestPythonLookupWire runs python/test_dnnfs_wire.py: the dnnfs package's request
// encoding and result decoding against hand-built bytes, f16/bf16
// conversions and its Table against a fake request file, with NumPy and
// without. It needs no mount.
func TestPythonLookupWire(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s not found: install python3 (and python3-numpy)", python)
	}
	out, err := runPython(t, 5*time.Minute, "-m", "unittest", "-v", "test_dnnfs_wire")
	t.Logf("python -m unittest test_dnnfs_wire:\n%s", out)
	if err != nil {
		t.Fatalf("test_dnnfs_wire.py: %v", err)
	}
	if !strings.Contains(out, "\nOK") {
		t.Fatal("unittest did not report OK")
	}
}
