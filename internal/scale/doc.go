// Package scale turns what gatekeeper sees of a pool's traffic into a
// scaling signal: how many pods the pool should have one pod start time
// from now (docs/scaling.md).
//
// An Estimator is one pool's pure, clock-injected state machine: each
// interval it is handed an Input (arrivals, the demand the pool could not
// serve by cause, the queue, the windows cut by pressure, each pod's
// service rate and the pod count) and answers an Estimate. Arrivals are
// forecast by Holt's linear (double exponential) smoothing over the
// horizon; desired replicas are ceil(forecast demand ÷ a pod's sustainable
// rate), clamped to [MinReplicas, MaxReplicas], scaled up at once and down
// only after the stabilization window, as Kubernetes' HorizontalPodAutoscaler
// does (its scale-down stabilization window: the highest recommendation of
// the window wins; https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#stabilization-window).
//
// A Scaler holds one Estimator per pool, turns cumulative counts into
// per-interval rates (Observe), and exports the gauges; it is safe for
// concurrent use. Gather reads the counts of the pool "all" (every pod)
// from the metrics the app already registers, so that signal needs no hook
// in the request path. With routing by model each model is a pool too
// (GatherPools): its arrivals, refusals and waiters are counted by the
// decision core in the Scaler's Tally (an atomic add per event, only for
// the models the pods list), its pods and their service read from the
// app's per-pod series.
package scale
