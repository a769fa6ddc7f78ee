#!/bin/sh
# Regenerates quantize-types.txt.gz: for every preset and quantized mix, the tensors in the
# order llama-quantize writes them and the type it picks for each, from llama.cpp's own
# quantizer run in --dry-run mode on the preset's sparse F16 layout (no data is read).
# Needs a llama.cpp build at the fixtures' commit (3f545bec); never run by CI.
#
#   LLAMA_QUANTIZE=/path/to/llama-quantize sh regen-quantize-types.sh
#
# MOERUN names a moerun binary to use instead of building one.
#
# gpt-oss experts are published in MXFP4 and uploaders keep them so; the script asks
# llama-quantize to do the same with a --tensor-type override.
set -eu
cd "$(dirname "$0")"
quantize=${LLAMA_QUANTIZE:-llama-quantize}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
moerun=${MOERUN:-$tmp/moerun}
[ -n "${MOERUN:-}" ] || go build -o "$moerun" ../../../cmd/moerun

for preset in $("$moerun" synth --list --json | sed -n 's/^    "name": "\(.*\)",$/\1/p'); do
	"$moerun" synth "$preset:f16" --sparse -o "$tmp/in.gguf" >/dev/null
	for mix in q8_0 q6_k q5_k_m q4_k_m q4_0 iq4_xs mxfp4; do
		ftype=$(echo "$mix" | tr a-z A-Z)
		[ "$ftype" = MXFP4 ] && ftype=MXFP4_MOE
		set --
		case $preset in gpt-oss-*) set -- --tensor-type '_exps\.weight=mxfp4' ;; esac
		echo "# $preset:$mix"
		# "[  4/579] blk.0.attn_k.weight - [...], type = f16, size = 2.00 MiB -> 0.56 MiB (q4_K)"
		# keeps its type when there is no "->".
		"$quantize" --dry-run "$@" "$tmp/in.gguf" "$tmp/out.gguf" "$ftype" 2>&1 |
			sed -n -e 's/^\[ *[0-9]*\/ *[0-9]*\] *\([^ ]*\) .*-> .*(\([^)]*\))$/\1 \2/p' \
				-e 's/^\[ *[0-9]*\/ *[0-9]*\] *\([^ ]*\) .*type = *\([^,]*\), size = [ 0-9.]* MiB$/\1 \2/p'
	done
done | gzip -9n >quantize-types.txt.gz
