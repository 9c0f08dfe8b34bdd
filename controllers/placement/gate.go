package placement

import (
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// gate is what the placement releases of a namespace see of their plane.
type gate struct {
	open bool
	// why the gate is closed, as a person reads it.
	why string
	// teardown: the plane is being deleted, and its teardown sees to the releases.
	teardown bool
	// noPlane: the namespace has no ComputePlane.
	noPlane bool
}

func gateOf(p *cpv1.ComputePlane) gate {
	switch {
	case p == nil:
		return gate{why: "the namespace has no ComputePlane", noPlane: true}
	case !p.DeletionTimestamp.IsZero():
		why := fmt.Sprintf("ComputePlane %s is being deleted (its teardown has Flux uninstall every placement release first)", p.Name)
		if p.Annotations[cpv1.UninstallAnnotation] == "" {
			why = fmt.Sprintf("ComputePlane %s is being deleted and is protected by the placement releases running in it: nothing is uninstalled until they are deleted, or until its owner sets %s", p.Name, cpv1.UninstallAnnotation)
		}
		return gate{why: why, teardown: true}
	}
	ready := apimeta.FindStatusCondition(p.Status.Conditions, cpv1.ReadyCondition)
	if ready == nil {
		return gate{why: fmt.Sprintf("ComputePlane %s has not been reconciled yet", p.Name)}
	}
	if ready.Status == metav1.ConditionTrue {
		return gate{open: true}
	}
	return gate{why: fmt.Sprintf("ComputePlane %s is not Ready (%s: %s)", p.Name, ready.Reason, ready.Message)}
}
