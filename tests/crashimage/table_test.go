package crashimage_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding"
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

// TestFencesTierMigration runs the SSD tier itself (package embedding) on
// the Recorder-backed pool: attaching devices registers them, a table is
// made through the tier, and its shards are moved, replicated and their
// replicas dropped by the migration code, whose only pool change is one
// SetShard each. Every fence is checked like TestFencesTables; the SSD
// files are outside the crash image (their copies are synced before the
// pool records them).
func TestFencesTierMigration(t *testing.T) {
	s := newScript(t, poolSize)
	x := newExt(s)
	var tier *embedding.Tier
	dir := t.TempDir()
	var devs []embedding.DeviceSpec
	for _, name := range []string{"ssd0", "ssd1", "ssd2"} {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		devs = append(devs, embedding.DeviceSpec{Dir: d, Model: embedding.Model{Channels: 1}})
	}
	s.do("attach the SSD tier (three new devices)", nil, func() error {
		var err error
		tier, err = embedding.Open(s.p, embedding.Options{Devices: devs, ShardBytes: 16 << 10})
		return err
	})
	s.create("/emb", 0o644)
	s.do("create a table through the tier", nil, func() error {
		return tier.CreateTable(s.lookup("/emb"), 4096, 8, format.DtypeF32, 16<<10)
	})
	tb, ok := tier.Table(s.lookup("/emb"))
	if !ok {
		t.Fatal("the tier does not know the new table")
	}
	for i := 0; i < 4; i++ {
		s.do(fmt.Sprintf("move shard %d", i), nil, func() error { return tier.MoveShard(tb, i, 0, false) })
	}
	s.do("replicate shard 1", nil, func() error { return tier.MoveShard(tb, 1, 0, true) })
	s.do("replicate shard 3", nil, func() error { return tier.MoveShard(tb, 3, 0, true) })
	s.do("drop shard 1's replica", nil, func() error { return tier.DropReplica(tb, 1) })
	s.unlink("/emb")
	s.do("detach the SSD tier", nil, func() error { return tier.Close() })
	x.close()
	verifyScript(t, s, nil)
	t.Cleanup(func() { x.logChecks(t) })
}
