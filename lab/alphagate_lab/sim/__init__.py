"""Simulated vLLM pods that speak vLLM's exact metrics, driven by a seeded decode model.

The simulator is the independent check on the decision core, so it must not import
alphagate.core, sources, kube or reconciler. Entry points:

* ``load_scenario(path)`` / ``parse_scenario(text)``: validated scenario files;
* ``Fleet(scenario, seed=..., tick=...)``: in-process pods; ``run()`` yields snapshots,
  ``advance_to``/``snapshot``/``truth`` step it by hand; ``Fleet(..., scrapes=True)`` also
  keeps what Prometheus would have scraped (``scraped(pod)``, ``prometheus_snapshot()``,
  at the scenario's ``prometheus.scrape_interval`` and ``lag``);
* ``SimServer(fleet, speed=..., file_sd=...)``: each pod on its own 127.0.0.1 port;
* ``render(snapshot)``: a pod's ``/metrics`` page; ``record``/``read_recording``: JSONL.

Traffic is per request (own acceptance, log-normal lengths), pods stall now and then, and
timeline events may ramp; ``scenarios/README.md`` documents the fields and their defaults.
"""

from alphagate_lab.sim.decode import DecodeParams, Load
from alphagate_lab.sim.exposition import render
from alphagate_lab.sim.fleet import Fleet, FleetEvent, FleetSnapshot
from alphagate_lab.sim.pod import (
    PodSnapshot,
    PodSpec,
    SimPod,
    SpecConfig,
    parse_speculative_args,
    spec_args,
)
from alphagate_lab.sim.recording import Recording, RecordingWriter, read_recording, record
from alphagate_lab.sim.scenario import Scenario, load_scenario, parse_scenario
from alphagate_lab.sim.server import SimServer
from alphagate_lab.sim.truth import PodTruth, SliceTruth, Truth

__all__ = [
    "DecodeParams",
    "Fleet",
    "FleetEvent",
    "FleetSnapshot",
    "Load",
    "PodSnapshot",
    "PodSpec",
    "PodTruth",
    "Recording",
    "RecordingWriter",
    "Scenario",
    "SimPod",
    "SimServer",
    "SliceTruth",
    "SpecConfig",
    "Truth",
    "load_scenario",
    "parse_scenario",
    "parse_speculative_args",
    "read_recording",
    "record",
    "render",
    "spec_args",
]
