package jsonschema_test

import (
	"fmt"

	"github.com/moerun/moerun/grammar/jsonschema"
)

func ExampleConvert() {
	grammar, err := jsonschema.Convert([]byte(`{
		"type": "object",
		"properties": {
			"name": {"type": "string", "maxLength": 8},
			"age": {"type": "integer", "minimum": 0, "maximum": 130}
		},
		"required": ["name"],
		"additionalProperties": false
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(grammar)
	// Output:
	// age ::= ([0-9] | ([1-8] [0-9] | [9] [0-9]) | "1" ([0-2] [0-9] | [3] "0"))
	// age-kv ::= "\"age\"" space ":" space age
	// char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})
	// name ::= "\"" char{0,8} "\""
	// name-kv ::= "\"name\"" space ":" space name
	// root ::= "{" space name-kv ( "," space ( age-kv ) )? space "}"
	// space ::= | " " | "\n"{1,2} [ \t]{0,20}
}

func ExampleConvert_error() {
	_, err := jsonschema.Convert([]byte(`{"properties": {"id": {"type": "string", "pattern": "^(a$"}}}`))
	fmt.Println(err)
	// Output:
	// jsonschema: properties.id.pattern: invalid pattern "^(a$": unbalanced parentheses
}
