package jsonschema

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// convertQuickly converts and fails the test if that takes longer than a
// generous bound: hostile schemas must be refused fast, not slowly.
func convertQuickly(t *testing.T, schema string) (Result, error) {
	t.Helper()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	res, err := ConvertWithOptions([]byte(schema), Options{})
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("conversion took %v", d)
	}
	runtime.ReadMemStats(&after)
	// All memory allocated, not just the peak: a loose but simple bound.
	const maxAlloc = 512 << 20
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > maxAlloc {
		t.Fatalf("conversion allocated %d MB", alloc>>20)
	} else {
		t.Logf("allocated %d MB in %v", alloc>>20, time.Since(start))
	}
	return res, err
}

func TestHostileSchemas(t *testing.T) {
	nestedTypeLists := strings.Repeat(`{"type":["array","array"],"items":`, 60) + "{}" + strings.Repeat("}", 60)
	manyOptional := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"type":"object","properties":{`)
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"p%d":{"type":"integer"}`, i)
		}
		b.WriteString(`},"additionalProperties":{"type":"string"}}`)
		return b.String()
	}
	hugeEnum := func(n int) string {
		vals := make([]string, n)
		for i := range vals {
			vals[i] = fmt.Sprint(i)
		}
		return `{"enum":[` + strings.Join(vals, ",") + `]}`
	}
	tests := []struct {
		name    string
		schema  string
		wantErr string // substring; empty: must convert
	}{
		{"deep arrays", strings.Repeat("[", 100000) + strings.Repeat("]", 100000), "nests"},
		{"deep items", strings.Repeat(`{"items":`, 10000) + "{}" + strings.Repeat("}", 10000), "nests"},
		{"nested type lists", nestedTypeLists, "too"},
		{"too big", `{"description":"` + strings.Repeat("x", MaxSchemaBytes) + `"}`, "bytes"},
		{"many optional properties", manyOptional(20000), ""},
		{"huge enum", hugeEnum(100000), ""},
		{"self $ref", `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, ""},
		{"$ref cycle", `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, ""},
		{"$ref to root", `{"type":"object","properties":{"n":{"$ref":"#"}}}`, "unsupported reference"},
		{"allOf $ref cycle", `{"allOf":[{"$ref":"#/allOf/0"}]}`, "refers to itself"},
		{"allOf $ref mutual", `{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"allOf":[{"$ref":"#/$defs/a"}]}},"allOf":[{"$ref":"#/$defs/a"}]}`, ""},
		{"long $ref chain", chainOfRefs(1000), "nest"},
		{"deep pattern groups", `{"type":"string","pattern":"^` + strings.Repeat("(", 300) + "a" + strings.Repeat(")", 300) + `$"}`, ""},
		{"long property names", `{"properties":{"` + strings.Repeat("a", 100000) + `":{},"` + strings.Repeat("b", 100000) + `":{}},"additionalProperties":true}`, ""},
		{"many conflicting names", conflictingNames(1000), ""},
		{"long name rebuilt by allOf", longNameAllOf(), "too"},
		{"long type list on a wide schema", wideTypeList(), "too"},
		{"allOf merging a wide $ref many times", wideAllOf(), "too"},
		{"huge name excluded from additional", `{"properties":{"` + strings.Repeat("a", 1000000) + `":{}},"additionalProperties":true}`, "too"},
		{"long name excluded from additional", `{"properties":{"` + strings.Repeat("a", 200000) + `":{}},"additionalProperties":true}`, "too"},
		{"huge enum per type", `{"type":[` + strings.Repeat(`"string",`, 40000) + `"null"],"enum":["` + strings.Repeat("x", 600000) + `"]}`, "too"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := convertQuickly(t, tc.schema)
			switch {
			case tc.wantErr == "" && err != nil:
				// Refusing as too large/complex is acceptable; anything else is not.
				if !strings.Contains(err.Error(), "too") {
					t.Fatalf("unexpected error: %v", err)
				}
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func chainOfRefs(n int) string {
	var b strings.Builder
	b.WriteString(`{"$defs":{`)
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `"d%d":{"$ref":"#/$defs/d%d"},`, i, i+1)
	}
	fmt.Fprintf(&b, `"d%d":{"type":"string"}},"$ref":"#/$defs/d0"}`, n)
	return b.String()
}

// conflictingNames gives many properties whose names sanitise to the same
// rule name, each probing past all the earlier ones.
func conflictingNames(n int) string {
	var b strings.Builder
	b.WriteString(`{"properties":{`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"a%s":{"const":%d}`, strings.Repeat(" ", i+1), i)
	}
	b.WriteString(`}}`)
	return b.String()
}

func TestErrorsNameThePath(t *testing.T) {
	tests := []struct{ schema, path string }{
		{`{"properties":{"name":{"type":"string","pattern":"^(a$"}}}`, "properties.name.pattern"},
		{`{"properties":{"a":{"items":{"type":"kaboom"}}}}`, "properties.a.items.type"},
		{`{"anyOf":[{"type":"string"},{"type":7}]}`, "anyOf.1"},
		{`{"properties":{"d":{"format":1}}}`, "properties.d.format"},
		{`{"type":"array","items":{},"minItems":-1}`, "minItems"},
		{`{"type":"integer","minimum":5,"maximum":1}`, "(root)"},
		{`{"$ref":"https://example.com/s.json#/x"}`, "$ref"},
		{`{"$defs":{"a":{"type":"nope"}},"$ref":"#/$defs/a"}`, "$defs.a.type"},
	}
	for _, tc := range tests {
		_, err := Convert([]byte(tc.schema))
		var se *SchemaError
		if !errors.As(err, &se) {
			t.Errorf("%s: error %v is not a *SchemaError", tc.schema, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.path+":") {
			t.Errorf("%s: error %q does not name %q", tc.schema, err, tc.path)
		}
	}
}

// FuzzConvert feeds arbitrary bytes as a schema: the converter must return
// a grammar or an error, never panic, and in bounded time.
func FuzzConvert(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"type":"string","pattern":"^(a|b){2,3}[0-9]?$"}`,
		`{"$defs":{"n":{"properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`,
		`{"allOf":[{"properties":{"a":{}}},{"anyOf":[{"properties":{"b":{}}}]}]}`,
		`{"type":"integer","minimum":-123,"maximum":4567}`,
		`{"type":["string","null"],"minLength":1,"maxLength":3}`,
		`{"properties":{"a":{},"ab":{}},"additionalProperties":{"enum":[1,"x",null]}}`,
		`{"items":[{"format":"date"},{"format":"uuid"}],"minItems":1}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, schema []byte, dotAll bool) {
		start := time.Now()
		res, err := ConvertWithOptions(schema, Options{DotAll: dotAll})
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("conversion took %v", d)
		}
		if err == nil && !strings.Contains(res.Grammar, "\nroot ::= ") && !strings.HasPrefix(res.Grammar, "root ::= ") {
			t.Fatalf("grammar without a root rule:\n%s", res.Grammar)
		}
	})
}

// longNameAllOf nests an allOf that repeats one member many times under a
// property with a very long name, so every repeat rebuilds long rule names
// without adding a rule.
func longNameAllOf() string {
	member := `{"properties":{"a":{}}},`
	return `{"properties":{"` + strings.Repeat("n", 500000) + `":{"allOf":[` +
		strings.Repeat(member, 15000) + `{}]}}}`
}

// wideTypeList puts a long "type" list on a schema with many members: each
// type is a copy of the whole schema.
func wideTypeList() string {
	var b strings.Builder
	b.WriteString(`{"type":[`)
	b.WriteString(strings.Repeat(`"null",`, 25000))
	b.WriteString(`"null"]`)
	for i := 0; i < 25000; i++ {
		fmt.Fprintf(&b, `,"k%d":0`, i)
	}
	b.WriteString("}")
	return b.String()
}

// wideAllOf merges the same 20000-property schema into an allOf 25000 times.
func wideAllOf() string {
	var b strings.Builder
	b.WriteString(`{"$defs":{"w":{"properties":{`)
	for i := 0; i < 20000; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":{}`, i)
	}
	b.WriteString(`}}},"allOf":[`)
	b.WriteString(strings.Repeat(`{"$ref":"#/$defs/w"},`, 25000))
	b.WriteString(`{}]}`)
	return b.String()
}
