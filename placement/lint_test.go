package placement

import (
	"strings"
	"testing"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/placement/placetest"
)

func rulesWith(t *testing.T, ngl int, ots ...string) Rules {
	t.Helper()
	r := DefaultRules()
	r.GPULayers, r.CtxSize = ngl, 4096
	for _, v := range ots {
		items, err := ParseOverrideTensor("-ot", v)
		if err != nil {
			t.Fatal(err)
		}
		r.Items = append(r.Items, items...)
	}
	return r
}

func hasWarning(r RuleUse, substr string) bool {
	for _, w := range r.Warnings {
		if strings.Contains(w, substr) {
			return true
		}
	}
	return false
}

func TestRuleLint(t *testing.T) {
	m := qwen30B(t, placetest.F16)
	r := rulesWith(t, 99, "exps=CPU", `blk\.3\.ffn_up_exps=CUDA0`, "nothing_here=CPU", `blk.1.=CPU`, `attn_norm=CUDA0`, `(?i)ATTN_Q=CPU`)
	plan := place(t, m, r, devicesFor(80))
	rules := plan.Rules
	if rules[0].Decided != 144 || rules[0].Moved != 144 || len(rules[0].Warnings) != 0 {
		t.Errorf("rule 1: %+v", rules[0])
	}
	if !hasWarning(rules[1], "shadowed") || len(rules[1].ShadowedBy) != 1 || rules[1].ShadowedBy[0] != 0 {
		t.Errorf("rule 2 (shadowed by rule 1): %+v", rules[1])
	}
	if !hasWarning(rules[2], "matches no tensor") {
		t.Errorf("rule 3 (matches nothing): %+v", rules[2])
	}
	// blk.1. also matches blk.10. … blk.19.: the lint names them and the escaped pattern.
	if !hasWarning(rules[3], `unescaped '.'`) || !hasWarning(rules[3], `blk\.1\.`) || !hasWarning(rules[3], "blk.10.") {
		t.Errorf("rule 4 (unescaped dot): %+v", rules[3])
	}
	if !hasWarning(rules[4], "moves nothing") {
		t.Errorf("rule 5 (already there): %+v", rules[4])
	}
	if !hasWarning(rules[5], "std::regex") || rules[5].Matched != 96 { // attn_q and attn_q_norm of 48 blocks, case-insensitively
		t.Errorf("rule 6 (lookbehind): %+v", rules[5])
	}
}

// --n-cpu-moe past the model's blocks acts like --cpu-moe; a device outside -dev is noted.
func TestRuleLintInfo(t *testing.T) {
	m := openModel(t, tinyQwen)
	r := rulesWith(t, 99, "exps=CUDA1")
	item, _ := NCPUMoEItem("-ncmoe", "9")
	r.Items = append([]Item{item}, r.Items...)
	r.Devices = []string{"CUDA0"}
	devs := []backend.Device{backend.GPU(0, 8<<30), backend.GPU(1, 8<<30), backend.CPU(64 << 30)}
	plan := place(t, m, r, devs)
	if !strings.Contains(strings.Join(plan.Rules[0].Info, " "), "acts like --cpu-moe") {
		t.Errorf("rule 1 info: %v", plan.Rules[0].Info)
	}
	if !hasWarning(plan.Rules[1], "shadowed") {
		t.Errorf("rule 2: %+v", plan.Rules[1])
	}
}
