# moerun build entry points. Plain `go build ./...` and `go test ./...` work too; this file
# only names the common invocations.
GO       ?= go
FUZZTIME ?= 20s
BIN      ?= bin/moerun

.PHONY: build test bench lint fuzz demo clean

build:
	$(GO) build -o $(BIN) ./cmd/moerun

test:
	$(GO) test ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# Runs every fuzz target for FUZZTIME each (make fuzz FUZZTIME=10m for a long run).
fuzz:
	@set -e; for file in $$(grep -l '^func Fuzz' $$(find . -name '*_test.go')); do \
		pkg=./$$(dirname $$file); \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
			echo "== $$pkg $$target"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done

demo: build
	$(BIN) place --preset deepseek-v3:q4_k_m --gpu 24GiB --cpu-moe

clean:
	rm -rf bin
