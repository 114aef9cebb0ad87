package route

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestConfigDefaultsAndValidate(t *testing.T) {
	c := Config{URL: "amqp://u:p@h/"}.withDefaults()
	want := Config{URL: "amqp://u:p@h/", Exchange: "outbox", AlternateExchange: "outbox.unroutable", Lanes: 4,
		Window: 512, ConfirmTimeout: 60 * time.Second, ConnectionName: "cdc-router", MaxInflightBytes: 64 << 20,
		UnroutableQueueType: "classic", AggregateWindow: 1, MaxHeld: 32 << 10}
	if c != want {
		t.Fatalf("defaults = %+v, want %+v", c, want)
	}
	bad := []Config{
		{},
		{URL: "http://h/"},
		{URL: "amqp://u:s3cret%zz@h/"},
		{URL: "amqp://h/", Exchange: "amq.topic"},
		{URL: "amqp://h/", Exchange: "e", AlternateExchange: "e"},
		{URL: "amqp://h/", Lanes: -1},
		{URL: "amqp://h/", Window: maxWindow + 1},
		{URL: "amqp://h/", ConfirmTimeout: -time.Second},
		{URL: "amqp://h/", MaxInflightBytes: -1},
		{URL: "amqp://h/", AggregateWindow: -1},
		{URL: "amqp://h/", Window: 8, AggregateWindow: 9},
		{URL: "amqp://h/", MaxHeld: -1},
		{URL: "amqp://h/", MaxHeld: maxHeld + 1},
		{URL: "amqp://h/", Exchange: strings.Repeat("e", 256)},
		{URL: "amqp://h/", UnroutableQueueType: "stream"},
	}
	for _, c := range bad {
		err := c.Validate()
		if err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", c)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Validate error shows the password: %v", err)
		}
	}
	if err := (Config{URL: "amqp://h/", NoAlternateExchange: true, Exchange: "x", AlternateExchange: "x"}).Validate(); err != nil {
		t.Errorf("an ignored alternate exchange was validated: %v", err)
	}
}

func TestDialErrorsAreOneSentence(t *testing.T) {
	b := newBroker(t)
	u, _ := amqp.ParseURI(b.url)
	badPassword := u
	badPassword.Password = "s3cret-wrong"
	noVhost := u
	noVhost.Vhost = b.exchange
	tests := []struct {
		url  string
		want error
		text string
	}{
		{"amqp://guest:s3cret%zz@127.0.0.1/", ErrInvalidURL, "the AMQP URL is not valid"},
		{"amqp://guest:s3cret@127.0.0.1:1/", ErrUnreachable, "refused the connection: start RabbitMQ or fix the host and port"},
		{badPassword.String(), ErrAccessRefused, "403 ACCESS_REFUSED): check the user name and password"},
		{noVhost.String(), ErrAccessRefused, "530 NOT_ALLOWED"},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := Dial(ctx, Config{URL: tt.url, Exchange: b.exchange}, nil)
		cancel()
		if err == nil {
			r.Close()
			t.Errorf("Dial succeeded with a bad URL")
			continue
		}
		t.Logf("%v", err)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("Dial error = %q, want %v containing %q", err, tt.want, tt.text)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Dial error shows the password: %v", err)
		}
	}
}

// TestExchangeMismatch: an exchange declared before without the alternate-exchange argument makes Dial
// fail with ErrExchangeMismatch and one sentence naming the fix; and the other way round.
func TestExchangeMismatch(t *testing.T) {
	b := newBroker(t)
	if err := b.admin.ExchangeDeclare(b.exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, b.config(""), nil)
	want := `exchange "` + b.exchange + `" already exists with other arguments (declared without alternate-exchange "` +
		b.exchange + `.unroutable"?): delete it (rabbitmqadmin delete exchange name=` + b.exchange +
		`) so the router can declare it, or start with --no-alternate-exchange, or choose another --exchange`
	if !errors.Is(err, ErrExchangeMismatch) || err.Error() != want {
		t.Fatalf("Dial error = %v\nwant ErrExchangeMismatch: %s", err, want)
	}

	other := newBroker(t)
	other.dial(other.config("")) // declares it with the alternate exchange
	cfg := other.config("")
	cfg.NoAlternateExchange = true
	if _, err = Dial(ctx, cfg, nil); !errors.Is(err, ErrExchangeMismatch) || !strings.Contains(err.Error(), "without --no-alternate-exchange") {
		t.Fatalf("Dial with --no-alternate-exchange on an exchange that has one = %v, want ErrExchangeMismatch", err)
	}
}

// TestDialHonoursContext: a cancelled context ends Dial.
func TestDialHonoursContext(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	p.Pause() // the TCP connection opens, the AMQP handshake stalls
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Dial(ctx, b.config(b.viaProxy(p)), nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Fatalf("Dial = %v after %s, want context.DeadlineExceeded promptly", err, time.Since(start))
	}
}
