package pgserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPGTLSFilesReadsBothURLForms(t *testing.T) {
	for conn, want := range map[string]TLSFiles{
		"postgres://u:p@h/db?sslmode=verify-full&sslrootcert=/ca.pem&sslcert=/c.pem&sslkey=/k.pem": {CA: "/ca.pem", Cert: "/c.pem", Key: "/k.pem"},
		"host=h user=u sslrootcert='/ca.pem' sslcert=/c.pem sslkey=/k.pem":                         {CA: "/ca.pem", Cert: "/c.pem", Key: "/k.pem"},
		"postgres://h/db?sslrootcert=system":                                                       {},
		"postgres://h/db?sslcert=/c.pem&sslkey=/k.pem&sslcertmode=disable":                         {},
	} {
		got := pgTLSFiles(conn)
		if got.CA != want.CA || got.Cert != want.Cert || got.Key != want.Key {
			t.Errorf("%s: files %q %q %q, want %q %q %q", conn, got.CA, got.Cert, got.Key, want.CA, want.Cert, want.Key)
		}
	}
}

// TestTLSFilesCheckNamesTheFileAndTheParameter: each file problem is reported before connecting, naming the
// parameter and the path; the TLS handshake itself is tested end to end in cmd/cdc-router.
func TestTLSFilesCheckNamesTheFileAndTheParameter(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	missing := filepath.Join(dir, "missing.pem")
	base := TLSFiles{Where: "--pg-url", CAParam: "sslrootcert", CertParam: "sslcert", KeyParam: "sslkey"}
	cases := []struct {
		name  string
		files func(TLSFiles) TLSFiles
		want  []string
	}{
		{"missing CA", func(f TLSFiles) TLSFiles { f.CA = missing; return f }, []string{"sslrootcert file " + missing, "no such file"}},
		{"CA not PEM", func(f TLSFiles) TLSFiles { f.CA = notPEM; return f }, []string{"sslrootcert file " + notPEM, "no PEM certificate"}},
		{"cert without key", func(f TLSFiles) TLSFiles { f.Cert = notPEM; return f }, []string{"only one of sslcert and sslkey"}},
		{"missing key", func(f TLSFiles) TLSFiles { f.Cert, f.Key = notPEM, missing; return f }, []string{"sslkey file " + missing}},
		{"not a pair", func(f TLSFiles) TLSFiles { f.Cert, f.Key = notPEM, notPEM; return f }, []string{"sslcert file " + notPEM, "sslkey file"}},
	}
	for _, c := range cases {
		err := c.files(base).Check()
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
	}
	if err := base.Check(); err != nil {
		t.Errorf("no files: %v", err)
	}
}
