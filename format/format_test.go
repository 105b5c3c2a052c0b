package format

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// ---------------------------------------------------------------------
// FORMAT.md agrees with the constants.

// docRow is one row of a structure table in FORMAT.md: offset | size | field.
type docRow struct {
	off, size int // size -1: variable ("var")
	field     string
}

func (r docRow) String() string {
	size := strconv.Itoa(r.size)
	if r.size < 0 {
		size = "var"
	}
	return fmt.Sprintf("| %d | %s | %s |", r.off, size, r.field)
}

// docStructs is what FORMAT.md must say, written from the constants: the
// offsets are the constants, and the sizes are either the fixed widths of
// the field types or differences of constants. fixed is the size of the
// structure's fixed part, which the rows must tile exactly.
var docStructs = map[string]struct {
	fixed int
	rows  []docRow
}{
	"superblock": {SuperSize, []docRow{
		{SBMagic, 8, "magic"},
		{SBVersion, 4, "version"},
		{SBBlockSize, 4, "block size"},
		{SBBlocks, 8, "blocks"},
		{SBUUID, 16, "uuid"},
		{SBJournalStart, 8, "journal start"},
		{SBJournalLen, 8, "journal length"},
		{SBInodeStart, 8, "inode start"},
		{SBInodeCount, 8, "inode count"},
		{SBDataStart, 8, "data start"},
		{SBCreated, 8, "created"},
		{SBState, 8, "state"},
		{SBMountCount, 8, "mount count"},
		{SBMountTime, 8, "mount time"},
		{SBTier, 8, "tier"},
		{SBTier + 8, SBCRC - (SBTier + 8), "reserved"},
		{SBCRC, 4, "crc"},
	}},
	"journal header": {JHSize, []docRow{
		{JHMagic, 8, "magic"},
		{JHCommit, 8, "commit word"},
	}},
	"transaction header": {TxHeader, []docRow{
		{TxSeq, 8, "seq"},
		{TxCount, 4, "count"},
		{TxLen, 4, "len"},
		{TxCRC, 4, "crc"},
		{TxCRC + 4, TxHeader - (TxCRC + 4), "pad"},
	}},
	"journal record": {RecHeader, []docRow{
		{RecOff, 8, "offset"},
		{RecLen, 4, "len"},
		{RecLen + 4, RecHeader - (RecLen + 4), "pad"},
		{RecHeader, -1, "data"},
	}},
	"inode": {InodeSize, []docRow{
		{INCRC, 4, "crc"},
		{INMode, 4, "mode"},
		{INUID, 4, "uid"},
		{INGID, 4, "gid"},
		{INNlink, 4, "nlink"},
		{INFlags, 4, "flags"},
		{INSize, 8, "size"},
		{INGen, 8, "generation"},
		{INAtime, 8, "atime"},
		{INMtime, 8, "mtime"},
		{INCtime, 8, "ctime"},
		{INXattr, 8, "xattr"},
		{INOverflow, 8, "overflow"},
		{INExtentCount, 4, "extent count"},
		{INRdev, 4, "rdev"},
		{INInline, InlineExtents * ExtentSize, "inline extents"},
		{INProcessNum, 4, "process num"},
		{INFFlag, 4, "F_flag"},
		{INFLogAddr, 8, "F_log addr"},
		{INSessionSize, 8, "session size"},
		{INSessionMode, 4, "session mode"},
		{INBtime, 8, "btime"},
		{INBtime + 8, INTable - (INBtime + 8), "reserved"},
		{INTable, 8, "table"},
	}},
	"extent": {ExtentSize, []docRow{
		{EXLogical, 8, "logical"},
		{EXPhys, 8, "physical"},
		{EXLen, 8, "len"},
	}},
	"overflow block": {BlockSize, []docRow{
		{OVCRC, 4, "crc"},
		{OVCount, 4, "count"},
		{OVNext, 8, "next"},
		{OVExtents, OverflowSlot * ExtentSize, "extents"},
	}},
	"directory block": {BlockSize, []docRow{
		{0, DirentsPerBlock * DirentSize, "slots"},
		{DirentsPerBlock * DirentSize, BlockSize - DirentsPerBlock*DirentSize, "unused"},
	}},
	"dirent": {DirentSize, []docRow{
		{DECRC, 4, "crc"},
		{DENameLen, 1, "name length"},
		{DEType, 1, "type"},
		{DEType + 1, DEIno - (DEType + 1), "reserved"},
		{DEIno, 8, "inode"},
		{DEName, MaxNameLen, "name"},
		{DEName + MaxNameLen, DirentSize - (DEName + MaxNameLen), "pad"},
	}},
	"xattr region": {XAEntries, []docRow{
		{XACRC, 4, "crc"},
		{XACount, 2, "count"},
		{XABlocks, 2, "blocks"},
		{XAUsed, 4, "used"},
		{XAEntries, -1, "entries"},
	}},
	"F_log header": {FLHeader, []docRow{
		{FLCRC, 4, "crc"},
		{FLCount, 4, "count"},
		{FLPLogBlk, 8, "P_log"},
		{FLBlocks, 4, "blocks"},
		{FLPBlocks, 4, "P_log blocks"},
		{FLPBlocks + 4, FLHeader - (FLPBlocks + 4), "reserved"},
	}},
	"F_log entry": {FLEntry, []docRow{
		{FEPid, 4, "Pid"},
		{FEPFlag, 4, "P_flag"},
		{FEPartHead, 8, "Part_addr_head"},
		{FEPLength, 8, "P_length"},
		{FEPLogAddr, 8, "P_log_addr"},
		{FENext, 8, "Next"},
		{FENext + 8, FECRC - (FENext + 8), "reserved"},
		{FECRC, 4, "crc"},
	}},
	"P_log line": {PLogLine, []docRow{
		{0, 8, "Tail_ptr"},
		{8, PLogLine - 8, "unused"},
	}},
	"tier registry": {BlockSize, []docRow{
		{TRCRC, 4, "crc"},
		{TRCount, 4, "count"},
		{TRMagic, 8, "magic"},
		{TRMagic + 8, TREntries - (TRMagic + 8), "reserved"},
		{TREntries, MaxTierDevices * TierDevSize, "devices"},
		{TREntries + MaxTierDevices*TierDevSize, BlockSize - (TREntries + MaxTierDevices*TierDevSize), "unused"},
	}},
	"tier device": {TierDevSize, []docRow{
		{TDUUID, 16, "uuid"},
		{TDFlags, 4, "flags"},
		{TDPathLen, 2, "path length"},
		{TDPathLen + 2, TDPath - (TDPathLen + 2), "reserved"},
		{TDPath, MaxTierPath, "path"},
	}},
	"device label": {DevLabelSize, []docRow{
		{DLMagic, 8, "magic"},
		{DLVersion, 4, "version"},
		{DLDev, 4, "device"},
		{DLPool, 16, "pool uuid"},
		{DLUUID, 16, "device uuid"},
		{DLUUID + 16, DLCRC - (DLUUID + 16), "reserved"},
		{DLCRC, 4, "crc"},
	}},
	"table descriptor": {TBHeader, []docRow{
		{TBCRC, 4, "crc"},
		{TBMagic, 4, "magic"},
		{TBRows, 8, "rows"},
		{TBDim, 4, "dim"},
		{TBDtype, 1, "dtype"},
		{TBDtype + 1, TBShardRows - (TBDtype + 1), "reserved"},
		{TBShardRows, 8, "shard rows"},
		{TBShards, 4, "shards"},
		{TBBlocks, 4, "blocks"},
		{TBBlocks + 4, TBHeader - (TBBlocks + 4), "reserved"},
		{TBHeader, -1, "shard entries"},
	}},
	"shard entry": {ShardEntrySize, []docRow{
		{SEDev, 2, "device"},
		{SERDev, 2, "replica device"},
		{SEGen, 4, "generation"},
		{SEOff, 8, "offset"},
		{SEROff, 8, "replica offset"},
		{SEROff + 8, SECRC - (SEROff + 8), "reserved"},
		{SECRC, 4, "crc"},
	}},
	"xattr entry": {XAEntryHeader, []docRow{
		{0, 1, "name length"},
		{1, 1, "value length high"},
		{2, 2, "value length"},
		{XAEntryHeader, -1, "name"},
	}},
}

// readDoc parses FORMAT.md: the rows of the table after each
// "<!-- struct: NAME -->" marker (and "<!-- geometry -->").
func readDoc(t *testing.T) map[string][][]string {
	t.Helper()
	f, err := os.Open("../FORMAT.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tables := map[string][][]string{}
	var cur string
	inTable := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if name, ok := strings.CutPrefix(line, "<!-- struct:"); ok {
			cur = strings.TrimSpace(strings.TrimSuffix(name, "-->"))
			if _, dup := tables[cur]; dup {
				t.Fatalf("FORMAT.md: two tables for %q", cur)
			}
			tables[cur] = nil
			inTable = false
			continue
		}
		if line == "<!-- geometry -->" {
			cur, inTable = "geometry", false
			tables[cur] = nil
			continue
		}
		if cur == "" {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				cur = "" // the table ended
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if _, err := strconv.Atoi(cells[0]); err != nil {
			continue // header or separator row
		}
		tables[cur] = append(tables[cur], cells)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return tables
}

func TestFormatDocMatchesConstants(t *testing.T) {
	doc := readDoc(t)
	for name, want := range docStructs {
		cells, ok := doc[name]
		if !ok {
			t.Errorf("FORMAT.md has no table marked <!-- struct: %s -->", name)
			continue
		}
		var got []docRow
		for _, c := range cells {
			if len(c) < 3 {
				t.Errorf("%s: short row %q", name, c)
				continue
			}
			off, err1 := strconv.Atoi(c[0])
			size, err2 := strconv.Atoi(c[1])
			if c[1] == "var" {
				size, err2 = -1, nil
			}
			if err1 != nil || err2 != nil {
				t.Errorf("%s: bad offset or size in row %q", name, c)
				continue
			}
			got = append(got, docRow{off, size, c[2]})
		}
		for i := 0; i < max(len(got), len(want.rows)); i++ {
			var g, w any = "(missing)", "(missing)"
			if i < len(got) {
				g = got[i]
			}
			if i < len(want.rows) {
				w = want.rows[i]
			}
			if g != w {
				t.Errorf("FORMAT.md table %q row %d is %v, consts.go says %v", name, i+1, g, w)
			}
		}
		// The code's own layout tiles the structure with no gap or overlap.
		end := 0
		for _, r := range want.rows {
			if r.off != end {
				t.Errorf("%s: field %q at %d, but the previous field ends at %d", name, r.field, r.off, end)
			}
			if r.size < 0 {
				end = r.off
				break
			}
			end = r.off + r.size
		}
		if end != want.fixed {
			t.Errorf("%s: the fields cover %d bytes, the structure has %d", name, end, want.fixed)
		}
	}
	for name := range doc {
		if _, ok := docStructs[name]; !ok && name != "geometry" {
			t.Errorf("FORMAT.md table %q is not checked: add it to docStructs", name)
		}
	}
	// Derived sizes.
	if INSession != INProcessNum || len(Inode{}.Session) != InodeSize-INSession {
		t.Errorf("the session fields start at %d, the reserved area at %d", INProcessNum, INSession)
	}
	if InodesPerBlock*InodeSize != BlockSize || OverflowSlot != 170 || DirentsPerBlock != 15 {
		t.Errorf("derived sizes: %d inodes per block, %d extents per overflow block, %d slots per directory block",
			InodesPerBlock, OverflowSlot, DirentsPerBlock)
	}
}

// TestDocRegionMap checks that doc.go's region map names every kind of
// data block FORMAT.md's "Region map" lists: a reader of the package doc
// must not miss one.
func TestDocRegionMap(t *testing.T) {
	spec, err := os.ReadFile("../FORMAT.md")
	if err != nil {
		t.Fatal(err)
	}
	_, row, ok := strings.Cut(string(spec), "| D .. N-1 | data region: ")
	if !ok {
		t.Fatal(`FORMAT.md's region map has no "| D .. N-1 | data region: ..." row`)
	}
	row, _, _ = strings.Cut(row, " |")
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	// The map's text, comment markers and line breaks folded to spaces.
	words := strings.Fields(strings.NewReplacer("//", " ").Replace(string(doc)))
	text := " " + strings.Join(words, " ") + " "
	for _, kind := range strings.Split(row, ", ") {
		if !strings.Contains(text, " "+strings.Join(strings.Fields(kind), " ")) {
			t.Errorf("doc.go's region map does not name %q (FORMAT.md, Region map)", kind)
		}
	}
}

func TestFormatDocGeometry(t *testing.T) {
	rows := readDoc(t)["geometry"]
	if len(rows) == 0 {
		t.Fatal("FORMAT.md has no geometry table")
	}
	for _, c := range rows {
		var v [8]uint64
		for i := range v {
			n, err := strconv.ParseUint(c[i], 10, 64)
			if err != nil {
				t.Fatalf("geometry row %q: %v", c, err)
			}
			v[i] = n
		}
		sb, err := Geometry(int64(v[0]))
		if err != nil {
			t.Fatalf("Geometry(%d): %v", v[0], err)
		}
		got := [8]uint64{v[0], sb.Blocks, sb.JournalLen, uint64(sb.InodeStart), sb.InodeCount,
			sb.InodeCount / InodesPerBlock, uint64(sb.DataStart), sb.Blocks - uint64(sb.DataStart)}
		if got != v {
			t.Errorf("FORMAT.md geometry row %v, Geometry says %v", v, got)
		}
	}
}

// TestFormatDocFieldsAreWhereEncodersPutThem encodes structures with
// distinct field values and reads each back at the offset FORMAT.md gives.
func TestFormatDocFieldsAreWhereEncodersPutThem(t *testing.T) {
	doc := readDoc(t)
	at := func(name, field string) (int, int) {
		for _, c := range doc[name] {
			if c[2] == field {
				off, _ := strconv.Atoi(c[0])
				size, _ := strconv.Atoi(c[1])
				return off, size
			}
		}
		t.Fatalf("FORMAT.md %s has no field %q", name, field)
		return 0, 0
	}
	read := func(b []byte, name, field string) uint64 {
		off, size := at(name, field)
		var v uint64
		for i := size - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[off+i])
		}
		return v
	}
	sb := Superblock{Blocks: 2048, JournalStart: 2, JournalLen: 64, InodeStart: 66, InodeCount: 1024,
		DataStart: 130, Created: 11, State: StateMounted, MountCount: 13, MountTime: 14}
	b := make([]byte, SuperSize)
	sb.Encode(b)
	for field, want := range map[string]uint64{"magic": Magic, "version": uint64(Version), "block size": BlockSize,
		"blocks": 2048, "journal start": 2, "journal length": 64, "inode start": 66, "inode count": 1024,
		"data start": 130, "created": 11, "state": 1, "mount count": 13, "mount time": 14,
		"crc": uint64(Checksum(b[:SBCRC]))} {
		if got := read(b, "superblock", field); got != want {
			t.Errorf("superblock %s: %d at the documented offset, want %d", field, got, want)
		}
	}
	in := Inode{Mode: ModeReg | 0o640, UID: 3, GID: 4, Nlink: 5, Flags: 1, Size: 6, Gen: 7, Atime: 8,
		Mtime: 9, Ctime: 10, Xattr: 11, Overflow: 12, Extents: 13, Rdev: 14, Btime: 15}
	b = make([]byte, InodeSize)
	in.Encode(b)
	for field, want := range map[string]uint64{"mode": uint64(in.Mode), "uid": 3, "gid": 4, "nlink": 5,
		"flags": 1, "size": 6, "generation": 7, "atime": 8, "mtime": 9, "ctime": 10, "xattr": 11,
		"overflow": 12, "extent count": 13, "rdev": 14, "btime": 15, "crc": uint64(Checksum(b[4:]))} {
		if got := read(b, "inode", field); got != want {
			t.Errorf("inode %s: %d at the documented offset, want %d", field, got, want)
		}
	}
	b = make([]byte, BlockSize)
	EncodeOverflow(b, []Extent{{Logical: 21, Phys: 22, Len: 23}}, 99)
	if read(b, "overflow block", "count") != 1 || read(b, "overflow block", "next") != 99 ||
		read(b, "overflow block", "crc") != uint64(Checksum(b[4:])) {
		t.Error("overflow block fields are not where FORMAT.md says")
	}
	off, _ := at("overflow block", "extents")
	if read(b[off:], "extent", "logical") != 21 || read(b[off:], "extent", "physical") != 22 || read(b[off:], "extent", "len") != 23 {
		t.Error("extent fields are not where FORMAT.md says")
	}
	b = make([]byte, DirentSize)
	(&Dirent{Name: "hello", Type: DTLnk, Ino: 77}).Encode(b)
	noff, _ := at("dirent", "name")
	if read(b, "dirent", "name length") != 5 || read(b, "dirent", "type") != uint64(DTLnk) ||
		read(b, "dirent", "inode") != 77 || string(b[noff:noff+5]) != "hello" {
		t.Error("dirent fields are not where FORMAT.md says")
	}
	b = make([]byte, 2*BlockSize)
	EncodeXattrs(b, []Xattr{{Name: "user.a", Value: []byte("xyz")}})
	eoff, _ := at("xattr region", "entries")
	e := b[eoff:]
	voff, _ := at("xattr entry", "name")
	if read(b, "xattr region", "count") != 1 || read(b, "xattr region", "blocks") != 2 ||
		read(b, "xattr region", "used") != 4+6+3 || read(e, "xattr entry", "name length") != 6 ||
		read(e, "xattr entry", "value length") != 3 || string(e[voff:voff+9]) != "user.axyz" {
		t.Error("xattr fields are not where FORMAT.md says")
	}
}

func TestFormatDocSessionFields(t *testing.T) {
	doc := readDoc(t)
	read := func(b []byte, name, field string) uint64 {
		for _, c := range doc[name] {
			if c[2] == field {
				off, _ := strconv.Atoi(c[0])
				size, _ := strconv.Atoi(c[1])
				var v uint64
				for i := size - 1; i >= 0; i-- {
					v = v<<8 | uint64(b[off+i])
				}
				return v
			}
		}
		t.Fatalf("FORMAT.md %s has no field %q", name, field)
		return 0
	}
	var in Inode
	in.SetSessionFields(3, 1, 77, 1<<33, SessionRead)
	b := make([]byte, InodeSize)
	in.Encode(b)
	if read(b, "inode", "process num") != 3 || read(b, "inode", "F_flag") != 1 || read(b, "inode", "F_log addr") != 77 ||
		read(b, "inode", "session size") != 1<<33 || read(b, "inode", "session mode") != uint64(SessionRead) {
		t.Error("inode session fields are not where FORMAT.md says")
	}
	h := FLogHeader{Count: 5, PLog: 99, Blocks: 1, PBlocks: 1}
	b = make([]byte, FLHeader)
	h.Encode(b)
	if read(b, "F_log header", "count") != 5 || read(b, "F_log header", "P_log") != 99 ||
		read(b, "F_log header", "blocks") != 1 || read(b, "F_log header", "P_log blocks") != 1 ||
		read(b, "F_log header", "crc") != uint64(Checksum(b[4:24])) {
		t.Error("F_log header fields are not where FORMAT.md says")
	}
	e := FEntry{Pid: 1, PFlag: 1, PartHead: 2, PLength: 3, PLogAddr: 4, Next: 5}
	b = make([]byte, FLEntry)
	e.Encode(b)
	if read(b, "F_log entry", "Pid") != 1 || read(b, "F_log entry", "P_flag") != 1 || read(b, "F_log entry", "Part_addr_head") != 2 ||
		read(b, "F_log entry", "P_length") != 3 || read(b, "F_log entry", "P_log_addr") != 4 || read(b, "F_log entry", "Next") != 5 ||
		read(b, "F_log entry", "crc") != uint64(Checksum(b[:FECRC])) {
		t.Error("F_log entry fields are not where FORMAT.md says")
	}
}

// ---------------------------------------------------------------------
// Geometry

func TestGeometry(t *testing.T) {
	var sizes []int64
	for s := int64(MinPoolSize); s <= 8<<40; s *= 2 {
		sizes = append(sizes, s, s+1, s+BlockSize+123, s*3/2)
	}
	for _, size := range sizes {
		sb, err := Geometry(size)
		if err != nil {
			t.Fatalf("Geometry(%d): %v", size, err)
		}
		blocks := uint64(size) / BlockSize
		switch {
		case sb.Blocks != blocks:
			t.Errorf("%d: %d blocks, want %d", size, sb.Blocks, blocks)
		case sb.JournalStart != JournalStart || sb.JournalLen < 64 || sb.JournalLen > 4096:
			t.Errorf("%d: journal %d+%d", size, sb.JournalStart, sb.JournalLen)
		case sb.JournalLen != max(64, min(blocks/64, 4096)):
			t.Errorf("%d: journal %d blocks", size, sb.JournalLen)
		case sb.InodeCount < 1024 || sb.InodeCount > 4<<20 || sb.InodeCount%InodesPerBlock != 0:
			t.Errorf("%d: %d inodes", size, sb.InodeCount)
		case uint64(sb.InodeStart) != 2+sb.JournalLen || uint64(sb.DataStart) != uint64(sb.InodeStart)+sb.InodeCount/InodesPerBlock:
			t.Errorf("%d: inode table at %d, data at %d", size, sb.InodeStart, sb.DataStart)
		case uint64(sb.DataStart)+16 > sb.Blocks:
			t.Errorf("%d: data region of %d blocks", size, sb.Blocks-uint64(sb.DataStart))
		}
		// The geometry is one the superblock decoder accepts.
		b := make([]byte, SuperSize)
		sb.Encode(b)
		got, err := DecodeSuperblock(b, size)
		if err != nil || got != sb {
			t.Fatalf("%d: decode of the encoded geometry: %v", size, err)
		}
		if _, err := DecodeSuperblock(b, size-BlockSize); size%BlockSize == 0 && err == nil {
			t.Errorf("%d: accepted on a medium one block too small", size)
		}
	}
	for _, size := range []int64{0, 1, MinPoolSize - 1, -5} {
		if _, err := Geometry(size); err == nil {
			t.Errorf("Geometry(%d) succeeded", size)
		}
	}
}

// ---------------------------------------------------------------------
// Codec round trips

func TestSuperblockRoundTrip(t *testing.T) {
	sb, err := Geometry(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	sb.UUID = [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	sb.Created, sb.State, sb.MountCount, sb.MountTime = -1, StateMounted, 1<<40, 1<<62
	b := make([]byte, BlockSize)
	for i := range b {
		b[i] = 0xEE // Encode clears its 256 bytes
	}
	sb.Encode(b)
	got, err := DecodeSuperblock(b, 64<<20)
	if err != nil || got != sb {
		t.Fatalf("round trip: %v\n got  %+v\n want %+v", err, got, sb)
	}
	// Every single-byte change is detected.
	for i := 0; i < SuperSize; i++ {
		c := bytes.Clone(b[:SuperSize])
		c[i] ^= 0x10
		if _, err := DecodeSuperblock(c, 64<<20); err == nil {
			t.Fatalf("flip at byte %d not detected", i)
		}
	}
	if _, err := DecodeSuperblock(make([]byte, SuperSize), 64<<20); !errors.Is(err, ErrBadMagic) {
		t.Errorf("zeros: %v", err)
	}
	if _, err := DecodeSuperblock(b[:SuperSize-1], 64<<20); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short: %v", err)
	}
	for name, edit := range map[string]func(*Superblock){
		"blocks":  func(s *Superblock) { s.Blocks = 0 },
		"journal": func(s *Superblock) { s.JournalLen = 1 },
		"inodes":  func(s *Superblock) { s.InodeStart++ },
		"count":   func(s *Superblock) { s.InodeCount = 17 },
		"data":    func(s *Superblock) { s.DataStart++ },
		"state":   func(s *Superblock) { s.State = 2 },
	} {
		s := sb
		edit(&s)
		s.Encode(b)
		if _, err := DecodeSuperblock(b, 64<<20); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	s := sb
	s.Encode(b)
	le.PutUint32(b[SBVersion:], 2)
	le.PutUint32(b[SBCRC:], Checksum(b[:SBCRC]))
	if _, err := DecodeSuperblock(b, 64<<20); !errors.Is(err, ErrBadVersion) {
		t.Errorf("version: %v", err)
	}
}

func randInode(r *rand.Rand) Inode {
	types := []uint32{ModeReg, ModeDir, ModeLnk, ModeFifo, ModeSock, ModeChr, ModeBlk}
	in := Inode{Mode: types[r.IntN(len(types))] | r.Uint32N(ModePerm+1), Rdev: r.Uint32(),
		UID: r.Uint32(), GID: r.Uint32(), Nlink: r.Uint32(), Flags: r.Uint32(), Size: r.Uint64N(MaxFileSize + 1),
		Gen: r.Uint64(), Atime: r.Int64(), Mtime: -r.Int64(), Ctime: r.Int64(), Xattr: Blk(r.Uint64()),
		Overflow: Blk(r.Uint64()), Extents: r.Uint32()}
	for i := range in.Inline {
		in.Inline[i] = Extent{r.Uint64(), Blk(r.Uint64()), r.Uint64() &^ ExtentUnwritten, r.IntN(2) == 0}
	}
	for i := range in.Session {
		in.Session[i] = byte(r.Uint32())
	}
	clear(in.Session[INBtime-INSession : INBtime-INSession+8]) // the birth time is Btime
	in.Btime = r.Int64()
	return in
}

func TestInodeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, InodeSize)
	for n := 0; n < 1000; n++ {
		in := randInode(r)
		in.Encode(b)
		got, err := DecodeInode(b)
		if err != nil || got != in {
			t.Fatalf("round trip: %v\n got  %+v\n want %+v", err, got, in)
		}
		i := r.IntN(InodeSize)
		b[i] ^= byte(1 + r.IntN(255))
		if _, err := DecodeInode(b); !errors.Is(err, ErrBadChecksum) {
			t.Fatalf("flip at byte %d: %v", i, err)
		}
	}
	// The largest file the kernel allows (MAX_LFS_FILESIZE) decodes.
	big := Inode{Mode: ModeReg | 0o644, Size: MaxFileSize}
	big.Encode(b)
	if got, err := DecodeInode(b); err != nil || got != big {
		t.Errorf("size 2^63-1: %+v, %v", got, err)
	}
	if got, err := DecodeInode(make([]byte, InodeSize)); err != nil || got != (Inode{}) {
		t.Errorf("free slot: %+v, %v", got, err)
	}
	if _, err := DecodeInode(make([]byte, InodeSize-1)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short: %v", err)
	}
	for _, in := range []Inode{{Mode: 0o644}, {Mode: 0o030644}, {Mode: 0o170644}, {Mode: ModeReg, Size: MaxFileSize + 1}, {Mode: ModeReg, Size: 1<<64 - 1}} {
		in.Encode(b)
		if _, err := DecodeInode(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%+v: %v", in, err)
		}
	}
	in := Inode{Mode: ModeDir | 0o755}
	if !in.IsDir() || in.IsReg() || in.IsSymlink() || DTOf(in.Mode) != DTDir || DTOf(ModeLnk) != DTLnk || DTOf(ModeReg) != DTReg {
		t.Error("type helpers")
	}
	for _, c := range []struct {
		mode uint32
		dt   uint8
	}{{ModeFifo, 1}, {ModeChr, 2}, {ModeDir, 4}, {ModeBlk, 6}, {ModeReg, 8}, {ModeLnk, 10}, {ModeSock, 12}} {
		if DTOf(c.mode|0o644) != c.dt || ModeOfDT(c.dt) != c.mode {
			t.Errorf("mode %#o: DT %d, want %d; back %#o", c.mode, DTOf(c.mode), c.dt, ModeOfDT(c.dt))
		}
		in := Inode{Mode: c.mode}
		if in.IsSpecial() != (c.mode != ModeReg && c.mode != ModeDir && c.mode != ModeLnk) {
			t.Errorf("mode %#o: IsSpecial %v", c.mode, in.IsSpecial())
		}
	}
}

func TestOverflowRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, BlockSize)
	for _, n := range []int{0, 1, 2, 100, OverflowSlot} {
		exts := make([]Extent, n)
		for i := range exts {
			exts[i] = Extent{r.Uint64(), Blk(r.Uint64()), r.Uint64() &^ ExtentUnwritten, r.IntN(2) == 0}
		}
		next := Blk(r.Uint64())
		EncodeOverflow(b, exts, next)
		got, gotNext, err := DecodeOverflow(b)
		if err != nil || gotNext != next || len(got) != n || (n > 0 && !reflect.DeepEqual(got, exts)) {
			t.Fatalf("%d extents: %v", n, err)
		}
		b[r.IntN(BlockSize)] ^= 4
		if _, _, err := DecodeOverflow(b); !errors.Is(err, ErrBadChecksum) {
			t.Fatalf("flip: %v", err)
		}
	}
	EncodeOverflow(b, nil, 0)
	le.PutUint32(b[OVCount:], OverflowSlot+1)
	le.PutUint32(b[OVCRC:], Checksum(b[4:]))
	if _, _, err := DecodeOverflow(b); !errors.Is(err, ErrCorrupt) {
		t.Errorf("count %d: %v", OverflowSlot+1, err)
	}
	if _, _, err := DecodeOverflow(b[:BlockSize-1]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short: %v", err)
	}
	if e := (Extent{Logical: 5, Len: 3}); e.End() != 8 {
		t.Error("End")
	}
}

func TestDirentRoundTrip(t *testing.T) {
	b := make([]byte, DirentSize)
	long := strings.Repeat("n", MaxNameLen)
	for _, de := range []Dirent{{"a", DTReg, 2}, {long, DTDir, 1 << 40}, {"\xff\x01 sp", DTLnk, 3}} {
		de.Encode(b)
		got, ok, err := DecodeDirent(b)
		if err != nil || !ok || got != de {
			t.Fatalf("%q: %+v %v %v", de.Name, got, ok, err)
		}
		b[DEName] ^= 1
		if _, _, err := DecodeDirent(b); !errors.Is(err, ErrBadChecksum) {
			t.Fatalf("flip: %v", err)
		}
	}
	if _, ok, err := DecodeDirent(make([]byte, DirentSize)); ok || err != nil {
		t.Errorf("free slot: %v %v", ok, err)
	}
	for _, de := range []Dirent{{"", DTReg, 2}, {"a/b", DTReg, 2}, {"a\x00", DTReg, 2}, {".", DTDir, 2}, {"..", DTDir, 2}, {"x", DTReg, 0}} {
		de.Encode(b)
		if _, ok, err := DecodeDirent(b); ok || !errors.Is(err, ErrCorrupt) {
			t.Errorf("%q ino %d: ok %v, %v", de.Name, de.Ino, ok, err)
		}
	}
	if _, _, err := DecodeDirent(b[:DirentSize-1]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short: %v", err)
	}
	for s := uint64(0); s < 40; s++ {
		off := DirentOff(s)
		if off%BlockSize+DirentSize > DirentsPerBlock*DirentSize || off/BlockSize != s/DirentsPerBlock {
			t.Fatalf("slot %d at %d", s, off)
		}
	}
}

func TestXattrsRoundTrip(t *testing.T) {
	cases := [][]Xattr{
		nil,
		{{Name: "user.a", Value: []byte{}}},
		{{Name: "user.a", Value: []byte("1")}, {Name: "security.selinux", Value: bytes.Repeat([]byte{7}, 5000)}},
		{{Name: strings.Repeat("n", 255), Value: bytes.Repeat([]byte{9}, XAMaxValue)}},
	}
	for _, xs := range cases {
		nb := XattrBlocks(xs)
		if nb < 1 || nb > XAMaxBlocks {
			t.Fatalf("%d blocks", nb)
		}
		b := make([]byte, nb*BlockSize)
		EncodeXattrs(b, xs)
		if XattrRegionBlocks(b) != nb {
			t.Fatalf("region blocks %d, want %d", XattrRegionBlocks(b), nb)
		}
		got, err := DecodeXattrs(b)
		if err != nil || len(got) != len(xs) {
			t.Fatalf("%d attributes: %v", len(xs), err)
		}
		for i := range xs {
			if got[i].Name != xs[i].Name || !bytes.Equal(got[i].Value, xs[i].Value) {
				t.Fatalf("attribute %d differs", i)
			}
		}
		b[len(b)-1] ^= 1
		if _, err := DecodeXattrs(b); !errors.Is(err, ErrBadChecksum) {
			t.Fatalf("flip: %v", err)
		}
		if _, err := DecodeXattrs(b[:len(b)-1]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("short: %v", err)
		}
	}
	// A 65536-byte value sets the high length byte; shorter ones leave it
	// zero, as pools written before it existed have it.
	for _, vl := range []int{XAMaxValue, XAMaxValue - 1} {
		xs := []Xattr{{Name: "user.v", Value: bytes.Repeat([]byte{3}, vl)}}
		b := make([]byte, XattrBlocks(xs)*BlockSize)
		EncodeXattrs(b, xs)
		if hi, lo := b[XAEntries+1], le.Uint16(b[XAEntries+2:]); int(hi)<<16|int(lo) != vl || (vl < 1<<16) != (hi == 0) {
			t.Errorf("value of %d bytes: length bytes %d, %d", vl, hi, lo)
		}
	}
	{
		xs := []Xattr{{Name: "user.v", Value: make([]byte, 3*BlockSize)}}
		b := make([]byte, XattrBlocks(xs)*BlockSize)
		EncodeXattrs(b, xs)
		b[XAEntries+1] = 2 // a value over 65536 bytes cannot be
		le.PutUint32(b[XACRC:], Checksum(b[4:]))
		if _, err := DecodeXattrs(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("value length over the maximum: %v", err)
		}
	}
	if XattrBlocks([]Xattr{{Name: "a", Value: make([]byte, XAMaxValue)}, {Name: "b", Value: make([]byte, XAMaxValue)}}) != 0 {
		t.Error("two maximal values fit one region")
	}
	if _, err := DecodeXattrs(make([]byte, BlockSize)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("zero block: %v", err)
	}
}

func TestChecksumIsCastagnoli(t *testing.T) {
	// CRC-32C check value ("123456789").
	if got := Checksum([]byte("123456789")); got != 0xE3069283 {
		t.Fatalf("Checksum = %08x", got)
	}
	if IsZero([]byte{0, 0, 1}) || !IsZero(nil) || !IsZero(make([]byte, 7)) {
		t.Error("IsZero")
	}
	if Blk(3).Off() != 3*BlockSize {
		t.Error("Blk.Off")
	}
	sb := Superblock{InodeStart: 10, DataStart: 20, Blocks: 100}
	if sb.InodeOff(2) != 10*BlockSize+2*InodeSize || !sb.ValidData(20, 80) || sb.ValidData(20, 81) ||
		sb.ValidData(19, 1) || sb.ValidData(99, ^uint64(0)) {
		t.Error("InodeOff / ValidData")
	}
}

func TestSessionCodecsRoundTrip(t *testing.T) {
	var in Inode
	in.SetSessionFields(7, 1, 1234, 5<<20, SessionWrite)
	if p, f, l, size, mode := in.SessionFields(); p != 7 || f != 1 || l != 1234 || size != 5<<20 || mode != SessionWrite {
		t.Fatalf("session fields %d %d %d %d %d", p, f, l, size, mode)
	}
	if !IsZero(in.Session[INSessionMode+4-INSession:]) {
		t.Error("SetSessionFields wrote past the session mode")
	}
	for _, n := range []int{1, 2, 63, 64, MaxThreads} {
		fb, pb := FLogBlocks(n)
		if int(fb)*BlockSize < FLHeader+n*FLEntry || int(fb-1)*BlockSize >= FLHeader+n*FLEntry ||
			int(pb)*BlockSize < n*PLogLine || int(pb-1)*BlockSize >= n*PLogLine {
			t.Fatalf("%d segments: %d F_log blocks, %d P_log blocks", n, fb, pb)
		}
		h := FLogHeader{Count: uint32(n), PLog: 500, Blocks: fb, PBlocks: pb}
		b := make([]byte, FLHeader)
		h.Encode(b)
		got, err := DecodeFLogHeader(b)
		if err != nil || got != h {
			t.Fatalf("header round trip: %v", err)
		}
		b[5] ^= 1
		if _, err := DecodeFLogHeader(b); !errors.Is(err, ErrBadChecksum) {
			t.Fatalf("flip: %v", err)
		}
	}
	b := make([]byte, FLHeader)
	for _, h := range []FLogHeader{{Count: 0, Blocks: 1, PBlocks: 0}, {Count: MaxThreads + 1}, {Count: 2, Blocks: 2, PBlocks: 1}} {
		h.Encode(b)
		if _, err := DecodeFLogHeader(b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%+v: %v", h, err)
		}
	}
	if _, err := DecodeFLogHeader(b[:FLHeader-1]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short header: %v", err)
	}
	e := FEntry{Pid: 9, PFlag: 1, PartHead: 1 << 20, PLength: 4096, PLogAddr: 0, Next: 8192}
	b = make([]byte, FLEntry)
	e.Encode(b)
	if got, err := DecodeFEntry(b); err != nil || got != e {
		t.Fatalf("entry round trip: %v", err)
	}
	b[FECRC-1] ^= 1 // reserved, but covered by the crc
	if _, err := DecodeFEntry(b); !errors.Is(err, ErrBadChecksum) {
		t.Fatalf("flip: %v", err)
	}
	e.PFlag = 2
	e.Encode(b)
	if _, err := DecodeFEntry(b); !errors.Is(err, ErrCorrupt) {
		t.Errorf("P_flag 2: %v", err)
	}
	if _, err := DecodeFEntry(b[:FLEntry-1]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("short entry: %v", err)
	}
}
