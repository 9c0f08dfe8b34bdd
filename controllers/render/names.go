// Package render turns a ComputePlane and its class into the Cluster API object graph
// the operator owns. It is pure: no I/O, same inputs give the same objects, so every
// shape is covered by table tests and the real CRD schemas in the envtest suites.
package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// AdminKubeconfigKey is the admin kubeconfig key that reaches the plane's API server
// through its in-cluster Service (Kamaji's super-admin.svc).
const AdminKubeconfigKey = "super-admin.svc"

// InfrastructureNamespace is where a plane's infrastructure lives: a dedicated,
// operator-owned namespace <prefix><tenant namespace>-<uid8>, where uid8 is the first 8 hex digits of the plane's
// UID and the readable part is shortened with a hash when the whole would pass 63
// characters.
//
// The readable part alone is not unique: classes with overlapping prefixes ("cp-" and
// "cp-a-"), truncated long names, or a plane deleted and created again under the same
// name would share it. The UID suffix separates all of those (UIDs are random and
// assigned by the apiserver, not chosen by a tenant). What remains (two planes whose
// readable parts and 32 random bits both agree) is refused, never merged: the operator
// creates the namespace itself, marks it with the full UID (PlaneUIDLabel) and uses no
// namespace without that mark.
func InfrastructureNamespace(plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass) string {
	suffix := ""
	if uid := strings.ReplaceAll(strings.ToLower(string(plane.UID)), "-", ""); len(uid) >= 8 {
		suffix = "-" + uid[:8]
	}
	return fitName(class.Spec.Infrastructure.NamespacePrefix+plane.Namespace, 63-len(suffix)) + suffix
}

// ClusterName names the Cluster, KamajiControlPlane (and so Kamaji's
// TenantControlPlane) and KubevirtCluster. One plane per tenant namespace and one
// infrastructure namespace per plane keep it unique.
func ClusterName(plane *cpv1.ComputePlane) string { return plane.Name }

// AdminKubeconfigSecretName is the Secret Kamaji writes the admin kubeconfig to.
func AdminKubeconfigSecretName(plane *cpv1.ComputePlane) string {
	return ClusterName(plane) + "-admin-kubeconfig"
}

// MachineDeploymentName names a node group's MachineDeployment.
func MachineDeploymentName(plane *cpv1.ComputePlane, group string) string {
	return fitName(ClusterName(plane)+"-"+group, 63)
}

// PlaneLabels link an object to its ComputePlane across namespaces. The UID label tells
// this plane's objects from those of an earlier plane of the same name.
func PlaneLabels(plane *cpv1.ComputePlane) map[string]string {
	return map[string]string{
		cpv1.PlaneNameLabel:      plane.Name,
		cpv1.PlaneNamespaceLabel: plane.Namespace,
		cpv1.PlaneUIDLabel:       string(plane.UID),
		cpv1.ManagedByLabel:      cpv1.ManagedByValue,
	}
}

// PlaneSelector selects what the operator created for this plane and no other (not an
// earlier plane's leftovers of the same name).
func PlaneSelector(plane *cpv1.ComputePlane) map[string]string {
	return map[string]string{
		cpv1.PlaneNameLabel:      plane.Name,
		cpv1.PlaneNamespaceLabel: plane.Namespace,
		cpv1.PlaneUIDLabel:       string(plane.UID),
	}
}

func merge(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// fitName keeps a name within max characters, replacing the tail with a hash.
func fitName(name string, max int) string {
	if len(name) <= max {
		return name
	}
	return name[:max-9] + "-" + hashOf(name)[:8]
}

// hashOf is a short, stable content hash.
func hashOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain structs are hashed
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
