# cdc-router: `make test` runs the whole suite against real PostgreSQL and RabbitMQ (started when needed),
# `make demo` shows events flowing on a machine that has both installed.
GO        ?= go
PKGS      := ./...
# make test runs its jobs two at a time (make -j2 over TEST_JOBS, each job one test binary at a time), so at
# most two test binaries run at once, as `go test -p 2` did before. Each free slot takes the next job, so the
# list goes longest first. The end-to-end package (e2e/, about 20 minutes, most of it waiting on the servers:
# about a quarter of the two cores) is two jobs, so that no single job sets the length of the run:
# test-e2e-2 runs the tests of the files E2E_2_FILES names (a shell glob), test-e2e every other (-skip the same list, so
# each test runs in exactly one of them, and a new test in those files joins test-e2e-2 by itself). Each
# test package starts PostgreSQL clusters of its own (testenv.Main), names its databases, queues, exchanges
# and broker users uniquely, and runs broker-wide faults on RabbitMQ nodes of its own, so what runs side by
# side does not see each other (two e2e/ processes included).
# The test binaries run with -race. The routers the end-to-end tests and the invariant harness start are
# built without it (CDC_ROUTER_RACE=off: they run at a user's speed, and the suite fits CI's 30 minutes);
# test-race-core runs the stream, stop, broker-cut and snapshot groups of the version matrix again with
# race-built routers (matrix.sh regex), and `make test-race` builds every router under test with -race. go
# vet runs every analyzer first, so go test runs none of its own (-vet=off: its set is a subset of go vet's).
TESTFLAGS  ?= -race -count=1 -timeout 45m
E2E_2_FILES = e2e/[r-z]*_test.go
TEST_JOBS  ?= test-e2e test-units test-e2e-2 test-chaos test-race-core test-deploy
# e2e_2 is the -run regex of the top-level tests in E2E_2_FILES (shell text for a recipe).
e2e_2 = ^($$(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' $(E2E_2_FILES) | paste -sd'|' -))$$

CDC_ROUTER_RACE ?= off
export CDC_ROUTER_RACE

.PHONY: test-matrix-job test-race chaos mutants build test test-short test-cluster test-consumer-groups bench-shards lint fuzz bench bench-e2e demo services clean test-matrix test-versions ci test-e2e test-e2e-2 test-units test-chaos test-race-core test-deploy

build:
	$(GO) build -o bin/cdc-router ./cmd/cdc-router

services:
	@internal/testenv/ensure-services.sh

test: services
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	@$(MAKE) --no-print-directory -k -j2 $(TEST_JOBS)

# CI (.ci/run): make test with the version matrix (make test-matrix) among its jobs.
ci:
	@$(MAKE) --no-print-directory test TEST_JOBS="test-e2e test-units test-e2e-2 test-matrix-job test-chaos test-race-core test-deploy"

# The jobs of make test; each says when it started and ended.
test-e2e:
	@date -u +'$@: start %T'
	$(GO) test $(TESTFLAGS) -vet=off -skip "$(e2e_2)" ./e2e/
	@date -u +'$@: done %T'

test-e2e-2:
	@date -u +'$@: start %T'
	$(GO) test $(TESTFLAGS) -vet=off -run "$(e2e_2)" ./e2e/
	@date -u +'$@: done %T'

test-units:
	@date -u +'$@: start %T'
	$(GO) test $(TESTFLAGS) -vet=off -p 1 $$($(GO) list $(PKGS) | grep -Ev '/(e2e|chaos)$$')
	@date -u +'$@: done %T'

# The invariant harness's CI seeds (chaos/: its generator, checker and recorder packages are in test-units).
test-chaos:
	@date -u +'$@: start %T'
	$(GO) test $(TESTFLAGS) -vet=off ./chaos/
	@date -u +'$@: done %T'

test-race-core:
	@date -u +'$@: start %T'
	CDC_ROUTER_RACE=on $(GO) test $(TESTFLAGS) -vet=off -run "$$(internal/testenv/matrix.sh regex)" ./e2e/
	@date -u +'$@: done %T'

test-deploy:
	cd deploy/kubernetes && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd deploy/compose && $(GO) vet ./... && $(GO) test -count=1 ./...

test-race:
	$(MAKE) test CDC_ROUTER_RACE=on

# The version matrix (internal/testenv/matrix.sh, docs/development.md "Versions"): PostgreSQL 14-18 binaries
# pinned and verified by internal/testenv/fetch-postgres.sh, RabbitMQ 4.0 run beside the system broker by
# internal/testenv/rabbitmq4.sh, both cached in /var/cache/cdc-router. test-matrix (CI: make ci, one of make
# test's jobs): the core end-to-end tests on PostgreSQL 14 and 18 (17: MATRIX_PG), each against RabbitMQ 4.0. test-versions: the whole
# e2e suite on each PostgreSQL version, then the whole suite on RabbitMQ 4.0.
test-matrix: services
	@$(MAKE) --no-print-directory test-matrix-job

# The matrix as a job of make ci: without the services prerequisite, which make test has checked already (in
# make -j2 a prerequisite to remake put the matrix behind the jobs after it: it started last, 29 minutes in).
test-matrix-job:
	@date -u +'test-matrix: start %T'
	internal/testenv/matrix.sh core
	@date -u +'test-matrix: done %T'

test-versions: services
	internal/testenv/matrix.sh full

lint:
	$(GO) vet $(PKGS)
	@gofmt -l . | tee /dev/stderr | (! read)

fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzDecode -fuzztime=60s ./decode/
	$(GO) test -run='^$$' -fuzz=FuzzRow -fuzztime=30s ./decode/
	$(GO) test -run='^$$' -fuzz=FuzzTracker -fuzztime=30s ./offsets/
	$(GO) test -run='^$$' -fuzz=FuzzHeaders -fuzztime=30s ./route/message/

bench:
	$(GO) test -run='^$$' -bench=. -benchmem -count=5 ./decode/ ./offsets/ ./route/ ./route/message/

# N = 1, 2, 4 sharded routers draining the same events: events/s and PostgreSQL CPU per event (docs/scaling.md).
bench-shards: services
	$(GO) test -run='^$$' -bench=Shards -benchtime=1x -count=3 -timeout 20m ./e2e/

bench-e2e: services
	$(GO) test -run='^$$' -bench=EndToEnd -benchtime=1x -count=3 -timeout 20m ./e2e/

# The bare publisher (the broker's ceiling), cdc-router and a polling publisher over the same workload, in
# one run: a 50,000-event backlog drain, then 1,000 and 5,000 events/s. Prints one table, writes the plots
# to docs/bench/ (docs/benchmarks.md). BENCHFLAGS, e.g. "-runs 1 -events 10000" or "-pprof-dir /tmp/prof".
.PHONY: bench-compare
bench-compare: services
	$(GO) run ./bench/compare $(BENCHFLAGS)

# demo/run.sh builds bin/cdc-router and bin/cdc-router-demo itself (once each), so it also works alone.
demo: services
	@./demo/run.sh

clean:
	rm -rf bin

# The RabbitMQ cluster tests (build tag cluster): a 3-node cluster beside the system broker, a quorum queue,
# and a node stopped, the queue leader's node stopped, a node killed (about 2.5 minutes, 3 x 130 MB of RAM).
# Run before each release; not part of `make test` (see docs/scaling.md).
test-cluster: services
	$(GO) test $(TESTFLAGS) -tags 'cluster consumergroups' -run '^TestCluster' -v ./e2e/

# The partitioned consumer groups under faults (build tag consumergroups, about 50-60 s; docs/consumer-groups.md),
# on the machine's broker; on RabbitMQ 4.0: env $$(internal/testenv/rabbitmq4.sh start) make test-consumer-groups.
# The measurements: go test -tags groupbench -run TestBenchConsumerGroups -v ./inbox/runner/
test-consumer-groups: services
	$(GO) test $(TESTFLAGS) -tags consumergroups -run '^TestConsumerGroup' -v ./e2e/

# The randomized invariant harness (chaos/, docs/testing.md): SEEDS seeds from BASE (default: taken from
# the clock, printed), or SEED=s (or s1,s2,...) to replay one (or these); KNOWN_BROKEN=kind,... (or all) also generates the fault kinds known
# to find open bugs; DURATION per seed (default 20s). Each seed takes about 30 to 45 s. The normal suite
# (make test) runs the fixed CI seeds of chaos/chaos_test.go. JOBS=n runs SEEDS from BASE in n streams of
# their own (a PostgreSQL cluster each: chaos/jobs.sh), logs in chaos-logs/, one summary at the end: the
# long run is `make chaos SEEDS=200 JOBS=2` (about two hours on two cores). On the shared broker everything
# runs in a fresh vhost created and deleted by the run, or in VHOST (which must exist; / for the default).
VHOST        ?=
SEEDS        ?= 10
JOBS         ?= 1
SEED         ?=
BASE         ?=
KNOWN_BROKEN ?=
DURATION     ?= 20s
chaos: services
ifneq ($(JOBS),1)
	GO=$(GO) chaos/jobs.sh $(SEEDS) $(JOBS) "$(BASE)" $(DURATION) $(if $(KNOWN_BROKEN),-chaos.known-broken=$(KNOWN_BROKEN)) $(if $(VHOST),-chaos.vhost=$(VHOST))
else
	$(GO) test -count=1 -v -timeout 0 -run '^TestChaos$$' ./chaos/ -args -chaos.seeds=$(SEEDS) -chaos.duration=$(DURATION) \
		$(if $(SEED),-chaos.seed=$(SEED)) $(if $(BASE),-chaos.base=$(BASE)) $(if $(KNOWN_BROKEN),-chaos.known-broken=$(KNOWN_BROKEN)) \
		$(if $(JUDGE),-chaos.judge=$(JUDGE)) $(if $(VHOST),-chaos.vhost=$(VHOST))
endif

# Mutants of the router that the harness must catch (chaos/mutants.sh, issue 36): each applied to a copy of
# the committed tree in a temporary directory (never the working tree), then the CI seeds (or
# MUTANT_SEEDS=a,b,...) run against it; prints which seeds killed each. MUTANTS="name ..." for some (none:
# the tree unchanged). About 3 minutes a mutant on two cores; not part of make test.
MUTANTS      ?=
MUTANT_SEEDS ?=
mutants: services
	GO=$(GO) MUTANT_SEEDS=$(MUTANT_SEEDS) chaos/mutants.sh $(MUTANTS)
