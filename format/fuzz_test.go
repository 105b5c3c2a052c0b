package format

import (
	"bytes"
	"reflect"
	"testing"
)

// The fuzz targets feed arbitrary bytes to each decoder. The decoder must
// return a value or an error, never panic. A value must re-encode to the
// input's canonical form: the input with the bytes the decoder ignores
// (reserved, padding, unused slots) zeroed and the checksum recomputed,
// which is the input itself when those bytes were zero. That pins down
// every byte the decoder reads: Encode(Decode(b)) reproduces all of them.
//
// Random bytes almost never carry a valid CRC, so each target also takes a
// fixCRC flag: the input is zero-extended to the structure's size and its
// checksum recomputed, which lets the fuzzer reach the field checks behind
// the checksum. (Run the block-sized targets with -fuzzminimizetime 1s: the
// minimizer is slow on 4 KiB inputs.)

// fixed returns b zero-extended to n bytes with the CRC at crcAt recomputed
// over [from, n) (over [0, crcAt) when from < 0).
func fixed(b []byte, n, crcAt, from int) []byte {
	c := make([]byte, max(n, len(b)))
	copy(c, b)
	if from < 0 {
		le.PutUint32(c[crcAt:], Checksum(c[:crcAt]))
	} else {
		le.PutUint32(c[crcAt:], Checksum(c[from:n]))
	}
	return c
}

func FuzzDecodeSuperblock(f *testing.F) {
	for _, size := range []int64{MinPoolSize, 64 << 20, 1 << 40} {
		sb, _ := Geometry(size)
		sb.State, sb.MountCount, sb.UUID[3] = StateMounted, 9, 7
		b := make([]byte, SuperSize)
		sb.Encode(b)
		f.Add(b, size, false)
		f.Add(b[:SBMountTime], size, true)
	}
	f.Add(make([]byte, SuperSize), int64(MinPoolSize), true)
	f.Add([]byte{1, 2, 3}, int64(-1), false)
	f.Fuzz(func(t *testing.T, b []byte, size int64, fixCRC bool) {
		if fixCRC {
			b = fixed(b, SuperSize, SBCRC, -1)
		}
		sb, err := DecodeSuperblock(b, size)
		if err != nil {
			return
		}
		canon := bytes.Clone(b[:SuperSize])
		clear(canon[SBTier+8 : SBCRC])
		le.PutUint32(canon[SBCRC:], Checksum(canon[:SBCRC]))
		got := make([]byte, SuperSize)
		sb.Encode(got)
		if !bytes.Equal(got, canon) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", canon, got)
		}
		if again, err := DecodeSuperblock(got, size); err != nil || again != sb {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func FuzzDecodeInode(f *testing.F) {
	b := make([]byte, InodeSize)
	(&Inode{Mode: ModeReg | 0o644, Nlink: 1, Size: 5000, Extents: 2,
		Inline: [InlineExtents]Extent{{0, 200, 1, false}, {1, 300, 1, false}}}).Encode(b)
	f.Add(bytes.Clone(b), false)
	(&Inode{Mode: ModeDir | 0o755, Nlink: 2, Size: BlockSize, Xattr: 9, Overflow: 10, Extents: 200}).Encode(b)
	f.Add(bytes.Clone(b), false)
	(&Inode{Mode: ModeChr | 0o600, Nlink: 1, Rdev: 1<<8 | 3}).Encode(b)
	f.Add(bytes.Clone(b), false)
	f.Add(b[:INInline], true)
	f.Add(make([]byte, InodeSize), false)
	f.Add([]byte("short"), false)
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		if fixCRC {
			b = fixed(b, InodeSize, INCRC, 4)
		}
		in, err := DecodeInode(b)
		if err != nil || IsZero(b[:InodeSize]) {
			return
		}
		canon := bytes.Clone(b[:InodeSize]) // every byte is a field (rdev took the last reserved ones)
		le.PutUint32(canon[INCRC:], Checksum(canon[4:]))
		got := make([]byte, InodeSize)
		in.Encode(got)
		if !bytes.Equal(got, canon) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", canon, got)
		}
		if again, err := DecodeInode(got); err != nil || again != in {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func FuzzDecodeOverflow(f *testing.F) {
	b := make([]byte, BlockSize)
	EncodeOverflow(b, []Extent{{4, 500, 2, false}, {9, 600, 1, true}}, 77)
	f.Add(bytes.Clone(b), false)
	f.Add(b[:OVExtents+2*ExtentSize], true)
	full := make([]Extent, OverflowSlot)
	for i := range full {
		full[i] = Extent{uint64(i), Blk(1000 + i), 1, false}
	}
	EncodeOverflow(b, full, 0)
	f.Add(bytes.Clone(b), false)
	f.Add(make([]byte, 16), true)
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		if fixCRC {
			b = fixed(b, BlockSize, OVCRC, 4)
		}
		exts, next, err := DecodeOverflow(b)
		if err != nil {
			return
		}
		canon := bytes.Clone(b[:BlockSize])
		clear(canon[OVExtents+len(exts)*ExtentSize:])
		le.PutUint32(canon[OVCRC:], Checksum(canon[4:]))
		got := make([]byte, BlockSize)
		EncodeOverflow(got, exts, next)
		if !bytes.Equal(got, canon) {
			t.Fatalf("re-encoding differs (%d extents, next %d)", len(exts), next)
		}
		again, next2, err := DecodeOverflow(got)
		if err != nil || next2 != next || len(again) != len(exts) || (len(exts) > 0 && !reflect.DeepEqual(again, exts)) {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func FuzzDecodeDirent(f *testing.F) {
	b := make([]byte, DirentSize)
	(&Dirent{Name: "file.txt", Type: DTReg, Ino: 12}).Encode(b)
	f.Add(bytes.Clone(b), false)
	f.Add(b[:DEName+8], true)
	(&Dirent{Name: string(bytes.Repeat([]byte{'z'}, MaxNameLen)), Type: DTDir, Ino: 1 << 33}).Encode(b)
	f.Add(bytes.Clone(b), false)
	f.Add(make([]byte, DirentSize), false)
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		if fixCRC {
			b = fixed(b, DirentSize, DECRC, 4)
		}
		de, ok, err := DecodeDirent(b)
		if err != nil || !ok {
			if ok {
				t.Fatal("ok with an error")
			}
			return
		}
		if de.Name == "" || len(de.Name) > MaxNameLen || de.Ino == 0 || de.Name == "." || de.Name == ".." ||
			bytes.ContainsAny([]byte(de.Name), "/\x00") {
			t.Fatalf("accepted invalid entry %+v", de)
		}
		canon := bytes.Clone(b[:DirentSize])
		clear(canon[DEType+1 : DEIno])
		clear(canon[DEName+len(de.Name):])
		le.PutUint32(canon[DECRC:], Checksum(canon[4:]))
		got := make([]byte, DirentSize)
		de.Encode(got)
		if !bytes.Equal(got, canon) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", canon, got)
		}
		if again, ok, err := DecodeDirent(got); err != nil || !ok || again != de {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func FuzzDecodeXattrs(f *testing.F) {
	for _, xs := range [][]Xattr{
		nil,
		{{Name: "user.a", Value: []byte("1")}, {Name: "user.bb", Value: nil}},
		{{Name: "user.big", Value: bytes.Repeat([]byte{5}, 5000)}},
		{{Name: "user.max", Value: bytes.Repeat([]byte{6}, XAMaxValue)}},
	} {
		b := make([]byte, XattrBlocks(xs)*BlockSize)
		EncodeXattrs(b, xs)
		f.Add(b, false)
		used := int(le.Uint32(b[XAUsed:]))
		f.Add(b[:XAEntries+min(used, 64)], true)
	}
	f.Add(make([]byte, BlockSize), false)
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		if fixCRC {
			nb := min(max(XattrRegionBlocks(b), 1), XAMaxBlocks)
			b = fixed(b, nb*BlockSize, XACRC, 4)
		}
		xs, err := DecodeXattrs(b)
		if err != nil {
			return
		}
		nb := XattrRegionBlocks(b)
		if nb < 1 || nb > XAMaxBlocks || len(b) < nb*BlockSize {
			t.Fatalf("decoded a region of %d blocks from %d bytes", nb, len(b))
		}
		canon := bytes.Clone(b[:nb*BlockSize])
		p := XAEntries
		for _, x := range xs {
			p += XAEntryHeader + len(x.Name) + len(x.Value)
		}
		clear(canon[p:])
		le.PutUint32(canon[XACRC:], Checksum(canon[4:]))
		got := make([]byte, nb*BlockSize)
		EncodeXattrs(got, xs)
		if !bytes.Equal(got, canon) {
			t.Fatalf("re-encoding differs (%d attributes in %d blocks)", len(xs), nb)
		}
		again, err := DecodeXattrs(got)
		if err != nil || len(again) != len(xs) {
			t.Fatalf("re-decode: %v", err)
		}
		for i := range xs {
			if again[i].Name != xs[i].Name || !bytes.Equal(again[i].Value, xs[i].Value) {
				t.Fatalf("attribute %d differs", i)
			}
		}
	})
}

func FuzzDecodeFLogHeader(f *testing.F) {
	fb, pb := FLogBlocks(3)
	b := make([]byte, FLHeader)
	(&FLogHeader{Count: 3, PLog: 200, Blocks: fb, PBlocks: pb}).Encode(b)
	f.Add(bytes.Clone(b), false)
	f.Add(b[:FLPBlocks], true)
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		if fixCRC {
			c := make([]byte, max(FLHeader, len(b)))
			copy(c, b)
			le.PutUint32(c[FLCRC:], Checksum(c[4:24]))
			b = c
		}
		h, err := DecodeFLogHeader(b)
		if err != nil {
			return
		}
		if h.Count < 1 || h.Count > MaxThreads {
			t.Fatalf("accepted %d entries", h.Count)
		}
		canon := bytes.Clone(b[:FLHeader])
		clear(canon[FLPBlocks+4:])
		got := make([]byte, FLHeader)
		h.Encode(got)
		if !bytes.Equal(got, canon) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", canon, got)
		}
		if again, err := DecodeFLogHeader(got); err != nil || again != h {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

func FuzzDecodeFEntry(f *testing.F) {
	b := make([]byte, FLEntry)
	(&FEntry{Pid: 4, PartHead: 8192, PLength: 4096, PLogAddr: 1 << 20, Next: 1<<20 + 64}).Encode(b)
	f.Add(bytes.Clone(b), false)
	f.Add(b[:FENext], true)
	f.Fuzz(func(t *testing.T, b []byte, fixCRC bool) {
		if fixCRC {
			b = fixed(b, FLEntry, FECRC, -1)
		}
		e, err := DecodeFEntry(b)
		if err != nil {
			return
		}
		if e.PFlag > 1 {
			t.Fatalf("accepted P_flag %d", e.PFlag)
		}
		canon := bytes.Clone(b[:FLEntry])
		clear(canon[FENext+8 : FECRC])
		le.PutUint32(canon[FECRC:], Checksum(canon[:FECRC]))
		got := make([]byte, FLEntry)
		e.Encode(got)
		if !bytes.Equal(got, canon) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", canon, got)
		}
		if again, err := DecodeFEntry(got); err != nil || again != e {
			t.Fatalf("re-decode: %v", err)
		}
	})
}

// FuzzDecodeTierStructs: the SSD-tier decoders never panic, and what they
// accept re-encodes to something that decodes the same.
func FuzzDecodeTierStructs(f *testing.F) {
	reg := make([]byte, BlockSize)
	EncodeTier(reg, []TierDevice{{UUID: [16]byte{1}, Path: "/ssd/a"}, {UUID: [16]byte{2}}})
	f.Add(reg, uint8(0))
	lab := make([]byte, DevLabelSize)
	(&DevLabel{Dev: 2, Pool: [16]byte{3}, UUID: [16]byte{4}}).Encode(lab)
	f.Add(lab, uint8(1))
	h, _ := NewTableHeader(1000, 64, DtypeF16, 100)
	hb := make([]byte, TBHeader)
	h.Encode(hb)
	f.Add(hb, uint8(2))
	eb := make([]byte, ShardEntrySize)
	(&ShardEntry{Dev: 1, RDev: 2, Gen: 3, Off: 4096, ROff: 8192}).Encode(eb)
	f.Add(eb, uint8(3))
	f.Fuzz(func(t *testing.T, b []byte, kind uint8) {
		switch kind % 4 {
		case 0:
			if len(b) >= BlockSize {
				b = fixed(b, BlockSize, TRCRC, 4)
			}
			devs, err := DecodeTier(b)
			if err != nil {
				return
			}
			out := make([]byte, BlockSize)
			EncodeTier(out, devs)
			again, err := DecodeTier(out)
			if err != nil || !reflect.DeepEqual(again, devs) {
				t.Fatalf("registry re-decode: %v %+v %+v", err, again, devs)
			}
		case 1:
			l, err := DecodeDevLabel(b)
			if err != nil {
				return
			}
			out := make([]byte, DevLabelSize)
			l.Encode(out)
			if again, err := DecodeDevLabel(out); err != nil || again != l {
				t.Fatalf("label re-decode: %v", err)
			}
		case 2:
			if len(b) >= TBHeader {
				b = fixed(b, TBHeader, TBCRC, 4)
			}
			h, err := DecodeTableHeader(b)
			if err != nil {
				return
			}
			if h.Shards == 0 || uint64(h.Shards-1)*h.ShardRows >= h.Rows || h.Size() > MaxTableBytes {
				t.Fatalf("accepted an inconsistent header %+v", h)
			}
			out := make([]byte, TBHeader)
			h.Encode(out)
			if again, err := DecodeTableHeader(out); err != nil || again != h {
				t.Fatalf("header re-decode: %v", err)
			}
		case 3:
			if len(b) >= ShardEntrySize {
				b = fixed(b, ShardEntrySize, SECRC, -1)
			}
			e, err := DecodeShardEntry(b, MaxTierDevices)
			if err != nil {
				return
			}
			out := make([]byte, ShardEntrySize)
			e.Encode(out)
			if again, err := DecodeShardEntry(out, MaxTierDevices); err != nil || again != e {
				t.Fatalf("entry re-decode: %v", err)
			}
		}
	})
}
