package main

import (
	"fmt"
	"io"
	"slices"

	"github.com/moerun/moerun/backend"
	"github.com/moerun/moerun/internal/mmap"
	"github.com/moerun/moerun/placement"
	"github.com/moerun/moerun/tensor"
)

// roofline is bench --roofline's account of a CPU decode test: the memory-bandwidth
// roofline of the test (this machine's stream-read bandwidth over the bytes a token reads)
// and the share of it each repetition reached. Decoding on the CPU streams every weight it
// uses once per token, so no decode is faster than the roofline; the share says how close
// to the hardware a build comes. On a machine shared with others (a cloud VM) the
// bandwidth moves from minute to minute, so it is measured right before and right after
// each repetition, with the test's threads, and each repetition is held to the best of
// those reads: the ceiling, so a read slowed by a neighbour's burst does not flatter the
// share.
type roofline struct {
	tokenBytes int64     // read per token: weights, and the KV cache at the test's mean depth
	kvBytes    int64     // of which the KV cache
	depth      int       // that mean depth
	stream     []float64 // GB/s around each repetition (the best of the reads before and after)
	shares     []float64 // each repetition's tokens/s over its roofline
}

// probeReads is how many reads of the probe's buffer go before and after each repetition.
const probeReads = 2

// streamProbe reads a buffer far larger than the last-level cache (as calibrate's stream
// read) to measure the bandwidth of the moment.
type streamProbe struct {
	pool *tensor.Pool
	buf  []byte
	free func() error
}

// newStreamProbe maps the probe's buffer (huge pages where the system gives them, as the
// weights) and writes every page of it: pages never written all map the kernel's one zero
// page, which a read finds in the cache (125 GB/s "from RAM" on the build machine).
func newStreamProbe(pool *tensor.Pool) (*streamProbe, error) {
	size := max(int64(minSetBytes), llcMultiple*llcBytes())
	buf, free, err := mmap.Anonymous(int(size))
	if err != nil {
		return nil, fmt.Errorf("--roofline: the stream-read buffer: %w", err)
	}
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = byte(i >> 12)
	}
	return &streamProbe{pool: pool, buf: buf, free: free}, nil
}

// measure is the bandwidth of the best of probeReads reads of the buffer, GB/s.
func (p *streamProbe) measure() (float64, error) {
	best, _, err := streamBandwidth(p.pool, p.buf, probeReads)
	return best, err
}

// newRoofline sizes a decode test's roofline: the bytes the CPU reads per token under plan
// (the predictor's count: every weight the CPU holds but the embedding, of which one row,
// k/E of the routed experts, and the KV cache) at the test's mean depth. It refuses plans
// that put anything on a GPU: their decode is not one device's stream.
func newRoofline(plan *placement.Plan, t benchTest) (*roofline, error) {
	depth := t.nDepth + t.nGen/2
	hw := placement.Hardware{CPU: placement.CPUSpec{DecodeBandwidth: 1}} // bytes only: the rate does not matter
	pred, err := placement.Predict(plan, hw, placement.PredictOptions{Depth: depth})
	if err != nil {
		return nil, err
	}
	if pred.Decode == nil {
		return nil, fmt.Errorf("--roofline: the plan does not fit: %v", pred.Problems)
	}
	r := &roofline{depth: depth}
	for _, d := range pred.Decode.Devices {
		if d.Kind != backend.KindCPU && d.Bytes() > 0 {
			return nil, badInput("--roofline measures CPU decoding; the plan puts weights on %s (give -ngl 0)", d.Device)
		}
		r.tokenBytes += d.Bytes()
		r.kvBytes += d.KVBytes
	}
	return r, nil
}

// add records a repetition of tps tokens/s between probes of before and after GB/s.
func (r *roofline) add(tps, before, after float64) {
	stream := max(before, after)
	r.stream = append(r.stream, stream)
	r.shares = append(r.shares, tps/(stream*1e9/float64(r.tokenBytes)))
}

// report writes the account: the bytes per token, the bandwidth and the roofline (their
// means over the repetitions), and the share of it the mean tokens/s reached, with the
// range of the repetitions' own shares.
func (r *roofline) report(w io.Writer, test string, threads int, tps float64) {
	stream, _ := meanStddev(r.stream)
	limit := stream * 1e9 / float64(r.tokenBytes)
	fmt.Fprintf(w, "moerun: %s roofline: %.2f MB read per token (KV cache %.2f MB at depth %d); stream read %.1f GB/s with %d threads (the best read around each repetition, averaged): %.1f t/s; %.2f t/s is %.1f%% of it (repetitions %.1f-%.1f%%)\n",
		test, float64(r.tokenBytes)/1e6, float64(r.kvBytes)/1e6, r.depth, stream, threads, limit, tps, 100*tps/limit,
		100*slices.Min(r.shares), 100*slices.Max(r.shares))
}
