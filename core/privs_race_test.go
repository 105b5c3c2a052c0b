package core

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/lock"
)

// holdWhole takes in's whole-file lock, runs op in a goroutine, waits
// until op queues behind the lock, runs meanwhile, releases the lock and
// returns op's error. It puts a change by another caller (meanwhile)
// between what op reads before its lock wait and what it does after.
func holdWhole(t *testing.T, in *Inode, op func() error, meanwhile func()) error {
	t.Helper()
	l := &lock.Lock{Mode: lock.Exclusive, Start: 0, End: lock.Whole}
	if err := in.locks.Acquire(context.Background(), l, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- op() }()
	for {
		if _, wait, _ := in.locks.Snapshot(); len(wait) > 0 {
			break
		}
		runtime.Gosched()
	}
	meanwhile()
	in.locks.Release(l)
	return <-done
}

// TestDataChangeKillsPrivsSetWhileWaiting: setuid set on a file while a
// write, fallocate or truncate by a caller without CAP_FSETID waits for
// its range lock is cleared by that change, as if set before it began
// (the kernel decides under the inode lock, file_remove_privs).
func TestDataChangeKillsPrivsSetWhileWaiting(t *testing.T) {
	fs, _ := openTestPool(t)
	nobody := Caller{TID: startNobody(t), UID: 65534, GID: 65534}
	ops := map[string]func(in *Inode) error{
		"write": func(in *Inode) error {
			_, killed, err := fs.WritePrivsAs(nobody, in, 0, []byte("x"), false)
			if err == nil && !killed {
				t.Error("the write does not report the setuid bit it cleared")
			}
			return err
		},
		"fallocate": func(in *Inode) error { return fs.FallocateAs(nobody, in, 0, 8192, 0) },
		"truncate": func(in *Inode) error {
			size := uint64(1)
			return fs.SetattrAs(nobody, in, SetAttr{Size: &size})
		},
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			in := mustCreate(t, fs, name, []byte("data"))
			suid := uint32(0o4755)
			err := holdWhole(t, in, func() error { return op(in) }, func() {
				if err := fs.Setattr(in, SetAttr{Mode: &suid}); err != nil {
					t.Error(err)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if m := in.Mode(); m&modeSUID != 0 {
				t.Errorf("mode %#o after the %s: setuid kept for a caller without CAP_FSETID", m, name)
			}
			if m := in.Mode(); m&0o777 != 0o755 {
				t.Errorf("mode %#o: permission bits changed", m)
			}
		})
	}
}

// TestWriteRefusedByFlagSetWhileWaiting: a file made immutable (or
// append-only) while a write waits for its range lock refuses the write,
// as if the flag had been set before it began.
func TestWriteRefusedByFlagSetWhileWaiting(t *testing.T) {
	fs, _ := openTestPool(t)
	for _, c := range []struct {
		flag uint32
		want error
	}{{format.InodeImmutable, ErrImmutable}, {format.InodeAppend, ErrAppendOnly}} {
		in := mustCreate(t, fs, fmt.Sprintf("f%d", c.flag), []byte("data"))
		err := holdWhole(t, in, func() error {
			_, err := fs.Write(in, 0, []byte("x"), false)
			return err
		}, func() {
			if err := fs.SetFileFlags(Caller{}, in, c.flag); err != nil {
				t.Error(err)
			}
		})
		if !errors.Is(err, c.want) {
			t.Errorf("write after flags %#x were set: %v, want %v", c.flag, err, c.want)
		}
		if got := fileBytes(t, fs, in); string(got) != "data" {
			t.Errorf("file reads %q after the refused write", got)
		}
		if err := fs.SetFileFlags(Caller{}, in, 0); err != nil {
			t.Fatal(err)
		}
	}
}
