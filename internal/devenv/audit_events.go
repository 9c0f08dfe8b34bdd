package devenv

import (
	"bufio"
	"encoding/json"
	"os"
	"time"
)

// tenantAuditPolicy records, at Metadata level, every request but the API server's own
// (loopback) ones: who asked a plane for what, when, and with what answer.
const tenantAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: None
    users: ["system:apiserver"]
  - level: Metadata
`

// AuditEvent is one audited request (the fields tests read of audit.k8s.io/v1 Event).
type AuditEvent struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	ImpersonatedUser *struct {
		Username string `json:"username"`
	} `json:"impersonatedUser"`
	ObjectRef      *AuditObjectRef `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// RequestReceived is when the API server received the request (microseconds).
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
	// StageTime is when the logged stage was reached (microseconds).
	StageTime time.Time `json:"stageTimestamp"`
}

// AuditObjectRef is the object a request was about.
type AuditObjectRef struct {
	APIGroup    string `json:"apiGroup"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource"`
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
}

// Succeeded reports a completed request answered with a 2xx code.
func (e AuditEvent) Succeeded() bool {
	return e.Stage == "ResponseComplete" && e.ResponseStatus != nil && e.ResponseStatus.Code/100 == 2
}

// Mutating reports a write (what can change the cluster).
func (e AuditEvent) Mutating() bool {
	switch e.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// ReadAudit reads a JSON audit log (Cluster.AuditLog).
func ReadAudit(path string) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}
