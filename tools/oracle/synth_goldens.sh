#!/bin/sh
# synth_goldens.sh: llama.cpp's answers for tiny random models that moerun itself writes.
#
# For each architecture moerun runs besides the shared fixtures, it synthesizes a tiny
# random model with `moerun synth` (other shapes, seed and quant types than
# ../shared/testdata/arch, so that our writer and our forward pass are both checked
# against llama.cpp on models nobody else made), lets llama.cpp load it and records, with
# model_golden.cpp, the prompt's token ids, 32 greedy tokens and every step's logits into
# moe/testdata/golden/synth-<arch>.json.gz (the model: moe/testdata/synth/<arch>.gguf).
# moe's TestTeacherForced holds the runtime to them as to the shared goldens. Never run by CI.
#
#   LLAMA=/path/to/llama.cpp sh tools/oracle/synth_goldens.sh [ARCH...]
#
# With model names (qwen3next, glm4moe, ...: the files' names), only their models and goldens are
# remade; the others' committed files are left as they are.
#
# LLAMA is a checkout of ngxson/llama.cpp at 3f545beccee69d9975f466ec7e45fd9aacd8ba90 with a
# CPU build in $LLAMA/build (DEVELOPERS.md, or tools/oracle/README.md, says how to get one:
#   cmake -B build -DGGML_NATIVE=ON -DLLAMA_CURL=OFF && cmake --build build -j
# in that checkout). A model llama.cpp refuses to load stops the script: that is a bug in
# moerun's writer.
set -eu
: "${LLAMA:?set LLAMA to a llama.cpp checkout with a build in LLAMA/build}"
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$root/moe/testdata/synth
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"

g++ -O2 -std=c++17 "$root/tools/oracle/model_golden.cpp" -I"$LLAMA/include" -I"$LLAMA/ggml/include" \
	-L"$LLAMA/build/bin" -lllama -Wl,-rpath,"$LLAMA/build/bin" -o "$tmp/model_golden"
(cd "$root" && go build -o "$tmp/moerun" ./cmd/moerun)

common="--random --seed 7 --vocab-size 512"
only="$*"
wanted() { # NAME: whether this run remakes NAME
	[ -z "$only" ] || case " $only " in *" $1 "*) ;; *) return 1 ;; esac
}
synth() { # NAME SPEC FLAGS...
	name=$1
	shift
	wanted "$name" || return 0
	"$tmp/moerun" synth "$@" $common -o "$out/$name.gguf"
}
# Shapes small enough to commit (about 1 MB each); widths that are not multiples of 256
# make llama-quantize's fallbacks (q5_0, q5_1) appear next to the mix's own types.
synth glm4moe glm-4.6:q4_0 --layers 3 --leading-dense 1 --n-embd 128 --heads 4 --heads-kv 2 \
	--head-dim 32 --rope-dim 16 --experts 8 --experts-used 2 --expert-ff 64 --n-ff 192
synth gpt-oss gpt-oss-120b:mxfp4 --layers 4 --n-embd 128 --heads 4 --heads-kv 2 --head-dim 32 \
	--experts 8 --experts-used 2 --expert-ff 64 --n-ff 64
synth qwen35moe qwen3.5-122b-a10b:q4_k_m --layers 4 --no-mtp --n-embd 128 --heads 4 --heads-kv 2 \
	--head-dim 32 --rope-dim 8 --experts 8 --experts-used 2 --expert-ff 64 --shared-ff 64 \
	--ssm-state 16 --ssm-groups 2 --ssm-heads 4
synth qwen2moe qwen2-57b-a14b:q6_k --layers 3 --n-embd 128 --heads 4 --heads-kv 2 --experts 8 \
	--experts-used 2 --expert-ff 64 --shared-ff 128 --n-ff 192
# Three value heads per key head, so that grouping them (Qwen3-Next) and tiling them
# (Qwen3.5) differ; the MTP block is kept, for llama.cpp to check its layout.
synth qwen3next qwen3-next-80b-a3b:q5_k_m --layers 4 --n-embd 128 --heads 4 --heads-kv 2 \
	--head-dim 32 --rope-dim 8 --experts 8 --experts-used 2 --expert-ff 64 --shared-ff 64 \
	--ssm-state 16 --ssm-groups 2 --ssm-heads 6
# The same, as converters wrote it before llama.cpp split in_proj_qkvz (its legacy ssm_in path).
synth qwen3next-ssm-in qwen3-next-80b-a3b:q5_k_m --legacy-ssm-in --no-mtp --layers 4 --n-embd 128 \
	--heads 4 --heads-kv 2 --head-dim 32 --rope-dim 8 --experts 8 --experts-used 2 --expert-ff 64 \
	--shared-ff 64 --ssm-state 16 --ssm-groups 2 --ssm-heads 6

# 256 wide, for IQ4_XS to apply where rows allow it; experts as wide as the dense length, as
# MiniMax-M2's converter writes them.
synth minimax-m2 minimax-m2:iq4_xs --layers 3 --n-embd 256 --heads 4 --heads-kv 2 --head-dim 32 \
	--rope-dim 16 --experts 8 --experts-used 2 --expert-ff 64 --n-ff 64

# DeepSeek Sparse Attention: an indexer top-k of 32, below "long"'s 169 tokens and fox's 43
# positions by its last step, so that attention drops positions; eight experts in two groups
# (llama.cpp wants fewer groups than experts). GLM-5's layout has every indexer full.
dsa="--layers 3 --leading-dense 1 --n-embd 128 --heads 4 --head-dim 48 --v-head-dim 32 --rope-dim 16
	--q-lora-rank 64 --kv-lora-rank 64 --experts 8 --experts-used 2 --expert-ff 64 --n-ff 192
	--indexer-heads 4 --indexer-head-dim 64 --indexer-top-k 32"
synth deepseek32 deepseek-v3.2:q8_0 $dsa --expert-groups 2 --expert-groups-used 1
synth glm-dsa glm-5:q5_k_m $dsa
# A training context of 1M makes llama.cpp read a glm-dsa file without indexer types as
# GLM-5.2: full indexers in layers 0-2, layer 3 sharing layer 2's choice.
synth glm-dsa-shared glm-5:q5_k_m $(echo "$dsa" | sed 's/--layers 3/--layers 4/') --context 1048576

# "long" is 169 tokens: past gpt-oss's 128-token window and several of the delta rule's
# 64-token chunks.
long='Once upon a time, there was a little robot who loved to read books. Every morning the robot walked
to the library, opened the big wooden door, and said hello to the old librarian. She smiled and
handed the robot a new book about the sea, the stars, the mountains and the history of the world.
def main():
    print("hello, world")
    for i in range(10):
        print(i * i)
Mixture of experts models route every token to a few experts; the router picks the top ones.'
cd "$out"
for model in *.gguf; do
	name=${model%.gguf}
	wanted "$name" || continue
	if ! "$tmp/model_golden" "$model" "hello=Hello world" "fox=The quick brown fox jumps over the lazy dog." \
		"long=$long" >"$tmp/$name.json" 2>"$tmp/$name.log"; then
		cat "$tmp/$name.log" >&2
		exit 1
	fi
	gzip -9n <"$tmp/$name.json" >"../golden/synth-$name.json.gz"
	echo "$name: $(grep -ci 'warn' "$tmp/$name.log" || true) lines of llama.cpp's log mention a warning" >&2
done

# The DSA models are not committed: moe's tests write the same bytes again (generated_test.go,
# which checks their SHA-256; update it there when you remake one).
for name in deepseek32 glm-dsa glm-dsa-shared; do
	if wanted "$name"; then
		echo "$name.gguf: SHA-256 $(sha256sum <"$name.gguf" | cut -d' ' -f1) (moe/generated_test.go)" >&2
		rm -f "$name.gguf"
	fi
done

# gpt-oss past the wrap of llama.cpp's small SWA cache (768 cells with the default ubatch of
# 512 in a context of 4096): 780 pseudo-random token ids, so that the decode steps' windows
# straddle the wrap; once with that cache (what llama-server runs by default) and once with
# the full-size one (llama_context_default_params' swa_full), which sums the window's
# positions in another order (moe's TestSlidingWindowGolden).
ids=$(awk 'BEGIN { x = 1; for (i = 0; i < 780; i++) { x = (x * 75 + 74) % 65537; printf "%s%d", (i ? "," : ""), 10 + x % 490 } }')
for full in 0 1; do
	suffix=swa
	[ "$full" = 1 ] && suffix=swa-full
	if ! MODEL_GOLDEN_SWA_FULL=$full "$tmp/model_golden" gpt-oss.gguf "wrap=ids:$ids" >"$tmp/swa.json" 2>"$tmp/swa.log"; then
		cat "$tmp/swa.log" >&2
		exit 1
	fi
	gzip -9n <"$tmp/swa.json" >"../golden/synth-gpt-oss-$suffix.json.gz"
done
