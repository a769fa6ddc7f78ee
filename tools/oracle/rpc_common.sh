# Sourced by rpc_placement.sh and rpc_compute.sh (set bin and root first).
# rpc_start PORT builds moerun into a temporary $work and starts llama.cpp's ggml-rpc-server
# from $bin on PORT, the GPU stand-in llama-fit-params places beside; both go at exit.
rpc_start() {
	work=$(mktemp -d)
	trap 'kill $rpc 2>/dev/null; rm -rf "$work"' EXIT
	(cd "$root" && go build -o "$work/moerun" ./cmd/moerun)
	LD_LIBRARY_PATH=$bin "$bin/ggml-rpc-server" -p "$1" >"$work/rpc.log" 2>&1 &
	rpc=$!
	sleep 2
}
