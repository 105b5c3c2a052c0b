package crashimage_test

import (
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// tableScript registers SSD-tier devices, makes embedding tables, moves
// and replicates their shards the way embedding/migrate.go records it
// (one SetShard each), and changes and frees table files like any other.
func tableScript(x *ext) {
	s := x.s
	s.mkdir("/t")
	s.create("/t/early", 0o644) // a file made before the registry exists
	x.register("a", 1)          // the first: a fresh block, then both superblocks
	x.register("b", 2)          // later ones: a transaction rewrites the block
	s.create("/t/emb", 0o644)
	x.createTable("/t/emb", 1000, 16, format.DtypeF32, 300, func(i int) format.ShardEntry {
		return format.ShardEntry{Dev: format.DevID(1 + i%2), Off: uint64(1+i) << 20}
	})
	// 300 shards: a descriptor of three blocks.
	s.create("/t/wide", 0o644)
	x.createTable("/t/wide", 3000, 8, format.DtypeBF16, 10, func(i int) format.ShardEntry {
		return format.ShardEntry{Dev: format.DevID(1 + i%2), Off: uint64(64+i) << 20}
	})
	s.do("truncate a table (refused)", core.ErrTable, func() error { return s.p.Truncate(s.lookup("/t/emb"), 10) })
	s.do("write to a table (refused)", core.ErrTable, func() error {
		_, err := s.p.Write(s.lookup("/t/emb"), 0, []byte("x"), false)
		return err
	})
	x.setShard("/t/emb", 2, "move", func(e *format.ShardEntry) { e.Dev, e.Off = 2, 40<<20 })
	x.setShard("/t/emb", 0, "replicate", func(e *format.ShardEntry) { e.RDev, e.ROff = 2, 41<<20 })
	x.setShard("/t/wide", 257, "move", func(e *format.ShardEntry) { e.Dev, e.Off = 1, 42<<20 })
	x.register("c", 3)
	x.setShard("/t/emb", 0, "move to a new device", func(e *format.ShardEntry) { e.Dev, e.Off = 3, 1<<20 })
	x.setShard("/t/emb", 0, "drop replica", func(e *format.ShardEntry) { e.RDev, e.ROff = 0, 0 })
	s.setxattr("/t/emb", "user.model", []byte("dlrm"), 0, nil)    // xattrs on a table
	s.setxattr("/t/emb", "user.big", pattern(5, 5000), 0, nil)    // an xattr block
	s.setxattr("/t/emb", "user.model", []byte("dlrm-v2"), 0, nil) // grows in place
	s.chmod("/t/emb", 0o600)
	s.link("/t/emb", "/t/emb-link", nil)
	s.rename("/t/emb", "/emb", 0, nil)
	s.unlink("/t/emb-link")
	s.removexattr("/emb", "user.big")
	s.unlink("/t/wide") // the last name: the descriptor is freed
	s.create("/t/again", 0o644)
	x.createTable("/t/again", 64, 4, format.DtypeF16, 64, func(i int) format.ShardEntry {
		return format.ShardEntry{Dev: 3, Off: 2 << 20, RDev: 1, ROff: 2 << 20}
	})
	s.rename("/t/again", "/emb", 0, nil) // replaces a table with a table
	s.unlink("/t/early")
}

// TestFencesTables checks every fence of tableScript: each crash image
// reopens with the registry of the last step that had returned or of the
// one in flight, every table is absent or whole with a valid translation
// table, and each shard entry is its old or its new location, never a mix.
func TestFencesTables(t *testing.T) {
	s := newScript(t, poolSize)
	x := newExt(s)
	tableScript(x)
	x.close()
	verifyScript(t, s, nil)
	t.Cleanup(func() { x.logChecks(t) })
}
