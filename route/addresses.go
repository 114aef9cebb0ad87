package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// urlStart matches the comma that begins the next URL of a list: one directly followed (after spaces) by
// a scheme. A comma anywhere else (a password, a query parameter) belongs to the URL it is in.
var urlStart = regexp.MustCompile(`\s*,\s*(amqps?://)`)

// SplitURLs splits Config.URL into its AMQP URLs: "amqp://a:5672/,amqp://b:5672/" is two. Only a comma
// directly followed by amqp:// or amqps:// separates two URLs, so a comma in a password or a query
// parameter stays where it is. Leading and trailing spaces of each URL are removed; a trailing comma makes
// an empty last URL (which Validate refuses); an empty list is nil.
func SplitURLs(list string) []string {
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

// address is one broker address of Config.URL, parsed.
type address struct {
	url string
	uri amqp.URI
}

// hostPort is what the logs and errors show of an address: never the user or the password.
func (a address) hostPort() string { return net.JoinHostPort(a.uri.Host, strconv.Itoa(a.uri.Port)) }

// parseAddresses parses every URL of the list; an invalid one is named by its position, without its password.
func parseAddresses(list string) ([]address, error) {
	urls := SplitURLs(list)
	if len(urls) == 0 {
		return nil, fmt.Errorf("%w: the AMQP URL is empty: set it, e.g. amqp://user:password@host:5672/vhost", ErrInvalidConfig)
	}
	addrs := make([]address, 0, len(urls))
	for i, u := range urls {
		uri, err := parseURL(u)
		switch {
		case u == "":
			err = &sentence{kind: ErrInvalidURL, text: "the AMQP URL is empty: remove the extra comma from the list"}
		case err == nil && strings.Contains(uri.Vhost, ",") && !strings.Contains(strings.ToLower(u), "%2c"):
			// The vhost is not shown: what follows the comma may be a second URL's user and password.
			err = &sentence{kind: ErrInvalidURL, text: "the vhost of the AMQP URL holds a comma: separate several " +
				"URLs with commas, each starting with amqp:// or amqps:// (write a comma in a vhost as %2C)"}
		}
		if err != nil {
			if len(urls) > 1 {
				return nil, &sentence{kind: ErrInvalidURL, text: fmt.Sprintf("AMQP URL %d of %d: %v", i+1, len(urls), err)}
			}
			return nil, err
		}
		addrs = append(addrs, address{url: u, uri: uri})
	}
	return addrs, nil
}

// connectAny connects to the first address, from addrs[start] on in a circle, that accepts the AMQP
// handshake. An address that cannot be reached is logged and the next is tried; any other failure (a
// refused login or vhost, a cancelled ctx) ends the attempt at once, since every node of a cluster would
// answer the same. It returns the index of the address it connected to.
func connectAny(ctx context.Context, cfg Config, logger *slog.Logger, addrs []address, start int) (*amqp.Connection, *socket, int, error) {
	var errs []error
	for n := range addrs {
		i := (start + n) % len(addrs)
		conn, sock, err := connect(ctx, cfg, addrs[i])
		if err == nil {
			return conn, sock, i, nil
		}
		if ctx.Err() != nil || !errors.Is(err, ErrUnreachable) || len(addrs) == 1 {
			return nil, nil, i, err
		}
		errs = append(errs, err)
		if n < len(addrs)-1 {
			logger.Warn("RabbitMQ address failed; trying the next one", slog.String("address", addrs[i].hostPort()),
				slog.String("error", err.Error()))
		}
	}
	texts := make([]string, len(errs))
	for i, err := range errs {
		texts[i] = err.Error()
	}
	return nil, nil, -1, &sentence{kind: ErrUnreachable, cause: errors.Join(errs...), text: fmt.Sprintf(
		"none of the %d RabbitMQ addresses accepted a connection: %s", len(addrs), strings.Join(texts, "; "))}
}

// Dialer dials a Router again and again, as a restarting caller does, moving through the addresses of
// Config.URL: each Dial starts with the address after the one the previous Dial connected to, so after
// the loss of a node the router goes to the next node first and tries the lost one last. With a single
// address it is Dial. Its methods are safe for concurrent use.
type Dialer struct {
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	next int

	logged sync.Map // the exchanges of amqp.topic.target=exchange already logged as found, by its Routers
}

// NewDialer returns a Dialer for cfg; a nil logger discards the log. cfg is validated by each Dial.
func NewDialer(cfg Config, logger *slog.Logger) *Dialer {
	return &Dialer{cfg: cfg, log: logger}
}

// Dial is the package's Dial, starting with the address after the one last connected to.
func (d *Dialer) Dial(ctx context.Context) (*Router, error) {
	d.mu.Lock()
	start := d.next
	d.mu.Unlock()
	r, used, err := dial(ctx, d.cfg, d.log, start, &d.logged)
	if used >= 0 {
		d.mu.Lock()
		d.next = used + 1
		d.mu.Unlock()
	}
	return r, err
}
