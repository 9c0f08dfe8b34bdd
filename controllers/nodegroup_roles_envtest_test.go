package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/rand"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/controllers/render"
)

// TestNodeGroupRolesOnTheMachineTemplate: a node group's roles land on the
// MachineDeployment's machine template as stored by the real Cluster API CRD (from
// there Cluster API takes them to the Nodes), never in the kubelet's --node-labels
// (which the kubelet refuses to start with), and a change of roles renames no template
// (it would roll every node of the group).
func TestNodeGroupRolesOnTheMachineTemplate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	class := newClass("roles-" + rand.String(6))
	if err := k8s.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	group := cpv1.NodeGroup{MinReplicas: 1, MaxReplicas: 1, InstanceType: "u1.medium", Roles: []string{"worker", "ingress"}}
	p := newPlane(tenantNamespace(t, ctx), "plane", class.Name, withGroup("workers", group))
	if err := k8s.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	mdKey := client.ObjectKey{Namespace: infraOf(p), Name: render.MachineDeploymentName(p, "workers")}
	md := &clusterv1.MachineDeployment{}
	rolesAre := func(want ...string) func() error {
		return func() error {
			if err := k8s.Get(ctx, mdKey, md); err != nil {
				return err
			}
			var got []string
			for k := range md.Spec.Template.Labels {
				if role, ok := strings.CutPrefix(k, render.NodeRoleLabelPrefix+"/"); ok {
					got = append(got, role)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("machine template roles %v, want %v", got, want)
			}
			return nil
		}
	}
	eventually(t, settle, rolesAre("ingress", "worker"))
	bootstrap, infra := md.Spec.Template.Spec.Bootstrap.ConfigRef.Name, md.Spec.Template.Spec.InfrastructureRef.Name
	kct := &bootstrapv1.KubeadmConfigTemplate{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: mdKey.Namespace, Name: bootstrap}, kct); err != nil {
		t.Fatal(err)
	}
	for _, arg := range kct.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs {
		if arg.Name == "node-labels" && arg.Value != nil && strings.Contains(*arg.Value, render.NodeRoleLabelPrefix) {
			t.Errorf("the kubelet's --node-labels carry roles: %q", *arg.Value)
		}
	}

	// A merge patch: the operator writes the plane's status meanwhile, and an update
	// from a read a moment old would conflict with it.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(p.DeepCopy())
	group.Roles = []string{"worker", "gpu"}
	p.Spec.NodeGroups["workers"] = group
	if err := k8s.Patch(ctx, p, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, settle, rolesAre("gpu", "worker"))
	if got := md.Spec.Template.Spec; got.Bootstrap.ConfigRef.Name != bootstrap || got.InfrastructureRef.Name != infra {
		t.Errorf("a change of roles renamed the templates (%s, %s; were %s, %s)", got.Bootstrap.ConfigRef.Name, got.InfrastructureRef.Name, bootstrap, infra)
	}
}
