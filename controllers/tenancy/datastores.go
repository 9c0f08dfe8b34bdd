package tenancy

import (
	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// DataStoreFor is the Kamaji DataStore a plane's state is kept in: the one it was
// created on, if recorded (status.dataStoreName); for a plane provisioned before the
// choice was recorded, the class's dataStoreName (immutable, so what it was rendered
// with); for a new plane, the first of the class's dataStores whose namespaceSelector
// matches its namespace's labels, else the class's dataStoreName. A DataStore is never
// changed under a running plane: its state would be left behind. Pure.
func DataStoreFor(p *cpv1.ComputePlane, class *cpv1.ComputePlaneClass, nsLabels map[string]string) string {
	switch {
	case p.Status.DataStoreName != "":
		return p.Status.DataStoreName
	case p.Status.InfrastructureNamespace != "":
		return class.Spec.ControlPlane.DataStoreName
	}
	for i := range class.Spec.ControlPlane.DataStores {
		d := &class.Spec.ControlPlane.DataStores[i]
		if NamespaceAllowed(&d.NamespaceSelector, nsLabels) {
			return d.Name
		}
	}
	return class.Spec.ControlPlane.DataStoreName
}
