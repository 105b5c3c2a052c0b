// Package clusterenv starts the real engines the cluster tests run against
// (DESIGN §Cluster): an N-member etcd cluster here, an S3 server beside
// it. Every server is a real process on 127.0.0.1 ports chosen free at run time, with
// its own t.TempDir data directory, and is killed at t.Cleanup by the pid
// this package started, never by name.
//
// A test that needs an engine skips when its binary is missing, unless
// DNNFS_REQUIRE_CLUSTER is set (`make test` sets it after `make deps`
// installed the engines): then a missing binary fails the test, so CI
// never passes by skipping.
//
// etcd's binary is, in this order: $DNNFS_ETCD_BIN, `etcd` on $PATH, or
// $GOPATH/bin/etcd, where `make deps` builds the server of the Go client's
// release line from the module pinned in etcdserver/go.mod.
//
// This package must not be imported by anything but tests.
package clusterenv
