package format

import (
	"bytes"
	"errors"
	"math/rand"
	"reflect"
	"slices"
	"testing"
)

// Round-trip and fuzz tests of the codecs the mount and the checker share:
// the superblock pair, journal transactions and extent lists.

func TestSuperblockPair(t *testing.T) {
	const size = 64 << 20
	sb, err := Geometry(size)
	if err != nil {
		t.Fatal(err)
	}
	pool := make([]byte, 2*BlockSize)
	sb.Encode(pool[SuperPrimary.Off():])
	sb.MountCount = 3
	sb.Encode(pool[SuperReplica.Off():])
	p, err := DecodeSuperblockPair(pool, size)
	if err != nil {
		t.Fatal(err)
	}
	if got, replica := p.Use(); replica || got.MountCount != 0 || !SameGeometry(&p.Primary, &p.Replica) {
		t.Fatalf("good pair: use %+v replica %v", got, replica)
	}
	pool[SuperPrimary.Off()+SBBlocks] ^= 1 // torn primary
	p, err = DecodeSuperblockPair(pool, size)
	if err != nil || p.PrimaryErr == nil || !errors.Is(p.PrimaryErr, ErrBadChecksum) {
		t.Fatalf("torn primary: %v / %v", err, p.PrimaryErr)
	}
	if got, replica := p.Use(); !replica || got.MountCount != 3 {
		t.Fatalf("torn primary: use %+v replica %v", got, replica)
	}
	pool[SuperReplica.Off()+SBBlocks] ^= 1
	if _, err := DecodeSuperblockPair(pool, size); err == nil || errors.Is(err, ErrNotPool) {
		t.Fatalf("both torn: %v, want both-bad error", err)
	}
	clear(pool)
	if _, err := DecodeSuperblockPair(pool, size); !errors.Is(err, ErrNotPool) {
		t.Fatalf("zeroed: %v, want ErrNotPool", err)
	}
	if _, err := DecodeSuperblockPair(pool[:BlockSize], size); !errors.Is(err, ErrNotPool) {
		t.Fatalf("short: %v, want ErrNotPool", err)
	}
	other := sb
	other.UUID[0]++
	if SameGeometry(&sb, &other) {
		t.Fatal("different UUIDs count as the same geometry")
	}
}

func randRecs(r *rand.Rand, minOff uint64) []TxRecord {
	recs := make([]TxRecord, r.Intn(8))
	for i := range recs {
		data := make([]byte, r.Intn(300))
		r.Read(data)
		recs[i] = TxRecord{Off: Off(minOff + uint64(r.Intn(1<<20))), Data: data}
	}
	return recs
}

func TestTxRoundTrip(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	const minOff, size = 1 << 16, 1 << 22
	for i := 0; i < 200; i++ {
		recs := randRecs(r, minOff)
		area := make([]byte, TxHeader+TxSize(recs)+r.Intn(64))
		r.Read(area)
		seq := uint64(i + 1)
		if n := EncodeTx(area, seq, recs); n != TxHeader+TxSize(recs) {
			t.Fatalf("EncodeTx used %d bytes, want %d", n, TxHeader+TxSize(recs))
		}
		got, err := DecodeTx(area, seq, minOff, size)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(recs) {
			t.Fatalf("%d records back, want %d", len(got), len(recs))
		}
		for k := range recs {
			if got[k].Off != recs[k].Off || !bytes.Equal(got[k].Data, recs[k].Data) {
				t.Fatalf("record %d differs", k)
			}
		}
		if _, err := DecodeTx(area, seq+1, minOff, size); !errors.Is(err, ErrBadTx) {
			t.Fatalf("wrong sequence number: %v", err)
		}
		if len(recs) > 0 {
			if _, err := DecodeTx(area, seq, uint64(recs[0].Off)+1, size); !errors.Is(err, ErrBadTx) {
				t.Fatalf("record below the allowed range: %v", err)
			}
			area[TxHeader+RecHeader-1] ^= 0x40 // a record byte: the checksum catches it
			if _, err := DecodeTx(area, seq, minOff, size); !errors.Is(err, ErrBadTx) {
				t.Fatalf("flipped record byte: %v", err)
			}
		}
	}
}

func FuzzDecodeTx(f *testing.F) {
	r := rand.New(rand.NewSource(2))
	for i := 0; i < 4; i++ {
		recs := randRecs(r, 4096)
		area := make([]byte, TxHeader+TxSize(recs))
		EncodeTx(area, 7, recs)
		f.Add(area, uint64(7), false)
	}
	f.Add(make([]byte, TxHeader), uint64(0), true)
	f.Add([]byte{1, 2}, uint64(1), false)
	const minOff, size = 4096, 1 << 21
	f.Fuzz(func(t *testing.T, area []byte, seq uint64, fixCRC bool) {
		if fixCRC && len(area) >= TxHeader {
			n := min(uint64(le.Uint32(area[TxLen:])), uint64(len(area)-TxHeader))
			le.PutUint32(area[TxLen:], uint32(n))
			le.PutUint64(area[TxSeq:], seq)
			le.PutUint32(area[TxCRC:], txChecksum(area[:TxCRC], area[TxHeader:TxHeader+n]))
		}
		recs, err := DecodeTx(area, seq, minOff, size)
		if err != nil {
			if !errors.Is(err, ErrBadTx) {
				t.Fatalf("error %v does not wrap ErrBadTx", err)
			}
			return
		}
		for _, rec := range recs {
			if uint64(rec.Off) < minOff || uint64(rec.Off)+uint64(len(rec.Data)) > size {
				t.Fatalf("record at %d+%d outside [%d, %d)", rec.Off, len(rec.Data), minOff, size)
			}
		}
		// Re-encoding gives a transaction that decodes to the same records.
		again := make([]byte, TxHeader+TxSize(recs))
		EncodeTx(again, seq, recs)
		got, err := DecodeTx(again, seq, minOff, size)
		if err != nil || len(got) != len(recs) {
			t.Fatalf("re-decode: %v (%d records, want %d)", err, len(got), len(recs))
		}
		for i := range recs {
			if got[i].Off != recs[i].Off || !bytes.Equal(got[i].Data, recs[i].Data) {
				t.Fatalf("record %d differs after re-encoding", i)
			}
		}
	})
}

// extentPool is a tiny in-memory data region for extent-list tests.
type extentPool struct {
	blocks map[Blk][]byte
	lo, hi Blk
}

func (p *extentPool) valid(b Blk, n uint64) bool { return b >= p.lo && uint64(b)+n <= uint64(p.hi) }
func (p *extentPool) read(b Blk) []byte {
	if blk, ok := p.blocks[b]; ok {
		return blk
	}
	return make([]byte, BlockSize)
}

func testExtents(n int, gap bool) []Extent {
	exts := make([]Extent, n)
	for i := range exts {
		exts[i] = Extent{Logical: uint64(2 * i), Phys: Blk(1000 + 3*i), Len: 1, Unwritten: gap && i%2 == 1}
	}
	return exts
}

func TestExtentsRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, InlineExtents, InlineExtents + 1, InlineExtents + OverflowSlot, InlineExtents + OverflowSlot + 1, 3*OverflowSlot + 7} {
		exts := testExtents(n, true)
		p := &extentPool{blocks: map[Blk][]byte{}, lo: 100, hi: 1 << 20}
		ovf := make([]Blk, OverflowBlocks(n))
		for i := range ovf {
			ovf[i] = Blk(500 - 7*i)
		}
		var d Inode
		EncodeExtents(&d, exts, ovf, func(b Blk, block []byte) { p.blocks[b] = bytes.Clone(block) })
		if len(p.blocks) != len(ovf) || int(d.Extents) != n {
			t.Fatalf("%d extents: %d blocks written, count %d", n, len(p.blocks), d.Extents)
		}
		got, gotOvf, err := DecodeExtents(&d, p.valid, p.read)
		if err != nil {
			t.Fatalf("%d extents: %v", n, err)
		}
		if len(got) != n || (n > 0 && !reflect.DeepEqual(got, exts)) || len(gotOvf) != len(ovf) || (len(ovf) > 0 && !reflect.DeepEqual(gotOvf, ovf)) {
			t.Fatalf("%d extents: round trip differs", n)
		}
	}
}

// An extent may end exactly at the largest file's last block
// ((2^63-1)/4096, MAX_LFS_FILESIZE), inline or in an overflow block, and
// no further.
func TestExtentsAtMaxFileBlock(t *testing.T) {
	const last = (MaxFileSize) / BlockSize // the block holding byte 2^63-2
	if last != MaxFileBlocks-1 || MaxFileBlocks*BlockSize != 1<<63 {
		t.Fatalf("MaxFileBlocks %d: the last block is %d", uint64(MaxFileBlocks), uint64(last))
	}
	for _, n := range []int{1, InlineExtents, InlineExtents + 1, InlineExtents + OverflowSlot + 1} {
		exts := testExtents(n, true)
		exts[n-1] = Extent{Logical: last, Phys: 7000, Len: 1, Unwritten: n%2 == 0}
		if n > 1 {
			exts[n-2].Len = 3 // a run up to right before the end, too
			exts[n-2].Logical = last - 3
			if n > 2 && exts[n-3].End() > exts[n-2].Logical {
				t.Fatal("test extents overlap")
			}
		}
		p := &extentPool{blocks: map[Blk][]byte{}, lo: 100, hi: 1 << 20}
		ovf := make([]Blk, OverflowBlocks(n))
		for i := range ovf {
			ovf[i] = Blk(500 - 7*i)
		}
		var d Inode
		EncodeExtents(&d, exts, ovf, func(b Blk, block []byte) { p.blocks[b] = bytes.Clone(block) })
		d.Mode, d.Size = ModeReg|0o644, MaxFileSize
		b := make([]byte, InodeSize)
		d.Encode(b)
		d2, err := DecodeInode(b)
		if err != nil {
			t.Fatalf("%d extents: inode: %v", n, err)
		}
		got, _, err := DecodeExtents(&d2, p.valid, p.read)
		if err != nil || !reflect.DeepEqual(got, exts) {
			t.Fatalf("%d extents: %v\n got  %+v\n want %+v", n, err, got, exts)
		}
		if phys, run, ok := MapBlock(got, last); !ok || phys != 7000 || run != 1 {
			t.Errorf("%d extents: MapBlock(last) = %d, %d, %v", n, phys, run, ok)
		}
		if _, run, ok := MapBlock(got, last+1); ok || run != 0 {
			t.Errorf("%d extents: MapBlock(past the last block) = %d, %v", n, run, ok)
		}
		// One block more, or a length that wraps around, is corrupt.
		for _, e := range []Extent{{Logical: last, Phys: 7000, Len: 2}, {Logical: MaxFileBlocks, Phys: 7000, Len: 1},
			{Logical: 1<<64 - 1, Phys: 7000, Len: 1}, {Logical: last, Phys: 7000, Len: 1<<63 - 1}} {
			bad := slices.Clone(exts)
			bad[n-1] = e
			var dd Inode
			q := &extentPool{blocks: map[Blk][]byte{}, lo: 100, hi: 1 << 20}
			EncodeExtents(&dd, bad, ovf, func(b Blk, block []byte) { q.blocks[b] = bytes.Clone(block) })
			if _, _, err := DecodeExtents(&dd, q.valid, q.read); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%d extents, last %+v: %v, want ErrCorrupt", n, e, err)
			}
		}
	}
}

func TestDecodeExtentsRejects(t *testing.T) {
	p := &extentPool{blocks: map[Blk][]byte{}, lo: 100, hi: 1 << 20}
	exts := testExtents(InlineExtents+2*OverflowSlot, false)
	var d Inode
	EncodeExtents(&d, exts, []Blk{200, 201}, func(b Blk, block []byte) { p.blocks[b] = bytes.Clone(block) })
	bad := func(name string, d Inode, edit func()) {
		t.Helper()
		saved := map[Blk][]byte{}
		for b, v := range p.blocks {
			saved[b] = bytes.Clone(v)
		}
		if edit != nil {
			edit()
		}
		if _, _, err := DecodeExtents(&d, p.valid, p.read); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
		p.blocks = saved
	}
	c := d
	c.Extents++
	bad("count too high", c, nil)
	c = d
	c.Overflow = 50
	bad("overflow outside the data region", c, nil)
	bad("chain loops", d, func() { EncodeOverflow(p.blocks[201], exts[InlineExtents+OverflowSlot:], 200) })
	bad("torn overflow block", d, func() { p.blocks[200][100] ^= 1 })
	c = d
	c.Inline[1].Logical = 0
	bad("overlapping extents", c, nil)
	c = d
	c.Inline[0].Len = 0
	bad("empty extent", c, nil)
	c = d
	c.Inline[0].Phys = 1
	bad("extent outside the data region", c, nil)
	c = d
	c.Inline[3].Logical = MaxFileBlocks
	bad("extent past the largest file", c, nil)
}

func FuzzDecodeExtents(f *testing.F) {
	in := make([]byte, InodeSize)
	var d Inode
	var blocks []byte
	EncodeExtents(&d, testExtents(InlineExtents+3, false), []Blk{120}, func(_ Blk, b []byte) { blocks = bytes.Clone(b) })
	d.Mode = ModeReg | 0o644
	d.Encode(in)
	f.Add(in, blocks)
	f.Add(make([]byte, InodeSize), make([]byte, BlockSize))
	f.Fuzz(func(t *testing.T, inode, block []byte) {
		if len(inode) < InodeSize {
			return
		}
		// Every overflow block reads as block (zero-extended): the decoder
		// must stop on its own at a loop or an over-long chain.
		blk := make([]byte, BlockSize)
		copy(blk, block)
		d, err := DecodeInode(fixed(inode, InodeSize, INCRC, 4))
		if err != nil {
			return
		}
		p := &extentPool{lo: 100, hi: 1 << 30}
		exts, _, err := DecodeExtents(&d, p.valid, func(Blk) []byte { return blk })
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		// A list that decodes re-encodes (onto fresh blocks) and decodes
		// back to itself.
		ovf := make([]Blk, OverflowBlocks(len(exts)))
		for i := range ovf {
			ovf[i] = Blk(100 + i)
		}
		q := &extentPool{blocks: map[Blk][]byte{}, lo: 100, hi: 1 << 30}
		var d2 Inode
		EncodeExtents(&d2, exts, ovf, func(b Blk, block []byte) { q.blocks[b] = bytes.Clone(block) })
		got, _, err := DecodeExtents(&d2, q.valid, q.read)
		if err != nil || len(got) != len(exts) || (len(exts) > 0 && !reflect.DeepEqual(got, exts)) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func FuzzDecodeSuperblockPair(f *testing.F) {
	sb, _ := Geometry(64 << 20)
	pool := make([]byte, 2*BlockSize)
	sb.Encode(pool[SuperPrimary.Off():])
	sb.Encode(pool[SuperReplica.Off():])
	f.Add(pool, false, true)
	f.Add(pool[:BlockSize+100], true, false)
	f.Fuzz(func(t *testing.T, b []byte, fixPrimary, fixReplica bool) {
		if len(b) < 2*BlockSize {
			b = append(b, make([]byte, 2*BlockSize-len(b))...)
		}
		if fixPrimary {
			le.PutUint32(b[SBCRC:], Checksum(b[:SBCRC]))
		}
		if fixReplica {
			r := b[SuperReplica.Off():]
			le.PutUint32(r[SBCRC:], Checksum(r[:SBCRC]))
		}
		p, err := DecodeSuperblockPair(b, 64<<20)
		if err != nil {
			if p.PrimaryErr == nil || p.ReplicaErr == nil {
				t.Fatalf("pair error %v with a good copy", err)
			}
			return
		}
		sb, replica := p.Use()
		want, werr := DecodeSuperblock(b[SuperPrimary.Off():], 64<<20)
		if replica {
			want, werr = DecodeSuperblock(b[SuperReplica.Off():], 64<<20)
		}
		if werr != nil || sb != want || replica != (p.PrimaryErr != nil) {
			t.Fatalf("Use gave the wrong copy (replica %v)", replica)
		}
	})
}

// xregionPool holds an xattr region at block 100 of a data region
// [100, hi).
func xregionPool(xs []Xattr, hi Blk) (*extentPool, uint64) {
	nb := XattrBlocks(xs)
	b := make([]byte, nb*BlockSize)
	EncodeXattrs(b, xs)
	p := &extentPool{blocks: map[Blk][]byte{}, lo: 100, hi: hi}
	for i := 0; i < nb; i++ {
		p.blocks[Blk(100+i)] = b[i*BlockSize : (i+1)*BlockSize]
	}
	return p, uint64(nb)
}

func (p *extentPool) readRun(b Blk, n uint64) []byte {
	var out []byte
	for k := Blk(0); k < Blk(n); k++ {
		out = append(out, p.read(b+k)...)
	}
	return out
}

func TestXattrRegionRoundTrip(t *testing.T) {
	xs := []Xattr{{Name: "user.a", Value: []byte("1")}, {Name: "user.big", Value: bytes.Repeat([]byte{7}, 3*BlockSize)}}
	p, nb := xregionPool(xs, 1000)
	got, gotNB, err := DecodeXattrRegion(100, p.valid, p.readRun)
	if err != nil || gotNB != nb || !reflect.DeepEqual(got, xs) {
		t.Fatalf("round trip: %v (%d blocks, want %d)", err, gotNB, nb)
	}
	if _, _, err := DecodeXattrRegion(50, p.valid, p.readRun); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("region outside the data region: %v", err)
	}
	p.hi = 102 // the region runs past the data region
	if _, _, err := DecodeXattrRegion(100, p.valid, p.readRun); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("region past the data region: %v", err)
	}
	p.hi = 1000
	p.blocks[101][9] ^= 1
	if _, _, err := DecodeXattrRegion(100, p.valid, p.readRun); !errors.Is(err, ErrBadChecksum) {
		t.Fatalf("torn region: %v", err)
	}
}

func FuzzDecodeXattrRegion(f *testing.F) {
	p, _ := xregionPool([]Xattr{{Name: "user.x", Value: []byte("hello")}}, 1000)
	f.Add(p.read(100), uint16(1000), true)
	f.Add(make([]byte, XAEntries), uint16(101), false)
	f.Fuzz(func(t *testing.T, first []byte, hi uint16, fixCRC bool) {
		region := make([]byte, XAMaxBlocks*BlockSize)
		copy(region, first)
		if fixCRC {
			if nb := XattrRegionBlocks(region); nb >= 1 && nb <= XAMaxBlocks {
				le.PutUint32(region[XACRC:], Checksum(region[4:nb*BlockSize]))
			}
		}
		valid := func(b Blk, n uint64) bool { return b >= 100 && uint64(b)+n <= uint64(hi) }
		read := func(b Blk, n uint64) []byte {
			o := int(b-100) * BlockSize
			return region[o : o+int(n)*BlockSize]
		}
		xs, nb, err := DecodeXattrRegion(100, valid, read)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrBadChecksum) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrBadChecksum", err)
			}
			return
		}
		if !valid(100, nb) {
			t.Fatalf("decoded a region of %d blocks past the data region", nb)
		}
		again := make([]byte, XattrBlocks(xs)*BlockSize)
		EncodeXattrs(again, xs)
		back, err := DecodeXattrs(again)
		if err != nil || len(back) != len(xs) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func TestMapBlock(t *testing.T) {
	exts := []Extent{{Logical: 2, Phys: 100, Len: 3}, {Logical: 10, Phys: 50, Len: 1}}
	for _, c := range []struct {
		fb   uint64
		phys Blk
		n    uint64
		ok   bool
	}{{0, 0, 2, false}, {2, 100, 3, true}, {4, 102, 1, true}, {5, 0, 5, false}, {10, 50, 1, true}, {11, 0, 0, false}} {
		phys, n, ok := MapBlock(exts, c.fb)
		if phys != c.phys || n != c.n || ok != c.ok {
			t.Errorf("MapBlock(%d) = %d, %d, %v; want %d, %d, %v", c.fb, phys, n, ok, c.phys, c.n, c.ok)
		}
	}
}
