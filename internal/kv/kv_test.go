package kv

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in    string
		flags []string
		want  []Item
		err   string // a piece of the error, "" for none
	}{
		{in: "a=1", want: []Item{{Key: "a", Value: "1"}}},
		{in: " a = 1 , b=x=y ,c=", want: []Item{{Key: "a", Value: "1"}, {Key: "b", Value: "x=y"}, {Key: "c"}}},
		{in: "rows=10,dim=4,dtype=f32\n", want: []Item{{Key: "rows", Value: "10"}, {Key: "dim", Value: "4"}, {Key: "dtype", Value: "f32"}}},
		{in: "shard=1,drop-replica", flags: []string{"drop-replica"}, want: []Item{{Key: "shard", Value: "1"}, {Key: "drop-replica", Flag: true}}},
		{in: "", err: "empty value"},
		{in: "  ", err: "empty value"},
		{in: "a=1,,b=2", err: "item 2 of 3 is empty"},
		{in: "a=1,", err: "item 2 of 2 is empty"},
		{in: ",a=1", err: "item 1 of 2 is empty"},
		{in: "a=1;b=2", want: []Item{{Key: "a", Value: "1;b=2"}}},
		{in: "a", err: `"a" is not key=value`},
		{in: "a=1,b", err: `"b" is not key=value`},
		{in: "=1", err: `"=1": empty key`},
		{in: "a=1,a=2", err: `key "a" given twice`},
		{in: "a=1, a =2", err: `key "a" given twice`},
		{in: "drop-replica=1", flags: []string{"drop-replica"}, err: `drop-replica="1": takes no value`},
		{in: "x,x", flags: []string{"x"}, err: `key "x" given twice`},
	} {
		got, err := Parse(c.in, c.flags...)
		switch {
		case c.err != "":
			var ke *Error
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.As(err, &ke) {
				t.Errorf("Parse(%q) = %v, %v; want an *Error with %q", c.in, got, err, c.err)
			}
		case err != nil:
			t.Errorf("Parse(%q): %v", c.in, err)
		case !reflect.DeepEqual(got, c.want):
			t.Errorf("Parse(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestList(t *testing.T) {
	if got, err := List(" 16, 4 ,1"); err != nil || !reflect.DeepEqual(got, []string{"16", "4", "1"}) {
		t.Errorf("List = %q, %v", got, err)
	}
	for _, in := range []string{"", "1,,2", "1,"} {
		if got, err := List(in); err == nil {
			t.Errorf("List(%q) = %q, want an error", in, got)
		}
	}
}

func TestValues(t *testing.T) {
	it := func(v string) Item { return Item{Key: "k", Value: v} }
	type res struct {
		v   any
		err string
	}
	get := func(v any, err error) res {
		if err != nil {
			return res{nil, err.Error()}
		}
		return res{v, ""}
	}
	for i, c := range []struct {
		got, want res
	}{
		{get(it("12").Int(1, 100)), res{int64(12), ""}},
		{get(it("0").Int(1, 100)), res{nil, `k="0": want an integer from 1 to 100`}},
		{get(it("x").Int(1, 100)), res{nil, `k="x": want an integer from 1 to 100`}},
		{get(it("-3").Int(-5, 5)), res{int64(-3), ""}},
		{get(it("18446744073709551615").Uint(0, 1<<64-1)), res{uint64(1<<64 - 1), ""}},
		{get(it("-1").Uint(0, 10)), res{nil, `k="-1": want an integer from 0 to 10`}},
		{get(it("11").Uint(0, 10)), res{nil, `k="11": want an integer from 0 to 10`}},
		{get(it("1.5").Float(0)), res{1.5, ""}},
		{get(it("-1").Float(0)), res{nil, `k="-1": want a number >= 0`}},
		{get(it("NaN").Float(0)), res{nil, `k="NaN": want a number >= 0`}},
		{get(it("+Inf").Float(0)), res{nil, `k="+Inf": want a number >= 0`}},
		{get(it("64KiB").Size()), res{int64(64 << 10), ""}},
		{get(it("0").Size()), res{nil, `k="0": size "0": must be more than 0`}},
		{get(it("90us").Duration()), res{90 * time.Microsecond, ""}},
		{get(it("-1s").Duration()), res{nil, `k="-1s": want a duration like 90us`}},
		{get(it("soon").Duration()), res{nil, `k="soon": want a duration like 90us`}},
	} {
		if c.got.v != c.want.v || !strings.HasPrefix(c.got.err, c.want.err) || (c.want.err == "") != (c.got.err == "") {
			t.Errorf("case %d: got %v %q, want %v %q", i, c.got.v, c.got.err, c.want.v, c.want.err)
		}
	}
	if err := (Item{Key: "x", Value: "1"}).Unknown("a", "b"); err.Error() != `unknown key "x" (want a, b)` {
		t.Errorf("Unknown: %v", err)
	}
	if err := (Item{Key: "drop", Flag: true}).Errorf("no"); err.Error() != "drop: no" {
		t.Errorf("flag Errorf: %v", err)
	}
	items, _ := Parse("a=1,b=2")
	if m := Map(items); !reflect.DeepEqual(m, map[string]string{"a": "1", "b": "2"}) {
		t.Errorf("Map = %v", m)
	}
}

// FuzzParse: Parse never panics; what it accepts has unique, non-empty,
// trimmed keys without '=' or ',' and parses again the same from its
// canonical form.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"a=1", "rows=10,dim=4,dtype=f32", "shard=1,drop", " a = b=c ,d=", ",", "a,,b", "=", "a=1,a=2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		items, err := Parse(s, "drop")
		if err != nil {
			var ke *Error
			if !errors.As(err, &ke) || err.Error() == "" {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		seen := map[string]bool{}
		var parts []string
		for _, it := range items {
			if it.Key == "" || seen[it.Key] || strings.ContainsAny(it.Key, "=,") || strings.TrimSpace(it.Key) != it.Key ||
				strings.Contains(it.Value, ",") || strings.TrimSpace(it.Value) != it.Value || it.Flag != (it.Key == "drop") {
				t.Fatalf("Parse(%q): bad item %+v", s, it)
			}
			seen[it.Key] = true
			if it.Flag {
				parts = append(parts, it.Key)
			} else {
				parts = append(parts, it.Key+"="+it.Value)
			}
		}
		again, err := Parse(strings.Join(parts, ","), "drop")
		if err != nil || !reflect.DeepEqual(again, items) {
			t.Fatalf("Parse(%q) = %+v; canonical form parses to %+v, %v", s, items, again, err)
		}
	})
}
