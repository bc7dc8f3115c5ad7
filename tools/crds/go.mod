// The upstream projects whose CustomResourceDefinitions the workbench renders objects for. Nothing
// here is built: the tests read each module's CRD files from the Go module cache (tests/upstream.py
// says which file of which module), so these versions are the ones the suite is proven against.
// A module of its own, apart from the control plane's tools, so their dependencies never meet.
module github.com/cube-jupyter/cube-jupyter/tools/crds

go 1.26

require (
	github.com/argoproj/argo-workflows/v4 v4.0.5
	github.com/kserve/kserve v0.16.0
	github.com/kubeflow/katib v0.19.0
	github.com/kubeflow/trainer/v2 v2.3.0
	github.com/kubeflow/training-operator v1.9.4
	istio.io/api v1.32.0
	sigs.k8s.io/jobset v0.12.0
	sigs.k8s.io/kueue v0.17.0
)
