// Package rabbitmq is what package route knows of RabbitMQ as a server before it publishes: its addresses
// (Config.URL's list of AMQP URLs: Split, Parse), why a connection to one failed (DialError), and the
// topology the router declares (Declare) with why RabbitMQ refused a declaration. Each such failure is a
// Sentence naming the fix, matching one of ErrInvalidURL, ErrUnreachable, ErrAccessRefused,
// ErrConnectionLimit and ErrExchangeMismatch, which route exports as its own.
//
// Invariants, each pinned by a test:
//   - Only a comma directly followed by amqp:// or amqps:// separates two URLs, so a comma in a password or
//     a query parameter stays in its URL (TestSplit).
//   - No error or log line of an address ever holds its password: an address is shown as host:port
//     (Address.HostPort), and a URL that does not parse is named by its position in the list, never quoted
//     (route's TestValidateNamesTheBadURLOfAListWithoutItsPassword, TestDialErrorsAreOneSentence).
//   - A failure that every node of a cluster would answer the same (a refused login or vhost, a declaration
//     the user may not make, an exchange or queue of other arguments) is not ErrUnreachable, so the caller
//     tries no other address for it; a classic queue whose node is down is, so the router retries
//     (TestHomeNodeDownNamesTheQuorumQueue; route's TestDialStopsAtARefusedLogin, TestExchangeMismatch).
//   - A vhost's or a user's max-connections reached (530 NOT_ALLOWED, as a refused vhost) is
//     ErrConnectionLimit, not ErrAccessRefused: it ends when stale connections go, so the caller retries it
//     (TestConnectionLimitIsNoRefusedVhost; route's TestDialAtTheVhostConnectionLimitIsRetried).
//
// It never publishes and never holds a connection: route opens, owns and closes them.
package rabbitmq
