// Package jsonschema turns a JSON Schema into GBNF grammar text, the way
// llama.cpp's json-schema-to-grammar does, for OpenAI's response_format
// {"type": "json_schema"} and llama-server's "json_schema" field. The text
// is meant for a GBNF parser that then constrains sampling.
//
// The output is llama.cpp's, byte for byte: the same rules, rule names and
// rule order (rules sorted by name, "root" the start rule, "space" the
// whitespace allowed between tokens), checked against every case of
// llama.cpp's own test (testdata/llama_cases.json).
//
// Supported, as in llama.cpp:
//
//   - "type": object, array, string, number, integer, boolean, null, and a
//     list of types (a union).
//   - "properties", "required" and "additionalProperties" (false, true or a
//     schema). Members come out required first, then optional ones, each in
//     schema order; an object with no keywords is any object.
//   - "enum" and "const", of any JSON values.
//   - "items" (a schema, or a list for tuples), "prefixItems", "minItems",
//     "maxItems".
//   - "minLength" and "maxLength" for strings.
//   - "format": date, time, date-time, uuid (and uuid1..uuid5).
//   - "pattern": a regex subset anchored with ^ and $: literals, ".",
//     [classes], groups (plain or "(?:"), "|", * + ? {n} {n,} {,m} {n,m},
//     and the escapes GBNF shares with regexes (\t \r \n \xHH \uHHHH ...).
//     Another pattern (unanchored, \d, \w, lookarounds, ...) leaves the
//     string unconstrained and is reported in Result.Warnings; a pattern
//     that is not a regex at all (unbalanced parentheses, ...) is an error.
//   - "anyOf", "oneOf" (both as a plain union), and "allOf" of object
//     schemas (properties merged) or of enums (their common values).
//   - "$ref" to local JSON pointers ("#/$defs/x", "#/definitions/x", any
//     "#/..." path); recursive references become recursive rules.
//   - "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum" for
//     integers, as exact digit-by-digit ranges.
//   - The empty schema {} is any object, as in llama.cpp; a schema with only
//     annotations (e.g. just "description") is any JSON value.
//
// Other keywords are ignored, as in llama.cpp. Where llama.cpp would build a
// grammar that cannot be right, this package returns an error instead:
// remote $refs (llama.cpp cannot fetch them either), a minimum above the
// maximum (also for minItems/maxItems and minLength/maxLength), negative or
// out-of-int-range counts, pattern repeats {n,m} with n > m, and an allOf
// whose $refs loop back on themselves. References that llama.cpp leaves
// unresolved (those inside an object that itself has a "$ref", such as
// "$defs" next to a top-level "$ref") and so treats as any object are
// resolved here on first use. Property names
// excluded from additional properties are matched per character rather
// than per byte, and '\', ']', '-', '^' in them are escaped, so such names
// give a valid rule where llama.cpp's would be malformed.
//
// As in llama.cpp, a $ref met again while its own rule is being built
// becomes a reference to that rule, so recursive schemas terminate; an allOf
// looping through $refs, which overflows llama.cpp's stack, is an error
// here. The schema is read as nlohmann reads it: member order kept,
// integers distinct from floats (42 vs 42.0 in enum literals), a repeated
// key keeping its first place and last value, invalid UTF-8 and numbers
// overflowing a double refused.
//
// Errors name the schema path at fault (see SchemaError). Input is bounded:
// at most MaxSchemaBytes of schema, MaxNestingDepth levels of nesting
// (counting $ref chains), MaxGrammarBytes of output and a fixed number of
// conversion steps charged by the text handled, so hostile schemas fail
// fast (well under a second, a few hundred MB at most for the largest
// accepted schema) instead of exhausting memory, time or the stack.
// Repetition counts (minItems, maxLength, {n,m}) pass through as in
// llama.cpp; bounding their expansion is the GBNF parser's job (llama.cpp's
// refuses counts above 2000).
package jsonschema
