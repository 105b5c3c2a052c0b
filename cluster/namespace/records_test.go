package namespace_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/tests/clusterenv"
)

func TestChunksRanges(t *testing.T) {
	for _, tc := range []struct {
		idx  []namespace.ChunkIdx
		want string
	}{
		{nil, ""},
		{[]namespace.ChunkIdx{0}, "0"},
		{[]namespace.ChunkIdx{3, 1, 2, 0, 7, 2}, "0-3,7"},
		{[]namespace.ChunkIdx{9, 5, 6, 10, 4294967295}, "5-6,9-10,4294967295"},
	} {
		c := namespace.NewChunks(tc.idx...)
		if got := c.String(); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.idx, got, tc.want)
		}
		back, err := namespace.ParseChunks(tc.want)
		if err != nil || !back.Equal(c) {
			t.Errorf("ParseChunks(%q): %v %v", tc.want, back, err)
		}
	}
	for _, bad := range []string{",", "1-", "-1", "3-1", "a", "1,,2", "0-4294967296", "0-2000000"} {
		if _, err := namespace.ParseChunks(bad); !errors.Is(err, namespace.ErrInvalid) {
			t.Errorf("ParseChunks(%q): %v, want ErrInvalid", bad, err)
		}
	}
	if c := namespace.ChunkRange(2, 5); c.String() != "2-4" || !c.Has(4) || c.Has(5) || c.Len() != 3 {
		t.Errorf("ChunkRange(2, 5) = %v", c)
	}
}

// FuzzParseChunks: whatever parses writes back to a string that parses to
// the same set.
func FuzzParseChunks(f *testing.F) {
	for _, s := range []string{"", "0", "0-3,7", "5-6,9-10", "1,1,1", "3-3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := namespace.ParseChunks(s)
		if err != nil {
			return
		}
		back, err := namespace.ParseChunks(c.String())
		if err != nil || !back.Equal(c) {
			t.Fatalf("%q → %q → %v %v", s, c.String(), back, err)
		}
	})
}

func TestIDs(t *testing.T) {
	a, b := namespace.NewFileID(), namespace.NewFileID()
	if a == b || a.Valid() != nil || namespace.NewFSID().Valid() != nil {
		t.Fatalf("ids %s %s", a, b)
	}
	for _, bad := range []namespace.FileID{"", "ABCDEF0123456789abcdef0123456789", "0123", namespace.FileID(strings.Repeat("g", 32))} {
		if !errors.Is(bad.Valid(), namespace.ErrInvalid) {
			t.Errorf("file id %q valid", bad)
		}
	}
	for _, good := range []namespace.NodeID{"a", "node-1.rack_2", namespace.NodeID(strings.Repeat("z", 64))} {
		if err := good.Valid(); err != nil {
			t.Errorf("node id %q: %v", good, err)
		}
	}
}

// TestOpenBadConfig: bad endpoints and TLS give one-line errors.
func TestOpenBadConfig(t *testing.T) {
	e := clusterenv.StartEtcd(t, 1)
	ctx := context.Background()
	for _, ep := range []string{"ftp://127.0.0.1:1", "http://", "http://127.0.0.1:1/path"} {
		if _, err := namespace.Open(ctx, cfg([]string{ep}, "a")); !errors.Is(err, namespace.ErrInvalid) {
			t.Errorf("endpoint %q: %v, want ErrInvalid", ep, err)
		}
	}
	c := cfg([]string{strings.Replace(e.Endpoint(0), "http://", "https://", 1)}, "a")
	c.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	c.DialTimeout = time.Second
	_, err := namespace.Open(ctx, c)
	if !errors.Is(err, namespace.ErrUnavailable) || !strings.Contains(err.Error(), "TLS handshake") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("https to a plain endpoint: %v, want a one-line ErrUnavailable about TLS", err)
	}
	t.Log(err)
	// The bare host:port form is plain HTTP.
	ns, err := namespace.Open(ctx, cfg([]string{strings.TrimPrefix(e.Endpoint(0), "http://")}, "a"))
	if err != nil {
		t.Fatal(err)
	}
	ns.Close()
}

// TestTLS: https endpoints with a client certificate; a client without
// one, or not trusting the server's CA, gets a one-line error.
func TestTLS(t *testing.T) {
	certs := clusterenv.NewTestCerts(t)
	e := clusterenv.StartEtcdTLS(t, 1, certs)
	ctx := context.Background()
	c := cfg(e.Endpoints(), "a")
	c.TLS = certs.ClientTLS()
	ns, err := namespace.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	id := namespace.NewFileID()
	if _, err := ns.Commit(ctx, "f", id, 0, rec(1, 1), namespace.NewChunks(0)); err != nil {
		t.Fatal(err)
	}
	if got, err := ns.Lookup(ctx, "f"); err != nil || got != id {
		t.Fatalf("Lookup over TLS: %s %v", got, err)
	}
	noCert := certs.ClientTLS()
	noCert.Certificates = nil
	untrusting := certs.ClientTLS()
	untrusting.RootCAs = nil
	for name, tc := range map[string]*tls.Config{"no client certificate": noCert, "unknown CA": untrusting} {
		c := cfg(e.Endpoints(), "b")
		c.TLS, c.DialTimeout = tc, time.Second
		_, err := namespace.Open(ctx, c)
		if !errors.Is(err, namespace.ErrUnavailable) || !strings.Contains(err.Error(), "TLS handshake") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line ErrUnavailable about the TLS handshake", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}
