package wire

import (
	"bytes"
	"testing"
)

// FuzzDecode: no input makes Decode panic, and whatever it accepts
// re-encodes to the same bytes (the codec has one encoding per message).
func FuzzDecode(f *testing.F) {
	for _, s := range samples() {
		b := mustAppend(f, s.id, s.msg)
		f.Add(b)
		f.Add(b[:HeaderSize]) // a header whose body is missing
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, m, err := Decode(b)
		if err != nil {
			if m != nil {
				t.Fatalf("Decode returned a message with error %v", err)
			}
			return
		}
		out, err := Append(nil, h.ID, m)
		if err != nil {
			t.Fatalf("Decode accepted %x as %+v, Append refuses it: %v", b, m, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", b, m, out)
		}
	})
}
