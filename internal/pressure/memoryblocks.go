package pressure

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"strconv"
)

// memoryBlock is one GPU of the allocator endpoint's answer (DESIGN §3).
// Pointers tell a missing field from a zero one; unknown fields are ignored.
type memoryBlock struct {
	GPUID              json.RawMessage `json:"gpu_id"`
	TotalBytes         *float64        `json:"total_bytes"`
	UsedBytes          *float64        `json:"used_bytes"`
	FreeBytes          *float64        `json:"free_bytes"`
	LargestFreeBlock   *float64        `json:"largest_free_block_bytes"`
	ReservedBytes      *float64        `json:"reserved_bytes"`
	AllocatedBytes     *float64        `json:"allocated_bytes"`
	FragmentationRatio *float64        `json:"fragmentation_ratio"`
	AllocRetryCount    *float64        `json:"alloc_retry_count"`
}

// MemoryBlock is one GPU's allocator figures with every field present, for
// a caller that has them in hand rather than as JSON (the replay reads its
// simulated pod this way): MemoryBlockReading turns it into exactly the
// GPUReading ParseMemoryBlocks yields for the same figures.
type MemoryBlock struct {
	ID                                                      string
	TotalBytes, UsedBytes, FreeBytes, LargestFreeBlockBytes float64
	ReservedBytes, AllocatedBytes                           float64
	FragmentationRatio, AllocRetryCount                     float64
}

// MemoryBlockReading is ParseMemoryBlocks' reading of one block, without
// the JSON.
func MemoryBlockReading(b MemoryBlock) GPUReading {
	v := [8]float64{b.TotalBytes, b.UsedBytes, b.FreeBytes, b.LargestFreeBlockBytes,
		b.ReservedBytes, b.AllocatedBytes, b.FragmentationRatio, b.AllocRetryCount}
	mb := memoryBlock{TotalBytes: &v[0], UsedBytes: &v[1], FreeBytes: &v[2], LargestFreeBlock: &v[3],
		ReservedBytes: &v[4], AllocatedBytes: &v[5], FragmentationRatio: &v[6], AllocRetryCount: &v[7]}
	return mb.reading(b.ID)
}

// errNoMemoryBlocks reports an allocator answer without any GPU.
var errNoMemoryBlocks = errors.New("pressure: memory_blocks: no gpu in answer")

// ParseMemoryBlocks reads the allocator endpoint's JSON: an object
// {"memory_blocks": [...]} (or {"memory_blocks": {...}}), an array of
// blocks, or a single block object. Per GPU it yields:
//   - Fragmentation = free_bytes ÷ largest_free_block_bytes when both are
//     present (1 when nothing is free; at least 1), else 1 ÷
//     fragmentation_ratio (the classic largest ÷ free ratio, taken as 1 when
//     above 1; ignored when not positive);
//   - MemoryUsed = used_bytes ÷ total_bytes;
//   - EffectiveUtilization = allocated_bytes ÷ reserved_bytes (reserved > 0);
//   - FreeMemory = free_bytes;
//   - Counters[AllocRetryRate] = alloc_retry_count.
//
// A missing, negative or inconsistent field leaves its signal absent. A block
// without gpu_id takes its position ("0", "1", …) as ID.
func ParseMemoryBlocks(data []byte) (Reading, error) {
	blocks, err := decodeBlocks(data)
	if err != nil {
		return Reading{}, err
	}
	if len(blocks) == 0 {
		return Reading{}, errNoMemoryBlocks
	}
	rd := Reading{GPUs: make([]GPUReading, 0, len(blocks))}
	for i, b := range blocks {
		id, err := gpuID(b.GPUID, i)
		if err != nil {
			return Reading{}, fmt.Errorf("pressure: memory_blocks[%d].gpu_id: %w", i, err)
		}
		rd.GPUs = append(rd.GPUs, b.reading(id))
	}
	sortGPUs(rd.GPUs)
	return rd, nil
}

// decodeBlocks accepts the three shapes ParseMemoryBlocks documents.
func decodeBlocks(data []byte) ([]memoryBlock, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '[' {
		var bs []memoryBlock
		if err := json.Unmarshal(data, &bs); err != nil {
			return nil, fmt.Errorf("pressure: memory_blocks: %w", err)
		}
		return bs, nil
	}
	var top struct {
		MemoryBlocks json.RawMessage `json:"memory_blocks"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("pressure: memory_blocks: %w", err)
	}
	inner := bytes.TrimSpace(top.MemoryBlocks)
	switch {
	case len(inner) == 0 || bytes.Equal(inner, []byte("null")):
		var b memoryBlock // a single block at top level
		if err := json.Unmarshal(data, &b); err != nil {
			return nil, fmt.Errorf("pressure: memory_blocks: %w", err)
		}
		if b.empty() {
			return nil, nil // not an allocator answer ({}, null, another document)
		}
		return []memoryBlock{b}, nil
	case inner[0] == '[':
		var bs []memoryBlock
		if err := json.Unmarshal(inner, &bs); err != nil {
			return nil, fmt.Errorf("pressure: memory_blocks: %w", err)
		}
		return bs, nil
	default:
		var b memoryBlock
		if err := json.Unmarshal(inner, &b); err != nil {
			return nil, fmt.Errorf("pressure: memory_blocks: %w", err)
		}
		return []memoryBlock{b}, nil
	}
}

// gpuID reads gpu_id as a string or a whole number; absent means position i.
func gpuID(raw json.RawMessage, i int) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return strconv.Itoa(i), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if s == "" {
			return strconv.Itoa(i), nil
		}
		return s, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil {
		return "", errors.New("not a string or whole number")
	}
	return strconv.FormatInt(n, 10), nil
}

// empty reports whether b has none of the fields we know.
func (b memoryBlock) empty() bool {
	return len(b.GPUID) == 0 && b.TotalBytes == nil && b.UsedBytes == nil &&
		b.FreeBytes == nil && b.LargestFreeBlock == nil && b.ReservedBytes == nil &&
		b.AllocatedBytes == nil && b.FragmentationRatio == nil && b.AllocRetryCount == nil
}

// reading turns one block into a GPUReading.
func (b memoryBlock) reading(id string) GPUReading {
	g := GPUReading{ID: id, Values: map[Signal]float64{}}
	free, hasFree := nonNegative(b.FreeBytes)
	largest, hasLargest := nonNegative(b.LargestFreeBlock)
	ratio, hasRatio := nonNegative(b.FragmentationRatio)
	switch {
	case hasFree && hasLargest && free == 0:
		g.Values[Fragmentation] = 1 // nothing free: nothing to fragment
	case hasFree && hasLargest && largest > 0:
		g.Values[Fragmentation] = math.Max(1, free/largest)
	case hasRatio && ratio > 0:
		g.Values[Fragmentation] = 1 / math.Min(1, ratio)
	}
	if hasFree {
		g.Values[FreeMemory] = free
	}
	if used, ok := nonNegative(b.UsedBytes); ok {
		if total, ok := nonNegative(b.TotalBytes); ok && total > 0 {
			g.Values[MemoryUsed] = used / total
		}
	}
	if alloc, ok := nonNegative(b.AllocatedBytes); ok {
		if res, ok := nonNegative(b.ReservedBytes); ok && res > 0 {
			g.Values[EffectiveUtilization] = alloc / res
		}
	}
	maps.DeleteFunc(g.Values, func(_ Signal, v float64) bool { return math.IsInf(v, 0) || math.IsNaN(v) })
	if n, ok := nonNegative(b.AllocRetryCount); ok {
		g.Counters = map[Signal]float64{AllocRetryRate: n}
	}
	return g
}

// nonNegative dereferences p, rejecting absent, negative and non-finite values.
func nonNegative(p *float64) (float64, bool) {
	if p == nil || *p < 0 || math.IsNaN(*p) || math.IsInf(*p, 0) {
		return 0, false
	}
	return *p, true
}

// newMemoryBlocksSource reads an allocator endpoint.
func newMemoryBlocksSource(name, url string, c *http.Client) *httpSource {
	return &httpSource{name: name, parse: ParseMemoryBlocks, get: getter(c, url, KindMemoryBlocks)}
}
