module github.com/moerun/moerun

go 1.26.0

require (
	github.com/alecthomas/kong v1.17.0
	github.com/dlclark/regexp2 v1.12.0
	github.com/google/go-cmp v0.7.0
	golang.org/x/sys v0.49.0
)
