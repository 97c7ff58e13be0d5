package main

// podRefused is the proxy's and the picker's OnPodRefused: a pod answered
// 503 or 429 itself. The controller counts it; when that makes the pod
// overloaded (control.PodOverloadAnswers), a round runs now rather than at
// the next poll, on the pressure monitor's goroutine like every round.
func (a *app) podRefused(name string) {
	if a.ctl.PodRefused(name) {
		a.pressure.Notify()
	}
}
