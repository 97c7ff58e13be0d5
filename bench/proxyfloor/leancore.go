package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"

	"github.com/gatekeeper-dev/gatekeeper/internal/breaker"
	"github.com/gatekeeper-dev/gatekeeper/internal/config"
	"github.com/gatekeeper-dev/gatekeeper/internal/decide"
	"github.com/gatekeeper-dev/gatekeeper/internal/pods"
	"github.com/gatekeeper-dev/gatekeeper/internal/queue"
)

// leanCoreServe is leanwatch with gatekeeper's decision core around the
// forwarder: each request is classified and admitted by decide.Core (one
// pod with a window of the given size, no limits, the policy's per-request
// keys from cfg: bench/run's gatekeeper.yaml) and finished by it once its
// answer has been relayed. It measures what gatekeeper's decision would cost on a
// front of its own (docs/design.md leaves that front to the team). Like
// leanwatch it serves bench traffic only, and it has none of what
// gatekeeper adds around the core: the usage read from the answer, the
// metrics, request ids, X-Forwarded-*, the send timeout, tracing.
func leanCoreServe(ln net.Listener, pod string, cfg *config.Config, window int) error {
	core, err := leanDecisionCore(pod, cfg, window)
	if err != nil {
		return err
	}
	p := &leanPods{addr: pod}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go leanCoreConn(c, p, core, cfg.Server.MaxBodyBytes)
	}
}

func leanDecisionCore(pod string, cfg *config.Config, window int) (*decide.Core, error) {
	q, err := queue.New(queue.Settings{})
	if err != nil {
		return nil, err
	}
	reg := pods.New(nil)
	u, err := url.Parse("http://" + pod)
	if err != nil {
		return nil, err
	}
	reg.Set([]pods.Pod{{Name: "bench", URL: u}})
	q.SetWindow("bench", window)
	q.SetAvailability(reg.Availability)
	lim, err := breaker.NewLimiter(breaker.LimiterSettings{})
	if err != nil {
		return nil, err
	}
	// The keys internal/policy maps onto decide.Policy for every request.
	pol := decide.Policy{
		MaxBodyBytes:        cfg.Server.MaxBodyBytes,
		RequestIDHeader:     cfg.Server.RequestIDHeader,
		CharsPerToken:       cfg.Estimate.CharsPerToken,
		DefaultMaxTokens:    int64(cfg.Estimate.DefaultMaxTokens),
		BytesPerLogit:       int64(cfg.Estimate.BytesPerLogit),
		PromptLogprobsChunk: int64(cfg.Estimate.PromptLogprobsChunk),
		MaxWait:             cfg.Queue.MaxWait,
		TTFTDeadline:        cfg.Queue.TTFTDeadline,
		DeadlineHeader:      cfg.Queue.DeadlineHeader,
		RetryAfter:          cfg.Shed.RetryAfter,
		SendTimeout:         cfg.Server.SendTimeout,
	}
	return decide.New(decide.Options{Registry: reg, Admission: decide.Queue(q), Limiter: lim, Policy: pol})
}

// leanCoreConn is leanConn with the watching read, the request's body read
// whole (as gatekeeper reads it) and the core's Decide before the forward
// and Finish after it.
func leanCoreConn(c net.Conn, p *leanPods, core *decide.Core, maxBody int64) {
	defer c.Close()
	br, bw, release := connBuffers(c)
	defer release()
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
		if err != nil {
			return
		}
		stop := watchClient(c)
		var dr decide.Request
		res := core.Decide(context.Background(), &dr, decide.In{Method: req.Method, Path: req.URL.EscapedPath(),
			Header: req.Header, Body: body, TooLarge: int64(len(body)) > maxBody})
		if res.Admitted == nil {
			stop()
			status := http.StatusOK // GET /v1/models, answered from the pods' models
			if res.Refusal != nil {
				status = res.Refusal.Status
			}
			fmt.Fprintf(bw, "HTTP/1.1 %d %s\r\nContent-Length: %d\r\n\r\n%s", status, http.StatusText(status), len(res.Models), res.Models)
			if bw.Flush() != nil {
				return
			}
			continue
		}
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		end, keep, err := leanCoreForward(req, p, bw)
		stop()
		core.Finish(&dr, res.Admitted, end)
		res.Admitted.Slot.Release()
		if err != nil || !keep {
			return
		}
		if err := bw.Flush(); err != nil || req.Close {
			return
		}
	}
}

// leanCoreForward is leanExchange on a pooled pod connection, reporting
// the pod's status for the core's End.
func leanCoreForward(req *http.Request, p *leanPods, bw *bufio.Writer) (end decide.End, clientKeep bool, err error) {
	pc, err := p.get()
	if err != nil {
		return decide.End{Cut: decide.CutUpstream}, false, err
	}
	if err := leanWriteRequest(req, pc, p.addr); err != nil {
		pc.c.Close()
		return decide.End{Cut: decide.CutUpstream}, false, err
	}
	line, err := pc.br.ReadSlice('\n')
	if err == nil {
		end.Status, err = leanStatus(line)
	}
	if err != nil {
		pc.c.Close()
		return decide.End{Cut: decide.CutUpstream}, false, err
	}
	_, _ = bw.Write(line)
	keep, err := leanRelayRest(pc.br, bw)
	if err != nil {
		pc.c.Close()
		end.Cut = decide.CutUpstream
		return end, false, err
	}
	if keep {
		p.put(pc)
	} else {
		pc.c.Close()
	}
	return end, true, nil
}
