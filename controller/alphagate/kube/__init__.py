"""Shell code that talks to Kubernetes. The one rule decided here is which Memory a unit
resumes from (`kube.record`); every other decision is the core's."""
