#!/bin/sh
# pure_goldens.sh: llama.cpp's final logits for tiny-qwen3moe with every matrix in Q4_0,
# IQ4_NL or Q2_K, formats llama.cpp repacks on an x86 CPU with AVX2 (Q2_K: with AVX-512).
#
# llama-quantize --allow-requantize --pure makes the three models from
# testdata/models/tiny-qwen3moe.gguf (moe's pureModel makes the same bytes itself, so the
# models are not committed), and llama-debug --save-logits records each prompt's token ids
# and final logits into moe/testdata/golden/tiny-qwen3moe-pure.json.gz, which
# TestRepackedMatchesLlamaCpp reads. Never run by CI.
#
#   LLAMA=/path/to/llama.cpp sh tools/oracle/pure_goldens.sh
#
# LLAMA is a checkout of ngxson/llama.cpp at 3f545beccee69d9975f466ec7e45fd9aacd8ba90; BUILD
# (default $LLAMA/build) a CPU build of it like the shared fixtures', for AVX-512 without
# AVX512-FP16, whose F16 and F32 products moerun reproduces (tensor/ggml_float.go):
#   cmake -B build-avx512 -DGGML_NATIVE=OFF -DGGML_AVX512=ON -DLLAMA_CURL=OFF &&
#   cmake --build build-avx512 --target llama-debug llama-quantize -j
set -eu
: "${LLAMA:?set LLAMA to a llama.cpp checkout with a build in LLAMA/build}"
BUILD=${BUILD:-$LLAMA/build}
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for typ in Q4_0 IQ4_NL Q2_K; do
	"$BUILD/bin/llama-quantize" --allow-requantize --pure \
		"$root/testdata/models/tiny-qwen3moe.gguf" "$tmp/$typ.gguf" "$typ" >/dev/null 2>&1
done
python3 - "$BUILD/bin/llama-debug" "$tmp" "$root/moe/testdata/golden/tiny-qwen3moe-pure.json.gz" <<'PY'
import glob, gzip, json, os, shutil, struct, subprocess, sys
debug, tmp, dst = sys.argv[1:4]
prompts = {
    "hello": "Hello world",
    "fox": "The quick brown fox jumps over the lazy dog because it wanted to see what was on the other side",
    "long": "In the beginning there was a small village by the sea, where the fishermen went out every morning before the sun rose and came back at noon with their nets full of silver fish, and the children ran along the shore to meet them, shouting and laughing, while the old women mended sails in the shade of the houses and told stories of storms long past.",
}
out = {"llama_cpp": "3f545bec, AVX-512 build without AVX512-FP16, llama-debug --save-logits -t 2", "models": {}}
for typ in ("Q4_0", "IQ4_NL", "Q2_K"):
    res = []
    for name, text in prompts.items():
        run = os.path.join(tmp, "run")
        shutil.rmtree(run, ignore_errors=True)
        os.makedirs(run)
        subprocess.run([debug, "-m", os.path.join(tmp, typ + ".gguf"), "-p", text, "--save-logits", "-t", "2"],
                       cwd=run, capture_output=True, check=True)
        files = glob.glob(os.path.join(run, "data", "*.bin"))
        ids = open([f for f in files if f.endswith("-tokens.bin")][0], "rb").read()
        logits = open([f for f in files if not f.endswith("-tokens.bin")][0], "rb").read()
        res.append({"name": name, "text": text,
                    "token_ids": list(struct.unpack("%di" % (len(ids) // 4), ids)),
                    "final_logits": list(struct.unpack("%df" % (len(logits) // 4), logits))})
    out["models"][typ.lower()] = res
open(dst, "wb").write(gzip.compress(json.dumps(out, separators=(",", ":")).encode(), 9, mtime=0))
PY
