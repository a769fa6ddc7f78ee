package arch

import "testing"

func TestLookup(t *testing.T) {
	for _, a := range All() {
		if got, ok := Lookup(a.Name); !ok || got != a {
			t.Errorf("Lookup(%q) = %v, %v", a.Name, got, ok)
		}
	}
	if _, ok := Lookup("no-such-arch"); ok {
		t.Error("an unknown architecture was found")
	}
	if a := Of("no-such-arch"); a.Name != "no-such-arch" || a.Recurrent || a.Indexer || a.SlidingWindow || a.Runs {
		t.Errorf("Of gives an unknown architecture %+v", a)
	}
}

func TestSizeLabel(t *testing.T) {
	if got := GPTOSS.SizeLabel(24); got != "20B" {
		t.Errorf("gpt-oss with 24 layers is %q", got)
	}
	if got := GPTOSS.SizeLabel(25); got != "?B" {
		t.Errorf("gpt-oss with 25 layers is %q", got)
	}
}
