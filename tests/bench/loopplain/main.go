// Command loopplain is go-fuse's example/loopback with FUSE passthrough
// turned off: every read and write reaches the daemon, as they do in
// dnnfs, in loopback run without root, and on kernels without
// CONFIG_FUSE_PASSTHROUGH. `make bench` measures it next to the example
// itself (which, run as root on a kernel with passthrough, hands each
// opened file to the kernel, so its data path is the kernel's, not a FUSE
// daemon's; docs/BENCHMARKS.md, "Peers").
//
// Everything else is the example's: go-fuse's fs.LoopbackNode and
// fs.LoopbackFile, the same mount options and timeouts.
//
//	usage: loopplain [-q] [-directmount] MOUNTPOINT ORIGINAL
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is a loopback node whose files never ask for passthrough; its
// children are wrapped the same way.
type node struct{ *fs.LoopbackNode }

var (
	_ = (fs.NodeOpener)((*node)(nil))
	_ = (fs.NodeCreater)((*node)(nil))
	_ = (fs.NodeWrapChilder)((*node)(nil))
)

func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{ops.(*fs.LoopbackNode)}
}

// file hides LoopbackFile's passthrough descriptor; the rest is promoted.
type file struct{ *fs.LoopbackFile }

var _ = (fs.FilePassthroughFder)((*file)(nil))

// PassthroughFd says no: go-fuse then serves reads and writes itself.
func (f *file) PassthroughFd() (int, bool) { return -1, false }

func wrap(fh fs.FileHandle) fs.FileHandle {
	if lf, ok := fh.(*fs.LoopbackFile); ok {
		return &file{lf}
	}
	return fh
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	return wrap(fh), fl, errno
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	return in, wrap(fh), fl, errno
}

func main() {
	quiet := flag.Bool("q", false, "quiet")
	directmount := flag.Bool("directmount", false, "call mount(2) instead of fusermount")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: loopplain [-q] [-directmount] MOUNTPOINT ORIGINAL")
		os.Exit(2)
	}
	orig := flag.Arg(1)
	lroot, err := fs.NewLoopbackRoot(orig)
	if err != nil {
		log.Fatalf("loopplain: %s: %v", orig, err)
	}
	root := &node{lroot.(*fs.LoopbackNode)}
	sec := time.Second
	opts := &fs.Options{
		// As example/loopback: libfuse's default timeouts.
		AttrTimeout:     &sec,
		EntryTimeout:    &sec,
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			DirectMount: *directmount,
			FsName:      orig,
			Name:        "loopplain",
		},
	}
	if !*quiet {
		opts.Logger = log.New(os.Stderr, "", 0)
	}
	server, err := fs.Mount(flag.Arg(0), root, opts)
	if err != nil {
		log.Fatalf("loopplain: mount: %v", err)
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-c
		server.Unmount()
	}()
	server.Wait()
}
