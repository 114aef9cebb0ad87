package chaos

import (
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// The harness's virtual host on the shared broker (issue 36, finding 7): every exchange, queue and binding a
// seed on the shared broker declares, and every connection of its routers, commands and consumer, are in
// vhost, so that a run on a broker other work shares leaves "/" alone. By default a fresh vhost of the run's
// own, created when the run starts (rabbitmqctl add_vhost, with every permission for the test user on it
// alone) and deleted with everything in it when it ends; -chaos.vhost (make chaos VHOST=…) names one that
// exists instead, used as it is, or "/" for the broker's default. No setting of an existing vhost or of the
// broker is changed. The seeds on the harness's own node (gen.Setup.OwnBroker) use that node's "/".
var vhost = "/"

// setUpVhost sets vhost for the run: flag's, or a fresh one (flag "") deleted at the end of t.
func setUpVhost(t *testing.T, flag string) {
	t.Helper()
	if flag != "" {
		vhost = flag
		return
	}
	u, err := url.Parse(testenv.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("cdc-chaos-%d-%d", os.Getpid(), time.Now().Unix())
	ctl := func(args ...string) error {
		if out, err := testenv.Rabbitmqctl(t, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("rabbitmqctl %s: %v: %s", args[0], err, out)
		}
		return nil
	}
	if err := ctl("add_vhost", name); err != nil {
		t.Fatalf("create the run's vhost (or name one with -chaos.vhost, make chaos VHOST=…): %v", err)
	}
	t.Cleanup(func() {
		if err := ctl("delete_vhost", name); err != nil {
			t.Logf("delete the run's vhost %s: %v", name, err)
		}
	})
	if err := ctl("set_permissions", "-p", name, u.User.Username(), ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	vhost = name
	t.Logf("vhost %s on the shared broker (created for this run, deleted at its end)", name)
}

// inVhost is the AMQP URL raw with the path of vhost v.
func inVhost(raw, v string) string {
	u, err := url.Parse(raw)
	if err != nil || v == "/" {
		return raw
	}
	u.Path, u.RawPath = "/"+v, "/"+url.PathEscape(v)
	return u.String()
}
