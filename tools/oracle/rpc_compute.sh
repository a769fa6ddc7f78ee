#!/usr/bin/env bash
# Records the GPU compute buffer llama.cpp sizes for the MLA presets, over context and
# ubatch: llama-fit-params (llama.cpp 3f545bec, built with -DGGML_RPC=ON) on a sparse
# Q4_K_M file of each preset beside one RPC device (ggml-rpc-server on this machine), with
# -ngl 99 -ot exps=CPU. placement's TestComputeAsLlamaCpp reads the file this writes.
#
#   LLAMA_RPC_BIN=/path/to/llama.cpp/build-rpc/bin tools/oracle/rpc_compute.sh
set -euo pipefail
bin=${LLAMA_RPC_BIN:?set LLAMA_RPC_BIN to a llama.cpp build-rpc/bin directory}
root=$(cd "$(dirname "$0")/../.." && pwd)
file=$root/testdata/placement/compute-mla.txt
# shellcheck source=tools/oracle/rpc_common.sh
. "$root/tools/oracle/rpc_common.sh"
rpc_start 50198
{
	echo "# llama.cpp 3f545bec llama-fit-params -ngl 99 -ot exps=CPU -fit off -fitp on -v beside one RPC device (tools/oracle/rpc_compute.sh)"
	echo "# preset ctx ubatch RPC0-compute-MiB"
} >"$file"
for p in deepseek-v3 kimi-k2 deepseek-v3.2 glm-5; do
	model=$work/$p.gguf
	"$work/moerun" synth "$p:q4_k_m" --sparse -o "$model" >/dev/null
	for c in 4096 32768 65536; do
		for ub in 256 512; do
			LD_LIBRARY_PATH=$bin "$bin/llama-fit-params" --rpc 127.0.0.1:50198 -m "$model" -ngl 99 -ot exps=CPU \
				-c "$c" -ub "$ub" -fit off -fitp on -v >"$work/out" 2>"$work/err"
			mib=$(sed -n 's/.*RPC0.*compute buffer size = *\([0-9.]*\) MiB.*/\1/p' "$work/err" | tail -1)
			[ -n "$mib" ] || { echo "$p -c $c -ub $ub: no compute buffer in llama.cpp's log" >&2; exit 1; }
			echo "$p $c $ub $mib" >>"$file"
		done
	done
	rm -f "$model"
done
echo "$file"
