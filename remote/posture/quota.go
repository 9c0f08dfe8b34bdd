package posture

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Object counts a placement namespace gets when its class's quota names none for that
// resource: every object a deployer may create is counted, so what one plane's charts
// can write into the DataStore its class shares is bounded (each object is at most
// about 1.5 MiB in etcd). Secrets leave room for Helm's release records, one per
// revision kept (maxHistory, at most 10); ReplicaSets for Deployments' rollout history.
var defaultCounts = map[string]string{
	"secrets":     "250",
	"configmaps":  "100",
	"pods":        "100",
	"replicasets": "200",
	"services":    "50",

	"persistentvolumeclaims": "20",
}

// What else a placement namespace gets when its class's quota names none: the claims'
// total size, and no node ports or load balancers (the plane's policies refuse them to
// placement releases anyway; the quota holds should a policy be missing).
var defaultResources = corev1.ResourceList{
	corev1.ResourceRequestsStorage:       resource.MustParse("200Gi"),
	corev1.ResourceServicesNodePorts:     resource.MustParse("0"),
	corev1.ResourceServicesLoadBalancers: resource.MustParse("0"),
}

// defaultCount is the count of a deployer-writable resource defaultCounts does not name.
const defaultCount = "50"

// BoundedQuota is a placement namespace's quota: the class's, and for every resource it
// does not name, the defaults above (count/<resource>[.<group>] for each kind a deployer
// may create). A class that wants a bound raised or lowered names it.
func BoundedQuota(class corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range defaultResources {
		out[name] = q.DeepCopy()
	}
	for _, gvr := range DeployerWritable() {
		name := "count/" + gvr.Resource
		if gvr.Group != "" {
			name += "." + gvr.Group
		}
		n, ok := defaultCounts[gvr.Resource]
		if !ok {
			n = defaultCount
		}
		out[corev1.ResourceName(name)] = resource.MustParse(n)
	}
	for name, q := range class {
		out[name] = q.DeepCopy()
	}
	return out
}
