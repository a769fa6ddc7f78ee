# moerun build entry points. Plain `go build ./...` and `go test ./...` work too; this file
# only names the common invocations.
GO       ?= go
FUZZTIME     ?= 20s
FUZZMINIMIZE ?= 2s
BIN      ?= bin/moerun
# Go's SIMD experiment builds the vector kernels of package tensor (tensor/simd_*_amd64.go);
# without it (plain go build/test, or SIMD=) the scalar kernels run.
SIMD     ?= GOEXPERIMENT=simd
# Tests and benchmarks run as the moerun binary does (cmd/moerun/preempt_simd.go): without
# asynchronous preemption, which under the SIMD experiment makes scalar float code ~80x slower.
export GODEBUG := asyncpreemptoff=1

.PHONY: build test bench lint fuzz demo examples clean cuda cuda-check cuda-fake kernels

build:
	$(SIMD) $(GO) build -o $(BIN) ./cmd/moerun

# The kernel levels this machine runs (tensor.Levels: generic, avx2, avx512; MOERUN_ISA caps
# the level a process uses).
LEVELS        = $(shell $(SIMD) $(GO) run ./tools/levels)
# The packages whose results depend on the kernel level: the kernels and the golden models.
LEVEL_PACKAGES = ./tensor/... ./moe/... ./backend/...

# The first run tests everything at the best level; the kernel and golden tests then run
# again at every lower level this machine has (-count=1: the level is read at start, which
# the test cache does not see), so no level can drift from llama.cpp unseen; the last run
# keeps the build without the SIMD experiment (the generic kernels only) tested.
test:
	$(SIMD) $(GO) test ./...
	@set -e; set -- $(LEVELS); [ $$# -gt 0 ] || { echo "tools/levels named no kernel level" >&2; exit 1; }; while [ $$# -gt 1 ]; do \
		echo "MOERUN_ISA=$$1 $(SIMD) $(GO) test -count=1 $(LEVEL_PACKAGES)"; \
		MOERUN_ISA=$$1 $(SIMD) $(GO) test -count=1 $(LEVEL_PACKAGES); \
		shift; \
	done
	$(GO) test ./tensor/...

bench:
	$(SIMD) $(GO) test -run '^$$' -bench . -benchmem ./...

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(SIMD) $(GO) vet ./tensor/...

# Runs every fuzz target for FUZZTIME each (make fuzz FUZZTIME=10m for a long run). New
# inputs are minimised for at most FUZZMINIMIZE (Go's default, 60 s, let a short run spend
# most of its time shrinking large template inputs instead of fuzzing).
fuzz:
	@set -e; for file in $$(grep -l '^func Fuzz' $$(find . -name '*_test.go')); do \
		pkg=./$$(dirname $$file); \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
			echo "== $$pkg $$target"; \
			$(SIMD) $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) $$pkg; \
		done; \
	done

# The examples and the documentation's tested sessions: the Go examples' Example tests,
# every console block in docs/ and examples/, the flag reference, the help examples and the
# JSON schemas (also part of make test).
examples:
	$(SIMD) $(GO) test ./examples/... ./docs

# The CUDA build (the cuda build tag; see README "GPU build"). It needs the CUDA driver API
# header cuda.h and libcuda (the NVIDIA driver) — not nvcc: the kernels are embedded PTX.
# CUDA 11.x and 12.x headers work as they are; CUDA 13 headers also need
# backend/cuda/cuda13 first on the include path (CUDA_COMPAT=cuda13), because gorgonia.org/cu
# calls the pre-13 cuCtxCreate.
CUDA_HOME   ?= /usr/local/cuda
CUDA_COMPAT ?=
CUDA_ENV    = CGO_CFLAGS="$(if $(CUDA_COMPAT),-I$(CURDIR)/backend/cuda/$(CUDA_COMPAT)) -I$(CUDA_HOME)/include" \
	CGO_LDFLAGS="-L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib64/stubs"

cuda:
	$(CUDA_ENV) $(SIMD) $(GO) build -tags cuda -o $(BIN) ./cmd/moerun

# Compiles and vets everything the cuda tag adds and runs its tests; on a machine without a
# GPU the GPU tests skip and the rest (routing, the no-GPU fallback) runs.
cuda-check:
	$(CUDA_ENV) $(SIMD) $(GO) vet -tags cuda ./backend/cuda/... ./cmd/moerun ./moe
	$(CUDA_ENV) $(SIMD) $(GO) test -tags cuda ./backend/cuda/...
	$(CUDA_ENV) $(SIMD) $(GO) test -tags cuda -run 'CUDA|TwoDevices' ./moe

# The cuda tag's tests without a GPU: a fake libcuda (backend/cuda/testdata/fakecuda: one
# device whose memory is host memory, launches that run the kernels' CUDA source on the CPU
# through the kernels' emulator) stands in for the driver. Needs cuda.h (CUDA_HOME, or
# Debian's nvidia-cuda-dev) and a C++ compiler; no GPU, no nvcc. Besides the backend's own
# tests and the conformance suite, the moe tests run every golden model through the CUDA
# backend under -ngl 99 (every operation on the kernels; -ngl 0 first, whose distance from
# llama.cpp the GPU run's bound adds), and one model's op offload, expert shares
# (selectors, the expert cache) and CUDA graphs: about 8 minutes on 2 cores, most of it
# the golden models (CI runs this target, .ci/run).
FAKECUDA = $(CURDIR)/bin/fakecuda
cuda-fake:
	mkdir -p $(FAKECUDA)
	$(CXX) -std=c++17 -O2 -ffp-contract=off -shared -fPIC -fno-semantic-interposition -Ibackend/cuda/kernels -Ibackend/cuda/kernels/testdata/emulate \
		-o $(FAKECUDA)/libcuda.so backend/cuda/testdata/fakecuda/fake.cc backend/cuda/testdata/fakecuda/rest.cc
	$(CUDA_ENV) CGO_LDFLAGS="-L$(FAKECUDA)" LD_LIBRARY_PATH=$(FAKECUDA) $(SIMD) $(GO) test -count=1 -tags cuda ./backend/cuda/...
	$(CUDA_ENV) CGO_LDFLAGS="-L$(FAKECUDA)" LD_LIBRARY_PATH=$(FAKECUDA) $(SIMD) $(GO) test -count=1 -tags cuda ./moe -run 'CUDAOpOffload|CUDAExpertShares|CUDAGraphs'
	$(CUDA_ENV) CGO_LDFLAGS="-L$(FAKECUDA)" LD_LIBRARY_PATH=$(FAKECUDA) $(SIMD) $(GO) test -count=1 -timeout 30m -tags cuda ./moe -run 'CUDAGolden/.*/-ngl_(0|99)$$'

# Regenerates the embedded PTX from backend/cuda/kernels/*.cu (needs nvcc).
kernels:
	$(GO) generate ./backend/cuda/kernels

demo: build
	$(BIN) place --preset deepseek-v3:q4_k_m --gpu 24GiB --cpu-moe

clean:
	rm -rf bin
