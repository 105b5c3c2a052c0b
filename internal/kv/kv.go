package kv

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dnnfs/dnnfs/internal/units"
)

// Item is one key=value (or, for a flag Parse was told about, a bare key).
type Item struct {
	Key   string
	Value string
	Flag  bool // a bare key: no '=' and no value
}

// Error is an option value that does not parse, or an item with a bad
// value: Key is "" for errors of the syntax.
type Error struct {
	Key   string
	Value string
	Flag  bool
	Msg   string
}

func (e *Error) Error() string {
	switch {
	case e.Key == "":
		return e.Msg
	case e.Flag:
		return e.Key + ": " + e.Msg
	}
	return fmt.Sprintf("%s=%q: %s", e.Key, e.Value, e.Msg)
}

// Parse splits s into its items, in order. Keys named in flags may stand
// alone (no '='); every other item must be key=value. Errors are *Error:
// an empty s, an empty item (",,", a trailing comma), an item without
// '=', an empty key, a key given twice, a flag given a value.
func Parse(s string, flags ...string) ([]Item, error) {
	parts, err := List(s)
	if err != nil {
		return nil, err
	}
	items := make([]Item, 0, len(parts))
	for _, p := range parts {
		k, v, ok := strings.Cut(p, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		isFlag := false
		for _, f := range flags {
			isFlag = isFlag || k == f
		}
		switch {
		case k == "":
			return nil, &Error{Msg: fmt.Sprintf("%q: empty key", p)}
		case !ok && !isFlag:
			return nil, &Error{Msg: fmt.Sprintf("%q is not key=value", p)}
		case ok && isFlag:
			return nil, &Error{Key: k, Value: v, Msg: "takes no value"}
		}
		for _, it := range items {
			if it.Key == k {
				return nil, &Error{Msg: fmt.Sprintf("key %q given twice", k)}
			}
		}
		items = append(items, Item{Key: k, Value: v, Flag: isFlag})
	}
	return items, nil
}

// List splits a comma-separated list ('16,4,1') into its trimmed items.
// Errors are *Error: an empty s or an empty item.
func List(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, &Error{Msg: "empty value"}
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
		if parts[i] == "" {
			return nil, &Error{Msg: fmt.Sprintf("item %d of %d is empty (two commas in a row, or one at an end)", i+1, len(parts))}
		}
	}
	return parts, nil
}

// Map returns the items as a map of key to value.
func Map(items []Item) map[string]string {
	m := make(map[string]string, len(items))
	for _, it := range items {
		m[it.Key] = it.Value
	}
	return m
}

// Errorf returns an *Error naming the item: key="value": message.
func (it Item) Errorf(format string, a ...any) error {
	return &Error{Key: it.Key, Value: it.Value, Flag: it.Flag, Msg: fmt.Sprintf(format, a...)}
}

// Unknown is the error of a key the caller does not take.
func (it Item) Unknown(want ...string) error {
	return &Error{Msg: fmt.Sprintf("unknown key %q (want %s)", it.Key, strings.Join(want, ", "))}
}

// Int reads the value as a decimal integer in [lo, hi].
func (it Item) Int(lo, hi int64) (int64, error) {
	n, err := strconv.ParseInt(it.Value, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, it.Errorf("want an integer from %d to %d", lo, hi)
	}
	return n, nil
}

// Uint reads the value as a decimal integer in [lo, hi].
func (it Item) Uint(lo, hi uint64) (uint64, error) {
	n, err := strconv.ParseUint(it.Value, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, it.Errorf("want an integer from %d to %d", lo, hi)
	}
	return n, nil
}

// Float reads the value as a finite number >= lo.
func (it Item) Float(lo float64) (float64, error) {
	f, err := strconv.ParseFloat(it.Value, 64)
	if err != nil || f < lo || f-f != 0 {
		return 0, it.Errorf("want a number >= %g", lo)
	}
	return f, nil
}

// Size reads the value as a byte size (units.ParseSize: 4096, 64KiB,
// 1GiB), positive.
func (it Item) Size() (int64, error) {
	n, err := units.ParseSize(it.Value)
	if err != nil {
		return 0, it.Errorf("%v", err)
	}
	return n, nil
}

// Duration reads the value as a Go duration (90us, 2ms), >= 0.
func (it Item) Duration() (time.Duration, error) {
	d, err := time.ParseDuration(it.Value)
	if err != nil || d < 0 {
		return 0, it.Errorf("want a duration like 90us")
	}
	return d, nil
}
