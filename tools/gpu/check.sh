#!/usr/bin/env bash
# shellcheck disable=SC2016 # the bash -c scripts expand their own arguments
# Every check moerun needs a real GPU for, as one prepared run on the workplace's GPU machine
# (docs/contributing.md, "Checks on a real GPU"). Go is not installed there and the copy of
# the working tree sent there is capped at 64 MiB, so the work is split in three:
#
#   tools/gpu/check.sh prepare   here: build the CUDA binaries into .gpu/, pack llama.cpp's
#                                source beside them, move the tracked files the run does not
#                                need out of the working tree, check that what travels fits
#   tools/gpu/check.sh device    there (the device call's command, carrying .gpu): the
#                                conformance suite and the golden models on the GPU, synthesis,
#                                moerun bench (and llama-bench when asked), within a time budget;
#                                everything to $OUT/check.log and $OUT/summary.json
#   tools/gpu/check.sh restore   here: put the moved files back
#
#   tools/gpu/check.sh cpu       here: the device run's CPU part (synthesis, CPU-only bench),
#                                small, against the binaries prepare built
#   tools/gpu/check.sh fit       here: does the run still fit (the tracked files it needs plus
#                                a reserve for the binaries)? make test runs it
#
# The device run's knobs (environment): CHECK_BUDGET seconds for the whole run (470, so two
# runs fit in 15 minutes of device time), CHECK_LLAMA=1 to build llama.cpp's CUDA llama-bench
# there and bench it side by side (about 390 s of the budget on an H100: raise CHECK_BUDGET
# and the call's timeout to match), CHECK_LAYERS (48: the full qwen3-30b-a3b), CHECK_PROMPT
# (512), CHECK_GEN (128), CHECK_REPS (3), CHECK_GPU_THREADS (16,8), CHECK_CPU_THREADS
# (1,4,8,16), CHECK_HOT_LAYERS (10: blocks of the hot-experts model, see hot_experts),
# CHECK_WORK (scratch folder for the models, /tmp/moerun-gpu-check).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

cap=$((64 << 20))          # the device tool's limit on what travels
reserve=$((12 << 20))      # room kept for .gpu by `fit` (binaries 7 MiB and llama.cpp 3 MiB, xz)
llama_commit=3f545bec      # the llama.cpp commit every fixture comes from
carry=.gpu                 # the ignored folder the device call carries
# What the device run reads from the working tree; every other tracked file may stay behind.
keep='^(\.gitignore|tools/gpu/|testdata/models/|testdata/quant/models/|moe/testdata/)'

die() {
	echo "tools/gpu/check.sh: $*" >&2
	exit 1
}

state_dir() {
	local gitdir
	gitdir=$(git rev-parse --absolute-git-dir 2>/dev/null) || die "$root is not a git checkout"
	echo "$gitdir/moerun-gpu"
}

# bytes_of FILE... prints the sum of the files' sizes (missing files count 0).
bytes_of() {
	local total=0 size f
	for f in "$@"; do
		[ -f "$f" ] || continue
		size=$(stat -c %s "$f")
		total=$((total + size))
	done
	echo "$total"
}

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# travelling_bytes prints what the device call would send: the tracked files present, the
# untracked files git does not ignore, and the carried folder.
travelling_bytes() {
	local tracked others carried=0
	tracked=$(git ls-files -z | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
	others=$(git ls-files -z --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
	if [ -d "$carry" ]; then
		carried=$(find "$carry" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
	fi
	echo $((tracked + others + carried))
}

cmd_fit() {
	local needed
	needed=$(git ls-files -z | tr '\0' '\n' | grep -E "$keep" | tr '\n' '\0' | xargs -0 -r stat -c %s -- | awk '{ s += $1 } END { print s + 0 }')
	echo "the device run needs $(mib "$needed") of tracked files; with $(mib $reserve) kept for the binaries: $(mib $((needed + reserve))) of the $(mib $cap) the device call carries"
	[ $((needed + reserve)) -le $cap ] || die "the GPU run no longer fits: move fixtures it does not need out of $keep, or store them compressed"
}

# cuda_home finds cuda.h: CUDA_HOME, /usr/local/cuda, or /usr (Debian's nvidia-cuda-dev).
cuda_home() {
	local dir
	for dir in "${CUDA_HOME:-}" /usr/local/cuda /usr; do
		[ -n "$dir" ] && [ -f "$dir/include/cuda.h" ] && { echo "$dir"; return; }
	done
	die "no cuda.h: set CUDA_HOME, or unpack Debian's headers without installing them:
  (cd /tmp && apt-get download nvidia-cuda-dev && dpkg -x nvidia-cuda-dev_*.deb /tmp/cudadev)
  CUDA_HOME=/tmp/cudadev/usr tools/gpu/check.sh prepare"
}

cmd_prepare() {
	local state home include bin
	state=$(state_dir)
	[ ! -e "$state/stash" ] || die "files are still moved out from an earlier prepare: run tools/gpu/check.sh restore first"
	command -v go >/dev/null || die "prepare builds with Go, which is not on PATH"
	command -v xz >/dev/null || die "prepare packs with xz, which is not on PATH"
	command -v "${CXX:-g++}" >/dev/null || die "prepare needs a C++ compiler (CXX, default g++) for the link stub"
	# Moving files out must lose nothing: every file leaves a clean tree and comes back.
	[ -z "$(git status --porcelain --untracked-files=no)" ] || die "the working tree has uncommitted changes; commit or stash them first (prepare moves tracked files out)"
	home=$(cuda_home)
	include="-I$home/include"
	if grep -Eq '#define CUDA_VERSION 1[3-9][0-9]{3}' "$home/include/cuda.h"; then
		include="-I$root/backend/cuda/cuda13 $include" # see the README's GPU build
	fi

	rm -rf "${state:?}/bin" "${state:?}/stub" "$carry"
	mkdir -p "$state/bin" "$state/stub" "$carry"
	# The binaries link against libcuda.so.1, which the GPU machine's driver provides. Here
	# the fake driver of the cuda tag's tests stands in at link time (and for `cpu`).
	"${CXX:-g++}" -std=c++17 -O2 -ffp-contract=off -shared -fPIC -Wl,-soname,libcuda.so.1 \
		-Ibackend/cuda/kernels -Ibackend/cuda/kernels/testdata/emulate \
		-o "$state/stub/libcuda.so.1" backend/cuda/testdata/fakecuda/fake.cc backend/cuda/testdata/fakecuda/rest.cc
	ln -sf libcuda.so.1 "$state/stub/libcuda.so"
	bin="$state/bin"
	echo "building the CUDA binaries (cuda.h from $home)"
	export CGO_CFLAGS="$include" CGO_LDFLAGS="-L$state/stub" GOEXPERIMENT=simd
	local flags=(-trimpath -ldflags "-s -w" -tags cuda)
	go build "${flags[@]}" -o "$bin/moerun" ./cmd/moerun
	go test -c "${flags[@]}" -o "$bin/cuda.test" ./backend/cuda
	go test -c "${flags[@]}" -o "$bin/moe.test" ./moe
	git rev-parse HEAD >"$bin/COMMIT"
	tar -C "$bin" -cf - . | xz -6 -T0 >"$carry/bin.tar.xz"

	local mirror=${LLAMA_MIRROR:-/work/.mirror/ngxson+llama.cpp/repo}
	if git --git-dir="$mirror" cat-file -e "$llama_commit^{commit}" 2>/dev/null; then
		# The sources llama-bench's CUDA build needs, without the other backends and tools
		# (check.sh device writes a tools/CMakeLists.txt naming llama-bench alone).
		git --git-dir="$mirror" archive --format=tar "$llama_commit" -- CMakeLists.txt cmake LICENSE \
			ggml/CMakeLists.txt ggml/cmake ggml/include ggml/src/CMakeLists.txt 'ggml/src/*.c' \
			'ggml/src/*.cpp' 'ggml/src/*.h' ggml/src/ggml-cpu ggml/src/ggml-cuda src include common \
			tools/llama-bench vendor 2>/dev/null | xz -6 -T0 >"$carry/llama.tar.xz"
	else
		echo "no llama.cpp mirror at $llama_commit (LLAMA_MIRROR; fetch ngxson/llama.cpp): CHECK_LLAMA=1 will have nothing to build"
	fi

	# Move every tracked file the run does not read into the stash, keeping its path.
	mkdir -p "$state/stash"
	git ls-files -z | tr '\0' '\n' | grep -Ev "$keep" >"$state/manifest" || true
	local f moved=0
	while IFS= read -r f; do
		[ -e "$f" ] || continue
		mkdir -p "$state/stash/$(dirname "$f")"
		mv "$f" "$state/stash/$f"
		moved=$((moved + 1))
	done <"$state/manifest"
	local travel
	travel=$(travelling_bytes)
	echo "moved $moved tracked files to $state/stash; the device call carries $(mib "$travel") of $(mib $cap)"
	if [ "$travel" -gt "$cap" ]; then
		cmd_restore
		die "what would travel is over the cap; nothing was left moved"
	fi
	local others
	others=$(git ls-files --others --exclude-standard | head -5 | tr '\n' ' ')
	[ -z "$others" ] || echo "note: untracked files travel too: $others"
	cat <<EOF
next: the device call  run(command: "bash tools/gpu/check.sh device", carry: ["$carry"], timeout_s: 500)
then: tools/gpu/check.sh restore   (puts the $moved files back; do it before anything else)
EOF
}

cmd_restore() {
	local state f back=0 clash=0
	state=$(state_dir)
	[ -d "$state/stash" ] || { echo "nothing to restore"; return; }
	while IFS= read -r f; do
		[ -e "$state/stash/$f" ] || continue
		if [ -e "$f" ]; then
			echo "not restored, $f exists again (the moved copy stays in $state/stash)" >&2
			clash=1
			continue
		fi
		mkdir -p "$(dirname "$f")"
		mv "$state/stash/$f" "$f"
		back=$((back + 1))
	done <"$state/manifest"
	[ "$clash" = 0 ] || die "some files were not restored (above)"
	rm -rf "$state/stash"
	echo "restored $back files"
	git status --short --untracked-files=no
}

# ---- the device run ------------------------------------------------------------------------

log() { echo "[$(date +%T) +$(($(date +%s) - started))s] $*"; }

# json_string prints S as a JSON string.
json_string() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	s=${s//$'\t'/ }
	s=${s//$'\r'/}
	s=${s//$'\n'/\\n}
	printf '"%s"' "$s"
}

left() { echo $((budget - ($(date +%s) - started))); }

# step NAME MAX_SECONDS COMMAND...: runs COMMAND with at most MAX_SECONDS, or what is left of
# the budget less RESERVE, and records it; a step with less than 10 s left is skipped.
step() {
	local name=$1 most=$2 limit rc status t0 t1
	shift 2
	limit=$(($(left) - reserve_s))
	[ "$most" -ge "$limit" ] || limit=$most
	if [ "$limit" -lt 10 ]; then
		log "SKIP $name: the budget is spent"
		steps+=("{\"name\":$(json_string "$name"),\"status\":\"skipped\",\"reason\":\"budget\"}")
		return 1
	fi
	log "RUN  $name (at most ${limit}s): $*"
	t0=$(date +%s.%N)
	set +e
	timeout --kill-after=5 "$limit" "$@"
	rc=$?
	set -e
	t1=$(date +%s.%N)
	case $rc in
	0) status=ok ;;
	124 | 137) status=timeout ;;
	*) status=failed ;;
	esac
	local seconds
	seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	log "$(printf '%-4s' "${status^^}") $name: rc $rc in ${seconds}s"
	steps+=("{\"name\":$(json_string "$name"),\"status\":\"$status\",\"rc\":$rc,\"seconds\":$seconds,\"limit\":$limit}")
	[ "$rc" = 0 ]
}

# bench_rows TOOL PLACEMENT FILE: turns a jsonl file of bench rows into summary entries.
bench_rows() {
	local tool=$1 placement=$2 file=$3 row
	[ -s "$file" ] || return 0
	while IFS= read -r row; do
		case $row in "{"*) benches+=("{\"tool\":\"$tool\",\"placement\":$(json_string "$placement"),\"row\":$row}") ;; esac
	done <"$file"
}

run_bench() { # TOOL NAME MAX MODEL PLACEMENT THREADS
	local tool=$1 name=$2 most=$3 model=$4 placement=$5 threads=$6 exe out
	out="$work/bench-$((++bench_n)).jsonl"
	case $tool in
	moerun) exe=("$bin/moerun" bench) ;;
	moerun-nographs) exe=(env MOERUN_CUDA_GRAPHS=0 "$bin/moerun" bench) ;;
	moerun-notiled) exe=(env MOERUN_CUDA_TILED=0 "$bin/moerun" bench) ;;
	llama.cpp) exe=("$work/llama/build/bin/llama-bench") ;;
	esac
	# shellcheck disable=SC2086 # the placement is a list of flags
	step "$name" "$most" bash -c 'set -o pipefail; "$@" | tee "$0"' "$out" "${exe[@]}" -m "$model" $placement \
		-t "$threads" -p "$prompt" -n "$gen" -r "$reps" -o jsonl || true
	bench_rows "$tool" "$placement" "$out"
}

write_summary() {
	local gpu=$1 file=$2
	{
		printf '{"commit":%s,"date":%s,"budget_s":%s,"elapsed_s":%s,' \
			"$(json_string "$(cat "$bin/COMMIT" 2>/dev/null || echo unknown)")" \
			"$(json_string "$(date -u +%FT%TZ)")" "$budget" "$(($(date +%s) - started))"
		printf '"machine":{"gpu":%s,"nproc":%s,"cpu":%s,"memory":%s},' \
			"$(json_string "$gpu")" "$(nproc)" \
			"$(json_string "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)")" \
			"$(json_string "$(free -g | awk '/^Mem:/ { print $2 " GiB" }')")"
		printf '"steps":[%s],' "$(IFS=,; echo "${steps[*]:-}")"
		printf '"bench":[%s]}\n' "$(IFS=,; echo "${benches[*]:-}")"
	} >"$file"
}

# device_run GPU: GPU is 1 on the GPU machine, 0 for the CPU part here.
device_run() {
	local gpu=$1 out=${OUT:-$root/.gpu-out}
	started=$(date +%s)
	budget=${CHECK_BUDGET:-470}
	reserve_s=5
	work=${CHECK_WORK:-/tmp/moerun-gpu-check}
	prompt=${CHECK_PROMPT:-512}
	gen=${CHECK_GEN:-128}
	reps=${CHECK_REPS:-3}
	layers=${CHECK_LAYERS:-48}
	local gpu_threads=${CHECK_GPU_THREADS:-16,8} cpu_threads=${CHECK_CPU_THREADS:-1,4,8,16}
	steps=() benches=() bench_n=0
	mkdir -p "$out" "$work"
	exec > >(tee "$out/check.log") 2>&1

	bin="$work/bin"
	[ -f "$carry/bin.tar.xz" ] || die "no $carry/bin.tar.xz: run tools/gpu/check.sh prepare here and carry $carry"
	rm -rf "$bin" && mkdir -p "$bin"
	xz -dc "$carry/bin.tar.xz" | tar -C "$bin" -xf -
	log "moerun $(cat "$bin/COMMIT"), budget ${budget}s, models in $work"
	local gpu_name="none"
	if [ "$gpu" = 1 ]; then
		nvidia-smi || true
		gpu_name=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo unknown)
	fi
	log "nproc $(nproc); $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1); $(free -g | awk '/^Mem:/ { print $2 " GiB" }')"

	if [ "$gpu" = 1 ]; then
		export MOERUN_REQUIRE_GPU=1 GODEBUG=asyncpreemptoff=1
		step "conformance suite and CUDA backend tests (backend/cuda)" 120 \
			bash -c 'cd backend/cuda && "$0" -test.v' "$bin/cuda.test" || true
		step "golden models on the GPU (moe: TestCUDAGolden, every placement)" 150 \
			bash -c 'cd moe && "$0" -test.v -test.run "CUDA|TwoDevices"' "$bin/moe.test" || true
	fi

	local small="$work/bench8.gguf" full="$work/qwen3-30b-a3b-$layers.gguf"
	step "synth bench8 (qwen3-30b-a3b:q4_k_m, 8 layers, random)" 120 \
		"$bin/moerun" synth qwen3-30b-a3b:q4_k_m --layers 8 --random --seed 1 -o "$small" || true
	if [ -f "$small" ]; then
		run_bench moerun "moerun bench CPU-only, bench8, -t $cpu_threads" 150 "$small" "-ngl 0" "$cpu_threads"
	fi

	local llama=0
	if [ "$gpu" = 1 ] && [ "${CHECK_LLAMA:-0}" = 1 ]; then
		if [ -f "$carry/llama.tar.xz" ]; then
			rm -rf "$work/llama" && mkdir -p "$work/llama"
			xz -dc "$carry/llama.tar.xz" | tar -C "$work/llama" -xf -
			echo 'add_subdirectory(llama-bench)' >"$work/llama/tools/CMakeLists.txt"
			step "build llama.cpp $llama_commit llama-bench (CUDA)" 480 bash -c 'cd "$0" &&
				cmake -B build -G "$(command -v ninja >/dev/null && echo Ninja || echo "Unix Makefiles")" \
					-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release \
					-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
					-DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF >/dev/null &&
				cmake --build build --target llama-bench -j "$(nproc)" >build.log 2>&1 || { tail -40 build.log; exit 1; }' \
				"$work/llama" && llama=1
		else
			log "CHECK_LLAMA=1 but $carry/llama.tar.xz was not carried (prepare found no mirror)"
		fi
		if [ "$llama" = 1 ] && [ -f "$small" ]; then
			run_bench llama.cpp "llama-bench CPU-only, bench8, -t $cpu_threads" 150 "$small" "-ngl 0 -nopo 1" "$cpu_threads"
		fi
	fi

	step "synth qwen3-30b-a3b:q4_k_m, $layers layers, random (timed)" 240 \
		"$bin/moerun" synth qwen3-30b-a3b:q4_k_m --layers "$layers" --random --seed 1 -o "$full" || true
	if [ -f "$full" ] && [ "$gpu" = 1 ]; then
		local t placement
		for t in ${gpu_threads//,/ }; do
			for placement in "-ngl 99" "-ngl 99 -ot exps=CPU" "-ngl 99 --n-cpu-moe $((layers / 2))"; do
				run_bench moerun "moerun bench $placement -t $t" 150 "$full" "$placement" "$t"
				[ "$llama" = 0 ] || run_bench llama.cpp "llama-bench $placement -t $t" 150 "$full" "$placement" "$t"
			done
		done
		# CUDA graphs against direct launches (backend/cuda/graph.go), at the first thread
		# count: the decode figures above with graphs, these without.
		t=${gpu_threads%%,*}
		for placement in "-ngl 99" "-ngl 99 -ot exps=CPU"; do
			run_bench moerun-nographs "moerun bench $placement -t $t, MOERUN_CUDA_GRAPHS=0" 150 "$full" "$placement" "$t"
		done
		# The tiled product for prompts (mmq) against the matrix-vector kernel for every
		# batch (backend/cuda/backend.go, tiledMinTokens): the prompt figures above with it,
		# these without.
		run_bench moerun-notiled "moerun bench -ngl 99 -t $t, MOERUN_CUDA_TILED=0" 150 "$full" "-ngl 99" "$t"
	fi
	hot_experts "$gpu"
	log "done: ${#steps[@]} steps, ${#benches[@]} bench rows; $out/check.log and $out/summary.json"
	write_summary "$gpu_name" "$out/summary.json"
}

# hot_experts GPU: issue 38's check, scaled down to fit the budget. A Qwen3.5-35B-A3B-shaped
# model with a measured-like expert load (gamma:0.5), CHECK_HOT_LAYERS of its 40 blocks, and
# the VRAM that 8 GiB is for the full model: room for the experts of 9 blocks in 40 with
# --n-cpu-moe beside everything else and --fit's 1 GiB margin. The best --n-cpu-moe that
# fits (every count tried with place) runs against -ot exps=CPU with the expert cache that
# --expert-cache auto sizes for that VRAM. On the CPU part a simulated GPU of that size
# stands in (same answers, no speed: it checks the commands).
hot_experts() {
	local gpu=$1 layers=${CHECK_HOT_LAYERS:-10} model total vram n ncmoe="" slots t
	model="$work/qwen35-hot-$layers.gguf"
	step "synth qwen3.5-35b-a3b:q4_k_m, $layers layers, expert load gamma:0.5" 200 \
		"$bin/moerun" synth qwen3.5-35b-a3b:q4_k_m --layers "$layers" --random --seed 1 --expert-load gamma:0.5 -o "$model" || return 0
	n=$((layers - (layers * 9 + 20) / 40))
	total=$("$bin/moerun" place "$model" --gpu 1TiB -c 4096 --fit off -ngl 99 --n-cpu-moe "$n" --json |
		grep -o '"total_bytes": *[0-9]*' | head -1 | grep -o '[0-9]*$')
	[ -n "$total" ] || return 0
	vram=$(((total >> 20) + 1024 + 1))
	local dry=(--gpu "${vram}MiB" -c 4096)
	for ((n = 0; n <= layers; n++)); do
		if "$bin/moerun" place "$model" "${dry[@]}" -ngl 99 --n-cpu-moe "$n" | grep -q '^verdict: fits:'; then
			ncmoe=$n
			break
		fi
	done
	slots=$("$bin/moerun" place "$model" "${dry[@]}" -ngl 99 -ot exps=CPU --expert-cache auto |
		sed -n 's/.*--expert-cache auto: \([0-9]*\) slots.*/\1/p')
	log "hot experts: ${vram} MiB of VRAM: --n-cpu-moe ${ncmoe:-none fits}, --expert-cache ${slots:-?} slots"
	[ -n "$ncmoe" ] && [ -n "$slots" ] || return 0
	local sim=""
	[ "$gpu" = 1 ] || sim="--sim-gpu ${vram}MiB"
	t=${CHECK_GPU_THREADS:-16,8}
	t=${t%%,*}
	run_bench moerun "moerun bench hot experts: -ngl 99 --n-cpu-moe $ncmoe -t $t" 120 "$model" "$sim -ngl 99 --n-cpu-moe $ncmoe" "$t"
	run_bench moerun "moerun bench hot experts: -ngl 99 -ot exps=CPU --expert-cache $slots -t $t" 120 "$model" \
		"$sim -ngl 99 -ot exps=CPU --expert-cache $slots" "$t"
}

cmd_device() {
	if ! nvidia-smi -L >/dev/null 2>&1; then
		die "no GPU here (nvidia-smi -L failed); tools/gpu/check.sh cpu runs the CPU part"
	fi
	device_run 1
}

# The CPU part on this machine, small by default, against the binaries prepare built (their
# libcuda is the fake driver, which no step uses: every run is -ngl 0).
cmd_cpu() {
	local state
	state=$(state_dir)
	[ -f "$state/stub/libcuda.so.1" ] || die "no binaries: run tools/gpu/check.sh prepare (and restore) first"
	export LD_LIBRARY_PATH="$state/stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export CHECK_LAYERS=${CHECK_LAYERS:-2} CHECK_PROMPT=${CHECK_PROMPT:-64} CHECK_GEN=${CHECK_GEN:-16} \
		CHECK_REPS=${CHECK_REPS:-1} CHECK_CPU_THREADS=${CHECK_CPU_THREADS:-1,$(nproc)}
	device_run 0
}

case ${1:-} in
prepare) cmd_prepare ;;
device) cmd_device ;;
restore) cmd_restore ;;
cpu) cmd_cpu ;;
fit) cmd_fit ;;
*)
	sed -n "3,/^set -euo/p" "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
	;;
esac
