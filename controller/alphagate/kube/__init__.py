"""Shell code that talks to Kubernetes: client config, the actuator that edits the canary's
args, the CR status, Events, leader election and the CRD. The one rule decided here is which
Memory a unit resumes from (`kube.record`: the Deployment's record is the truth); every
other decision is the core's. docs/architecture.md places each module."""
