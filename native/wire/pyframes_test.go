package wire

import (
	"encoding/hex"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

// framesEnv names the file TestWriteFrames writes; tests/python sets it and
// hands the file to python/test_dnnfs_native_wire.py, so the Python codec
// is checked against this package's tables, not a copy of them.
const framesEnv = "DNNFS_WIRE_FRAMES"

// sentinelNames names each Err* of errors.go, for the Python side, whose
// WireError kinds carry the same names.
var sentinelNames = map[error]string{
	ErrShort: "ErrShort", ErrMagic: "ErrMagic", ErrVersion: "ErrVersion",
	ErrVersionRange: "ErrVersionRange", ErrType: "ErrType", ErrTooLarge: "ErrTooLarge",
	ErrBodyLength: "ErrBodyLength", ErrExtentCount: "ErrExtentCount", ErrTrailing: "ErrTrailing",
	ErrZeroLength: "ErrZeroLength", ErrOverflow: "ErrOverflow", ErrMode: "ErrMode",
	ErrFlags: "ErrFlags", ErrReserved: "ErrReserved", ErrNoLease: "ErrNoLease",
	ErrExtentOrder: "ErrExtentOrder", ErrBlockSize: "ErrBlockSize", ErrErrno: "ErrErrno",
	ErrText: "ErrText",
}

// TestSentinelNames: sentinelNames covers every Err* var of errors.go,
// so a new sentinel cannot be missed by the Python side.
func TestSentinelNames(t *testing.T) {
	want := errorsGoSentinels(t)
	var got []string
	for _, n := range sentinelNames {
		got = append(got, n)
	}
	sort.Strings(got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sentinelNames has %v; errors.go declares %v", got, want)
	}
}

func errorsGoSentinels(t testing.TB) []string {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if strings.HasPrefix(n.Name, "Err") {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	sort.Strings(names)
	return names
}

type jsonMessage struct {
	Type   string          `json:"type"`   // the Go type's name, e.g. "Grant"
	Fields json.RawMessage `json:"fields"` // the Go struct as encoding/json writes it
}

func messageJSON(t testing.TB, m Message) jsonMessage {
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return jsonMessage{reflect.TypeOf(m).Elem().Name(), b}
}

type goldenJSON struct {
	Name   string      `json:"name"`
	ID     RequestID   `json:"id"`
	Frame  string      `json:"frame"` // hex, from wire_test.go's golden
	Header Header      `json:"header"`
	Msg    jsonMessage `json:"msg"`
}

type malformedJSON struct {
	Name  string `json:"name"`
	Frame string `json:"frame"`
	Kind  string `json:"kind"` // the sentinel Decode returned
}

type refusedJSON struct {
	Msg  jsonMessage `json:"msg"`
	Kind string      `json:"kind"` // the sentinel Append returned
}

type jsonFrames struct {
	Sentinels []string        `json:"sentinels"`
	Golden    []goldenJSON    `json:"golden"`
	Malformed []malformedJSON `json:"malformed"`
	Refused   []refusedJSON   `json:"refused"`
}

// TestWriteFrames writes the golden frames, the malformed frames with the
// sentinel Decode returns for each, and the messages Append refuses, as
// JSON to $DNNFS_WIRE_FRAMES; it is skipped when that is unset.
func TestWriteFrames(t *testing.T) {
	path := os.Getenv(framesEnv)
	if path == "" {
		t.Skip(framesEnv + " not set: tests/python sets it")
	}
	out := jsonFrames{Sentinels: errorsGoSentinels(t)}
	for _, s := range samples() {
		frame := strings.NewReplacer(" ", "", "|", "").Replace(golden[s.name])
		b, err := hex.DecodeString(frame)
		if err != nil || frame == "" {
			t.Fatalf("%s: golden frame %q: %v", s.name, frame, err)
		}
		h, m, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: golden frame: %v", s.name, err)
		}
		out.Golden = append(out.Golden, goldenJSON{s.name, s.id, frame, h, messageJSON(t, m)})
	}
	for _, c := range malformedCases(t) {
		b := c.frame()
		_, _, err := Decode(b)
		name, ok := sentinelNames[err]
		if !ok {
			t.Fatalf("%s: Decode returned %v, not a sentinel", c.name, err)
		}
		out.Malformed = append(out.Malformed, malformedJSON{c.name, hex.EncodeToString(b), name})
	}
	for _, c := range appendRefuses {
		// JSON strings are UTF-8: a Go string that is not cannot reach
		// Python as is (test_dnnfs_native_wire.py has its own case).
		if e, ok := c.m.(*ErrorReply); ok && !utf8.ValidString(e.Text) {
			continue
		}
		_, err := Append(nil, 1, c.m)
		name, ok := sentinelNames[err]
		if !ok {
			t.Fatalf("Append(%+v) returned %v, not a sentinel", c.m, err)
		}
		out.Refused = append(out.Refused, refusedJSON{messageJSON(t, c.m), name})
	}
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d golden, %d malformed, %d refused messages written to %s", len(out.Golden), len(out.Malformed), len(out.Refused), path)
}
