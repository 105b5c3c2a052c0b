package ids_test

import (
	"errors"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/ids"
)

func TestValid(t *testing.T) {
	for _, n := range []string{"a", "node-1", "n.2_x", "0123456789012345678901234567890123456789012345678901234567890123"} {
		if _, err := ids.ParseNodeID(n); err != nil {
			t.Errorf("node id %q refused: %v", n, err)
		}
	}
	for _, n := range []string{"", ".", "..", "A", "a/b", "a b", "é", "01234567890123456789012345678901234567890123456789012345678901234"} {
		if _, err := ids.ParseNodeID(n); !errors.Is(err, ids.ErrInvalid) {
			t.Errorf("node id %q: %v, want ErrInvalid", n, err)
		}
	}
	good := "0123456789abcdef0123456789abcdef"
	if _, err := ids.ParseFileID(good); err != nil {
		t.Errorf("file id %q refused: %v", good, err)
	}
	if _, err := ids.ParseFSID(good); err != nil {
		t.Errorf("fsid %q refused: %v", good, err)
	}
	for _, s := range []string{"", good[1:], good + "0", "0123456789ABCDEF0123456789abcdef", "0123456789abcdeg0123456789abcdef"} {
		if _, err := ids.ParseFileID(s); !errors.Is(err, ids.ErrInvalid) {
			t.Errorf("file id %q: %v, want ErrInvalid", s, err)
		}
		if _, err := ids.ParseFSID(s); !errors.Is(err, ids.ErrInvalid) {
			t.Errorf("fsid %q: %v, want ErrInvalid", s, err)
		}
	}
	a, b := ids.NewFileID(), ids.NewFileID()
	if a.Valid() != nil || b.Valid() != nil || a == b {
		t.Errorf("NewFileID: %q, %q: want two different valid ids", a, b)
	}
	if f := ids.NewFSID(); f.Valid() != nil {
		t.Errorf("NewFSID: %q is not valid", f)
	}
	if s := (ids.ChunkRef{File: ids.FileID(good), Ver: 3, Idx: 12}).String(); s != good+"/3/12" {
		t.Errorf("ChunkRef.String = %q", s)
	}
}
