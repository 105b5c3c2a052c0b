package clusterenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCerts is a throw-away CA with a server certificate for 127.0.0.1, a
// client certificate, and a node certificate for 127.0.0.1 to 127.0.0.5
// good for both (a dnnfs node's chunk server serves and fetches: mutual
// TLS), as PEM files in a t.TempDir.
type TestCerts struct {
	CA         string // CA certificate (PEM)
	ServerCert string
	ServerKey  string
	ClientCert string
	ClientKey  string
	NodeCert   string
	NodeKey    string
	pool       *x509.CertPool
	client     tls.Certificate
}

// NewTestCerts makes a CA and three certificates signed by it.
func NewTestCerts(t testing.TB) *TestCerts {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dnnfs test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	c := &TestCerts{CA: filepath.Join(dir, "ca.pem"), pool: x509.NewCertPool()}
	c.pool.AddCert(ca)
	writePEM(t, c.CA, "CERTIFICATE", caDER)
	issue := func(serial int64, name string, ips []net.IP, usage ...x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
			IPAddresses: ips, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		cert, keyf := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, cert, "CERTIFICATE", der)
		writePEM(t, keyf, "EC PRIVATE KEY", kder)
		return cert, keyf
	}
	local := []net.IP{net.IPv4(127, 0, 0, 1)}
	c.ServerCert, c.ServerKey = issue(2, "server", local, x509.ExtKeyUsageServerAuth)
	c.ClientCert, c.ClientKey = issue(3, "client", local, x509.ExtKeyUsageClientAuth)
	var nodes []net.IP
	for i := byte(1); i <= 5; i++ {
		nodes = append(nodes, net.IPv4(127, 0, 0, i))
	}
	c.NodeCert, c.NodeKey = issue(4, "node", nodes, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if c.client, err = tls.LoadX509KeyPair(c.ClientCert, c.ClientKey); err != nil {
		t.Fatal(err)
	}
	return c
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ClientTLS returns a client configuration that trusts the CA and
// presents the client certificate.
func (c *TestCerts) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: c.pool, Certificates: []tls.Certificate{c.client}, MinVersion: tls.VersionTLS12}
}
