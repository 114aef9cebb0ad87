package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/replication"
	"github.com/cdc-router/cdc-router/route"
)

// brokerError marks the broker errors that retrying cannot fix as fatal; the rest are retried. A failed TLS
// handshake is a configuration problem, named with the URL parameters that fix it.
func brokerError(err error) error {
	for _, permanent := range []error{route.ErrInvalidURL, route.ErrAccessRefused, route.ErrExchangeMismatch} {
		if errors.Is(err, permanent) {
			return &replication.Fatal{Msg: err.Error()}
		}
	}
	var verify *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var op *net.OpError
	switch {
	case errors.As(err, &verify), errors.As(err, &unknownCA), errors.As(err, &hostname):
		return &replication.Fatal{Msg: fmt.Sprintf("RabbitMQ's server certificate did not pass verification (%s): "+
			"cacertfile in the AMQP URL must name the CA certificate that signed it, and the URL's host (or "+
			"server_name_indication) must be one of the certificate's names", tlsReason(err))}
	case errors.As(err, &op) && op.Op == "remote error":
		return refusedTLS(op.Err.Error())
	case strings.Contains(err.Error(), "remote error: tls: "):
		// With TLS 1.3 the broker's alert arrives during the AMQP handshake, as the reason of an amqp.Error.
		_, reason, _ := strings.Cut(err.Error(), "remote error: ")
		reason, _, _ = strings.Cut(reason, ")")
		return refusedTLS(reason)
	case strings.Contains(err.Error(), "create TLS config from URI"):
		return &replication.Fatal{Msg: err.Error()}
	}
	return err
}

// refusedTLS is the refusal of a TLS handshake by the broker's side: the client certificate was missing (Go
// sends none that no CA the server names has signed) or not accepted.
func refusedTLS(alert string) error {
	return &replication.Fatal{Msg: fmt.Sprintf("RabbitMQ refused the TLS handshake (%s): it did not accept the "+
		"client certificate that certfile and keyfile in the AMQP URL name (the CA that signed it must be in the "+
		"broker's ssl_options.cacertfile, and the certificate must be valid now)", alert)}
}

// tlsReason is the innermost text of a certificate verification failure.
func tlsReason(err error) string {
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) {
		return verify.Err.Error()
	}
	return err.Error()
}

// amqpTLSFiles checks the certificate and key files an amqps:// URL names (amqp091 reads cacertfile, certfile
// and keyfile only for amqps), so a problem with one stops the router at once, naming the file and the
// parameter, instead of being retried as an unreachable broker.
func amqpTLSFiles(amqpURLs string) error {
	for _, u := range route.SplitURLs(amqpURLs) {
		if err := amqpTLSFile(u); err != nil {
			return err
		}
	}
	return nil
}

func amqpTLSFile(amqpURL string) error {
	u, err := url.Parse(amqpURL)
	if err != nil || u.Scheme != "amqps" {
		return nil // an invalid URL is reported by route.Dial, without the password
	}
	q := u.Query() // the parameters as amqp091's ParseURI reads them
	f := pgserver.TLSFiles{Where: "--amqp-url (CDC_ROUTER_AMQP_URL)", CAParam: "cacertfile", CA: q.Get("cacertfile"),
		CertParam: "certfile", Cert: q.Get("certfile"), KeyParam: "keyfile", Key: q.Get("keyfile")}
	if err := f.Check(); err != nil {
		return &replication.Fatal{Msg: err.Error()}
	}
	return nil
}
