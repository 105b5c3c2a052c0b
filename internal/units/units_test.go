package units

import (
	"errors"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"4096", 4096}, {"1B", 1}, {"1KiB", 1 << 10}, {"3MiB", 3 << 20}, {"8GiB", 8 << 30},
		{"2TiB", 2 << 40}, {"1PiB", 1 << 50}, {"7PiB", 7 << 50}, {"8191PiB", 8191 << 50},
		{"1K", 1 << 10}, {"1M", 1 << 20}, {"1G", 1 << 30}, {"1T", 1 << 40}, {"1P", 1 << 50},
		{"1KB", 1e3}, {"1MB", 1e6}, {"1GB", 1e9}, {"1TB", 1e12}, {"1PB", 1e15}, {"9000PB", 9e18},
		{"1pib", 1 << 50}, {" 2 GiB ", 2 << 30}, {"9223372036854775807", 1<<63 - 1},
	} {
		got, err := ParseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"8192PiB", "8192P", "9300PB", "9223372036854775808", "99999999999999999999", "18446744073709551616KiB"} {
		if n, err := ParseSize(in); !errors.Is(err, ErrTooLarge) {
			t.Errorf("ParseSize(%q) = %d, %v; want ErrTooLarge", in, n, err)
		}
	}
	for _, in := range []string{"0", "0PiB", "0 KiB"} {
		if n, err := ParseSize(in); !errors.Is(err, ErrZero) {
			t.Errorf("ParseSize(%q) = %d, %v; want ErrZero", in, n, err)
		}
	}
	for _, in := range []string{"", "-1", "1.5GiB", "GiB", "1XiB", "1EiB", "bogus"} {
		if n, err := ParseSize(in); err == nil || errors.Is(err, ErrTooLarge) || errors.Is(err, ErrZero) {
			t.Errorf("ParseSize(%q) = %d, %v; want a parse error", in, n, err)
		}
	}
}
