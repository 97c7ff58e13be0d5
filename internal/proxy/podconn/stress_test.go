package podconn

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentExchanges: many callers share the pool, some cancelling
// their streams midway; every finished stream is whole, every cancelled one
// ends with the context's error, and no connection that saw a cancel is
// reused (a reused one would answer the next caller with the rest of a
// stream). Run with -race: cancel, Close, reads and the pool meet here.
func TestConcurrentExchanges(t *testing.T) {
	const callers, each = 8, 40
	pod := newCountedPod(t, func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		for range 4 {
			_, _ = io.WriteString(w, "data: "+id+"\n\n")
			w.(http.Flusher).Flush()
		}
	})
	tr := &Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				id := string(rune('a'+c)) + string(rune('a'+i%26))
				if err := stream(tr, pod.URL+"/?id="+id, id, i%3 == 0); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := tr.pool.idle(pod.Listener.Addr().String()); got > 4 {
		t.Errorf("idle = %d, want at most 4", got)
	}
}

// stream reads one stream; with cancel, it cancels after the first event.
func stream(tr *Transport, url, id string, cancel bool) error {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	event := "data: " + id + "\n\n"
	first := make([]byte, len(event))
	if _, err := io.ReadFull(res.Body, first); err != nil || string(first) != event {
		return errors.New("first event " + string(first) + " of " + id)
	}
	if cancel {
		stop()
		if _, err := io.ReadAll(res.Body); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
	rest, err := io.ReadAll(res.Body)
	if err != nil || string(rest) != strings.Repeat(event, 3) {
		return errors.New("stream " + id + " = " + string(rest))
	}
	return nil
}
