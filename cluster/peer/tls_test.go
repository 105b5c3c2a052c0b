package peer_test

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/peer"
	"github.com/dnnfs/dnnfs/tests/clusterenv"
)

// pki is a CA and one certificate it signed for 127.0.0.1, usable as
// server and client (mutual TLS), written to files as --peer-cert,
// --peer-key and --peer-cacert name them.
type pki struct{ ca, cert, key string }

func makePKI(t testing.TB) pki {
	t.Helper()
	c := clusterenv.NewTestCerts(t)
	return pki{ca: c.CA, cert: c.NodeCert, key: c.NodeKey}
}

// TestTLS: nodes serve and fetch chunks over mutual TLS from certificate
// files; a plain-HTTP client, a client without a certificate and a node
// trusting another CA get nothing from them, and that node still reads
// every chunk (from S3), no error.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	good, other := makePKI(t), makePKI(t)
	srvTLS, err := peer.ServerTLS(good.cert, good.key, good.ca)
	if err != nil {
		t.Fatal(err)
	}
	cliTLS, err := peer.ClientTLS(good.cert, good.key, good.ca)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	f := e.commit(9, 4)
	a := e.addNode("a", nodeOpts{serverTLS: srvTLS, client: peer.NewClient(cliTLS)})
	readAll(t, a, f)
	b := e.addNode("b", nodeOpts{serverTLS: srvTLS, client: peer.NewClient(cliTLS)})
	for i, src := range readAll(t, b, f) {
		if src != peer.SourcePeer && src != peer.SourceHome {
			t.Errorf("chunk %d from %s, want a peer", i, src)
		}
	}
	if s := b.peer.Stats(); s.Peer.Hits+s.Home.Hits != 4 {
		t.Errorf("b: %+v", s)
	}
	if a.srv.URL[:8] != "https://" {
		t.Fatalf("a serves on %s", a.srv.URL)
	}

	url := a.srv.URL + "/v1/chunks/" + string(f.id) + "/1/0"
	get := func(c *http.Client, u string) error {
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return &statusErr{resp.StatusCode}
			}
		}
		return err
	}
	if err := get(peer.NewClient(cliTLS), url); err != nil {
		t.Fatalf("with the cluster's certificate: %v", err)
	}
	if err := get(peer.NewClient(nil), "http"+url[5:]); err == nil {
		t.Error("plain HTTP to a TLS server succeeded")
	}
	noCert, _ := peer.ClientTLS("", "", good.ca)
	if err := get(peer.NewClient(noCert), url); err == nil {
		t.Error("a client without a certificate was served (mutual TLS)")
	}
	otherTLS, _ := peer.ClientTLS(other.cert, other.key, other.ca)
	if err := get(peer.NewClient(otherTLS), url); err == nil {
		t.Error("a client of another CA was served")
	}

	// A node of another CA: its requests to a and b fail the handshake,
	// it falls back to S3 for every chunk, no error.
	otherSrv, _ := peer.ServerTLS(other.cert, other.key, other.ca)
	c := e.addNode("c", nodeOpts{serverTLS: otherSrv, client: peer.NewClient(otherTLS)})
	readAll(t, c, f)
	if s := c.peer.Stats(); s.Peer.Hits+s.Home.Hits != 0 || s.S3.Hits != 4 {
		t.Errorf("c: %+v", s)
	}
	if _, err := peer.ServerTLS(good.cert, good.key, filepath.Join(dir, "missing.pem")); err == nil {
		t.Error("ServerTLS with a missing CA file")
	}
	if _, err := peer.ServerTLS(good.key, good.cert, ""); err == nil {
		t.Error("ServerTLS with cert and key swapped")
	}
}

type statusErr struct{ code int }

func (s *statusErr) Error() string { return http.StatusText(s.code) }
