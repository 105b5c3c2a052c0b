package peer_test

import (
	"fmt"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/peer"
)

// FuzzParseChunkPath: whatever a peer sends as a path, the parser either
// refuses it or reads exactly one canonical chunk name, which it renders
// back byte for byte (so no two paths name one chunk, and nothing but a
// chunk name gets through).
func FuzzParseChunkPath(f *testing.F) {
	for _, s := range []string{
		"0123456789abcdef0123456789abcdef/1/0", "0123456789abcdef0123456789abcdef/18446744073709551615/4294967295",
		"../../etc/passwd", "0123456789abcdef0123456789abcdef/01/0", "%2e%2e/x/y", "a/b/c", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := peer.ParseChunkPath(s)
		if err != nil {
			return
		}
		if back := fmt.Sprintf("%s/%d/%d", ref.File, ref.Ver, ref.Idx); back != s || ref.Ver == 0 {
			t.Fatalf("%q parsed as %+v, which renders as %q", s, ref, back)
		}
	})
}
