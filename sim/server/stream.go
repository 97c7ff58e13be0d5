package server

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gatekeeper-dev/gatekeeper/sim"
)

// stream answers with server-sent events: a role chunk (chat), one chunk per
// token as the driver reports them, a finish chunk, the usage chunk when
// asked, then [DONE]; an engine death mid-stream becomes an error event.
func (srv *Server) stream(w http.ResponseWriter, r *http.Request, c *call) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	object := "text_completion"
	if c.chat {
		object = "chat.completion.chunk"
	}
	chunk := func(ch choice, u *usage) {
		resp := response{ID: c.id, Object: object, Created: c.created, Model: srv.name, Choices: []choice{}, Usage: u}
		if u == nil {
			resp.Choices = []choice{ch}
		}
		b, _ := json.Marshal(resp) // plain structs: cannot fail
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	if c.chat {
		chunk(choice{Delta: &message{Role: "assistant"}}, nil)
		_ = rc.Flush()
	}
	sent := 0
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.wait.notify:
		}
		p := srv.progress(c)
		for ; sent < p.generated; sent++ {
			t := c.text(1)
			if c.chat {
				chunk(choice{Delta: &message{Content: t}}, nil)
			} else {
				chunk(choice{Text: &t}, nil)
			}
		}
		if p.done {
			if p.state == sim.SeqFinished {
				empty := ""
				end := choice{FinishReason: c.finishReason(p.generated)}
				if c.chat {
					end.Delta = &message{}
				} else {
					end.Text = &empty
				}
				chunk(end, nil)
				if c.includeUsage {
					chunk(choice{}, c.usage(p.generated))
				}
			} else {
				b, _ := json.Marshal(map[string]apiError{"error": {Message: engineErrorMessage(p.err),
					Type: errorType(http.StatusInternalServerError), Code: http.StatusInternalServerError}})
				fmt.Fprintf(w, "data: %s\n\n", b)
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			_ = rc.Flush()
			return
		}
		_ = rc.Flush()
	}
}
