package pgserver

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// TLSFiles are the certificate and key files a connection URL names, with the names of the URL parameters
// that name them, so that a problem with a file is reported before any connection is tried, naming the
// file and the parameter. Empty paths are not checked.
type TLSFiles struct {
	Where               string // where the parameters are set, e.g. "--pg-url (CDC_ROUTER_PG_URL)"
	CAParam, CA         string // the CA certificates that verify the server
	CertParam, Cert     string // the client certificate
	KeyParam, Key       string // the client certificate's private key
	EncryptedKeyAllowed bool   // a password-protected key is decrypted by the driver; only its presence is checked
}

// Check reads each file: the CA file must hold at least one PEM certificate, and the client certificate
// and key must both be given, readable, and a matching pair. The error is one sentence naming the file,
// the parameter and the fix.
func (f TLSFiles) Check() error {
	if f.CA != "" {
		data, err := f.read(f.CAParam, f.CA)
		if err != nil {
			return err
		}
		if !x509.NewCertPool().AppendCertsFromPEM(data) {
			return fmt.Errorf("the %s file %s (in %s) holds no PEM certificate: point %s at the PEM file of the CA "+
				"certificate that signed the server's certificate", f.CAParam, f.CA, f.Where, f.CAParam)
		}
	}
	if (f.Cert == "") != (f.Key == "") {
		return fmt.Errorf("%s sets only one of %s and %s: a client certificate needs both, the certificate and its "+
			"private key", f.Where, f.CertParam, f.KeyParam)
	}
	if f.Cert == "" {
		return nil
	}
	cert, err := f.read(f.CertParam, f.Cert)
	if err != nil {
		return err
	}
	key, err := f.read(f.KeyParam, f.Key)
	if err != nil {
		return err
	}
	if block, _ := pem.Decode(key); block != nil && f.EncryptedKeyAllowed &&
		(x509.IsEncryptedPEMBlock(block) || block.Type == "ENCRYPTED PRIVATE KEY") { //nolint:staticcheck // only detects
		return nil
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		return fmt.Errorf("the %s file %s and the %s file %s (in %s) are not a PEM certificate and its private key "+
			"(%v): point %s at the client certificate and %s at its key", f.CertParam, f.Cert, f.KeyParam, f.Key,
			f.Where, err, f.CertParam, f.KeyParam)
	}
	return nil
}

func (f TLSFiles) read(param, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("cannot read the %s file %s (in %s): %v: fix the path in %s or the file's permissions",
			param, path, f.Where, err, param)
	}
	return data, nil
}

// pgWhere is where the PostgreSQL URL is set, for messages.
const pgWhere = "--pg-url (CDC_ROUTER_PG_URL)"

// pgTLSFiles are the files the sslrootcert, sslcert and sslkey parameters of a postgres:// URL or a
// keyword/value string name. sslrootcert=system means the system's CA certificates and is not a file.
func pgTLSFiles(conn string) TLSFiles {
	params := connParams(conn)
	f := TLSFiles{Where: pgWhere, CAParam: "sslrootcert", CA: params["sslrootcert"], CertParam: "sslcert",
		Cert: params["sslcert"], KeyParam: "sslkey", Key: params["sslkey"], EncryptedKeyAllowed: true}
	if f.CA == "system" {
		f.CA = ""
	}
	if params["sslcertmode"] == "disable" {
		f.Cert, f.Key = "", ""
	}
	return f
}

// connParams reads the parameters of a postgres:// URL's query or of a keyword/value string (values in
// single quotes are not unescaped: a file path rarely needs them). It is best effort: pgconn parses the
// string for the connection itself.
func connParams(conn string) map[string]string {
	params := map[string]string{}
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return params
		}
		for k, v := range u.Query() {
			params[k] = v[len(v)-1]
		}
		return params
	}
	for _, field := range strings.Fields(conn) {
		if k, v, ok := strings.Cut(field, "="); ok {
			params[k] = strings.Trim(v, "'")
		}
	}
	return params
}

// explainTLS turns a failed TLS handshake with PostgreSQL into one sentence naming the fix, or returns nil
// when err is no TLS failure. A TLS failure is a configuration problem, so it is not retried.
func explainTLS(err error) error {
	var op *net.OpError
	switch cause := verificationError(err); {
	case cause != nil:
		return cdc.Fatalf("PostgreSQL's server certificate did not pass verification (%v): sslrootcert in %s must name "+
			"the CA certificate that signed it, and with sslmode=verify-full the host in the URL must be one of the "+
			"certificate's names", cause, pgWhere)
	case errors.As(err, &op) && op.Op == "remote error":
		return cdc.Fatalf("PostgreSQL refused the TLS handshake (%v): it did not accept the client certificate that sslcert "+
			"and sslkey in %s name (the CA that signed it must be in the server's ssl_ca_file, and the certificate must "+
			"be valid now)", op.Err, pgWhere)
	case strings.Contains(err.Error(), "server refused TLS connection") && !errors.As(err, new(*pgconn.PgError)):
		// Without sslmode (prefer) pgx tries plain after the refusal; when that attempt got an answer from
		// the server (a refused password, say), the answer is what to report, and explainConnect does.
		return cdc.Fatalf("PostgreSQL does not accept TLS connections: set ssl = on in postgresql.conf (with ssl_cert_file "+
			"and ssl_key_file) and reload it, or connect without sslmode=require/verify-ca/verify-full in %s", pgWhere)
	}
	return nil
}

// verificationError is the certificate verification failure inside err, or nil.
func verificationError(err error) error {
	var verify *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &verify):
		return verify.Err
	case errors.As(err, &unknownCA):
		return unknownCA
	case errors.As(err, &hostname):
		return hostname
	case errors.As(err, &invalid):
		return invalid
	}
	return nil
}
