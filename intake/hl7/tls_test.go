package hl7

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

	"github.com/rxedge/agent/intake"
)

// testCA is a CA and the PEM files of certificates it signed.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, dir: t.TempDir()}
	os.WriteFile(filepath.Join(ca.dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	return ca
}

// issue writes name.pem and name.key for a leaf certificate.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(ca.dir, name+".pem"), filepath.Join(ca.dir, name+".key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

// With cert_file, key_file and ca_file the listener speaks TLS and takes
// only clients whose certificate the CA signed.
func TestServerTLS(t *testing.T) {
	ca := newCA(t)
	srvCert, srvKey := ca.issue(t, "server", x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.issue(t, "client", x509.ExtKeyUsageClientAuth)
	h, _ := newHandler(t)
	s := startServer(t, h, intake.HL7Options{CertFile: srvCert, KeyFile: srvKey, CAFile: filepath.Join(ca.dir, "ca.pem")})
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)

	pair, err := tls.LoadX509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", s.Addr().String(), &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if code := roundTrip(t, c, NewFrameReader(c, 0), rds("T1", "RXT1", "1", "12345-6789-01", "1", "EA", "")); code != AA {
		t.Fatalf("over TLS: %s", code)
	}

	// Without a client certificate: refused in the handshake, nothing
	// answered.
	bare, err := tls.Dial("tcp", s.Addr().String(), &tls.Config{RootCAs: pool})
	if err == nil {
		defer bare.Close()
		bare.SetDeadline(time.Now().Add(time.Minute))
		bare.Write(AppendFrame(nil, []byte(rds("T2", "RXT2", "1", "12345-6789-01", "1", "EA", ""))))
		if _, err := NewFrameReader(bare, 0).Next(); err == nil {
			t.Fatal("a client without a certificate was answered")
		}
	}
	// Plain MLLP to a TLS listener: nothing answered.
	plain := dial(t, s)
	plain.Write(AppendFrame(nil, []byte(rds("T3", "RXT3", "1", "12345-6789-01", "1", "EA", ""))))
	if got := waitClosed(t, plain); len(got) > 0 && got[0] == StartBlock {
		t.Fatalf("plain MLLP to a TLS listener was answered: %q", got)
	}
}
