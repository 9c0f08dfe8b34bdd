package render

import (
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// Addons renders the class's system add-ons as Flux HelmReleases next to the plane's
// infrastructure. They are the one legitimate user of the admin kubeconfig: they live in
// the infrastructure namespace, which the tenant cannot read or edit.
func Addons(plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass) []*helmv2.HelmRelease {
	out := make([]*helmv2.HelmRelease, 0, len(class.Spec.Addons))
	for _, a := range class.Spec.Addons {
		hr := &helmv2.HelmRelease{}
		hr.SetGroupVersionKind(helmv2.GroupVersion.WithKind(helmv2.HelmReleaseKind))
		hr.Namespace = InfrastructureNamespace(plane, class)
		hr.Name = fitName(ClusterName(plane)+"-"+a.Name, 53) // Helm caps release names at 53
		hr.Labels = merge(PlaneLabels(plane), map[string]string{cpv1.AddonRoleLabel: string(a.Role)})
		hr.Spec = helmv2.HelmReleaseSpec{
			Interval:         metav1.Duration{Duration: 10 * time.Minute},
			ChartRef:         &helmv2.CrossNamespaceSourceReference{Kind: a.ChartRef.Kind, Name: a.ChartRef.Name, Namespace: a.ChartRef.Namespace},
			KubeConfig:       &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: AdminKubeconfigSecretName(plane), Key: AdminKubeconfigKey}},
			ReleaseName:      a.Name,
			TargetNamespace:  a.TargetNamespace,
			StorageNamespace: a.TargetNamespace,
			Install:          &helmv2.Install{CreateNamespace: true, Remediation: &helmv2.InstallRemediation{Retries: 3}},
			Upgrade:          &helmv2.Upgrade{Remediation: &helmv2.UpgradeRemediation{Retries: 3}},
			Values:           a.Values,
		}
		out = append(out, hr)
	}
	return out
}
