// Package docs holds moerun's documentation (the Markdown files beside this one). It has no
// code; its tests (docs_test.go) run every documented console session, and check the flag
// reference, the help examples and the JSON schemas against the moerun binary.
package docs
