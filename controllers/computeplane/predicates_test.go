package computeplane

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

func TestServiceAccessChanged(t *testing.T) {
	svc := func(label string, port int32, selector string) *corev1.Service {
		s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "db"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": selector}, Ports: []corev1.ServicePort{{Port: port}}}}
		if label != "" {
			s.Labels = map[string]string{cpv1.ServiceAccessLabel: label}
		}
		return s
	}
	updates := []struct {
		name     string
		old, new *corev1.Service
		want     bool
	}{
		{"opts in", svc("", 5432, "db"), svc("plane", 5432, "db"), true},
		{"opts out (a revocation)", svc("plane", 5432, "db"), svc("", 5432, "db"), true},
		{"grants another plane", svc("plane", 5432, "db"), svc("other", 5432, "db"), true},
		{"labelled, port changes", svc("plane", 5432, "db"), svc("plane", 5433, "db"), true},
		{"labelled, selector changes", svc("plane", 5432, "db"), svc("plane", 5432, "other"), true},
		{"labelled, nothing of a grant changes", svc("plane", 5432, "db"), svc("plane", 5432, "db"), false},
		{"never labelled, port changes", svc("", 5432, "db"), svc("", 5433, "db"), false},
	}
	var p serviceAccessChanged
	for _, tc := range updates {
		if got := p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: Update = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !p.Create(event.CreateEvent{Object: svc("plane", 1, "db")}) || p.Create(event.CreateEvent{Object: svc("", 1, "db")}) {
		t.Error("Create must pass exactly the labelled Services")
	}
	if !p.Delete(event.DeleteEvent{Object: svc("plane", 1, "db")}) || p.Delete(event.DeleteEvent{Object: svc("", 1, "db")}) {
		t.Error("Delete must pass exactly the labelled Services")
	}
}
