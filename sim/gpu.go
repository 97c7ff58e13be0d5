package sim

import (
	"fmt"
	"strings"
)

// GPU describes one accelerator by the figures the roofline needs.
// Sources: NVIDIA data sheets, as collected in SIM-FACTS.md.
type GPU struct {
	// Name is a label, e.g. "A100-80G".
	Name string
	// MemoryBytes is the device memory.
	MemoryBytes int64
	// BandwidthBytesPerSec is the memory bandwidth.
	BandwidthBytesPerSec float64
	// PeakFLOPS is the dense bf16 peak.
	PeakFLOPS float64
	// SMs is the number of streaming multiprocessors (for the rule of thumb
	// max_num_seqs ≤ 4 × SMs).
	SMs int
	// LinkBytesPerSec is the bandwidth to the other GPUs, per direction,
	// that tensor parallelism's all-reduces run over: NVLink on the SXM
	// parts (A100 600 GB/s and H100 900 GB/s in both directions together,
	// NVIDIA's data sheets), PCIe 4.0 x16 on the A10G (about 32 GB/s).
	LinkBytesPerSec float64
}

// GPUByName returns a preset: "A10G", "A100-40G", "A100-80G" (the default),
// "H100-80G" or "H200". Memory is counted in GiB as the sim counts the
// 80 GB parts (sim/README.md's departures table); the H200 is what
// nvidia-smi reports for it, 143 771 MiB.
func GPUByName(name string) (GPU, error) {
	switch name {
	case "A10G": // NVIDIA A10 data sheet (the A10G is AWS's variant): 24 GB GDDR6, 600 GB/s, 125 TFLOP/s bf16 dense
		return GPU{Name: name, MemoryBytes: 24 * gib, BandwidthBytesPerSec: 600e9, PeakFLOPS: 125e12, SMs: 80, LinkBytesPerSec: 32e9}, nil
	case "A100-40G": // NVIDIA A100 data sheet, SXM 40 GB: HBM2 1 555 GB/s, 312 TFLOP/s bf16 dense, NVLink 600 GB/s
		return GPU{Name: name, MemoryBytes: 40 * gib, BandwidthBytesPerSec: 1.555e12, PeakFLOPS: 312e12, SMs: 108, LinkBytesPerSec: 300e9}, nil
	case "A100-80G", "": // NVIDIA A100 data sheet, SXM 80 GB: HBM2e 2 039 GB/s
		return GPU{Name: "A100-80G", MemoryBytes: 80 * gib, BandwidthBytesPerSec: 2.04e12, PeakFLOPS: 312e12, SMs: 108, LinkBytesPerSec: 300e9}, nil
	case "H100-80G": // NVIDIA H100 data sheet, SXM: HBM3 3.35 TB/s, 989 TFLOP/s bf16 dense, NVLink 900 GB/s
		return GPU{Name: name, MemoryBytes: 80 * gib, BandwidthBytesPerSec: 3.35e12, PeakFLOPS: 989e12, SMs: 132, LinkBytesPerSec: 450e9}, nil
	case "H200": // NVIDIA H200 data sheet, SXM: 141 GB HBM3e, 4.8 TB/s, 989 TFLOP/s bf16 dense (the H100's GH100), NVLink 900 GB/s
		return GPU{Name: name, MemoryBytes: 143771 * mib, BandwidthBytesPerSec: 4.8e12, PeakFLOPS: 989e12, SMs: 132, LinkBytesPerSec: 450e9}, nil
	}
	return GPU{}, fmt.Errorf("sim: unknown GPU %q (want %s)", name, strings.Join(GPUNames(), ", "))
}

// GPUNames lists the GPU presets, smallest memory first.
func GPUNames() []string { return []string{"A10G", "A100-40G", "A100-80G", "H100-80G", "H200"} }

// Model describes a decoder-only transformer by the figures the memory plan
// and the roofline need. Sources: the models' Hugging Face config.json.
type Model struct {
	// Name is what /v1/models reports.
	Name string
	// Params is the parameter count.
	Params int64
	// Layers, Hidden, Intermediate, KVHeads, HeadDim, Vocab are config.json's
	// num_hidden_layers, hidden_size, intermediate_size, num_key_value_heads,
	// head_dim and vocab_size.
	Layers, Hidden, Intermediate, KVHeads, HeadDim, Vocab int
	// DtypeBytes is the bytes per weight and KV element (2 for bf16).
	DtypeBytes int
	// MaxModelLen is the context length (max_position_embeddings).
	MaxModelLen int
}

// ModelByName returns a preset: "meta-llama/Meta-Llama-3-8B" (the default),
// "meta-llama/Llama-3.1-8B" (the same with a 128k context),
// "meta-llama/Meta-Llama-3-70B" (for tensor parallelism) or
// "meta-llama/Llama-2-13b-hf", all bf16.
func ModelByName(name string) (Model, error) {
	switch name {
	case "meta-llama/Meta-Llama-3-8B", "llama-3-8b", "":
		return Model{Name: "meta-llama/Meta-Llama-3-8B", Params: 8_030_261_248, Layers: 32, Hidden: 4096,
			Intermediate: 14336, KVHeads: 8, HeadDim: 128, Vocab: 128256, DtypeBytes: 2, MaxModelLen: 8192}, nil
	case "meta-llama/Llama-3.1-8B", "llama-3.1-8b": // Llama-3-8B with RoPE scaling to 128k tokens
		return Model{Name: "meta-llama/Llama-3.1-8B", Params: 8_030_261_248, Layers: 32, Hidden: 4096,
			Intermediate: 14336, KVHeads: 8, HeadDim: 128, Vocab: 128256, DtypeBytes: 2, MaxModelLen: 131072}, nil
	case "meta-llama/Meta-Llama-3-70B", "llama-3-70b":
		return Model{Name: "meta-llama/Meta-Llama-3-70B", Params: 70_553_706_496, Layers: 80, Hidden: 8192,
			Intermediate: 28672, KVHeads: 8, HeadDim: 128, Vocab: 128256, DtypeBytes: 2, MaxModelLen: 8192}, nil
	case "meta-llama/Llama-2-13b-hf", "llama-2-13b":
		return Model{Name: "meta-llama/Llama-2-13b-hf", Params: 13_015_864_320, Layers: 40, Hidden: 5120,
			Intermediate: 13824, KVHeads: 40, HeadDim: 128, Vocab: 32000, DtypeBytes: 2, MaxModelLen: 4096}, nil
	}
	return Model{}, fmt.Errorf("sim: unknown model %q (want meta-llama/Meta-Llama-3-8B, meta-llama/Llama-3.1-8B, meta-llama/Meta-Llama-3-70B or meta-llama/Llama-2-13b-hf)", name)
}

// WeightBytes is the weight footprint: parameters × bytes per element.
func (m Model) WeightBytes() int64 { return m.Params * int64(m.DtypeBytes) }

// KVBytesPerToken is 2 (K and V) × layers × KV heads × head dim × bytes per
// element: 131 072 for Llama-3-8B, 819 200 for Llama-2-13B in bf16.
func (m Model) KVBytesPerToken() int64 {
	return 2 * int64(m.Layers) * int64(m.KVHeads) * int64(m.HeadDim) * int64(m.DtypeBytes)
}

func (m Model) validate() error {
	if m.Params <= 0 || m.Layers <= 0 || m.Hidden <= 0 || m.Intermediate <= 0 || m.KVHeads <= 0 ||
		m.HeadDim <= 0 || m.Vocab <= 0 || m.DtypeBytes <= 0 || m.MaxModelLen <= 0 {
		return fmt.Errorf("sim: Settings.Model %q: every size must be > 0", m.Name)
	}
	return nil
}

func (g GPU) validate() error {
	if g.MemoryBytes <= 0 || g.BandwidthBytesPerSec <= 0 || g.PeakFLOPS <= 0 {
		return fmt.Errorf("sim: Settings.GPU %q: memory, bandwidth and FLOPS must be > 0", g.Name)
	}
	return nil
}
