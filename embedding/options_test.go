package embedding

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// The command-line option values of the tier: what each accepts, and
// that a refusal names the flag and the bad key or value.
func TestParseOptions(t *testing.T) {
	w, err := ParseWeights("free=2, bw=0.5")
	if err != nil || w != (Weights{Free: 2, BW: 0.5, Spread: 1}) {
		t.Errorf("ParseWeights = %+v, %v", w, err)
	}
	d, err := ParseDeviceSpec("/ssd/a:b:bw=800MiB/s,lat=90us,channels=8,cap=64GiB,sector=512")
	if err != nil || d.Dir != "/ssd/a:b" || d.Model != (Model{BW: 800 << 20, Lat: 90 * time.Microsecond, Channels: 8, Cap: 64 << 30, Sector: 512}) {
		t.Errorf("ParseDeviceSpec = %+v, %v", d, err)
	}
	if d, err := ParseDeviceSpec("/ssd/x"); err != nil || d.Dir != "/ssd/x" || d.Model != (Model{Channels: DefaultChannels}) {
		t.Errorf("ParseDeviceSpec plain = %+v, %v", d, err)
	}
	if cw, err := ParseClassWeights("16, 4,1"); err != nil || cw != [maxClasses]int{16, 4, 1} {
		t.Errorf("ParseClassWeights = %v, %v", cw, err)
	}
	if s, m, err := ParseClasses("128,512"); err != nil || s != 128 || m != 512 {
		t.Errorf("ParseClasses = %d, %d, %v", s, m, err)
	}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"weights: unknown key", second(ParseWeights("free=1,heat=2")), `--placement "free=1,heat=2": unknown key "heat"`},
		{"weights: negative", second(ParseWeights("bw=-1")), `bw="-1": want a number >= 0`},
		{"weights: empty", second(ParseWeights("")), `--placement "": empty value`},
		{"weights: twice", second(ParseWeights("bw=1,bw=2")), `key "bw" given twice`},
		{"ssd: bw", second(ParseDeviceSpec("/d:bw=fast")), `--ssd /d:bw=fast: bw="fast": want a rate like 800MiB/s`},
		{"ssd: lat", second(ParseDeviceSpec("/d:lat=soon")), `lat="soon": want a duration`},
		{"ssd: channels", second(ParseDeviceSpec("/d:channels=0")), `channels="0": want an integer from 1 to 256`},
		{"ssd: sector", second(ParseDeviceSpec("/d:sector=1000")), `sector="1000": want a power of two from 512 to 4096`},
		{"ssd: cap", second(ParseDeviceSpec("/d:cap=1K")), `cap="1K": want a size like 64GiB`},
		{"ssd: unknown", second(ParseDeviceSpec("/d:speed=1")), `unknown key "speed" (want bw, lat, channels, cap, sector)`},
		{"ssd: empty item", second(ParseDeviceSpec("/d:bw=1M,")), `item 2 of 2 is empty`},
		{"ssd: no dir", second(ParseDeviceSpec(":bw=1M")), `no directory`},
		{"class weights: two", second(ParseClassWeights("16,4")), `want three weights`},
		{"class weights: zero", second(ParseClassWeights("16,0,1")), `weight "0": want 1 .. 1000`},
		{"classes: order", third(ParseClasses("512,128")), `want two row thresholds`},
		{"classes: three", third(ParseClasses("1,2,3")), `want two row thresholds`},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, c.err, c.want)
		}
	}
}

func second[T any](_ T, err error) error        { return err }
func third[T, U any](_ T, _ U, err error) error { return err }

// --compute-elements: auto, or a count from 0 (on the loaders); the
// default leaves a core to FUSE and half a core per device to loaders,
// and is none when that leaves no core.
func TestParseComputeElements(t *testing.T) {
	for in, want := range map[string]int{"auto": ComputeAuto, "0": 0, "3": 3} {
		if n, err := ParseComputeElements(in); err != nil || n != want {
			t.Errorf("ParseComputeElements(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"", "-1", "x", "257"} {
		if _, err := ParseComputeElements(in); err == nil || !strings.Contains(err.Error(), "--compute-elements") {
			t.Errorf("ParseComputeElements(%q) = %v, want an error naming the flag", in, err)
		}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, c := range []struct{ procs, devs, want int }{
		{8, 2, 6}, {8, 4, 5}, {4, 1, 2}, {4, 2, 2}, {4, 4, 1},
		{2, 1, 0}, {2, 2, 0}, {1, 0, 0}, {8, 1000, 0}, // no core left: on the loaders
	} {
		runtime.GOMAXPROCS(c.procs)
		if n := DefaultComputeElements(c.devs); n != c.want {
			t.Errorf("DefaultComputeElements(%d) at GOMAXPROCS %d = %d, want %d", c.devs, c.procs, n, c.want)
		}
	}
}
