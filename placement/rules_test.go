package placement

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/moerun/moerun/tensor"
)

// -ot is split on every comma, then each item at its first '=' (llama.cpp's
// parse_tensor_buffer_overrides): no trimming, no escaping.
func TestParseOverrideTensor(t *testing.T) {
	for _, c := range []struct {
		value string
		want  [][2]string
	}{
		{"exps=CPU", [][2]string{{"exps", "CPU"}}},
		{`blk\.1\.ffn_up_exps=CPU,blk\.2\.=CPU`, [][2]string{{`blk\.1\.ffn_up_exps`, "CPU"}, {`blk\.2\.`, "CPU"}}},
		{"a=b=CPU", [][2]string{{"a", "b=CPU"}}}, // the name is "b=CPU", unknown later
		{" exps=CPU", [][2]string{{" exps", "CPU"}}},
		{"=CPU", [][2]string{{"", "CPU"}}}, // an empty pattern matches everything
	} {
		items, err := ParseOverrideTensor("-ot", c.value)
		if err != nil {
			t.Errorf("%q: %v", c.value, err)
			continue
		}
		var got [][2]string
		for _, it := range items {
			got = append(got, [2]string{it.Pattern, it.Target})
			if it.Kind != ItemPattern || it.Flag != "-ot" {
				t.Errorf("%q: item %+v", c.value, it)
			}
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%q: %s", c.value, diff)
		}
	}
	for _, c := range []struct{ value, flag, want string }{
		{"exps", "-ot", `error while handling argument "-ot": invalid value`},
		{"exps=CPU,", "-ot", "item '' has no '='"},
		{`blk\.[0-9]{1,2}\.=CPU`, "-ot", "which cut the quantifier in 'blk\\.[0-9]{1,2}\\.=CPU'"},
		{"x", "LLAMA_ARG_OVERRIDE_TENSOR", `error while handling environment variable "LLAMA_ARG_OVERRIDE_TENSOR": invalid value`},
	} {
		_, err := ParseOverrideTensor(c.flag, c.value)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.value, err, c.want)
		}
	}
}

func TestNCPUMoEItem(t *testing.T) {
	it, err := NCPUMoEItem("-ncmoe", "3")
	if err != nil || it.N != 3 || it.Kind != ItemNCPUMoE || it.Origin() != "-ncmoe 3" {
		t.Errorf("%+v %v", it, err)
	}
	for _, v := range []string{"-1", "x", ""} {
		if _, err := NCPUMoEItem("-ncmoe", v); err == nil {
			t.Errorf("--n-cpu-moe %q accepted", v)
		}
	}
	if _, err := NCPUMoEItem("-ncmoe", "-1"); err == nil || err.Error() != `error while handling argument "-ncmoe": invalid value` {
		t.Errorf("negative: %v, want llama.cpp's text", err)
	}
	if it := CPUMoEItem("-cmoe"); it.Pattern != `\.ffn_(up|down|gate|gate_up)_(ch|)exps` || it.Target != "CPU" {
		t.Errorf("--cpu-moe: %+v", it)
	}
}

// std::stoi and std::stof read a numeric prefix and ignore the rest.
func TestStoiStof(t *testing.T) {
	for s, want := range map[string]int{"99": 99, " 7": 7, "+3": 3, "-1": -1, "99abc": 99, "0x10": 0} {
		if got, err := Stoi(s); err != nil || got != want {
			t.Errorf("Stoi(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "abc", "-", "99999999999"} {
		if _, err := Stoi(s); err == nil {
			t.Errorf("Stoi(%q) accepted", s)
		}
	}
	for s, want := range map[string]float32{"1": 1, "0.5": 0.5, "3x": 3, " 2": 2, "1e1": 10} {
		if got, err := Stof(s); err != nil || got != want {
			t.Errorf("Stof(%q) = %g, %v; want %g", s, got, err, want)
		}
	}
	if _, err := Stof("x"); err == nil {
		t.Error(`Stof("x") accepted`)
	}
}

func TestParseLists(t *testing.T) {
	ts, err := ParseTensorSplit("-ts", "3,1/1")
	if err != nil || !cmp.Equal(ts, []float32{3, 1, 1}) {
		t.Errorf("-ts 3,1/1: %v %v", ts, err)
	}
	for _, v := range []string{"", ",1", "1,x", strings.Repeat("1,", 16), "-1"} {
		if _, err := ParseTensorSplit("-ts", v); err == nil {
			t.Errorf("-ts %q accepted", v)
		}
	}
	if _, err := ParseTensorSplit("-ts", strings.Repeat("1,", 16)+"1"); err == nil || !strings.Contains(err.Error(), "got 17 input configs, but system only has 16 devices") {
		t.Errorf("17 entries: %v", err)
	}
	ft, err := ParseFitTarget("-fitt", "2048,512")
	if err != nil || !cmp.Equal(ft, []int64{2048 << 20, 512 << 20}) {
		t.Errorf("-fitt: %v %v", ft, err)
	}
	if _, err := ParseFitTarget("-fitt", "1.5"); err == nil {
		t.Error("-fitt 1.5 accepted")
	}
}

func TestParseScalars(t *testing.T) {
	for v, want := range map[string]int{"auto": NGLAuto, "all": NGLAll, "99": 99, "0": 0} {
		if got, err := ParseGPULayers("-ngl", v); err != nil || got != want {
			t.Errorf("-ngl %s: %d %v", v, got, err)
		}
	}
	if _, err := ParseGPULayers("-ngl", "many"); err == nil {
		t.Error("-ngl many accepted")
	}
	for v, want := range map[string]tensor.Type{"f16": tensor.F16, "q8_0": tensor.Q8_0, "iq4_nl": tensor.IQ4_NL, "bf16": tensor.BF16} {
		if got, err := ParseCacheType("-ctk", v); err != nil || got != want {
			t.Errorf("-ctk %s: %v %v", v, got, err)
		}
	}
	if _, err := ParseCacheType("-ctk", "q4_K"); err == nil || !strings.Contains(err.Error(), "Unsupported cache type: q4_K") {
		t.Errorf("-ctk q4_K: %v", err)
	}
	for v, want := range map[string]FlashAttn{"on": FlashOn, "1": FlashOn, "enabled": FlashOn, "off": FlashOff, "false": FlashOff, "auto": FlashAuto, "-1": FlashAuto} {
		if got, err := ParseFlashAttn("-fa", v); err != nil || got != want {
			t.Errorf("-fa %s: %v %v", v, got, err)
		}
	}
	if _, err := ParseFlashAttn("-fa", "yes"); err == nil || !strings.Contains(err.Error(), "unknown value for --flash-attn: 'yes'") {
		t.Errorf("-fa yes: %v", err)
	}
	for v, want := range map[string]SplitMode{"none": SplitNone, "layer": SplitLayer, "row": SplitRow, "tensor": SplitTensor} {
		if got, err := ParseSplitMode("-sm", v); err != nil || got != want {
			t.Errorf("-sm %s: %v %v", v, got, err)
		}
	}
	for v, want := range map[string]LoadMode{"auto": LoadAuto, "none": LoadNone, "mmap+mlock": LoadMmapMlock, "dio": LoadDirectIO} {
		if got, err := ParseLoadMode(v); err != nil || got != want {
			t.Errorf("-lm %s: %v %v", v, got, err)
		}
	}
	if s, err := ParseSemantics("ik_llama.cpp"); err != nil || s != IKLlama || s.String() != "ik_llama.cpp" {
		t.Errorf("semantics: %v %v", s, err)
	}
}

// llama.cpp's refusals of cache settings.
func TestCacheRefusals(t *testing.T) {
	m := openModel(t, tinyQwen)
	r := DefaultRules()
	r.CacheV, r.FlashAttn = tensor.Q8_0, FlashOff
	if _, err := Place(m, r, devicesFor(8)); err == nil || !strings.Contains(err.Error(), "quantized V cache requires flash_attn to be enabled") {
		t.Errorf("q8_0 V with -fa off: %v", err)
	}
	// A quantized V with -fa auto turns flash attention on, as llama.cpp does.
	r = DefaultRules()
	r.CacheV = tensor.Q8_0
	plan := place(t, m, r, devicesFor(8))
	if !plan.Context.FlashAttn {
		t.Error("flash attention not on for a quantized V cache")
	}
	// A block that does not divide the head size: tiny-deepseek2's MLA K is 80 wide.
	r = DefaultRules()
	r.CacheK, r.CacheV = tensor.Q8_0, tensor.Q8_0
	ds := openModel(t, "../testdata/models/tiny-deepseek2.gguf")
	if _, err := Place(ds, r, devicesFor(8)); err == nil || !strings.Contains(err.Error(), "K cache type q8_0 with block size 32 does not divide n_embd_head_k=80") {
		t.Errorf("q8_0 K on head 80: %v", err)
	}
}
