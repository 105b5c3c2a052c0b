package main

import (
	"reflect"
	"strings"
	"testing"
)

// The -o options become the flags they name (the mount helper's e2e test
// runs them through mount(8); this one covers the syntax's corners).
func TestApplyMountOptions(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    map[string]string // flag -> value after parsing
		remount bool
		err     string
	}{
		{args: []string{"-o", "defaults,_netdev,nofail,x-systemd.automount,rw,user=alice,allow_other", "P", "M"},
			want: map[string]string{"allow-other": "true", "read-only": "false"}},
		{args: []string{"-o", "ro,noatime,commit_interval=2s,lock=file", "P", "M"},
			want: map[string]string{"read-only": "true", "atime": "noatime", "commit-interval": "2s", "lock": "file"}},
		{args: []string{"-o", "classes=64,256,class-weights=8,2,1,ssd=/d:bw=800MiB/s,lat=90us,nodev", "P", "M"},
			want: map[string]string{"classes": "64,256", "class-weights": "8,2,1", "ssd": `["/d:bw=800MiB/s,lat=90us"]`, "nodev": "true"}},
		// mount(8) appends the command line's options to fstab's: the last wins.
		{args: []string{"-o", "lock=file", "-o", "lock=range", "P", "M"}, want: map[string]string{"lock": "range"}},
		// A flag on the command line wins over -o.
		{args: []string{"--lock", "file", "-o", "lock=range", "P", "M"}, want: map[string]string{"lock": "file"}},
		{args: []string{"-o", "remount,ro,user_id=0", "M"}, remount: true},
		{args: []string{"-o", "bogus", "P", "M"}, err: "-o bogus: not a dnnfs mount option"},
		{args: []string{"-o", "lock", "P", "M"}, err: "-o lock: needs a value"},
		{args: []string{"-o", "commit-interval=soon", "P", "M"}, err: "-o commit-interval=soon: invalid argument"},
		{args: []string{"-o", "ro,,rw", "P", "M"}, err: "item 2 of 3 is empty"},
	} {
		fl := newFlags("mount")
		fl.String("pool", "", "")
		fl.StringArrayP("options", "o", nil, "")
		for _, b := range []string{"allow-other", "read-only", "nodev"} {
			fl.Bool(b, false, "")
		}
		for _, s := range []string{"atime", "lock", "classes", "class-weights"} {
			fl.String(s, "", "")
		}
		fl.Duration("commit-interval", 0, "")
		fl.StringArray("ssd", nil, "")
		if err := parse(fl, tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		opts, _ := fl.GetStringArray("options")
		mo, err := applyMountOptions(fl, opts)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || mo.remount != tc.remount {
			t.Errorf("%v: remount %v, error %v; want %v, nil", tc.args, mo.remount, err, tc.remount)
			continue
		}
		got := map[string]string{}
		for k := range tc.want {
			got[k] = fl.Lookup(k).Value.String()
		}
		if tc.want != nil && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: flags %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestMountHelperArgs(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"/sbin/mount.fuse.dnnfs", "/p", "/m", "-o", "rw,ro"}, []string{"/sbin/mount.fuse.dnnfs", "mount", "-o", "rw,ro", "/p", "/m"}},
		{[]string{"/sbin/mount.dnnfs", "/p", "/m", "-n", "-v", "-orw", "-t", "dnnfs"}, []string{"/sbin/mount.dnnfs", "mount", "-o", "rw", "/p", "/m"}},
		{[]string{"dnnfs", "/var/lib/dnnfs/pool", "/mnt/params", "-o", "ro"}, []string{"dnnfs", "mount", "-o", "ro", "/var/lib/dnnfs/pool", "/mnt/params"}},
		{[]string{"dnnfs", "mount", "--pool", "p", "m"}, []string{"dnnfs", "mount", "--pool", "p", "m"}},
	} {
		if got := mountHelperArgs(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: %v, want %v", tc.in, got, tc.want)
		}
	}
}
