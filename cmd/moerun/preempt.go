package main

import "strings"

// asyncPreemptOffEnv returns environ with asyncpreemptoff=1 added to its GODEBUG settings,
// and whether environ lacked it. The Go runtime and os.Getenv read the first GODEBUG entry
// of the environment, so every GODEBUG entry is replaced by one that keeps the first's
// settings: appending a second entry would leave the first in force, and a re-executed
// moerun would find the setting still missing and execute itself again, forever (as it did
// when GODEBUG was set but empty). Applied to its own result it reports no change.
func asyncPreemptOffEnv(environ []string) ([]string, bool) {
	const key, setting = "GODEBUG=", "asyncpreemptoff=1"
	var settings string
	found := false
	env := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		value, ok := strings.CutPrefix(kv, key)
		if !ok {
			env = append(env, kv)
			continue
		}
		if !found {
			settings, found = value, true
		}
	}
	if preemptOff(settings) {
		return environ, false
	}
	if settings != "" {
		settings += ","
	}
	return append(env, key+settings+setting), true
}

// preemptOff says whether GODEBUG settings turn async preemption off. As in the runtime's
// parsing, the last asyncpreemptoff in the list decides and nothing is trimmed.
func preemptOff(settings string) bool {
	off := false
	for _, s := range strings.Split(settings, ",") {
		if value, ok := strings.CutPrefix(s, "asyncpreemptoff="); ok {
			off = value == "1"
		}
	}
	return off
}
