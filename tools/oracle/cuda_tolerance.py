#!/usr/bin/env python3
"""cuda_tolerance: how far llama.cpp's own CUDA build is from its CPU build on the golden
models: the tolerance moe's TestCUDAGolden grants moerun's GPU runs.

Usage: cuda_tolerance.py CUDA_GOLDEN_DIR > moe/testdata/golden/cuda-vs-cpu.json

CUDA_GOLDEN_DIR holds <name>.json.gz written by model_golden with MODEL_GOLDEN_NGL=99 on a
CUDA build of llama.cpp (3f545bec), fed the golden prompts as token ids (ids:...); each is
compared with moe/testdata/golden/<name>.json.gz, llama.cpp's CPU output. Per model: over
the prompts' final logits (step 0) the largest max |delta| and NMSE and how many argmaxes
agree; over the steps both runs took with the same tokens (until their greedy tokens part)
the median NMSE and the mean KL; and how many 32-token greedy continuations are identical.
"""
import glob, gzip, json, math, os, sys


def compare(got, want):
    num = sum((a - b) ** 2 for a, b in zip(got, want))
    den = sum(b * b for b in want)
    def log_softmax(v):
        m = max(v)
        s = math.log(sum(math.exp(t - m) for t in v))
        return [t - m - s for t in v]
    p, q = log_softmax(want), log_softmax(got)
    kl = sum(math.exp(pi) * (pi - qi) for pi, qi in zip(p, q))
    top = max(range(len(got)), key=got.__getitem__) == max(range(len(want)), key=want.__getitem__)
    return num / den, kl, max(abs(a - b) for a, b in zip(got, want)), top


def main(cuda_dir):
    out = {}
    for path in sorted(glob.glob(os.path.join(cuda_dir, "*.json.gz"))):
        name = os.path.basename(path)[: -len(".json.gz")]
        cuda = json.load(gzip.open(path))
        cpu = json.load(gzip.open(os.path.join("moe/testdata/golden", name + ".json.gz")))
        finals, steps, same = [], [], 0
        for pc, pg in zip(cuda["prompts"], cpu["prompts"]):
            if pc["token_ids"] != pg["token_ids"]:
                sys.exit(f"{name}: prompt {pg['name']} has other tokens")
            finals.append(compare(pc["step_logits"][0], pg["step_logits"][0]))
            same += pc["greedy"] == pg["greedy"]
            for k, (a, b) in enumerate(zip(pc["step_logits"], pg["step_logits"])):
                if k > 0 and pc["greedy"][k - 1] != pg["greedy"][k - 1]:
                    break
                steps.append(compare(a, b))
        nmses = sorted(s[0] for s in steps)
        out[name] = {
            "final_max_abs_diff": max(f[2] for f in finals),
            "final_max_nmse": max(f[0] for f in finals),
            "final_top1": sum(f[3] for f in finals),
            "prompts": len(finals),
            "steps": len(steps),
            "steps_median_nmse": nmses[len(nmses) // 2],
            "steps_mean_kl": sum(s[1] for s in steps) / len(steps),
            "same_greedy": same,
        }
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main(sys.argv[1])
