// Package inferencepool turns Gateway API Inference Extension InferencePools
// (inference.networking.k8s.io/v1) into endpoints. A pool's endpoints are,
// for every pod in its namespace that matches spec.selector.matchLabels, is
// Ready, is not being deleted and has an IP, one "ip:port" per entry of
// spec.targetPorts. The v1 selector has matchLabels only.
//
// A Watcher runs client-go informers: one per pool, filtered to its name
// with a metadata.name field selector, and one pod informer per namespace
// that holds a pool, which keeps a slim copy of each pod (what the rule
// above reads). Both read through the one dynamic client, as unstructured
// objects: the Inference Extension's Go types are not a module gatekeeper
// can fetch, and the typed pod client (client-go's kubernetes clientset
// and informers) would compile every API group of k8s.io/api into the
// binary for one type. Any event recomputes the snapshot of every watched
// pool, and Options.OnChange gets it when it differs from the last one,
// one call at a time. The first call waits until every list has been read,
// so it is complete (Synced).
//
// Snapshot.Pool tells a pool that gives no answer (not created, deleted,
// not yet listed, or a spec that cannot be used: Found false) from a pool
// whose pods are all unready (Found, no endpoints). The caller keeps what
// it had in the first case.
//
// SetRefs changes the pools watched without a restart. ClientsFromConfig
// builds the dynamic client (Options.Dynamic, the only client a Watcher
// takes) from a kubeconfig or the pod's service account, and OwnNamespace
// names the namespace gatekeeper runs in. Besides cmd/gatekeeper, which
// wires it, this is the only gatekeeper package that imports k8s.io
// modules.
//
// # RBAC
//
// In every namespace that holds a watched pool, gatekeeper's service
// account needs these rules:
//
//	rules:
//	- apiGroups: ["inference.networking.k8s.io"]
//	  resources: ["inferencepools"]
//	  verbs: ["get", "list", "watch"]
//	- apiGroups: [""]
//	  resources: ["pods"]
//	  verbs: ["get", "list", "watch"]
//
// The informers use list and watch only; get costs nothing to grant and
// keeps `kubectl auth can-i` and future single reads working. Because each
// pool's list and watch carry a metadata.name field selector, which the API
// server authorizes as a request for that name, the inferencepools rule may
// name the pools in resourceNames. The pods rule may not: pods are listed
// by namespace. Use a Role and RoleBinding per namespace, or one
// ClusterRole bound by a RoleBinding in each; a ClusterRoleBinding grants
// every namespace and is more than the watcher needs.
package inferencepool
