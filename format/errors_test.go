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
	cases := []struct {
		decode   func() error
		sentinel error
		text     string // the whole message, or its start before " (stored"
	}{
		{func() error { _, err := DecodeSuperblock(zero, 64<<20); return err }, ErrBadMagic,
			"superblock: bad magic: not a dnnfs pool"},
		{func() error { _, err := DecodeInode(garbage); return err }, ErrBadChecksum,
			"inode: checksum mismatch"},
		{func() error { _, err := DecodeInode(zero[:1]); return err }, ErrCorrupt,
			"inode: corrupt structure: short buffer"},
		{func() error { _, err := DecodeDevLabel(zero); return err }, ErrBadMagic,
			"device label: bad magic: not a dnnfs pool"},
		{func() error { _, _, err := DecodeOverflow(garbage); return err }, ErrBadChecksum,
			"extent block: checksum mismatch"},
		{func() error { _, err := DecodeXattrs(zero); return err }, ErrCorrupt,
			"xattr region: corrupt structure: 0 blocks"},
		{func() error { _, err := DecodeTier(zero); return err }, ErrBadChecksum,
			"tier registry: checksum mismatch"},
		{func() error { _, err := DecodeFLogHeader(zero[:1]); return err }, ErrCorrupt,
			"F_log: corrupt structure: short buffer"},
		{func() error { _, err := DecodeTableHeader(garbage); return err }, ErrBadChecksum,
			"table descriptor: checksum mismatch"},
	}
	for _, c := range cases {
		err := c.decode()
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
