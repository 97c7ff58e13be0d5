package pressure

import (
	"encoding/json"
	"testing"
	"time"
)

func TestValueJSON(t *testing.T) {
	t.Parallel()
	v := Value{Value: 0.5, Source: "a/vllm", At: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Age: 1500 * time.Millisecond, Stale: false}
	got, err := json.Marshal(map[Signal]Value{KVCacheUsage: v})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kv_cache_usage":{"value":0.5,"source":"a/vllm","at":"2026-01-01T00:00:00Z","stale":false,"age_seconds":1.5}}`
	if string(got) != want {
		t.Errorf("json.Marshal() = %s, want %s", got, want)
	}
}
