package peer_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/cluster/peer"
)

// pki is a CA and one certificate it signed for 127.0.0.1, usable as
// server and client (mutual TLS), written to files as --peer-cert,
// --peer-key and --peer-cacert name them.
type pki struct{ ca, cert, key string }

func makePKI(t testing.TB, dir, name string) pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name + " node"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	p := pki{ca: filepath.Join(dir, name+"-ca.pem"), cert: filepath.Join(dir, name+".pem"), key: filepath.Join(dir, name+"-key.pem")}
	for path, block := range map[string]*pem.Block{
		p.ca:   {Type: "CERTIFICATE", Bytes: caDER},
		p.cert: {Type: "CERTIFICATE", Bytes: der},
		p.key:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestTLS: nodes serve and fetch chunks over mutual TLS from certificate
// files; a plain-HTTP client, a client without a certificate and a node
// trusting another CA get nothing from them, and that node still reads
// every chunk (from S3), no error.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	good, other := makePKI(t, dir, "cluster"), makePKI(t, dir, "other")
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
