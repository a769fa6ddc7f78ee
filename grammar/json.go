package grammar

// JSON is the grammar llama.cpp applies for response_format
// {"type": "json_object"}: one JSON object, with the same language as
// llama.cpp's grammars/json.gbnf. It is narrower than JSON itself, on
// purpose, to keep a model's output tidy:
//
//   - the text must start with "{" (no leading whitespace) and is an object;
//   - whitespace is at most one space, or a newline and up to 20 blanks,
//     after each token;
//   - integers have at most 16 digits, and an exponent is one digit followed
//     by at most 15 digits 1-9;
//   - strings may not contain DEL (U+007F) unescaped.
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
