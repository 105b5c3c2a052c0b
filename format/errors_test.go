package format

import (
	"errors"
	"strings"
	"testing"
)

// TestErrorTexts: every sentinel's text names the package, and a decoder's
// message names the structure instead, once, at its start (a checker shows
// it as is), while errors.Is still finds the sentinel.
func TestErrorTexts(t *testing.T) {
	for _, e := range []error{ErrBadMagic, ErrBadChecksum, ErrBadVersion, ErrCorrupt, ErrBadTx, ErrNotPool} {
		if !strings.HasPrefix(e.Error(), "format: ") {
			t.Errorf("sentinel %q does not start with \"format: \"", e)
		}
	}
	garbage := make([]byte, BlockSize)
	for i := range garbage {
		garbage[i] = byte(i*7 + 1)
	}
	zero := make([]byte, BlockSize)
	// The error of a decoder call, whatever else it returns.
	err2 := func(_ any, err error) error { return err }
	err3 := func(_, _ any, err error) error { return err }
	cases := []struct {
		err      error
		sentinel error
		text     string // the whole message, or its start before " (stored"
	}{
		{err2(DecodeSuperblock(zero, 64<<20)), ErrBadMagic, "superblock: bad magic: not a dnnfs pool"},
		{err2(DecodeInode(garbage)), ErrBadChecksum, "inode: checksum mismatch"},
		{err2(DecodeInode(zero[:1])), ErrCorrupt, "inode: corrupt structure: short buffer"},
		{err2(DecodeDevLabel(zero)), ErrBadMagic, "device label: bad magic: not a dnnfs pool"},
		{err3(DecodeOverflow(garbage)), ErrBadChecksum, "extent block: checksum mismatch"},
		{err2(DecodeXattrs(zero)), ErrCorrupt, "xattr region: corrupt structure: 0 blocks"},
		{err2(DecodeTier(zero)), ErrBadChecksum, "tier registry: checksum mismatch"},
		{err2(DecodeFLogHeader(zero[:1])), ErrCorrupt, "F_log: corrupt structure: short buffer"},
		{err2(DecodeTableHeader(garbage)), ErrBadChecksum, "table descriptor: checksum mismatch"},
	}
	for _, c := range cases {
		err := c.err
		if err == nil {
			t.Errorf("%q: no error", c.text)
			continue
		}
		if !errors.Is(err, c.sentinel) {
			t.Errorf("%q does not wrap %q", err, c.sentinel)
		}
		msg, _, _ := strings.Cut(err.Error(), " (stored")
		if msg != c.text {
			t.Errorf("message %q, want %q", msg, c.text)
		}
	}
}
