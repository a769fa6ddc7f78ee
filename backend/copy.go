package backend

import "fmt"

// Copy copies src, a contiguous tensor of backend from, into dst, a tensor of the same
// shape and type on backend to: a crossing between devices. Where one side is host memory
// the bytes go straight there: to's Set, ordered with to's operations, or from's Get,
// which has arrived after from.Synchronize (the caller's: several copies out of a device
// need one wait). Between two devices of their own they go through staging, which Copy
// grows as needed and the caller keeps for the next crossing.
func Copy(to Backend, dst Tensor, from Backend, src Tensor, staging *[]byte) error {
	if dst.Type != src.Type || dst.Rows != src.Rows || dst.Cols != src.Cols || !dst.Contiguous() || !src.Contiguous() {
		return fmt.Errorf("copy of %s into %s: want contiguous tensors of one shape", src, dst)
	}
	n := src.Bytes()
	if h := src.Buf.Host(); h != nil {
		return to.Set(dst, h[src.Off:src.Off+n])
	}
	if h := dst.Buf.Host(); h != nil {
		return from.Get(h[dst.Off:dst.Off+n], src)
	}
	if int64(cap(*staging)) < n {
		*staging = make([]byte, n)
	}
	buf := (*staging)[:n]
	if err := from.Get(buf, src); err != nil {
		return err
	}
	if err := from.Synchronize(); err != nil {
		return err
	}
	return to.Set(dst, buf)
}
