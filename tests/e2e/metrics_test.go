package e2e_test

import (
	"context"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/internal/metrics"
	"github.com/dnnfs/dnnfs/tests/harness"
)

// metricsURL is the /metrics URL a daemon logged when it bound
// --metrics-listen (before it mounted, so the line is in the log).
var metricsURL = regexp.MustCompile(`http://[0-9.:\[\]]+/metrics`)

func scrapeDaemon(t *testing.T, url string) metrics.Families {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := metrics.Scrape(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func metricValue(t *testing.T, f metrics.Families, name string, labels ...string) float64 {
	t.Helper()
	v, ok := f.Value(name, labels...)
	if !ok {
		t.Fatalf("scrape has no %s%v", name, labels)
	}
	return v
}

// TestMetricsScrape mounts with --metrics-listen 127.0.0.1:0, writes and
// reads a file, and scrapes the daemon over HTTP: the counters moved by
// what the test did.
func TestMetricsScrape(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "64MiB", "--metrics-listen", "127.0.0.1:0")
	log, err := os.ReadFile(fs.LogPath)
	must(t, err)
	url := metricsURL.FindString(string(log))
	if url == "" {
		t.Fatalf("no metrics URL in the daemon log:\n%s", fs.LogTail(20))
	}
	before := scrapeDaemon(t, url)
	const n = 2<<20 + 777
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i % 251)
	}
	f, err := os.Create(fs.Path("model.pt"))
	must(t, err)
	_, err = f.Write(data)
	must(t, err)
	must(t, f.Sync())
	must(t, f.Close())
	got, err := os.ReadFile(fs.Path("model.pt"))
	must(t, err)
	if len(got) != n {
		t.Fatalf("read back %d bytes, want %d", len(got), n)
	}
	after := scrapeDaemon(t, url)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dnnfs_bytes_total", []string{"op", "write"}, n},
		{"dnnfs_bytes_total", []string{"op", "read"}, n},
		{"dnnfs_operations_total", []string{"op", "fsync"}, 1},
		{"dnnfs_fuse_request_duration_seconds_count", []string{"op", "create"}, 1},
		{"dnnfs_fuse_request_duration_seconds_count", []string{"op", "fsync"}, 1},
	} {
		if d := metricValue(t, after, c.name, c.labels...) - metricValue(t, before, c.name, c.labels...); d != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, d, c.want)
		}
	}
	if v := metricValue(t, after, "dnnfs_pool_blocks"); v <= 0 {
		t.Errorf("dnnfs_pool_blocks = %v", v)
	}
}

// TestMetricsListenRefused: an address other hosts could reach is refused
// with one line naming the flags, a port in use fails the mount, and
// neither changes the pool or leaves a mount.
func TestMetricsListenRefused(t *testing.T) {
	t.Parallel()
	pool := harness.Mkfs(t, "16MiB")
	mnt := mountDir(t)
	for _, addr := range []string{"0.0.0.0:9464", ":9464", "192.0.2.1:9464", "[::]:9464"} {
		stderr := badRun(t, pool, []int{2}, "mount", "--pool", pool, mnt, "--metrics-listen", addr)
		for _, want := range []string{"--metrics-listen", "--metrics-allow-remote", "loopback"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("--metrics-listen %s: %q does not say %q", addr, strings.TrimSpace(stderr), want)
			}
		}
	}
	stderr := badRun(t, pool, []int{2}, "mount", "--pool", pool, mnt, "--metrics-listen", "127.0.0.1")
	if !strings.Contains(stderr, "--metrics-listen") || !strings.Contains(stderr, "HOST:PORT") {
		t.Errorf("--metrics-listen without a port: %q", strings.TrimSpace(stderr))
	}
	// A port another program holds: the mount fails before it mounts.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	stderr = badRun(t, pool, []int{1}, "mount", "--pool", pool, mnt, "--metrics-listen", ln.Addr().String())
	if !strings.Contains(stderr, "--metrics-listen") || !strings.Contains(stderr, "address already in use") {
		t.Errorf("--metrics-listen on a port in use: %q", strings.TrimSpace(stderr))
	}
	if isMountPoint(t, mnt) {
		t.Errorf("%s was mounted by a refused mount", mnt)
	}
}

// TestMetricsAllowRemote: --metrics-allow-remote lets the endpoint bind
// every interface.
func TestMetricsAllowRemote(t *testing.T) {
	t.Parallel()
	fs := newFS(t, "16MiB", "--metrics-listen", "0.0.0.0:0", "--metrics-allow-remote")
	log, err := os.ReadFile(fs.LogPath)
	must(t, err)
	url := metricsURL.FindString(string(log))
	// Go binds 0.0.0.0 as [::] (both IPv4 and IPv6) where it can.
	if !strings.HasPrefix(url, "http://0.0.0.0:") && !strings.HasPrefix(url, "http://[::]:") {
		t.Fatalf("metrics URL %q in the daemon log, want one on every interface:\n%s", url, fs.LogTail(20))
	}
	// The unspecified address as a destination is this host.
	if v := metricValue(t, scrapeDaemon(t, url), "dnnfs_pool_blocks"); v <= 0 {
		t.Errorf("dnnfs_pool_blocks = %v", v)
	}
}
