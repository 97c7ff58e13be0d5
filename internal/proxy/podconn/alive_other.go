//go:build !unix

package podconn

// initIdleCheck has nothing to ready: the idle check reads a socket unix's
// way.
func (c *conn) initIdleCheck() {}

// idleAlive cannot look at the socket here: an idle connection the pod
// closed fails the request taken onto it (retried as the package doc says).
func (c *conn) idleAlive() bool { return true }
