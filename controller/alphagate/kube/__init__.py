"""Shell code that talks to Kubernetes: client config, the actuator that edits the canary's
args, the CR status, Events, leader election and the CRD. Nothing here decides anything."""
