package wire

import (
	"syscall"
	"testing"
)

// sample is one valid message of each type with distinct field values, so
// a field read at the wrong offset shows (doc_test.go, the golden frames,
// the fuzz seeds).
type sample struct {
	name string // the doc table's heading
	id   RequestID
	msg  Message
	// fields: each doc table field's value in msg's encoding.
	fields map[string]uint64
	text   string // ErrorReply's text, the one variable field
}

func samples() []sample {
	return []sample{
		{"Hello", 1, &Hello{MinVersion: 1, MaxVersion: 7},
			map[string]uint64{"min_version": 1, "max_version": 7}, ""},
		{"HelloReply", 1, &HelloReply{PoolSize: 8 << 30, BlockSize: 4096, Flags: HelloDAX | HelloWrites, Version: 1},
			map[string]uint64{"pool_size": 8 << 30, "block_size": 4096, "flags": 3, "version": 1}, ""},
		{"Lease", 2, &Lease{Offset: 1 << 21, Length: 4 << 20, Flags: LeaseExtend, Mode: ModeWrite},
			map[string]uint64{"offset": 1 << 21, "length": 4 << 20, "flags": 1, "mode": 2}, ""},
		{"Grant", 2, &Grant{Lease: 9, Size: 3 << 20, Flags: GrantPoolFD, Extents: []Extent{
			{FileOff: 1 << 21, PoolOff: 64 << 20, Length: 1 << 20},
			{FileOff: 3 << 20, PoolOff: 96 << 20, Length: 2 << 20, Flags: ExtentFresh},
			{FileOff: 6 << 20, PoolOff: 128 << 20, Length: 4096, Flags: ExtentFresh},
		}}, map[string]uint64{"lease": 9, "size": 3 << 20, "flags": 1, "count": 3}, ""},
		{"Commit", 3, &Commit{Lease: 9, Size: 5 << 20},
			map[string]uint64{"lease": 9, "size": 5 << 20, "flags": 0}, ""},
		{"CommitReply", 3, &CommitReply{Size: 5 << 20}, map[string]uint64{"size": 5 << 20}, ""},
		{"Release", 4, &Release{Lease: 9}, map[string]uint64{"lease": 9}, ""},
		{"ReleaseReply", 4, &ReleaseReply{}, map[string]uint64{}, ""},
		{"ErrorReply", 5, &ErrorReply{Errno: syscall.EBADF, Text: "lease: not a dnnfs file"},
			map[string]uint64{"errno": 9, "text_len": 23}, "lease: not a dnnfs file"},
	}
}

func mustAppend(t testing.TB, id RequestID, m Message) []byte {
	t.Helper()
	b, err := Append(nil, id, m)
	if err != nil {
		t.Fatalf("Append(%T %+v): %v", m, m, err)
	}
	return b
}
