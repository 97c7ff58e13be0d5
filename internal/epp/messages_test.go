package epp

import (
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// TestSendBody: the chunks a body is streamed back in, for each side.
func TestSendBody(t *testing.T) {
	tests := []struct {
		n    int
		eos  bool
		want []int // chunk sizes; the last carries eos
	}{
		{n: 0, eos: true, want: []int{0}},
		{n: 0, eos: false, want: nil},
		{n: 1, eos: true, want: []int{1}},
		{n: chunkLimit, eos: true, want: []int{chunkLimit}},
		{n: chunkLimit + 1, eos: true, want: []int{chunkLimit, 1}},
		{n: 200000, eos: false, want: []int{chunkLimit, chunkLimit, chunkLimit, 200000 - 3*chunkLimit}},
	}
	for _, tt := range tests {
		for _, s := range []side{requestSide, responseSide} {
			var got []*extprocv3.StreamedBodyResponse
			err := sendBody(func(m *extprocv3.ProcessingResponse) error {
				br := m.GetRequestBody()
				if s == responseSide {
					br = m.GetResponseBody()
				}
				got = append(got, br.GetResponse().GetBodyMutation().GetStreamedResponse())
				return nil
			}, s, pattern(tt.n), tt.eos)
			if err != nil || len(got) != len(tt.want) {
				t.Fatalf("sendBody(%d bytes, side %d, eos %v) sent %d chunks, %v; want %d", tt.n, s, tt.eos, len(got), err, len(tt.want))
			}
			for i, c := range got {
				if c == nil || len(c.GetBody()) != tt.want[i] || c.GetEndOfStream() != (tt.eos && i == len(got)-1) {
					t.Errorf("sendBody(%d bytes, side %d, eos %v) chunk %d = %d bytes, eos %v; want %d bytes, eos %v",
						tt.n, s, tt.eos, i, len(c.GetBody()), c.GetEndOfStream(), tt.want[i], tt.eos && i == len(got)-1)
				}
			}
		}
	}
}

// TestStatusCode: a status Envoy's enum lacks becomes its class's generic
// one, as Envoy rejects an undefined code.
func TestStatusCode(t *testing.T) {
	tests := []struct {
		in   int
		want typev3.StatusCode
	}{
		{429, typev3.StatusCode_TooManyRequests},
		{503, typev3.StatusCode_ServiceUnavailable},
		{413, typev3.StatusCode_PayloadTooLarge},
		{499, typev3.StatusCode_BadRequest},
		{599, typev3.StatusCode_InternalServerError},
		{0, typev3.StatusCode_InternalServerError},
		{100, typev3.StatusCode_InternalServerError},
	}
	for _, tt := range tests {
		if got := statusCode(tt.in); got != tt.want {
			t.Errorf("statusCode(%d) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
