package fs

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/hanwen/go-fuse/v2/posixtest"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding"
	"github.com/dnnfs/dnnfs/internal/pmemtest"
	"github.com/dnnfs/dnnfs/pmem"
)

// testPoolSize is sparse: only what the tests write is allocated.
const testPoolSize = 512 << 20

// mountPool formats an emulated pool in a temporary directory and mounts it
// in this process with the daemon's own mount options (allow_other, as the
// conformance runs use). Cleanup unmounts, closes the pool and requires
// fsck to find it clean.
func mountPool(t *testing.T) string {
	t.Helper()
	mnt, _ := mountPoolFS(t, false)
	return mnt
}

// mountPoolFS is mountPool, also returning the mounted pool; with ssd, the
// mount has an SSD tier (one directory) for embedding tables.
func mountPoolFS(t *testing.T, ssd bool) (string, *core.FS) {
	t.Helper()
	return mountPoolWith(t, ssd, false, nil)
}

// mountPoolWith is mountPoolFS with the daemon's --read-cache option and
// the mount options changed by tweak (nil: as the daemon mounts).
func mountPoolWith(t testing.TB, ssd, readCache bool, tweak func(*gofs.Options)) (string, *core.FS) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root (DirectMount, allow_other)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE: %v", err)
	}
	dir := t.TempDir()
	poolPath := filepath.Join(dir, "pool")
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := pmem.Create(poolPath, testPoolSize, false); err != nil {
		t.Fatal(err)
	}
	m, err := pmem.Open(poolPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := core.Format(m, 0, 0); err != nil {
		m.Close()
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t)
	p, _, err := core.Open(m, core.Options{Log: log})
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	var tier *embedding.Tier
	closeTier := func() {
		if tier != nil {
			if err := tier.Close(); err != nil {
				t.Errorf("closing the SSD tier: %v", err)
			}
		}
	}
	if ssd {
		ssdDir := filepath.Join(dir, "ssd")
		if err := os.Mkdir(ssdDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if tier, err = embedding.Open(p, embedding.Options{Devices: []embedding.DeviceSpec{{Dir: ssdDir,
			Model: embedding.Model{Channels: embedding.DefaultChannels}}}, Log: log}); err != nil {
			p.Close()
			m.Close()
			t.Fatal(err)
		}
	}
	mo := MountOptions(poolPath, true, log)
	mo.Debug = os.Getenv("DNNFS_FUSE_DEBUG") != ""
	if tweak != nil {
		tweak(mo)
	}
	server, err := Mount(mnt, Root(p, Options{Log: log, Tier: tier, ReadCache: readCache}), p, mo, log)
	if err != nil {
		closeTier()
		p.Close()
		m.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unmount(t, server, mnt)
		closeTier()
		if err := p.Close(); err != nil {
			t.Errorf("closing the pool: %v", err)
		}
		pmemtest.CheckNow(t, m)
		if err := m.Close(); err != nil {
			t.Errorf("closing the medium: %v", err)
		}
	})
	return mnt, p
}

// unmount retries while the mount is busy (a failed test may still hold a
// descriptor until its deferred closes run), then detaches it.
func unmount(t testing.TB, server *fuse.Server, mnt string) {
	for i := 0; i < 50; i++ {
		if err := server.Unmount(); err == nil {
			server.Wait()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("unmount %s: still busy; detaching", mnt)
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		t.Errorf("unmount %s: %v", mnt, err)
	}
	server.Wait()
}

// posixSkip lists posixtest cases that cannot pass, with the reason.
var posixSkip = map[string]string{
	// The case takes a write lock and then a read lock on two descriptors
	// of one process; POSIX record locks belong to the process, so the
	// second succeeds on tmpfs and ext4 too (go-fuse's own run skips it).
	"FcntlFlockLocksFile": "fails on tmpfs too: POSIX record locks of one process never conflict",
}

// TestPosix runs every go-fuse posixtest case against a fresh dnnfs mount,
// each in its own pool so that fsck judges what that case left behind.
func TestPosix(t *testing.T) {
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if why, ok := posixSkip[name]; ok {
				t.Skip(why)
			}
			posixtest.All[name](t, mountPool(t))
		})
	}
}
