package vm

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseUserData(t *testing.T) {
	md := Metadata{InstanceID: "m-1", LocalHostname: "node-1"}
	cases := []struct {
		name    string
		data    string
		wantErr string
		files   map[string]string
		cmds    []Command
	}{
		{name: "kubeadm bootstrap provider's worker", data: "## template: jinja\n#cloud-config\nwrite_files:\n-   path: /run/kubeadm/kubeadm-join-config.yaml\n    owner: root:root\n    permissions: '0640'\n    content: |\n      name: {{ ds.meta_data.local_hostname }}\nruncmd:\n  - kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete\n",
			files: map[string]string{"/run/kubeadm/kubeadm-join-config.yaml": "name: node-1\n"},
			cmds:  []Command{{"/bin/sh", "-c", "kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml  && echo success > /run/cluster-api/bootstrap-success.complete"}}},
		{name: "a command as a list", data: "#cloud-config\nruncmd:\n  - [echo, '{{ v1.local_hostname }}']\n",
			cmds: []Command{{"echo", "{{ v1.local_hostname }}"}}},
		{name: "base64 content", data: "#cloud-config\nwrite_files:\n- path: /etc/x\n  encoding: b64\n  content: aGk=\n", files: map[string]string{"/etc/x": "hi"}},
		{name: "not cloud-config", data: "#!/bin/sh\necho hi\n", wantErr: "not a #cloud-config"},
		{name: "unknown instance data", data: "## template: jinja\n#cloud-config\nruncmd:\n  - echo {{ ds.meta_data.region }}\n", wantErr: "ds.meta_data.region"},
		{name: "a jinja statement", data: "## template: jinja\n#cloud-config\n{% if true %}\nruncmd: []\n{% endif %}\n", wantErr: "jinja statement"},
		{name: "a relative path", data: "#cloud-config\nwrite_files:\n- path: etc/x\n  content: hi\n", wantErr: "not absolute"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cc, err := ParseUserData([]byte(c.data), md)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, f := range cc.WriteFiles {
				b, err := f.Decode()
				if err != nil {
					t.Fatal(err)
				}
				got[f.Path] = string(b)
			}
			if len(c.files) > 0 && !reflect.DeepEqual(got, c.files) {
				t.Errorf("files %v, want %v", got, c.files)
			}
			if len(c.cmds) > 0 && !reflect.DeepEqual(cc.RunCmd, c.cmds) {
				t.Errorf("runcmd %q, want %q", cc.RunCmd, c.cmds)
			}
		})
	}
}

func TestEnvFileValue(t *testing.T) {
	cases := []struct {
		content string
		want    []string
		wantErr bool
	}{
		{`KUBELET_KUBEADM_ARGS="--node-labels=a=b,c=d --pod-infra-container-image=x"`, []string{"--node-labels=a=b,c=d", "--pod-infra-container-image=x"}, false},
		{"OTHER=1\nKUBELET_KUBEADM_ARGS=--a\n", []string{"--a"}, false},
		{"", nil, false},
		{`KUBELET_KUBEADM_ARGS="--a`, nil, true},
	}
	for _, c := range cases {
		got, err := envFileValue(c.content, "KUBELET_KUBEADM_ARGS")
		if (err != nil) != c.wantErr || !reflect.DeepEqual(got, c.want) {
			t.Errorf("envFileValue(%q) = %q, %v; want %q (error %t)", c.content, got, err, c.want, c.wantErr)
		}
	}
}
