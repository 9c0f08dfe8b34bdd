package vm

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// CloudConfig is the part of a cloud-init #cloud-config document that Cluster API's
// kubeadm bootstrap provider writes for a worker (bootstrap/kubeadm/pkg/cloudinit
// node.go, files.go, commands.go in sigs.k8s.io/cluster-api v1.14.2): files to write,
// then commands to run, in order.
type CloudConfig struct {
	WriteFiles []File `json:"write_files"`
	// RunCmd entries are a shell string, or a list of arguments (cloud-init accepts both).
	RunCmd []Command `json:"runcmd"`
}

// File is one write_files entry.
type File struct {
	Path        string `json:"path"`
	Content     string `json:"content"`
	Encoding    string `json:"encoding"`
	Owner       string `json:"owner"`
	Permissions string `json:"permissions"`
	Append      bool   `json:"append"`
}

// Command is one runcmd entry: argv to exec.
type Command []string

// UnmarshalJSON takes a string (run by /bin/sh -c, as cloud-init does) or a list.
func (c *Command) UnmarshalJSON(b []byte) error {
	var s string
	if err := yaml.Unmarshal(b, &s); err == nil {
		*c = Command{"/bin/sh", "-c", s}
		return nil
	}
	var argv []string
	if err := yaml.Unmarshal(b, &argv); err != nil {
		return fmt.Errorf("a runcmd entry is neither a string nor a list of strings: %s", b)
	}
	*c = argv
	return nil
}

// Metadata is the instance data a VM's cloud-init renders jinja templates with; CAPK
// gives each VM its instance-id and local-hostname, both the KubevirtMachine's name
// (sigs.k8s.io/cluster-api-provider-kubevirt v0.1.10 pkg/kubevirt/machine.go).
type Metadata struct {
	InstanceID    string
	LocalHostname string
}

var jinjaExpr = regexp.MustCompile(`\{\{-?\s*([^}]*?)\s*-?\}\}`)

// ParseUserData reads bootstrap data: "#cloud-config" YAML, with the "## template: jinja"
// header when its variables are to be rendered. Only the instance-data variables a node
// name is made of are known; any other jinja construct is an error, not left verbatim
// (a VM's cloud-init would render it, and a node that joined with it unrendered would
// prove nothing).
func ParseUserData(data []byte, md Metadata) (*CloudConfig, error) {
	text := string(data)
	jinja := false
	if rest, ok := strings.CutPrefix(text, "## template: jinja\n"); ok {
		jinja, text = true, rest
	}
	if !strings.HasPrefix(text, "#cloud-config") {
		return nil, fmt.Errorf("bootstrap data is not a #cloud-config document (starts %q)", firstLine(text))
	}
	if jinja {
		if strings.Contains(text, "{%") {
			return nil, fmt.Errorf("bootstrap data uses a jinja statement ({%% ... %%}), which this stand-in does not render")
		}
		vars := map[string]string{
			"ds.meta_data.local_hostname": md.LocalHostname, "v1.local_hostname": md.LocalHostname,
			"ds.meta_data.instance_id": md.InstanceID, "v1.instance_id": md.InstanceID,
		}
		var unknown []string
		text = jinjaExpr.ReplaceAllStringFunc(text, func(m string) string {
			name := jinjaExpr.FindStringSubmatch(m)[1]
			if v, ok := vars[name]; ok {
				return v
			}
			unknown = append(unknown, name)
			return m
		})
		if len(unknown) > 0 {
			return nil, fmt.Errorf("bootstrap data uses instance data this stand-in does not know: %v", unknown)
		}
	}
	cc := &CloudConfig{}
	if err := yaml.Unmarshal([]byte(text), cc); err != nil {
		return nil, fmt.Errorf("bootstrap data: %w", err)
	}
	for _, f := range cc.WriteFiles {
		if !strings.HasPrefix(f.Path, "/") {
			return nil, fmt.Errorf("write_files path %q is not absolute", f.Path)
		}
	}
	return cc, nil
}

// Decode is the file's content after its encoding (cloud-init's b64, base64, gzip, gz,
// gz+base64, gzip+base64, gz+b64, gzip+b64, or none).
func (f File) Decode() ([]byte, error) {
	data := []byte(f.Content)
	enc := strings.ToLower(f.Encoding)
	if strings.Contains(enc, "b64") || strings.Contains(enc, "base64") {
		d, err := base64.StdEncoding.DecodeString(strings.TrimSpace(f.Content))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		data = d
	}
	if strings.HasPrefix(enc, "gz") {
		r, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		if data, err = io.ReadAll(r); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	return data, nil
}

// Mode is the file's permissions, 0644 when unset (cloud-init's default).
func (f File) Mode() (uint32, error) {
	if f.Permissions == "" {
		return 0o644, nil
	}
	m, err := strconv.ParseUint(f.Permissions, 8, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: permissions %q: %w", f.Path, f.Permissions, err)
	}
	return uint32(m), nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
