// Package doctest runs the documentation as a reader would paste it. TestDocsRunAsWritten extracts every
// shell and SQL block of README.md and docs/**/*.md and runs them in order, one bash session per page,
// against a PostgreSQL cluster of the page's own (a database app owned by app_owner, as the docs' URLs say)
// and a RabbitMQ vhost of the page's own on the test broker (CDC_ROUTER_TEST_AMQP_URL). Only hosts, ports
// and broker credentials are adapted: `@db:5432` becomes the page's cluster, `amqp://…@rabbitmq:5672/` (or
// `mq`) the page's vhost with the test broker's credentials, `/etc/cdc-router/` a folder of the page's
// working directory. `cdc-router run` is started in the background and waited for until it streams; it is
// stopped when the next one starts and at the end of the page. TestDocsLinks checks that every relative
// link and anchor in them resolves, TestCodeNamesDocsThatExist that every docs/<page>.md#<anchor> a message
// or comment of the code or a deployment file names exists (page and heading, a section by its anchor
// rather than in words) and is not a page that only lists where its sections went,
// TestDocsNameOnlyMetricsThatExist that every cdc_router_* metric name in them and in
// deploy/ is one the code defines. docs/reference.md is checked against the code: TestReferenceListsEveryFlag
// (its flag table against the commands' --help), TestReferenceListsEveryConfigKey (the table's column of
// configuration keys against `cdc-router config keys`), TestReferenceListsEveryMetric (its metric tables
// against the names the code registers), TestReferenceListsEveryHeader (its section The message against
// the headers the router sets or reserves) and TestReferenceListsEveryStatusKey (its section status --json
// against the json keys of package admin).
//
// An HTML comment right before a block (blank lines between are allowed) says what the test does with it:
//
//	<!-- docs-test: skip REASON -->       not run: illustrative, or it needs what a test cannot have
//	<!-- docs-test: db NAME -->           an SQL block run in database NAME (default app)
//	<!-- docs-test: expect-empty -->      an SQL block whose every result has 0 rows
//	<!-- docs-test: file PATH -->         a yaml, properties or ini block written to PATH in the working directory
//	<!-- docs-test: program NAME -->      a go block that is a main package: built (and vetted) as ./NAME,
//	                                      which the page's shell may `go run ./NAME`
//
// and a comment of its own runs shell that a reader has already done (a setup) or checks what the page
// promised, at its place in the page, without showing it:
//
//	<!-- docs-test: sh
//	docs_until_sql orders_projection "SELECT amount = 10 FROM order_totals WHERE id = '42'"
//	-->
//
// The shell has docs_readme_setup [MIGRATE ARGS] (README's steps 1 and 2: migrate as app_owner, the role
// cdc_router and its grants, then the URLs of step 3 exported), docs_until_sql DB QUERY (wait up to 30 s for
// the query to return true), docs_until_queue QUEUE N (wait until a queue of the page's vhost holds N
// messages) and docs_wait_log TEXT (wait for the running router to log TEXT). Blocks in other languages
// (json, yaml without a file marker, go without a program marker) are not run. docs/testing.md is not run
// (notRun says why).
package doctest
