package jsonschema

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/moerun/moerun/grammar"
)

// Limits on hostile input. Real schemas (OpenAI structured outputs, tool
// parameter schemas) are far below all of them.
const (
	// MaxSchemaBytes is the largest schema document accepted.
	MaxSchemaBytes = 1 << 20
	// MaxNestingDepth bounds how deeply arrays and objects may nest in the
	// schema document, and how deeply subschemas may nest while converting
	// (where a chain of $refs counts as nesting too).
	MaxNestingDepth = 128
	// MaxGrammarBytes bounds the total text of the rules the conversion
	// produces; a schema that would expand past it (for example through
	// "type" lists nested many levels deep, each multiplying the work) is
	// refused rather than converted slowly.
	MaxGrammarBytes = 4 << 20
	// maxWork bounds the converter's steps for the same reason: one per
	// subschema visit, trie node, rule-name probe and pattern character,
	// and one per 16 bytes of rule text built, since the same long text can
	// be rebuilt many times without adding to the grammar.
	maxWork = 1_500_000
)

// Options changes how the grammar is built. The zero value is what
// llama-server uses.
type Options struct {
	// DotAll makes "." in a pattern match any character, newlines included.
	// llama.cpp's default (and llama-server's) is false: "." excludes \n, \r.
	DotAll bool
}

// Result is a successful conversion.
type Result struct {
	// Grammar is the GBNF text: one "name ::= body" line per rule, rules in
	// byte order of their names, "root" being the start rule.
	Grammar string
	// Warnings name the parts of the schema that were accepted but not
	// enforced, such as a pattern outside the supported regex subset (its
	// string is then any JSON string, as in llama.cpp). At most 100 are
	// kept, then one entry counts the rest.
	Warnings []string
}

// Convert turns a JSON schema into a GBNF grammar with the default options,
// discarding warnings. See ConvertWithOptions.
func Convert(schema []byte) (string, error) {
	res, err := ConvertWithOptions(schema, Options{})
	if err != nil {
		return "", err
	}
	return res.Grammar, nil
}

// ConvertWithOptions turns a JSON schema into a GBNF grammar whose root rule
// matches the JSON texts the schema describes, as llama.cpp's
// json_schema_to_grammar does. Errors name the schema path at fault.
func ConvertWithOptions(schema []byte, opts Options) (res Result, err error) {
	if len(schema) > MaxSchemaBytes {
		return Result{}, fmt.Errorf("jsonschema: schema is %d bytes, more than the %d accepted", len(schema), MaxSchemaBytes)
	}
	doc, err := parseJSON(schema, MaxNestingDepth)
	if err != nil {
		if errors.Is(err, errTooDeep) {
			return Result{}, fmt.Errorf("jsonschema: schema nests arrays/objects more than %d deep", MaxNestingDepth)
		}
		return Result{}, fmt.Errorf("jsonschema: schema is not valid JSON: %w", err)
	}
	c := &converter{
		dotAll:    opts.DotAll,
		rules:     map[string]string{"space": spaceRule},
		refs:      map[string]*jsonValue{},
		resolving: map[string]bool{},
		root:      doc,
	}
	defer func() {
		if r := recover(); r != nil {
			a, ok := r.(abort)
			if !ok {
				panic(r)
			}
			res, err = Result{}, a.err
		}
	}()
	c.resolveRefs(doc, nil)
	c.visit(doc, "", nil)
	return Result{Grammar: c.format(), Warnings: c.warnings}, nil
}

// abort carries a conversion error up through the recursive visit; it is
// recovered in ConvertWithOptions and never escapes the package.
type abort struct{ err error }

// SchemaError is a schema the converter refuses, with where it is.
type SchemaError struct {
	// Path locates the offending keyword, dot-separated from the schema's
	// root (e.g. "properties.name.pattern"); empty for the root itself.
	Path string
	Msg  string
}

func (e *SchemaError) Error() string {
	path := e.Path
	if path == "" {
		path = "(root)"
	}
	return "jsonschema: " + path + ": " + e.Msg
}

// schemaPath locates a subschema for error messages: a linked list from
// the leaf up, built in constant time per step and rendered only when an
// error or warning needs it, since property names can be long and schemas
// deep.
type schemaPath struct {
	parent *schemaPath
	elem   string
}

func joinPath(parent *schemaPath, elem string) *schemaPath {
	return &schemaPath{parent: parent, elem: elem}
}

// String renders the path dot-separated, shortening long elements and long
// paths so that messages stay readable and cheap.
func (p *schemaPath) String() string {
	const maxElem, maxElems = 64, 32
	var elems []string
	for q := p; q != nil; q = q.parent {
		e := q.elem
		if len(e) > maxElem {
			e = e[:maxElem] + "..."
		}
		elems = append(elems, e)
	}
	slices.Reverse(elems)
	if len(elems) > maxElems {
		elems = append(append(elems[:maxElems/2:maxElems/2], "..."), elems[len(elems)-maxElems/2:]...)
	}
	return strings.Join(elems, ".")
}

// The grammar's fixed building blocks. Their text is llama.cpp's, since the
// output is compared with llama.cpp's byte for byte.
const spaceRule = `| " " | "\n"{1,2} [ \t]{0,20}`

type builtinRule struct {
	body string
	deps []string
}

var primitiveRules = map[string]builtinRule{
	"boolean":       {`("true" | "false")`, nil},
	"decimal-part":  {`[0-9]{1,16}`, nil},
	"integral-part": {`[0] | [1-9] [0-9]{0,15}`, nil},
	"number":        {`("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?`, []string{"integral-part", "decimal-part"}},
	"integer":       {`("-"? integral-part)`, []string{"integral-part"}},
	"value":         {`object | array | string | number | boolean | null`, []string{"object", "array", "string", "number", "boolean", "null"}},
	"object":        {`"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"`, []string{"string", "value"}},
	"array":         {`"[" space ( value ("," space value)* )? space "]"`, []string{"value"}},
	"uuid":          {`"\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\""`, nil},
	"char":          {`[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})`, nil},
	"string":        {`"\"" char* "\""`, []string{"char"}},
	"null":          {`"null"`, nil},
}

var formatRules = map[string]builtinRule{
	"date":             {`[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )`, nil},
	"time":             {`([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )`, nil},
	"date-time":        {`date "T" time`, []string{"date", "time"}},
	"date-string":      {`"\"" date "\""`, []string{"date"}},
	"time-string":      {`"\"" time "\""`, []string{"time"}},
	"date-time-string": {`"\"" date-time "\""`, []string{"date-time"}},
}

// reservedName reports names a subschema's rule may not take, because a
// built-in rule of that name may be needed later; such a rule gets a "-"
// appended instead.
func reservedName(name string) bool {
	if name == "root" {
		return true
	}
	_, prim := primitiveRules[name]
	_, format := formatRules[name]
	return prim || format
}

var uuidFormat = regexp.MustCompile(`^uuid[1-5]?$`)

// sanitizeRuleName replaces each run of characters not allowed in a GBNF
// rule name (anything but ASCII letters, digits and '-') with one '-'.
func sanitizeRuleName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	inRun := false
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' {
			b.WriteByte(ch)
			inRun = false
			continue
		}
		if !inRun {
			b.WriteByte('-')
			inRun = true
		}
	}
	return b.String()
}

type converter struct {
	dotAll    bool
	rules     map[string]string     // rule name -> body
	refs      map[string]*jsonValue // "$ref" string -> the subschema it points at
	resolving map[string]bool       // refs whose rule is being built (cycle guard)
	warnings  []string
	root      *jsonValue
	depth     int           // current subschema nesting, $ref chains included
	work      int           // steps taken, against maxWork
	ruleBytes int           // text of all rules added, against MaxGrammarBytes
	undo      *[]ruleChange // while translating a pattern: changes to rules

	moreWarnings int // warnings beyond maxWarnings, only counted
}

func (c *converter) fail(path *schemaPath, format string, args ...any) {
	panic(abort{&SchemaError{Path: path.String(), Msg: fmt.Sprintf(format, args...)}})
}

// maxWarnings caps Result.Warnings; the rest are counted in a last entry.
const maxWarnings = 100

func (c *converter) warn(msg string) {
	switch {
	case len(c.warnings) < maxWarnings:
		c.warnings = append(c.warnings, msg)
	case len(c.warnings) == maxWarnings:
		c.warnings = append(c.warnings, "")
		fallthrough
	default:
		c.moreWarnings++
		c.warnings[maxWarnings] = fmt.Sprintf("... and %d more warnings", c.moreWarnings)
	}
}

func (c *converter) spend(steps int) {
	c.work += steps
	if c.work > maxWork {
		panic(abort{fmt.Errorf("jsonschema: schema needs more than %d conversion steps; refusing it as too complex", maxWork)})
	}
}

// addRule stores a rule under a name made of its sanitised name, or under
// that name plus a number when a different rule already holds the name, and
// returns the name used. Adding the same rule twice is harmless.
func (c *converter) addRule(name, body string) string {
	// Charge for the text handled, not just the call: the same long name or
	// body can be rebuilt many times (repeated allOf members, type lists)
	// without adding a rule, so MaxGrammarBytes alone would not bound it.
	c.spend(1 + (len(name)+len(body))/16)
	base := sanitizeRuleName(name)
	if old, ok := c.rules[base]; !ok || old == body {
		c.setRule(base, body)
		return base
	}
	for i := 0; ; i++ {
		c.spend(1)
		key := base + strconv.Itoa(i)
		if old, ok := c.rules[key]; !ok || old == body {
			c.setRule(key, body)
			return key
		}
	}
}

func (c *converter) setRule(name, body string) {
	old, existed := c.rules[name]
	if c.undo != nil {
		*c.undo = append(*c.undo, ruleChange{name: name, old: old, existed: existed})
	}
	if !existed {
		c.ruleBytes += len(name) + len(body)
		if c.ruleBytes > MaxGrammarBytes {
			panic(abort{fmt.Errorf("jsonschema: grammar would exceed %d bytes; refusing the schema as too large", MaxGrammarBytes)})
		}
	}
	c.rules[name] = body
}

// ruleChange records what setRule replaced, so that a failed pattern
// translation can take its rules back.
type ruleChange struct {
	name    string
	old     string
	existed bool
}

// addPrimitive adds a built-in rule under name, plus the built-in rules it
// refers to when they are not there yet.
func (c *converter) addPrimitive(name string, rule builtinRule) string {
	n := c.addRule(name, rule.body)
	for _, dep := range rule.deps {
		depRule, ok := primitiveRules[dep]
		if !ok {
			depRule = formatRules[dep]
		}
		if _, have := c.rules[dep]; !have {
			c.addPrimitive(dep, depRule)
		}
	}
	return n
}

func (c *converter) format() string {
	names := make([]string, 0, len(c.rules))
	for name := range c.rules {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		b.WriteString(name)
		b.WriteString(" ::= ")
		b.WriteString(c.rules[name])
		b.WriteByte('\n')
	}
	return b.String()
}

// resolveRefs checks, before anything is converted, that every "$ref" in the
// document resolves, as llama.cpp does. Like llama.cpp it does not look
// inside an object that has a "$ref"; references in there (typically in
// "$defs" next to a top-level "$ref") are resolved when first used, where
// llama.cpp would treat them as an unconstrained object.
func (c *converter) resolveRefs(n *jsonValue, path *schemaPath) {
	switch {
	case n.isArray():
		for i, item := range n.items {
			c.resolveRefs(item, joinPath(path, strconv.Itoa(i)))
		}
	case n.isObject():
		refValue := n.get("$ref")
		if refValue == nil {
			for i, k := range n.keys {
				c.resolveRefs(n.vals[i], joinPath(path, k))
			}
			return
		}
		refPath := joinPath(path, "$ref")
		if refValue.kind != jsonString {
			c.fail(refPath, "must be a string")
		}
		c.lookupRef(refValue.str, refPath)
	}
}

// lookupRef returns the subschema a "$ref" points at, resolving it on first
// use. Only local JSON pointers ("#/...") are supported.
func (c *converter) lookupRef(ref string, refPath *schemaPath) *jsonValue {
	if target, done := c.refs[ref]; done {
		return target
	}
	if !strings.HasPrefix(ref, "#/") {
		if strings.HasPrefix(ref, "https://") || strings.HasPrefix(ref, "http://") {
			c.fail(refPath, "remote reference %q is not supported (only local \"#/...\" references)", ref)
		}
		c.fail(refPath, "unsupported reference %q (only local \"#/...\" references)", ref)
	}
	target := c.root
	for _, sel := range strings.Split(ref[2:], "/") {
		c.spend(1)
		switch {
		case target.isObject() && target.has(sel):
			target = target.get(sel)
		case target.isArray():
			idx, ok := arrayIndex(sel)
			if !ok || idx >= uint64(len(target.items)) {
				c.fail(refPath, "cannot resolve %q: no element %q", ref, sel)
			}
			target = target.items[idx]
		default:
			c.fail(refPath, "cannot resolve %q: no member %q", ref, sel)
		}
	}
	c.refs[ref] = target
	return target
}

// arrayIndex reads a JSON-pointer array index the way llama.cpp's stoull
// does: leading blanks and a '+' are allowed, trailing text is ignored.
func arrayIndex(sel string) (uint64, bool) {
	s := strings.TrimLeft(sel, " \t\n\v\f\r")
	s = strings.TrimPrefix(s, "+")
	end := 0
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	if end == 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(s[:end], 10, 64)
	return n, err == nil
}

// visit adds the rules for schema and returns the name of (or an expression
// for) the rule matching it. name is the rule-name stem from the schema's
// position (property names joined by "-"); path is where it is, for errors.
func (c *converter) visit(schema *jsonValue, name string, path *schemaPath) string {
	c.spend(1)
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > MaxNestingDepth {
		c.fail(path, "subschemas (with $ref chains) nest more than %d deep", MaxNestingDepth)
	}

	schemaType := schema.get("type")
	typeIs := func(t string) bool { return schemaType.isString(t) }
	untyped := schemaType.isNull()
	format := ""
	if f := schema.get("format"); f != nil {
		if f.kind != jsonString {
			c.fail(joinPath(path, "format"), "must be a string")
		}
		format = f.str
	}
	ruleName := name
	switch {
	case reservedName(name):
		ruleName = name + "-"
	case name == "":
		ruleName = "root"
	}
	childName := func(suffix string) string {
		if name == "" {
			return suffix
		}
		return name + "-" + suffix
	}

	if ref := schema.get("$ref"); ref != nil {
		if ref.kind != jsonString {
			c.fail(joinPath(path, "$ref"), "must be a string")
		}
		return c.addRule(ruleName, c.resolveRef(ref.str, joinPath(path, "$ref")))
	}
	if schema.has("oneOf") || schema.has("anyOf") {
		keyword := "oneOf"
		if !schema.has("oneOf") {
			keyword = "anyOf"
		}
		return c.addRule(ruleName, c.union(name, schema.get(keyword).elements(), joinPath(path, keyword)))
	}
	if schemaType.isArray() {
		alternatives := make([]*jsonValue, len(schemaType.items))
		for i, t := range schemaType.items {
			// Each alternative copies the schema's members: charge for
			// them, or a long type list on a wide schema costs
			// (types × members) memory before any visit is counted.
			c.spend(1 + len(schema.keys))
			alternatives[i] = schema.withMember("type", t)
		}
		return c.addRule(ruleName, c.union(name, alternatives, joinPath(path, "type")))
	}
	if v := schema.get("const"); v != nil {
		return c.addRule(ruleName, grammar.Literal(v.dump()))
	}
	if enum := schema.get("enum"); enum != nil {
		values := enum.elements()
		c.spend(len(values))
		literals := make([]string, len(values))
		for i, v := range values {
			literals[i] = grammar.Literal(v.dump())
		}
		return c.addRule(ruleName, "("+strings.Join(literals, " | ")+")")
	}
	additional := schema.get("additionalProperties")
	if (untyped || typeIs("object")) && (schema.has("properties") || (additional != nil && !additional.isTrue())) {
		required := map[string]bool{}
		if r := schema.get("required"); r.isArray() {
			for _, item := range r.items {
				if item.kind == jsonString {
					required[item.str] = true
				}
			}
		}
		var props []property
		keys, vals := schema.get("properties").members()
		for i, k := range keys {
			props = append(props, property{k, vals[i], joinPath(joinPath(path, "properties"), k)})
		}
		return c.addRule(ruleName, c.objectRule(props, required, name, additional, path))
	}
	if (untyped || typeIs("object") || typeIs("string")) && schema.has("allOf") {
		return c.addRule(ruleName, c.allOf(schema.get("allOf"), name, joinPath(path, "allOf")))
	}
	if (untyped || typeIs("array")) && (schema.has("items") || schema.has("prefixItems")) {
		keyword := "items"
		if !schema.has("items") {
			keyword = "prefixItems"
		}
		items := schema.get(keyword)
		if items.isArray() {
			var b strings.Builder
			b.WriteString(`"[" space `)
			for i, item := range items.items {
				if i > 0 {
					b.WriteString(` "," space `)
				}
				b.WriteString(c.visit(item, childName("tuple-"+strconv.Itoa(i)), joinPath(path, keyword+"."+strconv.Itoa(i))))
			}
			b.WriteString(` space "]"`)
			return c.addRule(ruleName, b.String())
		}
		itemRule := c.visit(items, childName("item"), joinPath(path, keyword))
		minItems := 0
		if v := schema.get("minItems"); v != nil {
			minItems = c.count(v, joinPath(path, "minItems"))
		}
		maxItems := unbounded
		if v := schema.get("maxItems"); v != nil && (v.kind == jsonInt || v.kind == jsonUint) {
			maxItems = c.count(v, joinPath(path, "maxItems"))
		}
		if minItems > maxItems {
			c.fail(path, "minItems %d is greater than maxItems %d: no array matches", minItems, maxItems)
		}
		return c.addRule(ruleName, `"[" space `+repetition(itemRule, minItems, maxItems, `"," space`)+` space "]"`)
	}
	if (untyped || typeIs("string")) && schema.has("pattern") {
		p := schema.get("pattern")
		if p.kind != jsonString {
			c.fail(joinPath(path, "pattern"), "must be a string")
		}
		return c.visitPattern(p.str, ruleName, joinPath(path, "pattern"))
	}
	if (untyped || typeIs("string")) && uuidFormat.MatchString(format) {
		primName := format
		if ruleName == "root" {
			primName = "root"
		}
		return c.addPrimitive(primName, primitiveRules["uuid"])
	}
	if rule, ok := formatRules[format+"-string"]; ok && (untyped || typeIs("string")) {
		return c.addRule(ruleName, c.addPrimitive(format+"-string", rule))
	}
	if typeIs("string") && (schema.has("minLength") || schema.has("maxLength")) {
		charRule := c.addPrimitive("char", primitiveRules["char"])
		minLen, maxLen := 0, unbounded
		if v := schema.get("minLength"); v != nil {
			minLen = c.count(v, joinPath(path, "minLength"))
		}
		if v := schema.get("maxLength"); v != nil {
			maxLen = c.count(v, joinPath(path, "maxLength"))
		}
		if minLen > maxLen {
			c.fail(path, "minLength %d is greater than maxLength %d: no string matches", minLen, maxLen)
		}
		return c.addRule(ruleName, `"\"" `+repetition(charRule, minLen, maxLen, "")+` "\""`)
	}
	if typeIs("integer") && (schema.has("minimum") || schema.has("exclusiveMinimum") || schema.has("maximum") || schema.has("exclusiveMaximum")) {
		return c.addRule(ruleName, c.integerRange(schema, path))
	}
	if schema.isEmpty() || typeIs("object") {
		return c.addRule(ruleName, c.addPrimitive("object", primitiveRules["object"]))
	}
	if untyped && schema.isObject() {
		// Only annotations such as "description": any JSON value will do.
		return c.addRule(ruleName, c.addPrimitive("value", primitiveRules["value"]))
	}
	if schemaType == nil || schemaType.kind != jsonString {
		c.fail(path, "unrecognized schema %s", truncate(schema.dump()))
	}
	prim, ok := primitiveRules[schemaType.str]
	if !ok {
		c.fail(joinPath(path, "type"), "unknown type %q", schemaType.str)
	}
	primName := schemaType.str
	if ruleName == "root" {
		primName = "root"
	}
	return c.addPrimitive(primName, prim)
}

// truncate keeps error messages short when they quote the schema.
func truncate(s string) string {
	const limit = 200
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}

func (c *converter) union(name string, alternatives []*jsonValue, path *schemaPath) string {
	rules := make([]string, len(alternatives))
	for i, alt := range alternatives {
		altName := name + "-" + strconv.Itoa(i)
		if name == "" {
			altName = "alternative-" + strconv.Itoa(i)
		}
		rules[i] = c.visit(alt, altName, joinPath(path, strconv.Itoa(i)))
	}
	return strings.Join(rules, " | ")
}

// count reads a non-negative repetition count (minItems, maxLength, ...).
// llama.cpp converts any number (truncating fractions) or boolean to a C
// int; counts that are negative or do not fit are refused here, since
// llama.cpp would turn them into an invalid grammar.
func (c *converter) count(v *jsonValue, path *schemaPath) int {
	n, ok := toInt64(v)
	if !ok {
		c.fail(path, "must be a number")
	}
	if n < 0 || n > math.MaxInt32 {
		c.fail(path, "%d is out of the supported range 0..%d", n, math.MaxInt32)
	}
	return int(n)
}

// toInt64 converts as nlohmann's get<int64_t> does for well-defined inputs:
// numbers (fractions truncated) and booleans. Values outside int64 give
// false.
func toInt64(v *jsonValue) (int64, bool) {
	switch v.kind {
	case jsonBool:
		if v.boolean {
			return 1, true
		}
		return 0, true
	case jsonInt:
		return v.signed, true
	case jsonUint:
		if v.natural > math.MaxInt64 {
			return 0, false
		}
		return int64(v.natural), true
	case jsonFloat:
		if math.IsNaN(v.float) || v.float >= 9.2e18 || v.float <= -9.2e18 {
			return 0, false
		}
		return int64(v.float), true
	}
	return 0, false
}

// integerRange builds the rule for an integer with minimum/maximum bounds
// (the exclusive forms are used only when the inclusive one is absent, as in
// llama.cpp).
func (c *converter) integerRange(schema *jsonValue, path *schemaPath) string {
	// Bounds must stay strictly inside int64, whose extremes mean "absent".
	const limit = math.MaxInt64 - 1
	bound := func(key string, adjust int64) (int64, bool) {
		v := schema.get(key)
		if v == nil {
			return 0, false
		}
		// nlohmann's get<int64_t> refuses booleans (get<int> takes them).
		n, ok := toInt64(v)
		if !ok || v.kind == jsonBool || n > limit || n < -limit || n+adjust > limit || n+adjust < -limit {
			c.fail(joinPath(path, key), "must be a number within ±%d", int64(limit))
		}
		return n + adjust, true
	}
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if n, ok := bound("minimum", 0); ok {
		lo = n
	} else if n, ok := bound("exclusiveMinimum", 1); ok {
		lo = n
	}
	if n, ok := bound("maximum", 0); ok {
		hi = n
	} else if n, ok := bound("exclusiveMaximum", -1); ok {
		hi = n
	}
	if lo != math.MinInt64 && hi != math.MaxInt64 && lo > hi {
		c.fail(path, "minimum %d is greater than maximum %d: no integer matches", lo, hi)
	}
	var b strings.Builder
	b.WriteByte('(')
	writeIntRange(&b, lo, hi, 16, true)
	b.WriteByte(')')
	return b.String()
}

// resolveRef returns the rule for the subschema a "$ref" points at, building
// it on first use. A reference met again while its own rule is being built
// (a recursive schema) becomes a reference to that rule by name, which is
// what lets recursive schemas terminate.
func (c *converter) resolveRef(ref string, path *schemaPath) string {
	fragment := ref
	if i := strings.IndexByte(ref, '#'); i >= 0 {
		fragment = ref[i+1:]
	}
	refName := "ref" + sanitizeRuleName(fragment)
	if _, built := c.rules[refName]; built || c.resolving[ref] {
		return refName
	}
	c.resolving[ref] = true
	target := c.lookupRef(ref, path)
	// Errors inside the target are reported at the target's own place.
	c.spend(1 + len(fragment)/64)
	var refPath *schemaPath
	for _, elem := range strings.Split(strings.TrimPrefix(fragment, "/"), "/") {
		refPath = joinPath(refPath, elem)
	}
	refName = c.visit(target, refName, refPath)
	delete(c.resolving, ref)
	return refName
}

type property struct {
	name   string
	schema *jsonValue
	path   *schemaPath
}

// objectRule builds an object with the given properties: required ones
// first, in schema order, then the optional ones in schema order (each may
// be skipped), then additional properties if allowed.
func (c *converter) objectRule(props []property, required map[string]bool, name string, additional *jsonValue, path *schemaPath) string {
	sep := "-"
	if name == "" {
		sep = ""
	}
	var requiredProps, optionalProps, propNames []string
	kvRule := map[string]string{}
	for _, p := range props {
		c.spend(1)
		valueRule := c.visit(p.schema, name+sep+p.name, p.path)
		kvRule[p.name] = c.addRule(name+sep+p.name+"-kv", grammar.Literal(quoteJSON(p.name))+` space ":" space `+valueRule)
		if required[p.name] {
			requiredProps = append(requiredProps, p.name)
		} else {
			optionalProps = append(optionalProps, p.name)
		}
		propNames = append(propNames, p.name)
	}
	if additional.isTrue() || additional.isObject() {
		subName := name + sep + "additional"
		var valueRule string
		if additional.isObject() {
			valueRule = c.visit(additional, subName+"-value", joinPath(path, "additionalProperties"))
		} else {
			valueRule = c.addPrimitive("value", primitiveRules["value"])
		}
		var keyRule string
		if len(propNames) == 0 {
			keyRule = c.addPrimitive("string", primitiveRules["string"])
		} else {
			keyRule = c.addRule(subName+"-k", c.notStrings(propNames))
		}
		// "*" cannot clash with a property: it is added after them all and
		// stands for any number of additional members.
		kvRule["*"] = c.addRule(subName+"-kv", keyRule+` ":" space `+valueRule)
		optionalProps = append(optionalProps, "*")
	}

	var b strings.Builder
	b.WriteString(`"{" space `)
	for i, p := range requiredProps {
		if i > 0 {
			b.WriteString(` "," space `)
		}
		b.WriteString(kvRule[p])
	}
	if len(optionalProps) > 0 {
		b.WriteString(" (")
		if len(requiredProps) > 0 {
			b.WriteString(` "," space ( `)
		}
		// Optional members keep schema order, each may be absent, and commas
		// must come out right: one alternative per first present member,
		// followed by a "rest" rule for the members after it. rest[j] is the
		// rule for members j.. when something already precedes them; it is
		// built from the end so rule names come out as in llama.cpp.
		n := len(optionalProps)
		piece := func(j int, afterOther bool) string {
			k := optionalProps[j]
			kv := kvRule[k]
			if afterOther {
				if k == "*" {
					return `( "," space ` + kv + ` )*`
				}
				return `( "," space ` + kv + ` )?`
			}
			if k == "*" {
				return kv + ` ( "," space ` + kv + ` )*`
			}
			return kv
		}
		rest := make([]string, n+1)
		for j := n - 1; j >= 1; j-- {
			c.spend(1)
			body := piece(j, true)
			if j+1 < n {
				body += " " + rest[j+1]
			}
			rest[j] = c.addRule(name+sep+optionalProps[j-1]+"-rest", body)
		}
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(piece(i, false))
			if i+1 < n {
				b.WriteString(" " + rest[i+1])
			}
		}
		if len(requiredProps) > 0 {
			b.WriteString(" )")
		}
		b.WriteString(" )?")
	}
	b.WriteString(` space "}"`)
	return b.String()
}

// notStrings builds a rule matching any JSON string except the given ones
// (the names of declared properties, so additional properties cannot reuse
// them): a trie of the names, where each node accepts either a child's
// character and continues, or any other character and then anything.
func (c *converter) notStrings(names []string) string {
	// Children are kept sorted by character in a slice: most nodes have one
	// child, and maps per node made a long name cost far more memory than
	// the grammar it turns into.
	type trieNode struct {
		chars    []rune
		children []*trieNode
		end      bool
	}
	// Each trie node becomes at least ~20 bytes of grammar, so a trie this
	// large could not fit in MaxGrammarBytes anyway.
	const maxNodes = MaxGrammarBytes / 16
	nodes := 0
	root := &trieNode{}
	for _, s := range names {
		node := root
		for _, r := range s {
			c.spend(1)
			i, found := slices.BinarySearch(node.chars, r)
			if !found {
				if nodes++; nodes > maxNodes {
					panic(abort{fmt.Errorf("jsonschema: property names too long to exclude from additional properties (grammar would exceed %d bytes)", MaxGrammarBytes)})
				}
				node.chars = slices.Insert(node.chars, i, r)
				node.children = slices.Insert(node.children, i, &trieNode{})
			}
			node = node.children[i]
		}
		node.end = true
	}
	charRule := c.addPrimitive("char", primitiveRules["char"])
	var b strings.Builder
	b.WriteString(`["] ( `)
	// Depth-first over the trie, with an explicit stack since a long name
	// makes the trie as deep as the name is long.
	type frame struct {
		node    *trieNode
		next    int             // index of the next child to write
		rejects strings.Builder // the children's characters so far
	}
	stack := []*frame{{node: root}}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if f.next < len(f.node.chars) {
			c.spend(1)
			r, child := f.node.chars[f.next], f.node.children[f.next]
			if f.next > 0 {
				b.WriteString(" | ")
			}
			f.next++
			f.rejects.WriteString(classChar(r))
			b.WriteString("[" + classChar(r) + "]")
			switch {
			case len(child.chars) > 0:
				b.WriteString(" (")
				stack = append(stack, &frame{node: child})
			case child.end:
				b.WriteString(" " + charRule + "+")
			}
			if b.Len() > MaxGrammarBytes {
				panic(abort{fmt.Errorf("jsonschema: grammar would exceed %d bytes; refusing the schema as too large", MaxGrammarBytes)})
			}
			continue
		}
		if len(f.node.chars) > 0 {
			b.WriteString(` | [^"` + f.rejects.String() + "] " + charRule + "*")
		}
		stack = stack[:len(stack)-1]
		if len(stack) > 0 {
			b.WriteString(")") // closes the " (" written before this node
		}
	}
	b.WriteString(" )")
	if !root.end {
		b.WriteString("?")
	}
	b.WriteString(` ["]`)
	return b.String()
}

// classChar writes r for use inside a GBNF character class. llama.cpp
// writes the raw byte, which breaks the class for '\\', ']', '-' and a
// leading '^'; those are escaped here (GBNF has no "\-" or "\^", hence hex).
func classChar(r rune) string {
	switch r {
	case '\\':
		return `\\`
	case ']':
		return `\]`
	case '-':
		return `\x2D`
	case '^':
		return `\x5E`
	}
	return string(r)
}

// allOf merges the components of an allOf: their properties (required when
// the component is a plain member of allOf, optional when it sits in an
// anyOf inside it) into one object, or, when the components are enums, the
// values common to all of them. Other kinds of components are ignored, as
// in llama.cpp.
func (c *converter) allOf(allOf *jsonValue, name string, path *schemaPath) string {
	required := map[string]bool{}
	var props []property
	enumCounts := map[string]int{}
	following := map[string]bool{} // refs being followed, against cycles
	var add func(comp *jsonValue, isRequired bool, compPath *schemaPath)
	add = func(comp *jsonValue, isRequired bool, compPath *schemaPath) {
		c.spend(1)
		switch {
		case comp.has("$ref"):
			ref := comp.get("$ref")
			if ref.kind != jsonString {
				c.fail(joinPath(compPath, "$ref"), "must be a string")
			}
			if following[ref.str] {
				c.fail(joinPath(compPath, "$ref"), "reference %q refers to itself through allOf", ref.str)
			}
			following[ref.str] = true
			add(c.lookupRef(ref.str, joinPath(compPath, "$ref")), isRequired, compPath)
			delete(following, ref.str)
		case comp.has("properties"):
			keys, vals := comp.get("properties").members()
			c.spend(4 * len(keys)) // a $ref'd component may be merged many times
			for i, k := range keys {
				props = append(props, property{k, vals[i], joinPath(joinPath(compPath, "properties"), k)})
				if isRequired {
					required[k] = true
				}
			}
		case comp.has("enum"):
			for _, v := range comp.get("enum").elements() {
				literal := grammar.Literal(v.dump())
				c.spend(1 + len(literal)/64)
				enumCounts[literal]++
			}
		}
	}
	components := allOf.elements()
	for i, t := range components {
		tPath := joinPath(path, strconv.Itoa(i))
		if t.has("anyOf") {
			for j, tt := range t.get("anyOf").elements() {
				add(tt, false, joinPath(joinPath(tPath, "anyOf"), strconv.Itoa(j)))
			}
		} else {
			add(t, true, tPath)
		}
	}
	if len(enumCounts) > 0 {
		var common []string
		for literal, n := range enumCounts {
			if n == len(components) {
				common = append(common, literal)
			}
		}
		if len(common) > 0 {
			sort.Strings(common)
			return "(" + strings.Join(common, " | ") + ")"
		}
	}
	return c.objectRule(props, required, name, nil, path)
}
