package tensor

import (
	"fmt"
	"maps"
	"os"
	"strings"
)

// Kernel levels. Every kernel the package chooses at run time lives in a kernelSet, one per
// CPU level, as ggml-cpu keeps its type_traits_cpu table and builds one library per x86
// level: the generic level is plain Go (the reference every other kernel is tested
// against, and what any CPU runs); the SIMD levels (avx2Kernels and avx512Kernels in
// simd_amd64.go, built with GOEXPERIMENT=simd) each start from the level below and name
// what they replace. At start
// the best level the CPU supports is chosen, capped by MOERUN_ISA; the kernels of a Matrix
// are looked up once, when it is made.

// Level is a CPU kernel level.
type Level uint8

const (
	// LevelGeneric is plain Go: every CPU, and the build without GOEXPERIMENT=simd.
	LevelGeneric Level = iota
	// LevelAVX2 needs AVX2, FMA and F16C (x86-64-v3: Intel since Haswell, AMD since
	// Excavator and every Zen).
	LevelAVX2
	// LevelAVX512 needs AVX-512 F, BW and VL (x86-64-v4) on top; its kernels also use
	// VNNI, GFNI and VBMI where the CPU has them (Level.Features says which).
	LevelAVX512
)

var levelNames = [...]string{LevelGeneric: "generic", LevelAVX2: "avx2", LevelAVX512: "avx512"}

func (l Level) String() string {
	if int(l) < len(levelNames) {
		return levelNames[l]
	}
	return fmt.Sprintf("Level(%d)", uint8(l))
}

// ParseLevel reads a level's name as MOERUN_ISA gives it: generic, avx2 or avx512.
func ParseLevel(s string) (Level, error) {
	for l, name := range levelNames {
		if strings.EqualFold(strings.TrimSpace(s), name) {
			return Level(l), nil
		}
	}
	return 0, fmt.Errorf("unknown kernel level %q: want one of %s", s, strings.Join(levelNames[:], ", "))
}

// ISAEnv is the environment variable that caps the kernel level.
const ISAEnv = "MOERUN_ISA"

// rows4Kernel multiplies len(o0) consecutive whole rows (rowBytes apart) by four
// activation vectors: ok[r] is row r times ak.
type rows4Kernel = func(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32)

// rows2Kernel multiplies len(o0) consecutive whole rows by two activation vectors: o0[r]
// is row r times a0, o1[r] row r times a1.
type rows2Kernel = func(n int, rows, a0, a1 []byte, o0, o1 []float32)

// The two arithmetics of llama.cpp's repacked kernels, as indices.
const (
	gemm = iota
	gemv
)

// kernelSet is one level's kernels. A nil function or a type missing from a map means the
// level has no such kernel and the callers take their general path.
type kernelSet struct {
	level Level
	// features names the CPU features beyond the level's own that its kernels use
	// (VNNI, GFNI, VBMI), for KernelLevel.
	features []string

	// traits is the per-type table (the registry `traits`, with the level's VecDot,
	// ToFloat and FromFloat in place of the generic ones).
	traits map[Type]*Traits
	// activationFromFloat is how matmuls convert activations to a VecDotType where that
	// differs from its FromFloat (see the registry of the same name).
	activationFromFloat map[Type]func(src []float32, dst []byte)
	// dotTokens2 holds, for a type whose kernel spends much of its time unpacking weights
	// (nibbles to bytes, packed sub-block scales), a kernel that takes one weight row
	// against two activation vectors and unpacks each block once for both; each result is
	// the bits VecDot gives for its vector. Prefill tiles use it for pairs of tokens.
	dotTokens2 map[Type]func(n int, w, a0, a1 []byte) [2]float32
	// dotTokens4 is dotTokens2 for four activation vectors, for a type where sharing the
	// unpacking among four tokens pays beyond two; such a type has a two-token kernel too
	// (for the tokens left over). Prefill tiles take tokens four at a time, then in pairs.
	dotTokens4 map[Type]func(n int, w, a0, a1, a2, a3 []byte) [4]float32
	// dotTokens4Rows is dotTokens4 over len(o0) consecutive whole rows (rowBytes apart) in
	// one call, ok[r] = dotTokens4's result k for row r, for a type whose four-token kernel
	// costs much per call next to the short rows of a small model (Q8_0 on VNNI).
	dotTokens4Rows map[Type]func(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32)
	// dotTokens2Rows is dotTokens2 over consecutive whole rows, each token's bits of
	// VecDot, where the level has such a kernel.
	dotTokens2Rows map[Type]rows2Kernel
	// dotRowsOne holds, for a type whose VecDot has a fixed cost per call worth saving, a
	// kernel that takes len(out) consecutive whole rows and one activation vector:
	// out[r] = VecDot(n, row r, a), the same bits.
	dotRowsOne map[Type]func(n int, rows, a []byte, out []float32)
	// repackedKernels holds, for a type whose repacked arithmetic (repacked.go) the level
	// runs for one token without packing, its kernel over whole rows against one vector
	// (as dotRowsOne) in gemv's arithmetic.
	repackedKernels map[Type]func(n int, rows, a []byte, out []float32)
	// repackedTokens4 holds, for a type in repackedKernels that the level multiplies by four
	// tokens at a time, kernels over consecutive rows against four vectors (as
	// dotTokens4Rows) in the repacked arithmetic: [gemm] mul_mat's (its tokens in fours),
	// [gemv] every other product's (mul_mat_id's).
	repackedTokens4 map[Type][2]rows4Kernel
	// repackedTokens2 holds, for a type in repackedKernels, a kernel that multiplies whole
	// rows by two tokens at once in gemv's arithmetic (each token's bits of the one-token
	// kernel), reading the rows once.
	repackedTokens2 map[Type]rows2Kernel
	// packedFormats holds the formats whose prefill runs on packed kernels (packed.go).
	packedFormats map[Type]*packedFormat

	// Attention's inner loops (attention.go), the plain kernel's:
	// dotFloat64 is q·k summed in float64, in four interleaved partial sums: a single chain
	// waits for each addition before the next. The order differs from a plain loop's only
	// below float64's precision, far under the float32 rounding of the score.
	dotFloat64 func(q, k []float32) float64
	// madHalf is acc = x·s + acc fused, rounded to F16 precision: ggml's update of an F16
	// accumulator (ggml_vec_mad_f16).
	madHalf func(acc, x []float32, s float32)
	// scaleHalf is acc = acc·s rounded to F16 precision: ggml's rescaling of an F16
	// accumulator when the running maximum rises (ggml_vec_scale_f16).
	scaleHalf func(acc []float32, s float32)
	// madFloat is acc = x·s + acc fused: ggml_vec_mad_f32's update of a float32
	// accumulator (a V that is not F16).
	madFloat func(acc, x []float32, s float32)
	// addScaled is acc += x·s, multiplied and added separately (each rounded).
	addScaled func(acc, x []float32, s float32)
	// f16Heads, where the level has it, is vecDotF16 of each query head (q: heads·dk
	// floats, rounded to F16) against each of positions F16 key rows kStride bytes apart:
	// scores[h·headStride + p], the same bits, with keys (dk floats) as scratch. It returns
	// false for a dk it does not take.
	f16Heads func(q []float32, k []byte, kStride, positions, dk int, scores []float32, headStride int, keys []float32) bool
	// madHalfHeads, where the level has it, runs positions softmax steps of eight heads'
	// F16 accumulators (dv values each, dv a multiple of 32, the heads dv apart in acc)
	// against F16 value rows vStride bytes apart from v: for position p and head h, first
	// acc = scaleHalf(acc, ms[8p+h]) if bit h of raised[p] is set, then
	// acc = madHalf(acc, v_p, ws[8p+h]). madHeads calls it.
	madHalfHeads func(acc []float32, v []byte, vStride, positions, dv int, ws, ms []float32, raised []uint8)

	// The tiled kernel's inner loops; the 2 and 4 forms do two or four query rows at once,
	// each as tileScores and tileAccumulate would.
	tileScores      func(scores *[ggmlTile]float32, q, keys []float32, lo, hi int, scale float32)
	tileScores2     func(scores0, scores1 *[ggmlTile]float32, q0, q1, keys []float32, lo, hi int, scale float32)
	tileScores4     func(scores *[4]*[ggmlTile]float32, q *[4][]float32, keys []float32, lo, hi int, scale float32)
	tileExp         func(scores *[ggmlTile]float32, max float32)
	tileAccumulate  func(acc, values []float32, weights *[ggmlTile]float32, lo, hi int)
	tileAccumulate2 func(acc0, acc1, values []float32, weights0, weights1 *[ggmlTile]float32, lo, hi int)
	tileAccumulate4 func(acc *[4][]float32, values []float32, weights *[4]*[ggmlTile]float32, lo, hi int)
	// tileExpSum, where the level has it, turns a tile's scores into tileExp's
	// exponentials and returns their float64 sum of sum16s as tileSoftmax adds them, or
	// done false (the scores untouched) for a tile it leaves to them.
	tileExpSum func(scores *[ggmlTile]float32, max float32) (sum float64, done bool)
	// tileMaxOf is the largest of a tile's scores, or nan true when one is a NaN (or the
	// level has no such kernel): then the caller's scan decides. The sign of a zero maximum
	// may differ from the scan's (which keeps the last of equal values); no result depends
	// on it.
	tileMaxOf func(scores *[ggmlTile]float32) (max float32, nan bool)

	// ggml's float dot products (ggml_float.go): vecReduced is ggml_vec_dot_*'s whole steps
	// of q and k (a multiple of floatStep values) reduced to one float32, and tinyDot one
	// output of tinyBLAS (q and k of a multiple of vecWidth values).
	vecReduced, tinyDot func(q, k []float32) float32
	// widenHalf widens F16 values.
	widenHalf func(src []byte, dst []float32)
	// tinyDots4x4 and vecReduced4, where the level has them, are tinyDot of four rows by
	// four vectors (out[4r+t]) and vecReduced of four rows by one vector, each output in
	// its own accumulators: the same bits with independent chains to overlap.
	tinyDots4x4 func(w, x *[4][]float32, out *[16]float32)
	vecReduced4 func(w *[4][]float32, x []float32, out *[4]float32)
	// vecReducedKey128, where the level has it, is vecReduced of each 128-value row of q by
	// one 128-value key (out[h] for row h): the lightning indexer's heads against a key.
	vecReducedKey128 func(q []float32, key *[128]float32, out []float32)
	// vecF16Rows4, where the level has it, is vecReduced of four F16 rows (rowBytes apart,
	// steps steps of floatStep values) by a widened vector, reading the rows as F16: for
	// one token, where widening a row first would cost as much as the products.
	vecF16Rows4 func(w *byte, rowBytes, steps int, a *float32, out *[4]float32)
	// tinyF16Rows4x4, where the level has it, is tinyDot of four F16 rows (rowBytes apart,
	// steps steps of vecWidth values, read as F16) by four widened vectors (aStride bytes
	// apart): out[4r+t] for row r and vector t.
	tinyF16Rows4x4 func(w *byte, rowBytes, steps int, a *float32, aStride int, out *[16]float32)

	// Element-wise operations (ops.go, ops_exp.go, rope.go, deltanet.go), each the same
	// bits at every level: addRow and mulRow set dst[i] = a[i] + b[i] and a[i]·b[i];
	// exp32s replaces each value by its exp32; vsiluRun is vsilu32 over a run of whole
	// vectors (len(x) a multiple of vecWidth; dst may be x); ropeNeoX and ropeNormal
	// rotate (rotateNeoX); madFloats is ggml_vec_mad_f32, row[i] = k[i]·delta + row[i]
	// fused; convRow is one token's channels of the short convolution (convRowGo).
	addRow, mulRow       func(dst, a, b []float32)
	exp32s               func(x []float32)
	vsiluRun             func(dst, x []float32)
	ropeNeoX, ropeNormal func(x []float32, rowLen, rows int, cos, sin []float32)
	madFloats            func(row, k []float32, delta float32)
	convRow              func(dst, rows, kernel []float32)

	// readStream, where the level has it, reads the bytes of b with vector loads and
	// returns how many it read from the start (a whole number of its steps); StreamRead
	// copies the rest.
	readStream func(b []byte) int
}

// genericKernels is the generic level: plain Go, the reference of every other level. Its
// per-type tables are the registries the formats fill in (traits, activationFromFloat).
var genericKernels = kernelSet{
	level:               LevelGeneric,
	traits:              traits,
	activationFromFloat: activationFromFloat,
	dotTokens2:          map[Type]func(n int, w, a0, a1 []byte) [2]float32{},
	dotTokens4:          map[Type]func(n int, w, a0, a1, a2, a3 []byte) [4]float32{},
	dotTokens4Rows:      map[Type]func(n int, rows []byte, rowBytes int, a0, a1, a2, a3 []byte, o0, o1, o2, o3 []float32){},
	dotTokens2Rows:      map[Type]rows2Kernel{},
	dotRowsOne:          map[Type]func(n int, rows, a []byte, out []float32){},
	repackedKernels:     map[Type]func(n int, rows, a []byte, out []float32){},
	repackedTokens4:     map[Type][2]rows4Kernel{},
	repackedTokens2:     map[Type]rows2Kernel{},
	packedFormats:       map[Type]*packedFormat{},
	dotFloat64:          dotFloat64Go,
	madHalf:             madHalfGo,
	scaleHalf:           scaleHalfGo,
	madFloat:            madFloatGo,
	addScaled:           addScaledGo,
	tileScores:          tileScoresGo,
	tileScores2:         tileScores2Go,
	tileScores4:         tileScores4Go,
	tileExp:             tileExpGo,
	tileAccumulate:      tileAccumulateGo,
	tileAccumulate2:     tileAccumulate2Go,
	tileAccumulate4:     tileAccumulate4Go,
	tileExpSum:          func(*[ggmlTile]float32, float32) (float64, bool) { return 0, false },
	tileMaxOf:           func(*[ggmlTile]float32) (float32, bool) { return 0, true },
	vecReduced:          vecReducedGo,
	tinyDot:             tinyDotGo,
	widenHalf:           decodeF16,
	addRow:              addRowGo,
	mulRow:              mulRowGo,
	exp32s:              exp32sGo,
	vsiluRun:            vsiluRunGo,
	ropeNeoX:            rotateNeoX,
	ropeNormal:          rotateNormal,
	madFloats:           madFloatsGo,
	convRow:             convRowGo,
}

// active is the level in use: the best one kernelLevels offers within MOERUN_ISA's cap,
// chosen once at start. It is set by init functions, not by its declaration, because the
// generic two- and four-row tile loops call the active level's one-row kernels.
var active *kernelSet

func init() { active = &genericKernels }

// kernelLevels is every level this build and CPU can run, lowest first: the generic one,
// then the SIMD levels the CPU supports (simd_amd64.go appends them at start).
var kernelLevels = []*kernelSet{&genericKernels}

// isaCap is MOERUN_ISA's level and isaErr what was wrong with its value, if anything.
var isaCap, isaErr = parseISAEnv(os.Getenv(ISAEnv))

func parseISAEnv(s string) (Level, error) {
	if s == "" {
		return LevelAVX512, nil
	}
	l, err := ParseLevel(s)
	if err != nil {
		return LevelAVX512, fmt.Errorf("%s: %w", ISAEnv, err)
	}
	return l, nil
}

// selectLevel is the best of kernelLevels at or below limit.
func selectLevel(limit Level) *kernelSet {
	best := kernelLevels[0]
	for _, k := range kernelLevels {
		if k.level <= limit {
			best = k
		}
	}
	return best
}

// clone is a copy of k to build the next level on: its own maps and Traits, so that the
// new level's changes leave k's alone.
func (k *kernelSet) clone(level Level) *kernelSet {
	c := *k
	c.level, c.features = level, nil
	c.traits = make(map[Type]*Traits, len(k.traits))
	for t, tr := range k.traits {
		trc := *tr
		c.traits[t] = &trc
	}
	c.activationFromFloat = maps.Clone(k.activationFromFloat)
	c.dotTokens2, c.dotTokens4 = maps.Clone(k.dotTokens2), maps.Clone(k.dotTokens4)
	c.dotTokens4Rows, c.dotRowsOne = maps.Clone(k.dotTokens4Rows), maps.Clone(k.dotRowsOne)
	c.dotTokens2Rows = maps.Clone(k.dotTokens2Rows)
	c.repackedKernels, c.packedFormats = maps.Clone(k.repackedKernels), maps.Clone(k.packedFormats)
	c.repackedTokens4, c.repackedTokens2 = maps.Clone(k.repackedTokens4), maps.Clone(k.repackedTokens2)
	return &c
}

// ActiveLevel is the kernel level in use.
func ActiveLevel() Level { return active.level }

// KernelLevel reports the kernel level in use and, after it, the features its kernels use
// beyond the level's own, e.g. "avx512 (VNNI, GFNI, VBMI)".
func KernelLevel() string {
	if len(active.features) == 0 {
		return active.level.String()
	}
	return fmt.Sprintf("%s (%s)", active.level, strings.Join(active.features, ", "))
}

// Levels lists the kernel levels this build can run on this CPU, lowest first (MOERUN_ISA
// may name any of them).
func Levels() []Level {
	ls := make([]Level, len(kernelLevels))
	for i, k := range kernelLevels {
		ls[i] = k.level
	}
	return ls
}

// ISAError reports a MOERUN_ISA value that is not a level's name (the best level then
// runs), for the command line to refuse it.
func ISAError() error { return isaErr }
