package jsonschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestAgainstLlamaOracle converts random schemas with this package and with
// llama.cpp itself and requires the same grammar (or both failing). It runs
// only when JSONSCHEMA_LLAMA_ORACLE names a program that reads a schema on
// stdin and prints json_schema_to_grammar(schema, true) or, when that
// throws, a line starting with "ERROR". Such a program is a few lines of
// C++ compiled with llama.cpp's common/json-schema-to-grammar.cpp and
// common/json.cpp. JSONSCHEMA_ORACLE_N sets the number of schemas (500),
// JSONSCHEMA_ORACLE_SEED the random seed (1).
//
// The generator keeps away from the documented differences (bounds that
// contradict each other, special characters in names excluded from
// additional properties, $refs inside objects holding a $ref).
func TestAgainstLlamaOracle(t *testing.T) {
	oracle := os.Getenv("JSONSCHEMA_LLAMA_ORACLE")
	if oracle == "" {
		t.Skip("JSONSCHEMA_LLAMA_ORACLE not set")
	}
	n := 500
	if s := os.Getenv("JSONSCHEMA_ORACLE_N"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	seed := int64(1)
	if s := os.Getenv("JSONSCHEMA_ORACLE_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	rng := rand.New(rand.NewSource(seed))
	same := 0
	for i := 0; i < n; i++ {
		g := &schemaGen{rng: rng}
		schema := g.root()
		text, err := json.Marshal(schema)
		if err != nil {
			t.Fatal(err)
		}
		// encoding/json sorts map keys; orderedMap keeps generation order.
		cmd := exec.Command(oracle)
		cmd.Stdin = bytes.NewReader(text)
		var out bytes.Buffer
		cmd.Stdout = &out
		_ = cmd.Run()
		want := out.String()
		got, convErr := Convert(text)
		llamaFailed := strings.HasPrefix(want, "ERROR")
		switch {
		case llamaFailed && convErr != nil:
			same++
		case llamaFailed:
			t.Errorf("schema %s: llama.cpp fails (%s) but we give:\n%s", text, strings.TrimSpace(want), got)
		case convErr != nil:
			t.Errorf("schema %s: we fail (%v) but llama.cpp gives:\n%s", text, convErr, want)
		case got != want:
			t.Errorf("schema %s:\nllama.cpp:\n%s\nours:\n%s", text, want, got)
		default:
			same++
		}
		if t.Failed() && i > 20 {
			break
		}
	}
	t.Logf("%d of %d random schemas agree with llama.cpp", same, n)
}

// orderedMap marshals its members in insertion order.
type orderedMap struct {
	keys []string
	vals []any
}

func (m *orderedMap) set(k string, v any) *orderedMap {
	for i, old := range m.keys {
		if old == k {
			m.vals[i] = v
			return m
		}
	}
	m.keys = append(m.keys, k)
	m.vals = append(m.vals, v)
	return m
}

func (m *orderedMap) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range m.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kt, _ := json.Marshal(k)
		vt, err := json.Marshal(m.vals[i])
		if err != nil {
			return nil, err
		}
		b.Write(kt)
		b.WriteByte(':')
		b.Write(vt)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

type schemaGen struct {
	rng  *rand.Rand
	defs []string
}

func (g *schemaGen) pick(xs ...string) string { return xs[g.rng.Intn(len(xs))] }

var (
	genNames    = []string{"a", "b", "ab", "abc", "number", "string", "root", "value", "", "x y", "a.b", "n_1", "date", "item", "dot", "A", "Ab"}
	genPatterns = []string{`^[a-z]+$`, `^(ab|c)*d?$`, `^\d+$`, `^a.b{2,3}$`, `^(?:x|y){1,}z$`, `^[^"\\]{0,5}$`, `^"quoted"$`, `^(a(b(c)))$`, `^x{,2}(yy)?$`, `abc`, `^\w$`, `^[\x41-\x5A]\u00e9$`, `^(a$`, `^a|b$`, `^(?=a)b$`, `^.*$`, `^[0-9]{3}-[0-9]{4}$`}
	genFormats  = []string{"date", "time", "date-time", "uuid", "uuid4", "email", "uri"}
	genTypes    = []string{"string", "number", "integer", "boolean", "null", "object", "array", "kaboom"}
)

func (g *schemaGen) value(depth int) any {
	switch g.rng.Intn(9) {
	case 0:
		return nil
	case 1:
		return g.rng.Intn(2) == 0
	case 2:
		return g.rng.Intn(2000) - 1000
	case 3:
		return json.Number(g.pick("1.5", "-0.25", "1e20", "2.0", "1e-7", "123456789012345678901234", "0.1", "-0.0", "1E400"))
	case 4, 5:
		return g.pick("red", "a\"b", "tab\tnew\nline", "back\\slash", "\u0001ctl", "é€", "")
	case 6:
		if depth < 2 {
			return []any{g.value(depth + 1), g.value(depth + 1)}
		}
		return "deep"
	default:
		if depth < 2 {
			return (&orderedMap{}).set(g.pick(genNames...), g.value(depth+1))
		}
		return 7
	}
}

func (g *schemaGen) root() any {
	s := &orderedMap{}
	ndefs := g.rng.Intn(3)
	defs := &orderedMap{}
	for i := 0; i < ndefs; i++ {
		g.defs = append(g.defs, fmt.Sprintf("#/$defs/d%d", i))
	}
	for i := 0; i < ndefs; i++ {
		defs.set(fmt.Sprintf("d%d", i), g.schema(2))
	}
	body := g.schema(0)
	if m, ok := body.(*orderedMap); ok {
		if _, hasRef := indexOf(m.keys, "$ref"); !hasRef {
			s = m
		} else {
			s.set("anyOf", []any{m})
		}
	} else {
		s.set("items", body)
	}
	if ndefs > 0 {
		s.set("$defs", defs)
	}
	return s
}

func indexOf(xs []string, x string) (int, bool) {
	for i, y := range xs {
		if y == x {
			return i, true
		}
	}
	return -1, false
}

func (g *schemaGen) schema(depth int) any {
	r := g.rng
	if depth > 3 {
		return (&orderedMap{}).set("type", g.pick("string", "integer", "boolean"))
	}
	s := &orderedMap{}
	switch r.Intn(16) {
	case 0:
		if r.Intn(3) == 0 {
			s.set("type", []any{g.pick(genTypes[:7]...), g.pick(genTypes[:7]...)})
		} else {
			s.set("type", g.pick(genTypes...))
		}
	case 1:
		s.set("const", g.value(0))
	case 2:
		s.set("enum", []any{g.value(0), g.value(0), g.value(0)})
	case 3, 4:
		if r.Intn(2) == 0 {
			s.set("type", "object")
		}
		props := &orderedMap{}
		var names []any
		for i := r.Intn(5); i > 0; i-- {
			name := g.pick(genNames...)
			props.set(name, g.schema(depth+1))
			if r.Intn(2) == 0 {
				names = append(names, name)
			}
		}
		s.set("properties", props)
		if len(names) > 0 {
			s.set("required", names)
		}
		switch r.Intn(4) {
		case 0:
			s.set("additionalProperties", false)
		case 1:
			s.set("additionalProperties", true)
		case 2:
			s.set("additionalProperties", g.schema(depth+1))
		}
	case 5:
		s.set("type", "array")
		if r.Intn(3) == 0 {
			s.set("prefixItems", []any{g.schema(depth + 1), g.schema(depth + 1)})
		} else {
			s.set("items", g.schema(depth+1))
		}
		lo := r.Intn(3)
		if r.Intn(2) == 0 {
			s.set("minItems", lo)
		}
		if r.Intn(2) == 0 {
			s.set("maxItems", lo+r.Intn(3))
		}
	case 6:
		s.set("type", "string")
		lo := r.Intn(4)
		if r.Intn(2) == 0 {
			s.set("minLength", lo)
		}
		if r.Intn(2) == 0 {
			s.set("maxLength", lo+r.Intn(4))
		}
	case 7:
		s.set("type", "string").set("format", g.pick(genFormats...))
	case 8:
		if r.Intn(2) == 0 {
			s.set("type", "string").set("pattern", g.pick(genPatterns...))
		} else {
			s.set("type", "string").set("pattern", g.randomPattern())
		}
	case 9:
		s.set("type", "integer")
		bounds := []int64{0, 1, 9, 10, 99, 100, 101, 255, 1000, 12345, 1e9, 1 << 53, -1, -9, -10, -100, -12345}
		lo := bounds[r.Intn(len(bounds))]
		hi := bounds[r.Intn(len(bounds))]
		if lo > hi {
			lo, hi = hi, lo
		}
		if r.Intn(3) > 0 {
			s.set(g.pick("minimum", "exclusiveMinimum"), lo)
		}
		if r.Intn(3) > 0 {
			s.set(g.pick("maximum", "exclusiveMaximum"), hi+2)
		}
	case 10, 11:
		s.set(g.pick("anyOf", "oneOf"), []any{g.schema(depth + 1), g.schema(depth + 1)})
	case 12:
		var parts []any
		for i := r.Intn(3) + 1; i > 0; i-- {
			switch r.Intn(4) {
			case 0:
				parts = append(parts, (&orderedMap{}).set("enum", []any{"a", "b", 1, g.value(0)}))
			case 1:
				parts = append(parts, (&orderedMap{}).set("anyOf", []any{
					(&orderedMap{}).set("properties", (&orderedMap{}).set(g.pick(genNames...), g.schema(depth+1))),
				}))
			default:
				parts = append(parts, (&orderedMap{}).set("properties", (&orderedMap{}).set(g.pick(genNames...), g.schema(depth+1))))
			}
		}
		s.set("allOf", parts)
	case 13:
		if len(g.defs) > 0 {
			s.set("$ref", g.pick(g.defs...))
		}
	case 14:
		s.set("description", "only a description")
	}
	return s
}

// randomPattern strings together regex pieces, valid or not, mostly
// anchored, to exercise the pattern translator's corners.
func (g *schemaGen) randomPattern() string {
	pieces := []string{"a", "b", "ab", ".", "(", ")", "(?:", "(?=", "[a-z]", "[^\"]", "[\\d]", "[\\x41-\\x5A]", "[", "]", "|",
		"*", "+", "?", "{2}", "{1,3}", "{,2}", "{2,}", "{x}", "{", "}", "\\.", "\\(", "\\w", "\\d", "\\n", "\\u00e9", "\\x4", "\"", "-", "^", "$", "é", "\\"}
	var b strings.Builder
	if g.rng.Intn(8) > 0 {
		b.WriteByte('^')
	}
	for i := g.rng.Intn(8); i >= 0; i-- {
		b.WriteString(pieces[g.rng.Intn(len(pieces))])
	}
	if g.rng.Intn(8) > 0 {
		b.WriteByte('$')
	}
	return b.String()
}
