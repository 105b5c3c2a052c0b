package pmem

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A private open takes stores, zeroing and persists, and the file keeps
// every byte.
func TestOpenPrivateNeverWrites(t *testing.T) {
	path := newPool(t, 4*MinSize)
	m := mustOpen(t, path)
	pattern := bytes.Repeat([]byte("dnnfs!"), int(m.Size())/6)
	copy(m.Bytes(), pattern)
	m.Persist(0, m.Size())
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o444); err != nil {
		t.Fatal(err)
	}
	before := fileBytes(t, path)

	p, err := OpenPrivate(path)
	if err != nil {
		t.Fatal(err)
	}
	copy(p.Bytes()[100:], "private store")
	p.Persist(0, p.Size())
	z := p
	const zoff, zn = 4096 + 10, 3*MinSize + 5 // partial pages at both ends
	if err := z.Punch(zoff, zn); err != nil {
		t.Fatal(err)
	}
	b := p.Bytes()
	if firstNZ := bytes.IndexFunc(b[zoff:zoff+zn], func(r rune) bool { return r != 0 }); firstNZ >= 0 {
		t.Fatalf("Punch left a non-zero byte at %d", zoff+firstNZ)
	}
	if !bytes.Equal(b[zoff-10:zoff], before[zoff-10:zoff]) || !bytes.Equal(b[zoff+zn:zoff+zn+10], before[zoff+zn:zoff+zn+10]) {
		t.Fatal("Punch changed bytes outside its range")
	}
	if string(b[100:113]) != "private store" {
		t.Fatal("a store into the private map did not stick")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fileBytes(t, path), before) {
		t.Fatal("the pool file changed under a private open")
	}
}

func TestOpenReadOnlyRefusesPunch(t *testing.T) {
	path := newPool(t, MinSize)
	ro, err := OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Punch(0, 4096); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Punch on a read-only medium: got %v, want ErrReadOnly", err)
	}
}

// A read-only or private open of a sparse pool much larger than RAM maps
// it without reserving its size.
func TestOpenReadOnlyLargerThanRAM(t *testing.T) {
	path := newPool(t, MinSize)
	if err := os.Truncate(path, 1<<40); err != nil {
		t.Skip("cannot make a 1 TiB sparse file here:", err)
	}
	for name, open := range map[string]func(string) (Medium, error){"OpenReadOnly": OpenReadOnly, "OpenPrivate": OpenPrivate} {
		m, err := open(path)
		if err != nil {
			t.Fatalf("%s of a 1 TiB sparse pool: %v", name, err)
		}
		if m.Bytes()[1<<39] != 0 {
			t.Fatalf("%s: a hole reads non-zero", name)
		}
		m.Close()
	}
}
