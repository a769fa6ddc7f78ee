package placement

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/moerun/moerun/tensor"
)

// Semantics selects whose placement rules a plan follows.
type Semantics int

// The tools whose rules moerun reproduces.
const (
	Mainline Semantics = iota // llama.cpp at the fixtures' commit (3f545bec)
	IKLlama                   // ik_llama.cpp (8337e4cd): last-N -ncmoe, -ngl 0 drops overrides, old output rule
)

func (s Semantics) String() string {
	if s == IKLlama {
		return "ik_llama.cpp"
	}
	return "llama.cpp"
}

// ParseSemantics reads "llama.cpp" or "ik_llama.cpp".
func ParseSemantics(s string) (Semantics, error) {
	switch s {
	case "llama.cpp", "mainline":
		return Mainline, nil
	case "ik_llama.cpp", "ik_llama", "ik":
		return IKLlama, nil
	}
	return 0, fmt.Errorf("unknown semantics %q: use llama.cpp or ik_llama.cpp", s)
}

// SplitMode is -sm.
type SplitMode int

// llama.cpp's split modes.
const (
	SplitLayer SplitMode = iota
	SplitNone
	SplitRow
	SplitTensor
)

var splitModeNames = [...]string{"layer", "none", "row", "tensor"}

func (m SplitMode) String() string { return splitModeNames[m] }

// FlashAttn is -fa.
type FlashAttn int

// The -fa settings.
const (
	FlashAuto FlashAttn = iota
	FlashOn
	FlashOff
)

func (f FlashAttn) String() string { return [...]string{"auto", "on", "off"}[f] }

// LoadMode is how weights reach memory (--load-mode and the older --mmap/--no-mmap/--mlock).
type LoadMode int

// llama.cpp's load modes.
const (
	LoadAuto LoadMode = iota // mmap when every device supports it
	LoadNone                 // read into allocated buffers
	LoadMmap
	LoadMlock     // no mmap; host buffers locked
	LoadMmapMlock // mapped ranges locked
	LoadDirectIO
)

var loadModeNames = [...]string{"auto", "none", "mmap", "mlock", "mmap+mlock", "dio"}

func (l LoadMode) String() string { return loadModeNames[l] }

// ParseLoadMode reads a --load-mode value.
func ParseLoadMode(s string) (LoadMode, error) {
	for i, n := range loadModeNames {
		if s == n {
			return LoadMode(i), nil
		}
	}
	return 0, fmt.Errorf("invalid value %q: want one of %s", s, strings.Join(loadModeNames[:], ", "))
}

func (l LoadMode) mmap() bool   { return l == LoadAuto || l == LoadMmap || l == LoadMmapMlock }
func (l LoadMode) locked() bool { return l == LoadMlock || l == LoadMmapMlock }

// Rules are llama.cpp's parameters that decide placement and memory, as the command line
// and LLAMA_ARG_* environment set them. DefaultRules gives llama-server's defaults.
type Rules struct {
	Semantics Semantics

	GPULayers   int       // -ngl: ≥ 0, or NGLAuto, NGLAll
	Items       []Item    // the override list in llama.cpp's order: environment first, then the command line
	SplitMode   SplitMode // -sm
	TensorSplit []float32 // -ts; all zero (or empty) splits by free memory
	MainGPU     int       // -mg
	Devices     []string  // -dev: nil = every GPU; empty = none

	CtxSize   int // -c; 0 = the model's training context
	Batch     int // -b
	UBatch    int // -ub
	Parallel  int // -np; -1 = auto (llama-server: 4 slots sharing one unified cache)
	KVUnified Tristate
	CacheK    tensor.Type // -ctk
	CacheV    tensor.Type // -ctv
	FlashAttn FlashAttn
	KVOffload bool // false with -nkvo
	SWAFull   bool // --swa-full

	LoadMode  LoadMode
	NoHost    bool // --no-host
	Repack    bool // false with --no-repack
	OpOffload bool // false with --no-op-offload
	// OffloadAllExperts: op offload copies every expert of a CPU-held stack, not only
	// those the batch routes to (ik_llama.cpp's -no-ooae; ik_llama.cpp before its pull
	// request 842, and llama.cpp before its pull request 15346, always did).
	OffloadAllExperts bool
	// OpOffloadMinBatch is the fewest tokens for which op offload runs a CPU-held weight's
	// matmul on a GPU: ggml's GGML_OP_OFFLOAD_MIN_BATCH, 32 when unset.
	OpOffloadMinBatch int
	// ExpertCache is moerun's --expert-cache (llama.cpp has none).
	ExpertCache ExpertCache
	// HotStats are the routing statistics that hot:K expert selectors read (--hot-stats).
	HotStats *RoutingStats

	Fit       bool    // --fit on|off
	FitTarget []int64 // -fitt, bytes; one value applies to every device
	// KeepMargin keeps -fitt's free memory on every device with --fit off too. llama.cpp
	// keeps none without --fit, so plans of command lines do not; fit's search sets it,
	// since the placements it offers must leave --fit's margin free.
	KeepMargin bool
	FitMinCtx  int64 // -fitc; math.MaxUint32 when -c 0 asked for the full context
}

// The special -ngl values.
const (
	NGLAuto = -1
	NGLAll  = -2
)

// Tristate is an optional boolean.
type Tristate int

// Tristate values.
const (
	Unset Tristate = iota
	True
	False
)

// DefaultRules are llama-server's defaults at the fixtures' commit.
func DefaultRules() Rules {
	return Rules{
		GPULayers: NGLAuto, Batch: 2048, UBatch: 512, Parallel: -1,
		CacheK: tensor.F16, CacheV: tensor.F16, KVOffload: true, Repack: true, OpOffload: true, OpOffloadMinBatch: DefaultOffloadMinBatch,
		Fit: true, FitTarget: []int64{1 << 30}, FitMinCtx: 4096,
	}
}

// ItemKind says what produced an override-list entry.
type ItemKind int

// The kinds of override-list entries.
const (
	ItemPattern ItemKind = iota // an -ot item: pattern=buffer type
	ItemCPUMoE                  // --cpu-moe
	ItemNCPUMoE                 // --n-cpu-moe N
	ItemFit                     // written by --fit
)

// Item is one entry of the override list as the user wrote it. An --n-cpu-moe N item stands
// for the N patterns llama.cpp appends for it.
type Item struct {
	Kind    ItemKind
	Flag    string // the option or environment variable it came from: "-ot", "LLAMA_ARG_OVERRIDE_TENSOR"
	Text    string // as written: "exps=CPU", or N for --n-cpu-moe
	Pattern string // ItemPattern, ItemFit
	Target  string // buffer type
	N       int    // ItemNCPUMoE
	// Experts, on an ItemPattern, narrows it to some experts of the routed-expert stacks
	// it matches (PATTERN@EXPERTS=BUFFER, moerun's own); nil for a whole-tensor rule.
	Experts *ExpertSelector
}

// Origin is how reports name the item: "-ot exps=CPU", "--n-cpu-moe 2".
func (it Item) Origin() string {
	if it.Text == "" {
		return it.Flag
	}
	return it.Flag + " " + it.Text
}

// llama.cpp's MoE expert patterns (common/common.h, LLM_FFN_EXPS_REGEX and friends).
const (
	expsRegex = `\.ffn_(up|down|gate|gate_up)_(ch|)exps`
	// ik_llama.cpp generates its own, anchored on the weight/scale suffix.
	ikExpsRegex = `\.ffn_(up|down|gate|gate_up)_exps\.(weight|scale)`
)

func blockExpsPattern(il int) string { return fmt.Sprintf(`blk\.%d%s`, il, expsRegex) }

// UsageError is a mistake in the rules or flags, reported in llama.cpp's words where
// llama.cpp has them.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error { return &UsageError{fmt.Sprintf(format, args...)} }

// argError is llama.cpp's wording for a bad option value, from the command line or the
// environment.
func argError(flag, msg string) error {
	if strings.HasPrefix(flag, "LLAMA_ARG_") {
		return usagef("error while handling environment variable %q: %s", flag, msg)
	}
	return usagef("error while handling argument %q: %s", flag, msg)
}

// ParseOverrideTensor splits an -ot value exactly as llama.cpp does: on every comma (no
// quoting), then each item at its first '='. Buffer-type names are checked later against
// the devices. A regex quantifier with a comma ({1,3}) is cut in two by this split, which
// the error explains.
func ParseOverrideTensor(flag, value string) ([]Item, error) {
	parts := strings.Split(value, ",")
	items := make([]Item, 0, len(parts))
	for i, part := range parts {
		pattern, target, ok := strings.Cut(part, "=")
		if !ok {
			hint := fmt.Sprintf("item '%s' has no '=' (write PATTERN=BUFFER_TYPE)", part)
			if i+1 < len(parts) && splitQuantifier(part, parts[i+1]) {
				hint = fmt.Sprintf("llama.cpp splits -ot values on every comma, which cut the quantifier in '%s'; "+
					"write it without a comma (alternation (1|2|3), or [0-9][0-9]?)", part+","+parts[i+1])
			}
			return nil, argError(flag, "invalid value\n"+hint)
		}
		regex, sel, err := splitSelector(pattern)
		if err != nil {
			return nil, argError(flag, err.Error())
		}
		items = append(items, Item{Kind: ItemPattern, Flag: flag, Text: part, Pattern: regex, Target: target, Experts: sel})
	}
	return items, nil
}

// splitQuantifier reports whether a comma split "x{1" from "3}…": a {m,n} quantifier.
func splitQuantifier(before, after string) bool {
	open := strings.LastIndexByte(before, '{')
	if open < 0 || strings.ContainsRune(before[open:], '}') || !allDigits(before[open+1:]) {
		return false
	}
	close := strings.IndexByte(after, '}')
	return close >= 0 && allDigits(after[:close])
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// NCPUMoEItem is --n-cpu-moe N; llama.cpp refuses negative N.
func NCPUMoEItem(flag, value string) (Item, error) {
	n, err := Stoi(value)
	if err != nil {
		return Item{}, argError(flag, err.Error())
	}
	if n < 0 {
		return Item{}, argError(flag, "invalid value")
	}
	return Item{Kind: ItemNCPUMoE, Flag: flag, Text: value, N: n, Target: "CPU"}, nil
}

// CPUMoEItem is --cpu-moe.
func CPUMoEItem(flag string) Item {
	return Item{Kind: ItemCPUMoE, Flag: flag, Pattern: expsRegex, Target: "CPU"}
}

// ParseGPULayers reads -ngl: an integer, "auto" or "all".
func ParseGPULayers(flag, value string) (int, error) {
	switch value {
	case "auto":
		return NGLAuto, nil
	case "all":
		return NGLAll, nil
	}
	n, err := Stoi(value)
	if err != nil {
		return 0, argError(flag, err.Error()+" (want a number of layers, auto or all)")
	}
	return n, nil
}

// Stoi parses an integer the way C++'s std::stoi does: leading spaces, an optional sign and
// at least one digit; anything after the digits is ignored ("99abc" is 99), as llama.cpp
// accepts it.
func Stoi(s string) (int, error) {
	i := 0
	for i < len(s) && strings.IndexByte(" \t\n\v\f\r", s[i]) >= 0 {
		i++
	}
	j := i
	if j < len(s) && (s[j] == '+' || s[j] == '-') {
		j++
	}
	k := j
	for k < len(s) && '0' <= s[k] && s[k] <= '9' {
		k++
	}
	if k == j {
		return 0, fmt.Errorf("stoi: %q is not a number", s)
	}
	n, err := strconv.ParseInt(s[i:k], 10, 32)
	if err != nil {
		return 0, fmt.Errorf("stoi: %q is out of range", s)
	}
	return int(n), nil
}

// Stof parses a float the way std::stof does (a numeric prefix; the rest is ignored).
func Stof(s string) (float32, error) {
	t := strings.TrimLeft(s, " \t\n\v\f\r")
	for end := len(t); end > 0; end-- {
		if v, err := strconv.ParseFloat(t[:end], 32); err == nil {
			return float32(v), nil
		}
	}
	return 0, fmt.Errorf("stof: %q is not a number", s)
}

// maxDevices is llama_max_devices(): -ts and -fitt accept fewer entries than this.
const maxDevices = 16

// ParseTensorSplit reads -ts: proportions separated by ',' or '/'.
func ParseTensorSplit(flag, value string) ([]float32, error) {
	fields, err := listFields(flag, value)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(fields))
	for i, f := range fields {
		if out[i], err = Stof(f); err != nil {
			return nil, argError(flag, err.Error())
		}
		if out[i] < 0 || math.IsNaN(float64(out[i])) || math.IsInf(float64(out[i]), 0) {
			return nil, argError(flag, fmt.Sprintf("invalid value %q: proportions must be finite and not negative", f))
		}
	}
	return out, nil
}

// ParseFitTarget reads -fitt: MiB per device, one value for all.
func ParseFitTarget(flag, value string) ([]int64, error) {
	fields, err := listFields(flag, value)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(fields))
	for i, f := range fields {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, argError(flag, fmt.Sprintf("invalid value %q: want MiB as a whole number", f))
		}
		out[i] = int64(n) << 20
	}
	return out, nil
}

// listFields splits -ts and -fitt values as llama.cpp does, on runs of ',' and '/'. A
// leading separator gives llama.cpp an empty first field, which it cannot convert.
func listFields(flag, value string) ([]string, error) {
	if value == "" || strings.IndexAny(value[:1], ",/") == 0 {
		return nil, argError(flag, fmt.Sprintf("invalid value %q", value))
	}
	fields := strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == '/' })
	if len(fields) >= maxDevices {
		return nil, argError(flag, fmt.Sprintf("got %d input configs, but system only has %d devices", len(fields), maxDevices))
	}
	return fields, nil
}

// cacheTypes are the -ctk/-ctv values llama.cpp accepts (common/arg.cpp kv_cache_types).
var cacheTypes = []tensor.Type{tensor.F32, tensor.F16, tensor.BF16, tensor.Q8_0, tensor.Q4_0, tensor.Q4_1, tensor.IQ4_NL, tensor.Q5_0, tensor.Q5_1}

// ParseCacheType reads -ctk/-ctv.
func ParseCacheType(flag, value string) (tensor.Type, error) {
	for _, t := range cacheTypes {
		if t.String() == value {
			return t, nil
		}
	}
	names := make([]string, len(cacheTypes))
	for i, t := range cacheTypes {
		names[i] = t.String()
	}
	return 0, argError(flag, fmt.Sprintf("Unsupported cache type: %s (allowed: %s)", value, strings.Join(names, ", ")))
}

// ParseSplitMode reads -sm.
func ParseSplitMode(flag, value string) (SplitMode, error) {
	for i, n := range splitModeNames {
		if value == n {
			return SplitMode(i), nil
		}
	}
	return 0, argError(flag, "invalid value")
}

// ParseFlashAttn reads -fa: on/off/auto and llama.cpp's other spellings.
func ParseFlashAttn(flag, value string) (FlashAttn, error) {
	switch {
	case IsTruthy(value):
		return FlashOn, nil
	case IsFalsey(value):
		return FlashOff, nil
	case value == "auto" || value == "-1":
		return FlashAuto, nil
	case value == "":
		// Older guides write a bare -fa, from before llama.cpp gave it a value.
		return 0, argError(flag, "needs a value since llama.cpp made it one: write -fa on (or off, auto)")
	}
	return 0, argError(flag, fmt.Sprintf("error: unknown value for --flash-attn: '%s'", value))
}

// DefaultOffloadMinBatch is ggml's op offload threshold when GGML_OP_OFFLOAD_MIN_BATCH is
// unset.
const DefaultOffloadMinBatch = 32

// ParseOffloadMinBatch reads GGML_OP_OFFLOAD_MIN_BATCH as ggml's backends do, with C's atoi:
// leading blanks, a sign and the digits up to the first other character; no digits read
// as 0 (every batch offloads), and a value beyond an int32 is clamped (atoi's overflow is
// undefined; the clamp keeps its likely intent: never, or always).
func ParseOffloadMinBatch(value string) int {
	s := strings.TrimLeft(value, " \t\n\v\f\r")
	sign := 1
	if s != "" && (s[0] == '+' || s[0] == '-') {
		if s[0] == '-' {
			sign = -1
		}
		s = s[1:]
	}
	n := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			break
		}
		n = min(n*10+int(c-'0'), math.MaxInt32)
	}
	return sign * n
}

// ParseOnOff reads --fit on|off.
func ParseOnOff(flag, value string) (bool, error) {
	switch {
	case IsTruthy(value):
		return true, nil
	case IsFalsey(value):
		return false, nil
	}
	return false, argError(flag, fmt.Sprintf("error: unknown value for %s: '%s'", flag, value))
}

// IsTruthy and IsFalsey are llama.cpp's spellings of on and off.
func IsTruthy(s string) bool { return s == "on" || s == "enabled" || s == "true" || s == "1" }

// IsFalsey is the off half of IsTruthy.
func IsFalsey(s string) bool { return s == "off" || s == "disabled" || s == "false" || s == "0" }
