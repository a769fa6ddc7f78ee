package placement

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlclark/regexp2"
)

// FuzzParseOverrideTensor: any -ot value either parses into items whose texts rejoin into the
// value, or fails with a usage error.
func FuzzParseOverrideTensor(f *testing.F) {
	for _, s := range []string{"exps=CPU", `blk\.1\.ffn_up_exps=CPU,blk\.2\.=CPU`, "a=b=c", "", ",", "x{1,2}=CPU", "=", "é=CUDA0",
		"exps@0-3+8=CUDA0", "exps@hot:4=CUDA0", "a@=CPU", "@1=CPU", "x@3-1=CPU", "x[@]1=CPU"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		items, err := ParseOverrideTensor("-ot", value)
		if err != nil {
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		texts := make([]string, len(items))
		for i, it := range items {
			texts[i] = it.Text
			selector := ""
			if it.Experts != nil {
				selector = it.Text[len(it.Pattern) : len(it.Text)-len(it.Target)-1]
				if again, err := ParseExpertSelector(selector[1:]); err != nil || again.String() != it.Experts.String() {
					t.Fatalf("item %+v of %q: its selector %q reads back as %v, %v", it, value, selector, again, err)
				}
			}
			if it.Pattern+selector+"="+it.Target != it.Text || strings.Contains(it.Pattern, "=") || strings.Contains(it.Text, ",") {
				t.Fatalf("item %+v of %q", it, value)
			}
		}
		if strings.Join(texts, ",") != value {
			t.Fatalf("items %q do not rejoin into %q", texts, value)
		}
	})
}

// FuzzMatcher: the matcher's verdict equals regexp2's (the engine of record) on any pattern
// and name, whichever shortcut it takes; patterns it accepts regexp2 accepts too.
func FuzzMatcher(f *testing.F) {
	for _, s := range []string{`exps`, `blk\.1[0-9]\.ffn_.*_exps`, `^blk\.3\.`, `(ch|)exps`, `[^a-z]x`, `a.b`, `\bffn`, `(?i)X`, `x{2}`, `[[:digit:]]+`, `\x41`, `a|b`, `(a)\1`, `^$`} {
		f.Add(s, "blk.13.ffn_up_exps.weight")
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if len(pattern) > 64 || len(name) > 96 {
			return // tensor names are under 64 bytes; long inputs only slow the backtracker
		}
		m, err := compileMatcher(pattern)
		re, rerr := regexp2.Compile(pattern, regexp2.ECMAScript|regexp2.RE2)
		if err != nil {
			var pe *PatternError
			if !errors.As(err, &pe) || rerr == nil {
				t.Fatalf("compile %q: %v (regexp2: %v)", pattern, err, rerr)
			}
			return
		}
		if rerr != nil {
			t.Fatalf("accepted %q, which regexp2 rejects: %v", pattern, rerr)
		}
		want, werr := re.MatchString(name)
		got, gerr := m.match(name, isPlainASCII(name))
		if werr != nil || gerr != nil {
			return // a match timeout: both engines give up on pathological patterns
		}
		if got != want {
			t.Fatalf("%q on %q: %v, regexp2 %v", pattern, name, got, want)
		}
	})
}

// FuzzPlace: any override list and layer count either plans or fails with a typed error; a
// plan places every tensor exactly once on a known device or skips it.
func FuzzPlace(f *testing.F) {
	m := openModel(f, tinyQwen)
	for _, s := range []string{"exps=CPU", "blk\\.0\\.=CUDA0", "=CPU", "(x=CPU", "exps=NOPE", "attn=CUDA0,ffn=CPU",
		"exps@0-3=CUDA0,exps=CPU", "ffn_up_exps@hot:2=CUDA0", "blk\\.1\\.@7+99=CUDA0"} {
		f.Add(s, 99, 2)
	}
	f.Fuzz(func(t *testing.T, ot string, ngl, ncmoe int) {
		r := DefaultRules()
		r.CtxSize, r.GPULayers = 4096, ngl%10
		items, err := ParseOverrideTensor("-ot", ot)
		if err != nil {
			return
		}
		r.Items = items
		if it, err := NCPUMoEItem("-ncmoe", string(rune('0'+(ncmoe&7)))); err == nil {
			r.Items = append(r.Items, it)
		}
		plan, err := Place(m, r, devicesFor(8))
		if err != nil {
			var ue *UsageError
			var be *UnknownBufferTypeError
			var pe *PatternError
			if !errors.As(err, &ue) && !errors.As(err, &be) && !errors.As(err, &pe) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		var total int64
		for _, tu := range plan.Tensors {
			if tu.Device != "CPU" && tu.Device != "CUDA0" {
				t.Fatalf("%s on %q", tu.Name, tu.Device)
			}
			total += tu.Bytes
		}
		var held int64
		for _, d := range plan.Devices {
			held += d.Weights
		}
		if held != total {
			t.Fatalf("devices hold %d weight bytes, tensors sum to %d", held, total)
		}
	})
}
