// Package backendtest is the conformance suite of backend.Backend, in the spirit of
// llama.cpp's test-backend-ops: every operation of backend.Ops is run on the backend under
// test and on a reference — a CPU backend (backend/cpu) on a pool of its own, a fresh one
// for each case so that its results do not depend on the calls before — with the same
// random inputs, and the results are compared.
//
// # What it checks
//
// For every operation of backend.AllOps and every type the backend Supports for it (the
// weight's type for get-rows, mul-mat, mul-mat-id and mul-mat-stack, which are tried with
// every type of the tensor package; the cache's for set-rows and attention; F32 for the
// others), Run builds cases of odd and regular shapes: 1, 3, 7, 32 and 65 tokens, rows of
// odd numbers of blocks, strided views where an operation takes them (RMSNorm, L2Norm,
// Copy), outputs that overwrite an input where the operation is element-wise. The inputs
// go in with Alloc and Set (weights with Load), the results come out with Get and
// Synchronize, and each output is compared with the reference's by normalised mean
// squared error, Σ(a−b)²/Σb² (b the reference), against a bound:
//
//   - MatMulErr (5e-4) for the products — mul-mat, mul-mat-id, mul-mat-stack and
//     attention — where a device may convert activations differently or sum in another
//     order;
//   - SoftmaxErr (1e-6) for the router's weights;
//   - ElementErr (1e-7) for everything else; a set-rows into a quantized cache allows
//     about one rounding step, as test-backend-ops does.
//
// A NaN, or an infinity where the reference has none, fails whatever the bound; expert ids
// (route) and copies must be identical. With Options.Exact every result must have the
// reference's bits: what a backend that runs the CPU's kernels (backend/sim) must give.
//
// Each tensor lies in a buffer of its own between guard bytes. Inputs are random, outputs
// start as NaNs (or invalid ids), and after the operation the whole buffer is read back:
// a byte outside an output's view (in the guards, between the rows of a strided view, in
// an input) that changed is a failure, and so is an output element left unwritten.
//
// Beyond the operations' values Run checks the contract around them: an operand (tensor
// or weight) held by another backend — a second instance of the backend under test, or
// the reference — is refused with an error, never a panic or a silent copy; Set and Get
// with a host slice of the wrong size, and views past the end of their buffer, are errors;
// Load with the wrong number of bytes is an error naming the tensor; Alloc returns zeroed
// memory; backend.Copy moves tensors between the backend, the host and a second instance.
// The router is checked with group-limited selection and smart expert reduction, its
// inputs drawn away from ties so that the expert ids must be identical; attention with
// grouped queries, sinks, a sliding window over a whole cache and over a ring of fewer
// rows than positions (a sliding-window layer's cache), F16 and Q8_0 caches, both
// numerics, a decode
// step over 600 positions (which a CPU on several workers splits between them), a batch
// of 65 tokens (ggml's tiled kernel), and a V cache that is a view of the K cache (MLA:
// v = k.Columns(0, vDim)); RoPE in normal and NeoX modes, partial (Dims and Offset), with
// YaRN and with frequency factors.
//
// An operation whose Supports answers false for a type is skipped, and the skipped types
// are listed with t.Log; a backend that supports no case at all fails, so the suite cannot
// pass by checking nothing.
//
// # Plugging in a backend
//
// A backend's test calls Run with a function that makes a fresh backend:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) backend.Backend {
//			b, err := cuda.New(0, cuda.Options{})
//			if err != nil {
//				t.Skip(err)
//			}
//			return b
//		}, backendtest.Options{})
//	}
//
// Run calls it once per operation (and a few more times for the checks that need two
// instances) and closes what it returns; state shared between the instances, such as a
// worker pool, is the caller's to release (t.Cleanup). A GPU backend's CPU emulator — the
// same kernels compiled for the host — plugs in the same way and should pass with the same
// bounds; a backend that runs the CPU's own kernels should pass with Options.Exact. Run
// needs nothing from the backend but the backend.Backend interface; subtests are named
// op/type/shape, so `go test -run 'Conformance/mul-mat/q4_K'` runs one slice of it.
package backendtest
