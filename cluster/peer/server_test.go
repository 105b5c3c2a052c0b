package peer_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/peer"
)

// rawGet sends a request line as written (no client-side cleaning of the
// path) and returns the status and body.
func rawGet(t *testing.T, base, target string, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var req strings.Builder
	fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n", target)
	for k, v := range hdr {
		fmt.Fprintf(&req, "%s: %s\r\n", k, v)
	}
	req.WriteString("\r\n")
	if _, err := io.WriteString(conn, req.String()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// TestServerProtocol drives a node's chunk server by hand: the replies of
// the package doc's table, ranges, and that nothing outside the chunks is
// reachable.
func TestServerProtocol(t *testing.T) {
	e := newEnv(t)
	f := e.commit(8, 3)
	a := e.addNode("a", nodeOpts{})
	if _, _, err := a.peer.Fetch(context.Background(), f.ref(0)); err != nil {
		t.Fatal(err)
	}
	auth := map[string]string{"Authorization": "Bearer " + token}
	chunk0 := "/v1/chunks/" + string(f.id) + "/1/0"
	c0 := f.chunk(0)

	code, h, body := rawGet(t, a.srv.URL, chunk0, auth)
	if code != 200 || !bytes.Equal(body, c0) || h.Get(peer.CRCHeader) != f.m.Chunks[0].CRC32C.String() {
		t.Fatalf("GET chunk 0: %d, %d bytes, crc %q", code, len(body), h.Get(peer.CRCHeader))
	}
	for _, r := range []struct {
		rng        string
		code       int
		from, to   int // the bytes expected, [from, to)
		contentRng string
	}{
		{"bytes=0-9", 206, 0, 10, "bytes 0-9/65536"},
		{"bytes=100-", 206, 100, 65536, "bytes 100-65535/65536"},
		{"bytes=-16", 206, 65520, 65536, "bytes 65520-65535/65536"},
		{"bytes=65530-70000", 206, 65530, 65536, "bytes 65530-65535/65536"},
		{"bytes=-70000", 206, 0, 65536, "bytes 0-65535/65536"},
		{"bytes=65536-", 416, 0, 0, "bytes */65536"},
		{"bytes=5-1", 400, 0, 0, ""},
		{"bytes=0-1,5-6", 400, 0, 0, ""},
		{"bytes=-0", 400, 0, 0, ""},
		{"items=0-1", 400, 0, 0, ""},
		{"bytes=01-2", 400, 0, 0, ""},
	} {
		hdr := map[string]string{"Authorization": auth["Authorization"], "Range": r.rng}
		code, h, body := rawGet(t, a.srv.URL, chunk0, hdr)
		if code != r.code || h.Get("Content-Range") != r.contentRng || (code != 206) != (h.Get(peer.CRCHeader) == "") {
			t.Errorf("Range %s: %d %q crc %q, want %d %q (a crc only with bytes)", r.rng, code, h.Get("Content-Range"), h.Get(peer.CRCHeader), r.code, r.contentRng)
			continue
		}
		if code == 206 && (!bytes.Equal(body, c0[r.from:r.to]) || h.Get(peer.CRCHeader) != f.m.Chunks[0].CRC32C.String()) {
			t.Errorf("Range %s: wrong bytes or crc", r.rng)
		}
	}

	id := string(f.id)
	for target, want := range map[string]int{
		"/v1/chunks/" + id + "/1/1":   404, // not held
		"/":                           404,
		"/v1/chunks":                  404,
		"/v1/chunks/":                 400,
		"/etc/passwd":                 404,
		"/v1/chunks/../../etc/passwd": 400,
		"/v1/chunks/" + id + "/1/../../../etc/passwd":  400,
		"/v1/chunks/" + id + "/1/%2e%2e":               400,
		"/v1/chunks/" + id + "/1/0/":                   400,
		"/v1/chunks/" + id + "//1/0":                   400,
		"/v1/chunks/" + strings.ToUpper(id) + "/1/0":   400,
		"/v1/chunks/" + id[:31] + "/1/0":               400,
		"/v1/chunks/" + id + "/0/0":                    400, // versions start at 1
		"/v1/chunks/" + id + "/01/0":                   400,
		"/v1/chunks/" + id + "/1/+0":                   400,
		"/v1/chunks/" + id + "/1/4294967296":           400, // past uint32
		"/v1/chunks/" + id + "/1/0?fill=2":             400,
		"/v1/chunks/" + id + "/1/0?x=1":                400,
		"/v1/chunks/" + id + "/1/0?fill=1&fill=1":      400,
		"/v1/chunks/" + id + "/18446744073709551616/0": 400,
		"/v2/chunks/" + id + "/1/0":                    404,
		"/v1/chunks/" + id + "/1/0#frag":               400, // no fragments in a request line
		"//v1/chunks/" + id + "/1/0":                   404,
		"/v1/chunks/" + id + "/1/0?":                   200,
	} {
		if code, _, _ := rawGet(t, a.srv.URL, target, auth); code != want {
			t.Errorf("GET %s: %d, want %d", target, code, want)
		}
		// Without the token, nothing but 401, whatever the path.
		if code, h, _ := rawGet(t, a.srv.URL, target, nil); code != 401 || h.Get("WWW-Authenticate") == "" {
			t.Errorf("GET %s without a token: %d", target, code)
		}
	}
	for _, m := range []string{"POST", "PUT", "DELETE", "HEAD"} {
		req, _ := http.NewRequest(m, a.srv.URL+chunk0, strings.NewReader("x"))
		req.Header.Set("Authorization", auth["Authorization"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 {
			t.Errorf("%s: %d, want 405", m, resp.StatusCode)
		}
	}

	// ?fill=1: eight concurrent askers of a chunk nobody holds; one S3
	// GET, every asker served, and the node keeps it.
	before := a.store.Stats().ChunkGets
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, h, body := rawGet(t, a.srv.URL, "/v1/chunks/"+id+"/1/2?fill=1", auth)
			if code != 200 || !bytes.Equal(body, f.chunk(2)) || h.Get(peer.CRCHeader) != f.m.Chunks[2].CRC32C.String() {
				t.Errorf("fill: %d, %d bytes", code, len(body))
			}
		}()
	}
	wg.Wait()
	if n := a.store.Stats().ChunkGets - before; n != 1 {
		t.Errorf("8 concurrent fills made %d S3 GETs, want 1", n)
	}
	if code, _, _ := rawGet(t, a.srv.URL, "/v1/chunks/"+id+"/1/2", auth); code != 200 {
		t.Errorf("the filled chunk is not held: %d", code)
	}
	// A ranged fill serves the range of the filled chunk.
	code, h, body = rawGet(t, a.srv.URL, "/v1/chunks/"+id+"/1/1?fill=1", map[string]string{"Authorization": auth["Authorization"], "Range": "bytes=-10"})
	if code != 206 || !bytes.Equal(body, f.chunk(1)[len(f.chunk(1))-10:]) {
		t.Errorf("ranged fill: %d %q %d bytes", code, h.Get("Content-Range"), len(body))
	}
	// A chunk that no manifest has: the fill fails, 502.
	if code, _, _ := rawGet(t, a.srv.URL, "/v1/chunks/"+id+"/1/9?fill=1", auth); code != 502 {
		t.Errorf("fill of a chunk past the manifest: %d, want 502", code)
	}
	if code, _, _ := rawGet(t, a.srv.URL, "/v1/chunks/"+id+"/7/0?fill=1", auth); code != 502 {
		t.Errorf("fill of a version with no manifest: %d, want 502", code)
	}
}
