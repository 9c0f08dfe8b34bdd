package main

import (
	"context"
	"fmt"
	"time"

	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
	"github.com/cozystack/computeplane/netpol"
)

// showGrants walks the sample plane's grant of the postgres Service through both sides:
// asked for by the plane, pending until the Service's owner opts in (the tenant may not
// opt in for it), granted, revoked when the owner opts out. The policy must open nothing before the opt-in and after the
// opt-out, or the demo fails.
func showGrants(ctx context.Context, c client.Client, kubectl func(...string) error, key client.ObjectKey) error {
	p := &cpv1.ComputePlane{}
	if err := c.Get(ctx, key, p); err != nil {
		return err
	}
	policy := client.ObjectKey{Namespace: p.Status.InfrastructureNamespace, Name: netpol.GrantsName(p.Name, string(p.UID))}
	// The grant policy's rule count, -1 when there is none.
	rules := func(ctx context.Context) (int, error) {
		cnp := &ciliumv2.CiliumNetworkPolicy{}
		if err := c.Get(ctx, policy, cnp); apierrors.IsNotFound(err) {
			return -1, nil
		} else if err != nil {
			return 0, err
		}
		return len(cnp.Spec.Egress), nil
	}
	await := func(what string, done func(ctx context.Context) (bool, error)) error {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, done); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	granted := func(state cpv1.GrantState, want int) func(ctx context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			got := &cpv1.ComputePlane{}
			if err := c.Get(ctx, key, got); err != nil {
				return false, err
			}
			n, err := rules(ctx)
			return len(got.Status.ServiceAccess) == 1 && got.Status.ServiceAccess[0].State == state && n == want, err
		}
	}
	access := `jsonpath={range .status.serviceAccess[*]}{.name}{"\t"}{.state}{"\t"}{.message}{"\n"}{end}`

	if err := kubectl("create", "service", "clusterip", "postgres", "-n", key.Namespace, "--tcp=5432:5432"); err != nil {
		return err
	}
	if err := await("a Service that has not opted in must open nothing", granted(cpv1.GrantPending, -1)); err != nil {
		return err
	}
	if err := kubectl("get", "computeplane", "-n", key.Namespace, key.Name, "-o", access); err != nil {
		return err
	}
	fmt.Println("    (pending, and no grant policy: the Service's owner has not agreed)")

	step("...the tenant (alice, here allowed to edit the namespace's Services, as the built-in edit role allows) cannot opt it in itself: that is the Service owner's right (computeplane-service-access)")
	if err := kubectl("create", "role", "service-editor", "-n", key.Namespace, "--verb=get,list,patch,update", "--resource=services"); err != nil {
		return err
	}
	if err := kubectl("create", "rolebinding", "alice-services", "-n", key.Namespace, "--role=service-editor", "--user=alice"); err != nil {
		return err
	}
	// Refused by RBAC would prove nothing: wait until alice may edit the Service.
	if err := await("alice was not allowed to edit Services", func(ctx context.Context) (bool, error) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: "alice",
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: key.Namespace, Verb: "patch", Resource: "services", Name: "postgres"}}}
		if err := c.Create(ctx, sar); err != nil {
			return false, err
		}
		return sar.Status.Allowed, nil
	}); err != nil {
		return err
	}
	if err := refused(kubectl("--as=alice", "label", "service", "postgres", "-n", key.Namespace, cpv1.ServiceAccessLabel+"="+key.Name)); err != nil {
		return fmt.Errorf("the tenant opting its own Service in: %w", err)
	}

	step("...its owner (the cluster admin here, standing for the platform) opts in: the grant policy opens exactly the Service's backends on 5432/TCP")
	if err := kubectl("label", "service", "postgres", "-n", key.Namespace, cpv1.ServiceAccessLabel+"="+key.Name); err != nil {
		return err
	}
	if err := await("the opted-in Service was not granted", granted(cpv1.GrantGranted, 1)); err != nil {
		return err
	}
	if err := kubectl("get", "computeplane", "-n", key.Namespace, key.Name, "-o", access); err != nil {
		return err
	}
	if err := kubectl("get", "ciliumnetworkpolicy", "-n", policy.Namespace, policy.Name, "-o",
		`jsonpath=egress: {.spec.egress}{"\n"}egressDeny: {.spec.egressDeny}{"\n"}`); err != nil {
		return err
	}

	step("...and opts out: revoked at once")
	if err := kubectl("label", "service", "postgres", "-n", key.Namespace, cpv1.ServiceAccessLabel+"-"); err != nil {
		return err
	}
	if err := await("a Service that opted out must be revoked", granted(cpv1.GrantPending, -1)); err != nil {
		return err
	}
	if err := kubectl("get", "computeplane", "-n", key.Namespace, key.Name, "-o", access); err != nil {
		return err
	}
	fmt.Println("    (revoked: the grant policy is gone)")
	return nil
}
