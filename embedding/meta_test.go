package embedding

import (
	"errors"
	"sync"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pooltest"
)

// The SSD tier's metadata through the core's store, without devices: the
// registry and a table's descriptor survive a remount, shard entries are
// checked against the registry, and a freed table hands its shards back.
func TestMetaLifecycle(t *testing.T) {
	fs, m := pooltest.MustOpen(t, pooltest.Options{Size: 32 << 20})
	meta := Meta{S: fs}
	id1, err := meta.RegisterTierDevice(format.TierDevice{UUID: [16]byte{1}, Path: "/ssd/a"})
	if err != nil || id1 != 1 {
		t.Fatalf("register: %d %v", id1, err)
	}
	id2, err := meta.RegisterTierDevice(format.TierDevice{UUID: [16]byte{2}, Path: "/ssd/b"})
	if err != nil || id2 != 2 {
		t.Fatalf("register: %d %v", id2, err)
	}
	in, err := fs.Create(fs.Root(), "t", core.NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := format.NewTableHeader(1000, 16, format.DtypeF32, 300)
	if err != nil {
		t.Fatal(err)
	}
	shards := []format.ShardEntry{{Dev: 1, Off: 4096}, {Dev: 2, Off: 4096}, {Dev: 1, Off: 1 << 20}, {Dev: 2, Off: 1 << 20}}
	if err := meta.CreateTable(in, hdr, shards); err != nil {
		t.Fatal(err)
	}
	if err := meta.CreateTable(in, hdr, shards); !errors.Is(err, core.ErrExist) {
		t.Fatalf("second CreateTable: %v, want ErrExist", err)
	}
	if err := fs.Truncate(in, 10); !errors.Is(err, core.ErrTable) {
		t.Fatalf("truncate of a table: %v", err)
	}
	if _, err := fs.Write(in, 0, []byte("x"), false); !errors.Is(err, core.ErrTable) {
		t.Fatalf("pool write to a table: %v", err)
	}
	if in.Attr().Size != 1000*64 {
		t.Fatalf("size %d", in.Attr().Size)
	}
	moved := format.ShardEntry{Dev: 2, Off: 2 << 20, Gen: 1, RDev: 1, ROff: 3 << 20}
	if err := meta.SetShard(in, 2, moved); err != nil {
		t.Fatal(err)
	}
	if err := meta.SetShard(in, 2, format.ShardEntry{Dev: 3, Off: 4096}); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("shard on an unregistered device: %v", err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}

	fs, _, err = core.Open(m, core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	meta = Meta{S: fs}
	if got, err := meta.TierDevices(); err != nil || len(got) != 2 || got[1].Path != "/ssd/b" {
		t.Fatalf("registry after remount: %+v", got)
	}
	in, err = fs.Lookup(fs.Root(), "t")
	if err != nil {
		t.Fatal(err)
	}
	h2, ok := in.Table()
	if !ok || h2 != hdr {
		t.Fatalf("table after remount: %+v %v", h2, ok)
	}
	got, err := meta.TableShards(in)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]format.ShardEntry(nil), shards...)
	want[2] = moved
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("shard %d after remount: %+v, want %+v", i, got[i], want[i])
		}
	}
	var mu sync.Mutex
	var freed []format.ShardEntry
	done := make(chan struct{})
	fs.SetExtFreed(func(in *core.Inode, kind core.ExtKind, desc []byte) {
		_, s, err := DecodeTable(desc, 2)
		if err != nil || kind != core.ExtTable {
			t.Errorf("freed descriptor: kind %d, %v", kind, err)
		}
		mu.Lock()
		freed = s
		mu.Unlock()
		close(done)
	})
	free0 := fs.Statfs().Free
	if err := fs.Unlink(fs.Root(), "t"); err != nil {
		t.Fatal(err)
	}
	<-done
	if len(freed) != 4 || freed[2] != moved {
		t.Fatalf("freed shards %+v", freed)
	}
	if fs.Statfs().Free != free0+uint64(hdr.Blocks) {
		t.Fatalf("descriptor blocks not freed: %d -> %d", free0, fs.Statfs().Free)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestMetaCreateTableOnlyOnEmptyFiles(t *testing.T) {
	fs, _ := pooltest.MustOpen(t, pooltest.Options{Size: 16 << 20})
	meta := Meta{S: fs}
	defer fs.Close()
	if _, err := meta.RegisterTierDevice(format.TierDevice{UUID: [16]byte{9}}); err != nil {
		t.Fatal(err)
	}
	in, err := fs.Create(fs.Root(), "f", core.NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(in, 0, []byte("data"), false); err != nil {
		t.Fatal(err)
	}
	hdr, _ := format.NewTableHeader(10, 4, format.DtypeF16, 10)
	if err := meta.CreateTable(in, hdr, []format.ShardEntry{{Dev: 1, Off: 4096}}); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("table on a file with data: %v", err)
	}
	d, err := fs.Create(fs.Root(), "d", core.NewInode{Mode: format.ModeDir | 0o755})
	if err != nil {
		t.Fatal(err)
	}
	if err := meta.CreateTable(d, hdr, []format.ShardEntry{{Dev: 1, Off: 4096}}); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("table on a directory: %v", err)
	}
}
