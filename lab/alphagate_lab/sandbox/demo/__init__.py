"""`alphagate demo`: the whole loop on 127.0.0.1, with nothing to configure.

It starts a local sandbox and lets the real controller run in it:

* the **Kubernetes API server double** with the demo namespace, the SpeculativeCanary CRD,
  one baseline and one canary Deployment per traffic slice (from the scenario's pools) and
  the SpeculativeCanary (from the policy, with the scenario's timings);
* the **kubelet runner** (:mod:`alphagate_lab.sandbox.kubelet`), which runs each Deployment's
  pods as simulated vLLM engines (:mod:`alphagate_lab.sim`) and restarts them when the actuator
  patches ``--speculative-config``;
* **Prometheus** (Debian's binary, when installed) scraping every pod through a file-SD list
  (labels pod/namespace/deployment/role/slice) and the controller's own /metrics, or else the
  pod-scrape source, which finds the pods through the API;
* the **controller** itself: `alphagate run`'s `Controller` with the real reconciler, actuator
  and status writer over the real `kubernetes` client, in enforce mode.

A scenario (the default one is package data: `alphagate_lab/data/demo-scenario.yaml`) moves the
traffic mix and the load in simulated seconds; ``speed`` compresses the scenario and the
policy's timings together, so the story is the same, only shorter. Scripted faults
(``chaos``) stop Prometheus, make the API server answer 500 and delete a canary pod for a
while; each shows as Error or Inconclusive and never as a flip. At the end a report (Markdown,
PNG timeline, points) is written with :func:`alphagate_lab.report.write`.

:class:`Demo` is the engine; `alphagate_lab.commands.demo` adds the terminal (rich live view,
``--no-live`` lines, ``--json``). Every part is stopped on exit, Ctrl-C included.

    inputs   the scenario and policy, scaled to the demo's speed; the Deployments; Prometheus
    chaos    the scripted faults and when each starts
    view     what the view shows and the result (log lines, decisions, snapshot, options)
    results  transitions, milestones, how each fault showed, the report's notes
    sandbox  the sandbox's parts started in order: API server, Prometheus, pods, kubelet
    engine   Demo: the sandbox, the controller, the scenario's loop
    logfile  the controller's logs to a file for the demo's duration
"""

from alphagate_lab.sandbox.demo.chaos import ChaosRecord, ChaosStep, chaos_plan
from alphagate_lab.sandbox.demo.engine import Demo
from alphagate_lab.sandbox.demo.inputs import (
    DEFAULT_OUT,
    DEFAULT_POLICY,
    DEFAULT_SCENARIO,
    NAMESPACE,
    data_text,
    deployment_objects,
    load_policy,
    load_scenario_text,
    scaled_policy,
)
from alphagate_lab.sandbox.demo.logfile import logging_to
from alphagate_lab.sandbox.demo.view import (
    Decision,
    DemoOptions,
    DemoResult,
    LogLine,
    Snapshot,
    latency_by_slice,
    why_text,
)

__all__ = [
    "DEFAULT_OUT",
    "DEFAULT_POLICY",
    "DEFAULT_SCENARIO",
    "NAMESPACE",
    "ChaosRecord",
    "ChaosStep",
    "Decision",
    "Demo",
    "DemoOptions",
    "DemoResult",
    "LogLine",
    "Snapshot",
    "chaos_plan",
    "data_text",
    "deployment_objects",
    "latency_by_slice",
    "load_policy",
    "load_scenario_text",
    "logging_to",
    "scaled_policy",
    "why_text",
]
