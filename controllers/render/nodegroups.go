package render

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/utils/ptr"
	kubevirtv1 "kubevirt.io/api/core/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// DefaultDiskSize is a node's system disk when neither the group nor the class sets one.
var DefaultDiskSize = resource.MustParse("20Gi")

// NodeGroup is everything one node group renders to.
type NodeGroup struct {
	Name              string
	MachineTemplate   *unstructured.Unstructured
	BootstrapTemplate *bootstrapv1.KubeadmConfigTemplate
	MachineDeployment *clusterv1.MachineDeployment
	HealthCheck       *clusterv1.MachineHealthCheck
}

// NodeGroups renders every node group at workerVersion, sorted by name.
func NodeGroups(plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass, workerVersion string) ([]NodeGroup, error) {
	names := make([]string, 0, len(plane.Spec.NodeGroups))
	for n := range plane.Spec.NodeGroups {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]NodeGroup, 0, len(names))
	for _, n := range names {
		g, err := nodeGroup(plane, class, workerVersion, n, plane.Spec.NodeGroups[n])
		if err != nil {
			return nil, fmt.Errorf("node group %q: %w", n, err)
		}
		out = append(out, g)
	}
	return out, nil
}

func nodeGroup(plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass, version, name string, g cpv1.NodeGroup) (NodeGroup, error) {
	ns := InfrastructureNamespace(plane, class)
	cluster := ClusterName(plane)
	mdName := MachineDeploymentName(plane, name)
	groupLabels := merge(PlaneLabels(plane), map[string]string{cpv1.ClusterNameLabel: cluster, cpv1.NodeGroupLabel: name})

	vm, err := VirtualMachineSpec(plane, class, version, name, g)
	if err != nil {
		return NodeGroup{}, err
	}
	vmObj, err := toUnstructured(vm)
	if err != nil {
		return NodeGroup{}, err
	}
	dropNulls(vmObj)
	kmtSpec := map[string]any{"template": map[string]any{"spec": map[string]any{
		"virtualMachineTemplate": map[string]any{
			"metadata": map[string]any{"labels": toAny(groupLabels)},
			"spec":     vmObj,
		},
		// CAPK's "ssh" check dials each VM on port 22 from its controller (and puts its key
		// in the guest), which the VMs' ingress default deny rightly refuses: the Machine
		// waits for its Node to join the plane instead.
		"virtualMachineBootstrapCheck": map[string]any{"checkStrategy": "none"},
	}}}
	// Machine templates are immutable in CAPI: a change of content is a new name, which
	// rolls the MachineDeployment.
	kmt := object(KubevirtAPIVersion, KubevirtTemplateKind, ns, fitName(mdName+"-"+hashOf(kmtSpec)[:8], 63), plane)
	kmt.SetLabels(groupLabels)
	kmt.Object["spec"] = kmtSpec

	kct := &bootstrapv1.KubeadmConfigTemplate{}
	kct.SetGroupVersionKind(bootstrapv1.GroupVersion.WithKind("KubeadmConfigTemplate"))
	kct.Namespace = ns
	kct.Labels = groupLabels
	kct.Spec.Template.Spec.JoinConfiguration.NodeRegistration.KubeletExtraArgs = []bootstrapv1.Arg{
		{Name: "node-labels", Value: ptr.To(nodeLabels(name))},
	}
	kct.Name = fitName(mdName+"-"+hashOf(kct.Spec)[:8], 63)

	md := &clusterv1.MachineDeployment{}
	md.SetGroupVersionKind(clusterv1.GroupVersion.WithKind("MachineDeployment"))
	md.Namespace = ns
	md.Name = mdName
	md.Labels = groupLabels
	md.Spec.ClusterName = cluster
	md.Spec.Selector.MatchLabels = machineSelector(cluster, name)
	md.Spec.Template.ObjectMeta.Labels = merge(groupLabels, roleLabels(g.Roles))
	md.Spec.Template.Spec.ClusterName = cluster
	md.Spec.Template.Spec.Version = version
	md.Spec.Template.Spec.Bootstrap.ConfigRef = clusterv1.ContractVersionedObjectReference{
		APIGroup: bootstrapv1.GroupVersion.Group, Kind: "KubeadmConfigTemplate", Name: kct.Name,
	}
	md.Spec.Template.Spec.InfrastructureRef = clusterv1.ContractVersionedObjectReference{
		APIGroup: InfrastructureGroup, Kind: KubevirtTemplateKind, Name: kmt.GetName(),
	}
	if g.MinReplicas == g.MaxReplicas {
		md.Spec.Replicas = ptr.To(g.MinReplicas)
	} else {
		// Autoscaled: the cluster-autoscaler owns replicas within these bounds; the
		// operator never sets them, so it never fights the autoscaler.
		md.Annotations = map[string]string{
			cpv1.AutoscalerMinSizeAnnotation: strconv.Itoa(int(g.MinReplicas)),
			cpv1.AutoscalerMaxSizeAnnotation: strconv.Itoa(int(g.MaxReplicas)),
		}
	}
	return NodeGroup{Name: name, MachineTemplate: kmt, BootstrapTemplate: kct, MachineDeployment: md,
		HealthCheck: MachineHealthCheck(plane, class, name)}, nil
}

// VirtualMachineSpec is the KubeVirt VM of one node: an instance type or explicit
// CPU and memory, a system disk imported from the class's node image, the GPUs the group
// asks for, and the pod network. The VMI carries the plane labels (which the tenant
// cannot set) so network policies can select exactly this plane's VM pods.
func VirtualMachineSpec(plane *cpv1.ComputePlane, class *cpv1.ComputePlaneClass, version, name string, g cpv1.NodeGroup) (*kubevirtv1.VirtualMachineSpec, error) {
	disk := DefaultDiskSize
	switch {
	case g.DiskSize != nil:
		disk = *g.DiskSize
	case class.Spec.NodeGroups.DefaultDiskSize != nil:
		disk = *class.Spec.NodeGroups.DefaultDiskSize
	}
	image := class.Spec.NodeGroups.NodeImage
	if image == "" {
		image = "quay.io/capk/ubuntu-2404-container-disk:" + version
	}

	domain := kubevirtv1.DomainSpec{
		Devices: kubevirtv1.Devices{
			Disks: []kubevirtv1.Disk{{Name: "system", DiskDevice: kubevirtv1.DiskDevice{Disk: &kubevirtv1.DiskTarget{Bus: kubevirtv1.DiskBusVirtio}}}},
			Interfaces: []kubevirtv1.Interface{{Name: "default",
				InterfaceBindingMethod: kubevirtv1.InterfaceBindingMethod{Bridge: &kubevirtv1.InterfaceBridge{}}}},
		},
	}
	for _, gpu := range g.GPUs {
		for range max(gpu.Count, 1) {
			domain.Devices.GPUs = append(domain.Devices.GPUs, kubevirtv1.GPU{
				Name: fmt.Sprintf("gpu%d", len(domain.Devices.GPUs)), DeviceName: gpu.DeviceName,
			})
		}
	}
	spec := &kubevirtv1.VirtualMachineSpec{
		RunStrategy: ptr.To(kubevirtv1.RunStrategyAlways),
		DataVolumeTemplates: []kubevirtv1.DataVolumeTemplateSpec{{
			ObjectMeta: metaName("system"),
			Spec: cdiv1.DataVolumeSpec{
				Source: &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://" + image)}},
				Storage: &cdiv1.StorageSpec{
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: disk}},
				},
			},
		}},
		Template: &kubevirtv1.VirtualMachineInstanceTemplateSpec{
			ObjectMeta: metaLabels(merge(PlaneLabels(plane), map[string]string{cpv1.NodeGroupLabel: name})),
			Spec: kubevirtv1.VirtualMachineInstanceSpec{
				Domain:   domain,
				Networks: []kubevirtv1.Network{{Name: "default", NetworkSource: kubevirtv1.NetworkSource{Pod: &kubevirtv1.PodNetwork{}}}},
				Volumes: []kubevirtv1.Volume{{Name: "system",
					VolumeSource: kubevirtv1.VolumeSource{DataVolume: &kubevirtv1.DataVolumeSource{Name: "system"}}}},
			},
		},
	}
	if sc := class.Spec.NodeGroups.StorageClassName; sc != "" {
		spec.DataVolumeTemplates[0].Spec.Storage.StorageClassName = ptr.To(sc)
	}
	switch {
	case g.InstanceType != "":
		spec.Instancetype = &kubevirtv1.InstancetypeMatcher{Kind: "VirtualMachineClusterInstancetype", Name: g.InstanceType}
	case g.Resources != nil:
		cores, err := wholeCores(g.Resources.CPU)
		if err != nil {
			return nil, err
		}
		mem := g.Resources.Memory
		spec.Template.Spec.Domain.CPU = &kubevirtv1.CPU{Cores: cores}
		spec.Template.Spec.Domain.Memory = &kubevirtv1.Memory{Guest: &mem}
	default:
		return nil, fmt.Errorf("neither instanceType nor resources is set")
	}
	return spec, nil
}

func wholeCores(q resource.Quantity) (uint32, error) {
	milli := q.MilliValue()
	if milli <= 0 || milli%1000 != 0 {
		return 0, fmt.Errorf("resources.cpu %s is not a whole number of cores", q.String())
	}
	return uint32(milli / 1000), nil
}

// nodeLabels are the kubelet's --node-labels: the node group only. The kubelet refuses
// to start with any kubernetes.io or k8s.io label outside the few it may set on its own
// Node (node-role.kubernetes.io among the refused), so roles go through Cluster API
// instead (roleLabels).
func nodeLabels(group string) string {
	return cpv1.NodeGroupLabel + "=" + group
}

// NodeRoleLabelPrefix is the domain of the role labels; Cluster API syncs every label
// of that domain from a Machine to its Node.
const NodeRoleLabelPrefix = "node-role.kubernetes.io"

// roleLabels are one node-role.kubernetes.io/<role> label per role, set on the
// MachineDeployment's machine template: Cluster API copies them to the Machines, and
// from each Machine to its Node once the Node has joined (GetManagedLabels in
// sigs.k8s.io/cluster-api v1.14.2 util/labels/helpers.go, called from
// core/reconcilers/machine/machine_controller_noderef.go, always syncs the
// node-role.kubernetes.io, node-restriction.kubernetes.io and node.cluster.x-k8s.io
// domains). A change of roles is propagated in place, without a rollout (labels are
// not among the rollout fields: MachineTemplateDeepCopyRolloutFields in
// core/reconcilers/machinedeployment/mdutil/util.go).
func roleLabels(roles []string) map[string]string {
	if len(roles) == 0 {
		return nil
	}
	out := make(map[string]string, len(roles))
	for _, r := range roles {
		out[NodeRoleLabelPrefix+"/"+r] = ""
	}
	return out
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// toUnstructured goes through JSON so numbers come out as int64/float64 (the converter
// keeps kubevirt's unsigned fields unsigned, which unstructured objects cannot hold).
func toUnstructured(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	return out, utiljson.Unmarshal(b, &out)
}

// dropNulls removes null values (creationTimestamp: null and the like) that typed
// structs leave behind and server-side apply would try to own.
func dropNulls(m map[string]any) {
	for k, v := range m {
		switch t := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			dropNulls(t)
			if len(t) == 0 && k == "metadata" {
				delete(m, k)
			}
		case []any:
			for _, item := range t {
				if im, ok := item.(map[string]any); ok {
					dropNulls(im)
				}
			}
		}
	}
}
