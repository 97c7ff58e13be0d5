// Package podconn is gatekeeper's transport to its pods: an
// http.RoundTripper for plain http:// HTTP/1.1 pods that runs each exchange
// on the caller's goroutine. httputil.ReverseProxy uses it as it would use
// http.Transport; only the RoundTripper differs.
//
// http.Transport gives every connection two goroutines of its own (its read
// and write loops) and hands each request to both through channels: an open
// token stream costs those two stacks, and each request the hand-offs.
// Here the caller writes the request into a pooled buffer flushed once
// (headers and a buffered body in one write where they fit) and reads the
// response; the response body it is handed reads the connection itself,
// and gives the connection back to the idle pool when it reaches its end
// cleanly. The requests gatekeeper sends (a body of known length, an ASCII
// host, no trailers) are written by writeRequest, and the answers pods give
// (HTTP/1.x, a status from 200 but 204 and 304, one Content-Length or
// chunked alone, plain header lines, a head that fits the read buffer) are
// parsed in place by readHead, each without net/http's general machinery;
// everything else goes through net/http's own (*http.Request).Write and
// http.ReadResponse. Both are checked against net/http's: what each
// writes reads back the same (TestWriteRequestAsNetHTTP), and whatever
// the bytes, readHead returns what http.ReadResponse would (FuzzReadHead).
// The one difference: header fields go out in the map's order, where
// net/http sorts them. Only a dial runs on a goroutine of its own, which ends
// with it: the dialer's call chain is deep enough to double the stack of
// the caller's goroutine, which a stream would then keep for its life.
//
// What it does, as http.Transport does:
//   - Keep-alive: an idle pool per host (host:port), last in first out, at
//     most MaxIdleConnsPerHost, each connection closed once idle for
//     IdleConnTimeout. A connection is reused only when its response body
//     reached its end, neither side said Connection: close, nothing
//     followed the response, and the request's context had not ended.
//   - ResponseHeaderTimeout: a read deadline from the end of the request's
//     write until the response's headers; its error is a net.Error whose
//     Timeout is true.
//   - Cancellation: context.AfterFunc moves the connection's deadline into
//     the past when the request's context ends (no goroutine waits for
//     it); the exchange's error is then the context's error, and the
//     connection is closed.
//   - 1xx responses other than 101 are skipped, each handed to the
//     request's httptrace.ClientTrace.Got1xxResponse when it has one (so
//     ReverseProxy forwards them).
//   - Retries: a request is sent again, once, on a freshly dialled
//     connection, when a reused connection failed before any byte of it
//     was written (its body is rewound with GetBody), or when the request
//     is replayable (GET, HEAD, OPTIONS or TRACE without a body, or one
//     with an Idempotency-Key) and the reused connection failed before any
//     byte of the response arrived. A POST that was written is never sent
//     again. Dial errors are returned as the dialer made them
//     (*net.OpError, Op "dial").
//   - Header fields are checked as http.Transport checks them before they
//     are written.
//
// What differs, by choice:
//   - The response's headers, 1xx responses included, are bounded by
//     MaxResponseHeaderBytes [64 KiB], not net/http's 10 MiB: a pod that
//     sends more is an error (the connection is closed), not memory growth.
//     (nginx's default proxy_buffer_size, which must hold a response's
//     headers, is 4 or 8 KiB; vLLM's are well under 1 KiB.)
//   - No Accept-Encoding: gzip is added, so no body is decompressed on the
//     way through: what the pod sends is what the client gets.
//   - The only ClientTrace hook called is Got1xxResponse (and, for a
//     request net/http's own writer writes, its WroteHeaderField and
//     WroteRequest).
//   - The request is written whole before the response is read: a pod that
//     answers early and closes the connection before it has read a large
//     body fails the request at the write (http.Transport may hand on the
//     early answer). gatekeeper bounds and buffers bodies, and vLLM reads
//     them whole.
//   - A pod closing an idle connection is noticed when the connection is
//     taken from the pool, by one non-blocking read of its socket
//     (syscall.RawConn, unix only; elsewhere no check): end of file, a
//     reset or unsolicited bytes discard it. http.Transport's read loop
//     notices at once. The race that remains is the one http.Transport has
//     too: a pod that closes the connection after that check, while the
//     request is on its way, fails a request that was written; it is
//     retried only when replayable (above). IdleConnTimeout below the pod's
//     keep-alive (vLLM's uvicorn: 5 s) makes that rare.
//
// What it hands to Fallback (http.Transport): requests to https:// pods,
// requests that ask for a protocol upgrade (an Upgrade header: the 101's
// connection becomes the body), CONNECT, and requests with an Expect
// header (http.Transport waits for the pod's 100 Continue before the
// body).
package podconn
