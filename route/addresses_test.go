package route

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

func TestValidateNamesTheBadURLOfAListWithoutItsPassword(t *testing.T) {
	tests := []struct{ list, want string }{
		{"amqp://u:s3cret@a/,amqp://u:s3cret%zz@b/", "AMQP URL 2 of 2: the AMQP URL is not valid"},
		{"amqp://u:s3cret@a/,", "AMQP URL 2 of 2: the AMQP URL is empty: remove the extra comma"},
		{",amqp://u:s3cret@a/", "AMQP URL 1 of 2: the AMQP URL is empty"},
		{"http://u:s3cret@a/,amqp://b/", "AMQP URL 1 of 2: the AMQP URL is not valid"},
		{"amqp://u:p@a/,u:s3cret@b:5672/", "the vhost of the AMQP URL holds a comma: separate several URLs"},
	}
	for _, tt := range tests {
		err := Config{URL: tt.list}.Validate()
		if err == nil || !errors.Is(err, ErrInvalidURL) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%q) = %v, want an ErrInvalidURL containing %q", tt.list, err, tt.want)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Validate(%q) shows the password: %v", tt.list, err)
		}
	}
	if err := (Config{URL: "amqp://u:p@a/,amqps://u:p@b/,amqp://c/%2Cv"}).Validate(); err != nil {
		t.Errorf("a valid list: %v", err)
	}
}

// refusingAddr is a local address where nothing listens: a connection to it is refused at once.
func refusingAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// via is the broker's URL with its host:port replaced by addr and its password by pass ("" keeps it).
func (b *broker) via(addr, pass string) string {
	u, err := amqp.ParseURI(b.url)
	if err != nil {
		b.t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	u.Host = host
	if u.Port, err = strconv.Atoi(port); err != nil {
		b.t.Fatal(err)
	}
	if pass != "" {
		u.Password = pass
	}
	return u.String()
}

func TestDialMovesOnFromAnAddressThatRefuses(t *testing.T) {
	b := newBroker(t)
	dead := refusingAddr(t)
	cfg := b.config(b.via(dead, "s3cret") + "," + b.url)
	r := b.dial(cfg)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	logs := b.logs.String()
	if !strings.Contains(logs, "trying the next one") || !strings.Contains(logs, "address="+dead) {
		t.Errorf("the refused address was not logged by host:port:\n%s", logs)
	}
	// The password check of newBroker's cleanup covers "s3cret" and "guest@".
}

func TestDialerStartsAfterTheAddressItLastUsed(t *testing.T) {
	b := newBroker(t)
	u, _ := amqp.ParseURI(b.url)
	target := net.JoinHostPort(u.Host, strconv.Itoa(u.Port))
	pa, pb := testenv.NewProxy(t, target), testenv.NewProxy(t, target)
	d := NewDialer(b.config(b.via(pa.Addr, "")+","+b.via(pb.Addr, "")), slog.New(slog.NewTextHandler(b.logs, nil)))
	var used []string
	for range 3 {
		before := len(b.logs.String())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := d.Dial(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		line := b.logs.String()[before:]
		switch {
		case strings.Contains(line, "address="+pa.Addr):
			used = append(used, "a")
		case strings.Contains(line, "address="+pb.Addr):
			used = append(used, "b")
		default:
			t.Fatalf("no address in the log:\n%s", line)
		}
	}
	if got := strings.Join(used, ""); got != "aba" {
		t.Errorf("addresses used by three Dials = %s, want aba (each Dial starts after the last one used)", got)
	}
}

func TestDialReportsEveryAddressWhenNoneAnswers(t *testing.T) {
	b := newBroker(t)
	d1, d2 := refusingAddr(t), refusingAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, b.config(b.via(d1, "s3cret")+","+b.via(d2, "s3cret")), slog.New(slog.NewTextHandler(b.logs, nil)))
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("err = %v, want ErrUnreachable", err)
	}
	for _, want := range []string{"none of the 2 RabbitMQ addresses accepted a connection", d1, d2, "start RabbitMQ or fix the host and port"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %v", err)
	}
}

func TestDialStopsAtARefusedLogin(t *testing.T) {
	b := newBroker(t)
	u, _ := amqp.ParseURI(b.url)
	p := testenv.NewProxy(t, net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Every node of a cluster shares its users: a refused login is not retried on the next address.
	_, err := Dial(ctx, b.config(b.via(u.Host+":"+strconv.Itoa(u.Port), "s3cret-wrong")+","+b.via(p.Addr, "")), nil)
	if !errors.Is(err, ErrAccessRefused) {
		t.Fatalf("err = %v, want ErrAccessRefused", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the password: %v", err)
	}
}
