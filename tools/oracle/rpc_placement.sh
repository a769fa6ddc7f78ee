#!/usr/bin/env bash
# Records what llama.cpp decides, tensor by tensor, when it places the presets moerun synth
# writes: llama-fit-params (llama.cpp 3f545bec, built with -DGGML_RPC=ON) loads a sparse
# Q4_K_M file of each preset without allocating (-fit off -fitp on) beside one RPC device,
# a stand-in for a GPU (ggml-rpc-server on this machine; it reports 24105 MiB here), and
# logs each layer's device, each tensor -ot or --n-cpu-moe moved, and the memory per
# device. placement's TestPresetsAsLlamaCpp reads the files this writes.
#
#   LLAMA_RPC_BIN=/path/to/llama.cpp/build-rpc/bin tools/oracle/rpc_placement.sh [PRESET...]
set -euo pipefail
bin=${LLAMA_RPC_BIN:?set LLAMA_RPC_BIN to a llama.cpp build-rpc/bin directory}
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/testdata/placement
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(qwen3-next-80b-a3b minimax-m2 deepseek-v3.2 glm-5 glm-4.7-flash qwen3.6-35b-a3b kimi-k2)
# shellcheck source=tools/oracle/rpc_common.sh
. "$root/tools/oracle/rpc_common.sh"
rpc_start 50199
# The cases: flags after -m FILE, one name each.
cases=("ngl99_ot_exps_cpu|-ngl 99 -ot exps=CPU -c 32768" "ngl99_ncmoe8|-ngl 99 --n-cpu-moe 8 -c 32768")
for p in "${presets[@]}"; do
	model=$work/$p.gguf
	"$work/moerun" synth "$p:q4_k_m" --sparse -o "$model" >/dev/null
	file=$out/$p.rpc.txt
	echo "# llama.cpp 3f545bec llama-fit-params -fit off -fitp on -v, beside one RPC device, on moerun synth $p:q4_k_m --sparse (tools/oracle/rpc_placement.sh)" >"$file"
	for c in "${cases[@]}"; do
		name=${c%%|*} flags=${c#*|}
		# shellcheck disable=SC2086 # the flags are words
		LD_LIBRARY_PATH=$bin "$bin/llama-fit-params" --rpc 127.0.0.1:50199 -m "$model" $flags -fit off -fitp on -v \
			>"$work/out" 2>"$work/err"
		echo "case $name: $flags" >>"$file"
		sed -n 's/.*load_tensors: layer *\([0-9]*\) assigned to device \([^,]*\),.*/layer \1 \2/p;
			s/.*tensor \([^ ]*\) ([^)]*) buffer type overridden to \(.*\)$/override \1 \2/p;
			s/.*memory_breakdown_print: |   - \([A-Za-z0-9_]*\).*(* *[0-9]* = *\([0-9]*\) + *\([0-9]*\) + *\([0-9]*\)).*/memory \1 model \2 context \3 compute \4/p;
			s/.*memory_breakdown_print: |   - \([A-Za-z0-9_]*\)  *|  *[0-9]* = *\([0-9]*\) + *\([0-9]*\) + *\([0-9]*\) .*/memory \1 model \2 context \3 compute \4/p' \
			"$work/err" >>"$file"
		grep -q '^memory RPC0' "$file" || { echo "$p $name: no memory breakdown in llama.cpp's log" >&2; exit 1; }
	done
	echo "$file"
done
