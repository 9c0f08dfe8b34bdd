package render

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

func metaName(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }

func metaLabels(labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Labels: labels}
}
