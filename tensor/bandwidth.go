package tensor

// StreamRead reads every byte of buf once, split across the pool's workers. It is the probe
// of the memory-bandwidth ceiling: a mat-vec streams its weights the same way, so
// len(buf)/time of a StreamRead over a buffer far larger than the last-level cache is the
// speed no memory-bound kernel can beat. buf may be mapped memory; a fault reading it is
// returned as an error.
//
// The SIMD build reads with the widest vector loads the CPU has and nothing else, asking
// for the lines 4 KiB ahead as the decode kernels do (readStream); elsewhere the bytes are
// copied, piece by piece, into a small per-worker buffer that stays in the L1 cache (the
// runtime's copy uses wide loads, while a loop of 8-byte loads in Go reaches about half the
// bandwidth on one core). The copy is not the ceiling: on the build machine, 1 GiB in huge
// pages, it read 25.7-27.5 GB/s on 2 threads and 13.6-13.7 on 1 where AVX-512 loads alone
// read 31.0-33.1 and 15.2-16.5 (with or without the prefetch, within noise), and the decode
// kernels reached 101-105% of a roofline taken with the copy.
func (p *Pool) StreamRead(buf []byte) error {
	if err := p.lock(); err != nil {
		return err
	}
	defer p.mu.Unlock()
	p.scratch.stream = grow(p.scratch.stream, p.threads*streamPiece)
	j := &p.jobs.stream
	*j = streamJob{buf: buf, scratch: p.scratch.stream}
	return p.run(j, ceilDiv(len(buf), streamChunk))
}

const (
	// streamChunk is the unit of work: large enough that handing out units costs nothing,
	// small enough that the workers finish together.
	streamChunk = 1 << 20
	// streamPiece is the size of each copy: it and the worker's buffer fit in L1.
	streamPiece = 16 << 10
)

type streamJob struct {
	buf     []byte
	scratch []byte // streamPiece bytes per worker
}

func (j *streamJob) unit(w, u int) {
	b := j.buf[u*streamChunk : min((u+1)*streamChunk, len(j.buf))]
	if active.readStream != nil {
		b = b[active.readStream(b):]
	}
	dst := j.scratch[w*streamPiece : (w+1)*streamPiece]
	for len(b) > 0 {
		b = b[copy(dst, b):]
	}
}
