# moerun build entry points. Plain `go build ./...` and `go test ./...` work too; this file
# only names the common invocations.
GO       ?= go
FUZZTIME ?= 20s
BIN      ?= bin/moerun
# Go's SIMD experiment builds the vector kernels of package tensor (tensor/simd_*_amd64.go);
# without it (plain go build/test, or SIMD=) the scalar kernels run.
SIMD     ?= GOEXPERIMENT=simd
# Tests and benchmarks run as the moerun binary does (cmd/moerun/preempt_simd.go): without
# asynchronous preemption, which under the SIMD experiment makes scalar float code ~80x slower.
export GODEBUG := asyncpreemptoff=1

.PHONY: build test bench lint fuzz demo examples clean

build:
	$(SIMD) $(GO) build -o $(BIN) ./cmd/moerun

# The second run keeps the scalar kernels (the fallback and the tests' reference) tested.
test:
	$(SIMD) $(GO) test ./...
	$(GO) test ./tensor/...

bench:
	$(SIMD) $(GO) test -run '^$$' -bench . -benchmem ./...

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(SIMD) $(GO) vet ./tensor/...

# Runs every fuzz target for FUZZTIME each (make fuzz FUZZTIME=10m for a long run).
fuzz:
	@set -e; for file in $$(grep -l '^func Fuzz' $$(find . -name '*_test.go')); do \
		pkg=./$$(dirname $$file); \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
			echo "== $$pkg $$target"; \
			$(SIMD) $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

# The examples and the documentation's tested sessions: the Go examples' Example tests,
# every console block in docs/ and examples/, the flag reference, the help examples and the
# JSON schemas (also part of make test).
examples:
	$(SIMD) $(GO) test ./examples/... ./docs

demo: build
	$(BIN) place --preset deepseek-v3:q4_k_m --gpu 24GiB --cpu-moe

clean:
	rm -rf bin
