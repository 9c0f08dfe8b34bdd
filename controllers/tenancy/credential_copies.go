package tenancy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	cpv1 "github.com/cozystack/computeplane/api/v1alpha1"
)

// A tenant can read its plane's applier Secret (it lives in the tenant namespace, where
// Flux reads it), so it can write the credential into a Secret of another name, which a
// Flux object naming nothing like an applier Secret would then carry into the plane. The
// property kept is on content: no Secret but the operator's may hold a plane's token,
// wherever in it and however written. A ServiceAccount token is a JWT the plane's API
// server signed over its exact bytes, so whatever reads the Secret (Flux's kubeconfig
// parser, a chart's valuesFrom) must find those bytes, verbatim, in a value, in a YAML
// or JSON string of it (quoting, escapes, folded lines and aliases resolved as a YAML
// parser resolves them), or under one layer of base64.

// jwtShape matches a compact JWS whose header and payload are JSON objects, as every
// Kubernetes ServiceAccount token is ("eyJ" is base64 of `{"`).
var jwtShape = regexp.MustCompile(`eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+`)

// CarriedCredential is a plane token found in a Secret: under which key and to whom the
// token says it was issued.
type CarriedCredential struct{ Key, Subject string }

// PlaneCredentialIn finds the first token in data whose subject (unverified: a forged
// claim only refuses its own Secret) isPlaneSubject says is a plane's. Keys are judged
// in order, so the answer is stable. Pure.
func PlaneCredentialIn(data map[string][]byte, isPlaneSubject func(string) bool) (CarriedCredential, bool) {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if sub, ok := tokenIn(data[k], isPlaneSubject); ok {
			return CarriedCredential{Key: k, Subject: sub}, true
		}
	}
	return CarriedCredential{}, false
}

// tokenIn looks for a plane token in one value: in its bytes, under a layer of base64
// (the whole value, or any run of base64 in it), and, when the value holds a backslash
// (the one way a YAML or JSON parser turns bytes into a token's bytes that were not
// there: escapes, escaped line breaks), in every string a YAML parse yields. Folding
// and block scalars only join a split token with spaces or newlines, which no reader can
// use; an alias repeats bytes already there.
func tokenIn(value []byte, isPlaneSubject func(string) bool) (string, bool) {
	seen := map[string]bool{}
	var found string
	try := func(b []byte) bool {
		for _, jwt := range jwtShape.FindAll(b, -1) {
			if seen[string(jwt)] {
				continue
			}
			seen[string(jwt)] = true
			if sub := jwtSubject(jwt); sub != "" && isPlaneSubject(sub) {
				found = sub
				return true
			}
		}
		return false
	}
	layers := func(b []byte) bool {
		if try(b) || try(unbase64(b)) {
			return true
		}
		for _, run := range base64Run.FindAll(b, -1) {
			if try(unbase64(run)) {
				return true
			}
		}
		return false
	}
	if layers(value) {
		return found, true
	}
	if bytes.IndexByte(value, '\\') < 0 {
		return "", false
	}
	var doc any
	if yaml.Unmarshal(value, &doc) != nil {
		return "", false
	}
	for _, s := range stringsOf(doc) {
		if layers([]byte(s)) {
			return found, true
		}
	}
	return "", false
}

// base64Run matches a run of base64 long enough to hold a token's first two parts.
var base64Run = regexp.MustCompile(`[A-Za-z0-9+/_-]{40,}={0,2}`)

// jwtSubject is the sub claim of a compact JWS's payload, or "".
func jwtSubject(jwt []byte) string {
	parts := bytes.Split(jwt, []byte("."))
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(string(parts[1]), "="))
	if err != nil {
		return ""
	}
	var claims struct {
		Subject string `json:"sub"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	return claims.Subject
}

// unbase64 decodes b as base64 (either alphabet, padded or not, line breaks ignored),
// or returns nil.
func unbase64(b []byte) []byte {
	s := strings.Join(strings.Fields(string(b)), "")
	if len(s) < 16 {
		return nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if out, err := enc.DecodeString(s); err == nil {
			return out
		}
	}
	return nil
}

// stringsOf lists every string in a parsed YAML document, keys included.
func stringsOf(doc any) []string {
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case map[string]any:
			for k, x := range v {
				out = append(out, k)
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return out
}

// CredentialCopyMessage is admission's refusal of a Secret carrying a plane's token.
func CredentialCopyMessage(namespace, name string, c CarriedCredential) string {
	return fmt.Sprintf("Secret %s/%s carries a ComputePlane's credential (a token issued to %s, under key %q): only the operator's applier Secret (<plane>%s) may hold it, and only a placement release may apply with it, held, counted and uninstalled; name that Secret as a placement release's spec.kubeConfig.secretRef instead of copying it",
		namespace, name, c.Subject, c.Key, cpv1.ApplierKubeconfigSuffix)
}
