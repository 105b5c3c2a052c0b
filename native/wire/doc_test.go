package wire

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// docRow is one row of a layout table in doc.go: offset, size, field.
// Size -1 is "n", the variable text.
type docRow struct {
	off, size int
	field     string
}

// docTable is a table and what its heading says: "# Name (type 0x....)".
type docTable struct {
	typ  int // -1 without "(type ...)"
	rows []docRow
}

// readDocTables parses doc.go: the rows (lines whose first word is an
// offset) under each "# Name" heading.
func readDocTables(t *testing.T) map[string]*docTable {
	t.Helper()
	f, err := os.Open("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tables := map[string]*docTable{}
	var cur *docTable
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "//")
		if h, ok := strings.CutPrefix(line, " # "); ok {
			name, typ, _ := strings.Cut(h, " (type ")
			cur = &docTable{typ: -1}
			if typ != "" {
				v, err := strconv.ParseUint(strings.TrimSuffix(typ, ")"), 0, 16)
				if err != nil {
					t.Fatalf("doc.go heading %q: %v", h, err)
				}
				cur.typ = int(v)
			}
			tables[name] = cur
			continue
		}
		w := strings.Fields(line)
		if cur == nil || !strings.HasPrefix(line, "\t") || len(w) < 3 {
			continue
		}
		off, err := strconv.Atoi(w[0])
		if err != nil {
			continue // a column heading or a continued meaning
		}
		size := -1
		if w[1] != "n" {
			if size, err = strconv.Atoi(w[1]); err != nil {
				t.Fatalf("doc.go: bad size in %q", line)
			}
		}
		cur.rows = append(cur.rows, docRow{off, size, w[2]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return tables
}

// TestDocMatchesEncoder reads each doc.go table's fields out of the
// encoder's bytes for a sample with distinct values, so neither the doc
// nor the encoder can move a field alone; it also checks the type codes,
// that the rows tile the fixed part, that each field is aligned to its
// size, and the size constants.
func TestDocMatchesEncoder(t *testing.T) {
	doc := readDocTables(t)
	type want struct {
		typ    int
		bytes  []byte // the encoding the table describes
		size   int    // its fixed part
		fields map[string]uint64
		text   string
	}
	wants := map[string]want{}
	for _, s := range samples() {
		b := mustAppend(t, s.id, s.msg)
		size := len(b) - HeaderSize
		switch s.msg.(type) {
		case *Grant:
			size = GrantSize
			ext := s.msg.(*Grant).Extents[1]
			wants["Extent"] = want{-1, b[HeaderSize+GrantSize+ExtentSize:], ExtentSize, map[string]uint64{
				"file_off": ext.FileOff, "pool_off": ext.PoolOff, "length": ext.Length,
				"flags": uint64(ext.Flags), "reserved": 0}, ""}
		case *ErrorReply:
			size = ErrorSize
		case *Release:
			wants["Header"] = want{-1, b, HeaderSize, map[string]uint64{"magic": uint64(Magic),
				"version": uint64(Version), "type": uint64(TypeRelease), "id": uint64(s.id), "length": ReleaseSize}, ""}
		}
		if fixed, ok := fixedSize[s.msg.Type()]; ok && fixed != size {
			t.Errorf("%s: encodes %d body bytes, its size constant says %d", s.name, size, fixed)
		}
		wants[s.name] = want{int(s.msg.Type()), b[HeaderSize:], size, s.fields, s.text}
	}
	for name, tab := range doc {
		if _, ok := wants[name]; !ok && len(tab.rows) > 0 {
			t.Errorf("doc.go has a table %q this test does not check: add a sample", name)
		}
	}
	for name, w := range wants {
		tab, ok := doc[name]
		if !ok {
			t.Errorf("doc.go has no heading %q", name)
			continue
		}
		if tab.typ != w.typ {
			t.Errorf("doc.go %s: type %#x, the constant is %#x", name, tab.typ, w.typ)
		}
		checkDocRows(t, name, tab.rows, w.bytes, w.size, w.fields, w.text)
	}
}

func checkDocRows(t *testing.T, name string, rows []docRow, b []byte, size int, fields map[string]uint64, text string) {
	t.Helper()
	at := 0
	for _, r := range rows {
		if r.off != at {
			t.Errorf("doc.go %s %s: offset %d, the previous row ends at %d", name, r.field, r.off, at)
		}
		if r.size < 0 {
			if got := string(b[r.off:]); got != text {
				t.Errorf("doc.go %s %s: the encoder wrote %q there, want %q", name, r.field, got, text)
			}
			continue
		}
		at = r.off + r.size
		if r.off%r.size != 0 {
			t.Errorf("doc.go %s %s: at %d, not a multiple of its size (package doc, Layout)", name, r.field, r.off)
		}
		want, ok := fields[r.field]
		if !ok || at > len(b) {
			t.Errorf("doc.go %s: field %q (at %d, %d bytes) is not in the encoding", name, r.field, r.off, r.size)
			continue
		}
		var got uint64
		for i := r.size - 1; i >= 0; i-- {
			got = got<<8 | uint64(b[r.off+i])
		}
		if got != want {
			t.Errorf("doc.go %s %s: the encoder wrote %#x at %d, want %#x", name, r.field, got, r.off, want)
		}
	}
	if at != size {
		t.Errorf("doc.go %s: the rows cover %d bytes, the encoding's fixed part is %d", name, at, size)
	}
	if len(rows) < len(fields) {
		t.Errorf("doc.go %s: %d rows for %d fields", name, len(rows), len(fields))
	}
}
