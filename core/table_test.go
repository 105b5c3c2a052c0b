package core

import (
	"bytes"
	"errors"
	"testing"

	"github.com/dnnfs/dnnfs/format"
)

// descriptor builds a table descriptor: the header, then n shard entries
// of recognisable bytes (the core does not read them).
func descriptor(t *testing.T, rows uint64, shardRows uint64) (format.TableHeader, []byte) {
	t.Helper()
	hdr, err := format.NewTableHeader(rows, 16, format.DtypeF32, shardRows)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, int(hdr.Blocks)*format.BlockSize)
	hdr.Encode(b)
	for i := format.TBHeader; i < format.TBHeader+int(hdr.Shards)*format.ShardEntrySize; i++ {
		b[i] = byte(i)
	}
	return hdr, b
}

// tierBlock is a registry block listing one device at path.
func tierBlock(path string) []byte {
	b := make([]byte, format.BlockSize)
	format.EncodeTier(b, []format.TierDevice{{UUID: [16]byte{path[len(path)-1]}, Path: path}})
	return b
}

// The core stores, journals and frees an extension's descriptor and
// registry block as bytes: they survive a remount as written, the file
// takes the header's size, the header cannot be rewritten, and a freed
// table hands its descriptor to the extension and its blocks back.
func TestExtStore(t *testing.T) {
	fs, m := openTestPoolWith(t, 32<<20, Options{})
	if fs.Registry() != nil {
		t.Fatal("a new pool has a registry")
	}
	// The core does not read the registry, but recovery.Check (at
	// cleanup) does: valid blocks.
	reg := tierBlock("/ssd7")
	if err := fs.UpdateRegistry(func(old []byte) ([]byte, error) { return reg, nil }); err != nil {
		t.Fatal(err)
	}
	reg2 := tierBlock("/ssd8")
	if err := fs.UpdateRegistry(func(old []byte) ([]byte, error) {
		if !bytes.Equal(old, reg) {
			t.Errorf("UpdateRegistry got %x..., want the first block", old[:4])
		}
		return reg2, nil
	}); err != nil {
		t.Fatal(err)
	}
	errF := errors.New("refused")
	if err := fs.UpdateRegistry(func([]byte) ([]byte, error) { return nil, errF }); err != errF {
		t.Fatalf("UpdateRegistry refused by f: %v", err)
	}
	if err := fs.UpdateRegistry(func([]byte) ([]byte, error) { return []byte{1}, nil }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("UpdateRegistry of one byte: %v", err)
	}

	in, err := fs.Create(fs.Root(), "t", NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	hdr, desc := descriptor(t, 1000, 300)
	if err := fs.CreateExt(in, ExtTable, desc[:len(desc)-1]); !errors.Is(err, ErrInvalid) {
		t.Fatalf("descriptor cut short: %v", err)
	}
	if err := fs.CreateExt(in, ExtTable, desc); err != nil {
		t.Fatal(err)
	}
	if err := fs.CreateExt(in, ExtTable, desc); !errors.Is(err, ErrExist) {
		t.Fatalf("second CreateExt: %v, want ErrExist", err)
	}
	if err := fs.Truncate(in, 10); !errors.Is(err, ErrTable) {
		t.Fatalf("truncate of a table: %v", err)
	}
	if _, err := fs.Write(in, 0, []byte("x"), false); !errors.Is(err, ErrTable) {
		t.Fatalf("pool write to a table: %v", err)
	}
	if in.Attr().Size != 1000*64 {
		t.Fatalf("size %d", in.Attr().Size)
	}
	entry := bytes.Repeat([]byte{0xee}, format.ShardEntrySize)
	off := format.TBHeader + 2*format.ShardEntrySize
	if err := fs.WriteExt(in, ExtTable, off, entry); err != nil {
		t.Fatal(err)
	}
	copy(desc[off:], entry)
	if err := fs.WriteExt(in, ExtTable, 0, entry); !errors.Is(err, ErrInvalid) {
		t.Fatalf("rewrite of the header: %v", err)
	}
	if err := fs.WriteExt(in, ExtTable, len(desc)-1, entry); !errors.Is(err, ErrInvalid) {
		t.Fatalf("write past the descriptor: %v", err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}

	fs, _, err = Open(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	if got := fs.Registry(); !bytes.Equal(got, reg2) {
		t.Fatalf("registry after remount: %x...", got[:4])
	}
	in, err = fs.Lookup(fs.Root(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if h2, ok := in.Table(); !ok || h2 != hdr || len(fs.Tables()) != 1 {
		t.Fatalf("table after remount: %+v %v", h2, ok)
	}
	got, err := fs.ExtDesc(in, ExtTable)
	if err != nil || !bytes.Equal(got, desc) {
		t.Fatalf("descriptor after remount differs: %v", err)
	}
	type freed struct {
		kind ExtKind
		desc []byte
	}
	done := make(chan freed, 1)
	fs.SetExtFreed(func(in *Inode, kind ExtKind, desc []byte) { done <- freed{kind, desc} })
	free0 := fs.Statfs().Free
	if err := fs.Unlink(fs.Root(), "t"); err != nil {
		t.Fatal(err)
	}
	if f := <-done; f.kind != ExtTable || !bytes.Equal(f.desc, desc) {
		t.Fatalf("freed descriptor: kind %d, equal %v", f.kind, bytes.Equal(f.desc, desc))
	}
	if fs.Statfs().Free != free0+uint64(hdr.Blocks) {
		t.Fatalf("descriptor blocks not freed: %d -> %d", free0, fs.Statfs().Free)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCreateExtOnlyOnEmptyFiles(t *testing.T) {
	fs, _ := openTestPoolWith(t, 16<<20, Options{})
	defer fs.Close()
	in, err := fs.Create(fs.Root(), "f", NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(in, 0, []byte("data"), false); err != nil {
		t.Fatal(err)
	}
	_, desc := descriptor(t, 10, 10)
	if err := fs.CreateExt(in, ExtTable, desc); !errors.Is(err, ErrInvalid) {
		t.Fatalf("table on a file with data: %v", err)
	}
	d, err := fs.Create(fs.Root(), "d", NewInode{Mode: format.ModeDir | 0o755})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.CreateExt(d, ExtTable, desc); !errors.Is(err, ErrInvalid) {
		t.Fatalf("table on a directory: %v", err)
	}
	e, err := fs.Create(fs.Root(), "e", NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.CreateExt(e, ExtKind(9), desc); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown kind: %v", err)
	}
}
