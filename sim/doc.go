// Package sim simulates a vLLM server's GPU memory and engine in virtual time,
// so gatekeeper's admission code can be proved without a GPU (DESIGN §8).
//
// Allocator reproduces PyTorch's CUDA caching allocator (the source of the
// fragmentation gatekeeper guards against); Engine runs vLLM's memory plan,
// continuous batching and a roofline step time on top of it. Everything is
// deterministic for a seed and nothing here starts a goroutine: callers drive
// time with Engine.Advance. README.md in this folder documents every parameter
// and the facts it rests on. Nothing imports sim but the commands.
package sim
