package fs

import (
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/format"
)

// The values of the writable virtual xattrs: what each accepts, and that a
// refusal names the bad key or value (the daemon logs it with EINVAL).
func TestParseXattrValues(t *testing.T) {
	if th, size, mode, err := parseSession("threads=4, size=1GiB,mode=read"); err != nil || th != 4 || size != 1<<30 || mode != format.SessionRead {
		t.Errorf("parseSession = %d, %d, %d, %v", th, size, mode, err)
	}
	if s, err := ParseTableSpec("rows=1000,dim=64,dtype=bf16,shard=1MiB,shard_rows=8,shards=125,row_bytes=128"); err != nil ||
		s != (TableSpec{Rows: 1000, Dim: 64, Dtype: format.DtypeBF16, ShardBytes: 1 << 20}) {
		t.Errorf("ParseTableSpec = %+v, %v", s, err)
	}
	for _, c := range []struct {
		in, want string
	}{
		{"threads=4", "threads and size are required"},
		{"threads=x,size=1M", `threads="x": want an integer`},
		{"threads=4,size=lots", `size="lots": cannot parse size`},
		{"threads=4,size=1M,mode=append", `mode="append": want write or read`},
		{"threads=4,size=1M,speed=2", `unknown key "speed" (want threads, size, mode)`},
		{"threads=4,,size=1M", "item 2 of 3 is empty"},
		{"threads=4,threads=5,size=1M", `key "threads" given twice`},
		{"threads", `"threads" is not key=value`},
	} {
		if _, _, _, err := parseSession(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseSession(%q) = %v, want an error with %q", c.in, err, c.want)
		}
	}
	for _, c := range []struct {
		in, want string
	}{
		{"rows=10,dim=4", "rows, dim and dtype are required"},
		{"rows=0,dim=4,dtype=f32", `rows="0": want an integer from 1`},
		{"rows=10,dim=4294967296,dtype=f32", `dim="4294967296": want an integer from 1 to 4294967295`},
		{"rows=10,dim=4,dtype=f64", `dtype="f64": want f32, f16 or bf16`},
		{"rows=10,dim=4,dtype=f32,shard=0", `shard="0": size "0": must be more than 0`},
		{"rows=10,dim=4,dtype=f32,cols=3", `unknown key "cols" (want rows, dim, dtype, shard)`},
		{"rows=10;dim=4", `rows="10;dim=4": want an integer`},
		{"", "empty value"},
	} {
		if _, err := ParseTableSpec(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseTableSpec(%q) = %v, want an error with %q", c.in, err, c.want)
		}
	}
}
