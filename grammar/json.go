package grammar

// JSON is llama.cpp's general JSON grammar (grammars/json.gbnf there),
// written out here: one JSON object. It is narrower than JSON itself, on
// purpose, to keep a model's output tidy:
//
//   - the text must start with "{" (no leading whitespace) and is an object;
//   - whitespace is at most one space, or a newline and up to 20 blanks,
//     after each token;
//   - integers have at most 16 digits, and an exponent is one digit followed
//     by at most 15 digits 1-9;
//   - strings may not contain DEL (U+007F) unescaped, nor use the \/ escape.
//
// llama-server does not use this grammar for response_format json_object:
// it converts the (empty) JSON schema instead, which gives ServerJSONObject.
const JSON = `# One JSON object, as llama.cpp constrains response_format json_object.
root   ::= object

value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::= "{" ws ( member ("," ws member)* )? "}" ws
member ::= string ":" ws value

array  ::= "[" ws ( value ("," ws value)* )? "]" ws

string ::= "\"" ( plain | "\\" escape )* "\"" ws
plain  ::= [^"\\\x7F\x00-\x1F]
escape ::= ["\\bfnrt] | "u" [0-9a-fA-F]{4}

number ::= "-"? ([0-9] | [1-9] [0-9]{0,15}) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Whitespace: nothing, one space, or a newline and some indentation.
ws     ::= | " " | "\n" [ \t]{0,20}
`

// ServerJSONObject is the grammar llama-server applies for
// response_format {"type": "json_object"} without a schema: llama.cpp's
// json-schema-to-grammar output for the empty schema (its primitive rules in
// common/json-schema-to-grammar.cpp, written out here). It differs from JSON
// in where whitespace may go (after "{", "[", ":" and ",", and before "}" and
// "]", up to two newlines; never before ":" or after the closing "}"), and in
// numbers (fractions of at most 16 digits, exponents like integers).
const ServerJSONObject = `# One JSON object, as llama-server constrains response_format json_object.
root          ::= object

object        ::= "{" space ( string ":" space value ("," space string ":" space value)* )? space "}"
array         ::= "[" space ( value ("," space value)* )? space "]"
value         ::= object | array | string | number | boolean | null

string        ::= "\"" char* "\""
char          ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})

number        ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?
integral-part ::= [0] | [1-9] [0-9]{0,15}
decimal-part  ::= [0-9]{1,16}

boolean       ::= ("true" | "false")
null          ::= "null"

space         ::= | " " | "\n"{1,2} [ \t]{0,20}
`
