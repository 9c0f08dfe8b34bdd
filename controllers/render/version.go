package render

// WorkerVersion is the Kubernetes version the workers may run now. A new plane's workers
// start at the class's version. After the class's version changes, workers keep the
// version they run (currentWorkers, as the MachineDeployments say) until the control plane
// reports the new version Ready: the control plane is upgraded first, then the workers,
// as Kubernetes' version-skew policy requires.
func WorkerVersion(classVersion, controlPlaneVersion string, controlPlaneReady bool, currentWorkers []string) string {
	if controlPlaneReady && controlPlaneVersion == classVersion {
		return classVersion
	}
	for _, v := range currentWorkers {
		if v != "" {
			return v
		}
	}
	return classVersion
}
