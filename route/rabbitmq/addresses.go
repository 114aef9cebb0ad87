package rabbitmq

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	amqp "github.com/rabbitmq/amqp091-go"
)

// urlStart matches the comma that begins the next URL of a list: one directly followed (after spaces) by
// a scheme. A comma anywhere else (a password, a query parameter) belongs to the URL it is in.
var urlStart = regexp.MustCompile(`\s*,\s*(amqps?://)`)

// Split splits a list of AMQP URLs: "amqp://a:5672/,amqp://b:5672/" is two. Only a comma directly followed
// by amqp:// or amqps:// separates two URLs, so a comma in a password or a query parameter stays where it
// is. Leading and trailing spaces of each URL are removed; a trailing comma makes an empty last URL (which
// Parse refuses); an empty list is nil.
func Split(list string) []string {
	list = strings.TrimSpace(list)
	if list == "" {
		return nil
	}
	var urls []string
	for {
		loc := urlStart.FindStringSubmatchIndex(list)
		if loc == nil {
			if rest, ok := strings.CutSuffix(list, ","); ok {
				return append(urls, strings.TrimSpace(rest), "")
			}
			return append(urls, strings.TrimSpace(list))
		}
		urls = append(urls, strings.TrimSpace(list[:loc[0]]))
		list = list[loc[2]:]
	}
}

// Address is one broker address of a list, parsed.
type Address struct {
	URL string
	URI amqp.URI
}

// HostPort is what the logs and errors show of an address: never the user or the password.
func (a Address) HostPort() string { return net.JoinHostPort(a.URI.Host, strconv.Itoa(a.URI.Port)) }

// Parse parses every URL of a non-empty list (Split); an invalid one is named by its position, without its
// password.
func Parse(list string) ([]Address, error) {
	urls := Split(list)
	addrs := make([]Address, 0, len(urls))
	for i, u := range urls {
		uri, err := parseURL(u)
		switch {
		case u == "":
			err = &Sentence{Kind: ErrInvalidURL, Text: "the AMQP URL is empty: remove the extra comma from the list"}
		case err == nil && strings.Contains(uri.Vhost, ",") && !strings.Contains(strings.ToLower(u), "%2c"):
			// The vhost is not shown: what follows the comma may be a second URL's user and password.
			err = &Sentence{Kind: ErrInvalidURL, Text: "the vhost of the AMQP URL holds a comma: separate several " +
				"URLs with commas, each starting with amqp:// or amqps:// (write a comma in a vhost as %2C)"}
		}
		if err != nil {
			if len(urls) > 1 {
				return nil, &Sentence{Kind: ErrInvalidURL, Text: fmt.Sprintf("AMQP URL %d of %d: %v", i+1, len(urls), err)}
			}
			return nil, err
		}
		addrs = append(addrs, Address{URL: u, URI: uri})
	}
	return addrs, nil
}

// parseURL parses an AMQP URL into its parts, turning a failure into a sentence without the password.
func parseURL(raw string) (amqp.URI, error) {
	uri, err := amqp.ParseURI(raw)
	if err == nil {
		return uri, nil
	}
	reason := err.Error()
	var uerr *url.Error
	if errors.As(err, &uerr) {
		// url.Error quotes the whole URL, password included.
		reason = "it does not parse as a URL"
	}
	return amqp.URI{}, &Sentence{Kind: ErrInvalidURL, Text: fmt.Sprintf(
		"the AMQP URL is not valid (%s): write it as amqp://user:password@host:5672/vhost, "+
			"percent-encoding reserved characters in the user name and password", reason)}
}

// DialError turns a failed amqp.DialConfig to uri into one sentence naming the fix.
func DialError(uri amqp.URI, err error) error {
	addr := net.JoinHostPort(uri.Host, fmt.Sprint(uri.Port))
	var aerr *amqp.Error
	var nerr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return &Sentence{Kind: ErrUnreachable, Cause: err, Text: fmt.Sprintf(
			"RabbitMQ at %s refused the connection: start RabbitMQ or fix the host and port in the AMQP URL", addr)}
	case errors.As(err, &aerr) && aerr.Code == amqp.AccessRefused:
		return &Sentence{Kind: ErrAccessRefused, Text: fmt.Sprintf(
			"RabbitMQ at %s refused the login of user %q (403 ACCESS_REFUSED): check the user name and password in the AMQP URL",
			addr, uri.Username)}
	case errors.As(err, &aerr) && aerr.Code == amqp.NotAllowed && strings.Contains(aerr.Reason, "connection limit"):
		return connectionLimitError(addr, uri, aerr.Reason)
	case errors.As(err, &aerr) && aerr.Code == amqp.NotAllowed:
		return &Sentence{Kind: ErrAccessRefused, Text: fmt.Sprintf(
			"RabbitMQ at %s refused user %q access to vhost %q (530 NOT_ALLOWED: %s): create the vhost or grant the user permissions on it "+
				"(rabbitmqctl set_permissions -p <vhost> <user> \".*\" \".*\" \".*\"), or fix the vhost in the AMQP URL",
			addr, uri.Username, uri.Vhost, aerr.Reason)}
	case errors.As(err, &aerr) && aerr.Server:
		return &Sentence{Kind: ErrUnreachable, Text: fmt.Sprintf(
			"RabbitMQ at %s closed the connection during the handshake (%d %s): check the broker's log", addr, aerr.Code, aerr.Reason)}
	case errors.As(err, &aerr):
		return &Sentence{Kind: ErrUnreachable, Text: fmt.Sprintf(
			"the connection to %s broke during the AMQP handshake (%s): check that this is RabbitMQ's AMQP port and that the network is sound",
			addr, aerr.Reason)}
	case errors.As(err, &nerr):
		return &Sentence{Kind: ErrUnreachable, Cause: err, Text: fmt.Sprintf(
			"cannot reach RabbitMQ at %s (%v): check the host and port in the AMQP URL and the network", addr, err)}
	}
	return &Sentence{Kind: ErrUnreachable, Cause: err, Text: fmt.Sprintf(
		"cannot connect to RabbitMQ at %s (%v): check the AMQP URL and the broker's log", addr, err)}
}

// connectionLimitError is RabbitMQ's refusal of a connection over a vhost's or a user's max-connections:
// "access to vhost 'v' refused for user 'u': connection limit (1) is reached" or "connection refused for
// user 'u': user connection limit (0) is reached" (530 NOT_ALLOWED, as for a vhost the user may not use).
// Connections that linger after a cut end it once the broker notices them gone, so it is retried.
func connectionLimitError(addr string, uri amqp.URI, reason string) error {
	raise := fmt.Sprintf(`raise the vhost's limit (rabbitmqctl set_vhost_limits -p %s '{"max-connections": N}')`, uri.Vhost)
	if strings.Contains(reason, "user connection limit") {
		raise = fmt.Sprintf(`raise the user's limit (rabbitmqctl set_user_limits %s '{"max-connections": N}')`, uri.Username)
	}
	return &Sentence{Kind: ErrConnectionLimit, Text: fmt.Sprintf("RabbitMQ at %s refused the connection because a "+
		"connection limit is reached (530 %s): close stale connections (rabbitmqctl list_connections, close_connection) "+
		"or %s", addr, reason, raise)}
}
