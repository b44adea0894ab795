"""The Kubernetes lab: an HTTPS Kubernetes API with RBAC, quotas, a Job controller and a
one-node kubelet running Pods as local processes (docs/k8s-lab.md). Lab software:
services never import it; the Site Runtime only knows the kubeconfig it writes."""
