// celeval: evaluate ValidatingAdmissionPolicies on AdmissionReview requests with the API server's own
// machinery (k8s.io/apiserver of the test cluster's Kubernetes version), outside an API server.
//
// What runs is what kube-apiserver runs for a policy and its binding: the policy is compiled by the
// ValidatingAdmissionPolicy plugin's own compilePolicy (its CEL environment, library functions, variables
// composition, matchConditions, messageExpression, cost limits), matched by the plugin's policy matcher
// (resource rules with matchPolicy, the binding's namespaceSelector against the namespaces given), and
// evaluated by the plugin's Validator with the API server's per-binding runtime cost budget. Only the
// dispatcher around them is not used: it stops at the first denial, and this harness reports every
// validation.
//
// Protocol: one JSON object per line on stdin, one answer per line on stdout, in order.
//
//	{"namespaces": [Namespace, ...]}                   the cluster's namespaces (replace the previous set)
//	  -> {"namespaces": N}
//	{"define": "key", "policy": VAP, "binding": VAPB}  compile a policy under a key
//	  -> {"defined": "key", "error": ""}
//	{"review": AdmissionRequest, "policies": ["key", ...]}
//	  -> {"object": {...}, "oldObject": {...}, "invalid": "", "results": [{"policy": "key",
//	      "matched": true, "skipped": "", "error": "", "validations": [{"passed": b, "message": s,
//	      "error": s}, ...]}, ...]}
//
// A review's object and oldObject are decoded into the request kind's Go type (a custom resource's into an
// unstructured object), as the API server decodes a request body, and echoed back as the policies saw them (`invalid` says why an object could not be
// decoded: the API server would have refused the request before admission). Defaulting is not applied.
// `skipped` says why a policy did not apply: "resource rules", "namespace selector", "matchConditions".
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	_ "unsafe" // go:linkname

	admissionv1 "k8s.io/api/admission/v1"
	regv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/policy/generic"
	"k8s.io/apiserver/pkg/admission/plugin/policy/matching"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// compilePolicy is the ValidatingAdmissionPolicy plugin's own compiler (k8s.io/apiserver
// pkg/admission/plugin/policy/validating/plugin.go), the function kube-apiserver's policy source calls for
// every policy it loads. Linked by name rather than copied so that a Kubernetes bump changes both at once.
//
//go:linkname compilePolicy k8s.io/apiserver/pkg/admission/plugin/policy/validating.compilePolicy
func compilePolicy(policy *validating.Policy) validating.Validator

type policy struct {
	vap       *regv1.ValidatingAdmissionPolicy
	binding   *regv1.ValidatingAdmissionPolicyBinding
	validator validating.Validator
}

type validation struct {
	Passed  bool   `json:"passed"`
	Message string `json:"message"`
	Error   string `json:"error"`
}

type result struct {
	Policy      string       `json:"policy"`
	Matched     bool         `json:"matched"`
	Skipped     string       `json:"skipped"`
	Error       string       `json:"error"`
	Validations []validation `json:"validations"`
}

type answer struct {
	Namespaces *int            `json:"namespaces,omitempty"`
	Defined    string          `json:"defined,omitempty"`
	Object     json.RawMessage `json:"object,omitempty"`
	OldObject  json.RawMessage `json:"oldObject,omitempty"`
	Invalid    string          `json:"invalid,omitempty"`
	Results    []result        `json:"results,omitempty"`
	Error      string          `json:"error,omitempty"`
}

type line struct {
	Namespaces []corev1.Namespace                      `json:"namespaces"`
	Define     string                                  `json:"define"`
	Policy     *regv1.ValidatingAdmissionPolicy        `json:"policy"`
	Binding    *regv1.ValidatingAdmissionPolicyBinding `json:"binding"`
	Review     *admissionv1.AdmissionRequest           `json:"review"`
	Policies   []string                                `json:"policies"`
}

// noOpinion: the policies read no `authorizer`; kube-apiserver passes its caching authorizer here.
type noOpinion struct{}

func (noOpinion) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionNoOpinion, "", nil
}

type harness struct {
	policies   map[string]*policy
	namespaces cache.Indexer
	matcher    generic.PolicyMatcher
	objects    admission.ObjectInterfaces
	decoder    runtime.Decoder
}

func newHarness() *harness {
	ns := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	return &harness{
		policies:   map[string]*policy{},
		namespaces: ns,
		// No client: a namespace missing from the lister is answered before matching (review).
		matcher: generic.NewPolicyMatcher(matching.NewMatcher(corelisters.NewNamespaceLister(ns), nil)),
		objects: admission.NewObjectInterfacesFromScheme(scheme.Scheme),
		decoder: scheme.Codecs.UniversalDeserializer(),
	}
}

// defaultMatchResources: what the API server's defaulting sets on a stored policy or binding
// (k8s.io/kubernetes pkg/apis/admissionregistration/v1 SetDefaults_MatchResources and
// SetDefaults_ValidatingAdmissionPolicySpec); the matcher refuses nil selectors.
func defaultMatchResources(m *regv1.MatchResources) {
	if m.MatchPolicy == nil {
		p := regv1.Equivalent
		m.MatchPolicy = &p
	}
	if m.NamespaceSelector == nil {
		m.NamespaceSelector = &metav1.LabelSelector{}
	}
	if m.ObjectSelector == nil {
		m.ObjectSelector = &metav1.LabelSelector{}
	}
}

func (h *harness) define(key string, vap *regv1.ValidatingAdmissionPolicy, b *regv1.ValidatingAdmissionPolicyBinding) answer {
	if vap == nil || b == nil {
		return answer{Defined: key, Error: "define needs policy and binding"}
	}
	if vap.Spec.FailurePolicy == nil {
		f := regv1.Fail
		vap.Spec.FailurePolicy = &f
	}
	if vap.Spec.MatchConstraints != nil {
		defaultMatchResources(vap.Spec.MatchConstraints)
	}
	if b.Spec.MatchResources != nil {
		defaultMatchResources(b.Spec.MatchResources)
	}
	v := compilePolicy(vap)
	h.policies[key] = &policy{vap: vap, binding: b, validator: v}
	out := answer{Defined: key}
	if err := v.CompileError(); err != nil {
		out.Error = err.Error()
	}
	return out
}

func (h *harness) setNamespaces(list []corev1.Namespace) answer {
	for _, o := range h.namespaces.List() {
		_ = h.namespaces.Delete(o)
	}
	for i := range list {
		_ = h.namespaces.Add(&list[i])
	}
	n := len(list)
	return answer{Namespaces: &n}
}

// decode: the request's raw object as the API server decodes a request body into the kind's Go type.
func (h *harness) decode(raw runtime.RawExtension, gvk schema.GroupVersionKind) (runtime.Object, json.RawMessage, error) {
	if len(raw.Raw) == 0 || string(raw.Raw) == "null" {
		return nil, nil, nil
	}
	into, err := scheme.Scheme.New(gvk)
	if runtime.IsNotRegisteredError(err) {
		// A custom resource (a JobSet): the API server hands admission an unstructured object.
		into, err = &unstructured.Unstructured{}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	obj, _, err := h.decoder.Decode(raw.Raw, &gvk, into)
	if err != nil {
		return nil, nil, err
	}
	if got := obj.GetObjectKind().GroupVersionKind(); got != gvk {
		return nil, nil, fmt.Errorf("the object is a %s, the request says %s", got, gvk)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, nil, err
	}
	js, err := json.Marshal(u)
	return obj, js, err
}

func options(op admissionv1.Operation, raw runtime.RawExtension) (runtime.Object, error) {
	var o runtime.Object
	switch op {
	case admissionv1.Create:
		o = &metav1.CreateOptions{}
	case admissionv1.Update:
		o = &metav1.UpdateOptions{}
	case admissionv1.Delete:
		o = &metav1.DeleteOptions{}
	default:
		return nil, nil
	}
	if len(raw.Raw) > 0 && string(raw.Raw) != "null" {
		if err := json.Unmarshal(raw.Raw, o); err != nil {
			return nil, fmt.Errorf("options: %w", err)
		}
	}
	return o, nil
}

func (h *harness) review(r *admissionv1.AdmissionRequest, keys []string) answer {
	var out answer
	gvk := schema.GroupVersionKind{Group: r.Kind.Group, Version: r.Kind.Version, Kind: r.Kind.Kind}
	gvr := schema.GroupVersionResource{Group: r.Resource.Group, Version: r.Resource.Version, Resource: r.Resource.Resource}
	obj, objJSON, err := h.decode(r.Object, gvk)
	if err != nil {
		out.Invalid = "object: " + err.Error()
		return out
	}
	old, oldJSON, err := h.decode(r.OldObject, gvk)
	if err != nil {
		out.Invalid = "oldObject: " + err.Error()
		return out
	}
	out.Object, out.OldObject = objJSON, oldJSON
	opts, err := options(r.Operation, r.Options)
	if err != nil {
		out.Invalid = err.Error()
		return out
	}
	info := &user.DefaultInfo{Name: r.UserInfo.Username, UID: r.UserInfo.UID, Groups: r.UserInfo.Groups}
	if len(r.UserInfo.Extra) > 0 {
		info.Extra = map[string][]string{}
		for k, v := range r.UserInfo.Extra {
			info.Extra[k] = v
		}
	}
	dryRun := r.DryRun != nil && *r.DryRun
	attr := admission.NewAttributesRecord(obj, old, gvk, r.Namespace, r.Name, gvr, r.SubResource,
		admission.Operation(r.Operation), opts, dryRun, info)
	for _, key := range keys {
		out.Results = append(out.Results, h.evaluate(key, attr))
	}
	return out
}

// evaluate: what kube-apiserver's ValidatingAdmissionPolicy dispatcher does for one policy and its binding
// (k8s.io/apiserver pkg/admission/plugin/policy/validating/dispatcher.go Dispatch), every decision kept.
func (h *harness) evaluate(key string, attr admission.Attributes) result {
	res := result{Policy: key}
	p, ok := h.policies[key]
	if !ok {
		res.Error = "no policy defined as " + key
		return res
	}
	if ns := attr.GetNamespace(); ns != "" {
		if _, found, _ := h.namespaces.GetByKey(ns); !found {
			res.Error = fmt.Sprintf("namespace %q is not among the namespaces given", ns)
			return res
		}
	}
	matches, matchResource, matchKind, err := h.matcher.DefinitionMatches(attr, h.objects, validating.NewValidatingAdmissionPolicyAccessor(p.vap))
	if err != nil {
		res.Error = "policy: " + err.Error()
		return res
	}
	if !matches {
		res.Skipped = "resource rules"
		return res
	}
	matches, err = h.matcher.BindingMatches(attr, h.objects, validating.NewValidatingAdmissionPolicyBindingAccessor(p.binding))
	if err != nil {
		res.Error = "binding: " + err.Error()
		return res
	}
	if !matches {
		res.Skipped = "namespace selector"
		return res
	}
	versioned, err := admission.NewVersionedAttributes(attr, matchKind, h.objects)
	if err != nil {
		res.Error = "failed to convert object version: " + err.Error()
		return res
	}
	var namespace *corev1.Namespace
	if ns := attr.GetNamespace(); ns != "" {
		if namespace, err = h.matcher.GetNamespace(context.Background(), ns); err != nil {
			res.Error = err.Error()
			return res
		}
	}
	out := p.validator.Validate(context.Background(), matchResource, versioned, nil, namespace,
		celconfig.RuntimeCELCostBudget, noOpinion{})
	if len(out.Decisions) == 0 {
		res.Skipped = "matchConditions"
		return res
	}
	res.Matched = true
	if len(out.Decisions) != len(p.vap.Spec.Validations) {
		// A matchCondition's error, a compile error of the policy, the cost budget: one decision for all.
		res.Error = out.Decisions[0].Message
		return res
	}
	for _, d := range out.Decisions {
		v := validation{Passed: d.Action == validating.ActionAdmit && d.Evaluation == validating.EvalAdmit}
		switch d.Evaluation {
		case validating.EvalError:
			v.Error = d.Message
		case validating.EvalDeny:
			v.Message = d.Message
		}
		res.Validations = append(res.Validations, v)
	}
	return res
}

func main() {
	h := newHarness()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 256<<20)
	w := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(w)
	for in.Scan() {
		var l line
		var out answer
		if err := json.Unmarshal(in.Bytes(), &l); err != nil {
			out.Error = "bad input line: " + err.Error()
		} else if l.Namespaces != nil {
			out = h.setNamespaces(l.Namespaces)
		} else if l.Define != "" {
			out = h.define(l.Define, l.Policy, l.Binding)
		} else if l.Review != nil {
			out = h.review(l.Review, l.Policies)
		} else {
			out.Error = "a line holds namespaces, define or review"
		}
		if err := enc.Encode(out); err != nil {
			fmt.Fprintln(os.Stderr, "celeval:", err)
			os.Exit(1)
		}
		// One answer per line, flushed: the caller may write its next line only after reading this one.
		if err := w.Flush(); err != nil {
			fmt.Fprintln(os.Stderr, "celeval:", err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "celeval:", err)
		os.Exit(1)
	}
}
