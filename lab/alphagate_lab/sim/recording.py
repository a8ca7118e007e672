"""JSONL recordings of a simulated fleet, for backtests and benchmarks.

Format (one JSON object per line, UTF-8):

1. A header, first line::

       {"type": "header", "format": "alphagate-sim-recording", "version": 1,
        "scenario": "<name>", "scenario_spec": {...validated scenario...},
        "seed": 7, "tick": 15.0, "interval": 15.0, "scrape_interval": 15.0,
        "prometheus_lag": 0.0, "start_epoch": 1800000000.0,
        "model_name": "...", "buckets": {"vllm:inter_token_latency_seconds": [0.01, ...], ...}}

2. Then, in time order, ``snapshot`` and ``event`` lines::

       {"type": "event", "t": 600.0, "kind": "timeline", "message": "...", "pod": ""}
       {"type": "snapshot", "t": 615.0, "time": 1800000615.0,
        "pods": [{"labels": {"pod": ..., "namespace": ..., "deployment": ...,
                             "role": "canary"|"baseline", "slice": ...},
                  "model_name": ..., "phase": "ready"|"loading",
                  "started": <unix time of the process start = every _created value>,
                  "restarts": 0, "spec_k": 5 | null,
                  "counters": {"vllm:generation_tokens_total": 123, ...},
                  "per_pos": [..K values..], "success": {"stop": 3, "length": 1, ...},
                  "gauges": {"vllm:num_requests_running": 7, ...},
                  "histograms": {"vllm:inter_token_latency_seconds":
                                   {"buckets": [cumulative counts, last is +Inf],
                                    "sum": 1.5, "count": 99}, ...}}, ...],
        "truth": {"slices": {"chat": {"alpha": 0.7, "pods_alpha": 0.7, "share": 1.0,
                                      "arrival_rate": 24.0, "concurrency": null,
                                      "ready_pods": 4, "generated_tokens": 123456,
                                      "speculating_pods": 1}},
                  "pods": {"chat-canary-0": {"slice": ..., "role": ..., "ready": true,
                                             "k": 5, "expected_alpha": 0.7, "alpha": 0.71,
                                             "batch": 7.1, "passes": 1,
                                             "mean_step": 0.017, "tokens_per_step": 4.5,
                                             "time_per_token": 0.0038, "tpot_p99": 0.007,
                                             "speculating": true, "batch_alpha": 0.69,
                                             "stalled": 0.0, "running": 7,
                                             "generated_tokens": 34567}, ...}}}

``t`` is simulated seconds since the start; ``time`` = ``start_epoch + t``. Counters are
cumulative since the pod's last (re)start, exactly as a scrape would show them: a pod's
counters drop when it restarts (``started`` and ``restarts`` change), spec-decode keys and
``per_pos`` exist only while speculation is on (``spec_k`` not null), and a pod that is
loading has ``phase: "loading"`` (a scrape would fail). ``truth`` is what the scenario set
(slice alpha, traffic) and what each pod really did in its last tick; ``generated_tokens``
count since the start of the run and, unlike the counters, survive restarts.
``scrape_interval`` and ``prometheus_lag`` are the scenario's Prometheus path (a consumer
that plays Prometheus reads each pod every ``scrape_interval``, ``prometheus_lag`` late).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from alphagate import vllm
from alphagate.errors import ScenarioError
from alphagate_lab.sim.fleet import Fleet, FleetEvent, FleetSnapshot
from alphagate_lab.sim.pod import PodSnapshot
from alphagate_lab.sim.truth import PodTruth, SliceTruth, Truth

FORMAT = "alphagate-sim-recording"
VERSION = 1


class RecordingWriter:
    """Appends snapshots and events to a recording file."""

    def __init__(self, path: str | Path, fleet: Fleet, *, interval: float) -> None:
        self.path = Path(path)
        try:
            self._fh: IO[str] = self.path.open("w", encoding="utf-8")
        except OSError as exc:
            raise ScenarioError(f"{self.path}: cannot write recording: {exc.strerror}") from exc
        self.count = 0
        header = {
            "type": "header",
            "format": FORMAT,
            "version": VERSION,
            "scenario": fleet.scenario.name,
            "scenario_spec": fleet.scenario.model_dump(mode="json"),
            "seed": fleet.seed,
            "tick": fleet.tick,
            "interval": interval,
            "scrape_interval": fleet.scrape_interval,
            "prometheus_lag": fleet.prometheus_lag,
            "start_epoch": fleet.epoch0,
            "model_name": fleet.scenario.model_name,
            "buckets": {k: list(v) for k, v in vllm.HISTOGRAM_BUCKETS.items()},
        }
        self._line(header)

    def _line(self, obj: dict[str, Any]) -> None:
        self._fh.write(json.dumps(obj, separators=(",", ":")) + "\n")

    def write_events(self, events: list[FleetEvent]) -> None:
        for ev in events:
            self._line(
                {"type": "event", "t": ev.t, "kind": ev.kind, "message": ev.message, "pod": ev.pod}
            )

    def write(self, snap: FleetSnapshot) -> None:
        self._line(
            {
                "type": "snapshot",
                "t": snap.t,
                "time": snap.time,
                "pods": [p.to_json() for p in snap.pods],
                "truth": snap.truth.to_json(),
            }
        )
        self.count += 1

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def record(
    fleet: Fleet, path: str | Path, *, duration: float | None = None, every: float = 15.0
) -> int:
    """Run ``fleet`` in-process and write a snapshot every ``every`` seconds; returns the count."""
    with RecordingWriter(path, fleet, interval=every) as writer:
        for snap in fleet.run(duration, every=every):
            writer.write_events(fleet.drain_events())
            writer.write(snap)
        return writer.count


@dataclass
class Recording:
    header: dict[str, Any]
    snapshots: list[FleetSnapshot] = field(default_factory=list)
    events: list[FleetEvent] = field(default_factory=list)


def _truth_from_json(t: float, data: dict[str, Any]) -> Truth:
    slices = {
        name: SliceTruth(
            name=name,
            alpha=float(s["alpha"]),
            share=float(s["share"]),
            arrival_rate=float(s["arrival_rate"]),
            concurrency=s["concurrency"],
            ready_pods=int(s["ready_pods"]),
            pods_alpha=s.get("pods_alpha"),
            generated_tokens=int(s.get("generated_tokens", 0)),
            speculating_pods=int(s.get("speculating_pods", 0)),
        )
        for name, s in data["slices"].items()
    }
    pods = {name: PodTruth(pod=name, **p) for name, p in data["pods"].items()}
    return Truth(t, slices, pods)


def iter_recording(path: str | Path) -> Iterator[dict[str, Any] | FleetSnapshot | FleetEvent]:
    """Stream a recording: the header dict first, then snapshots and events in order."""
    p = Path(path)
    try:
        fh = p.open(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read recording: {exc.strerror}") from exc
    with fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                kind = obj.get("type")
                if lineno == 1:
                    if kind != "header" or obj.get("format") != FORMAT:
                        raise ValueError(f"not an {FORMAT} file (no header line)")
                    if obj.get("version") != VERSION:
                        raise ValueError(f"unsupported version {obj.get('version')!r}")
                    yield obj
                elif kind == "snapshot":
                    t, time = float(obj["t"]), float(obj["time"])
                    yield FleetSnapshot(
                        t=t,
                        time=time,
                        pods=[PodSnapshot.from_json(d, t=t, time=time) for d in obj["pods"]],
                        truth=_truth_from_json(t, obj["truth"]),
                    )
                elif kind == "event":
                    yield FleetEvent(
                        float(obj["t"]), str(obj["kind"]), str(obj["message"]), str(obj["pod"])
                    )
                else:
                    raise ValueError(f"unknown line type {kind!r}")
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise ScenarioError(f"{p}:{lineno}: bad recording line: {exc}") from exc


def read_recording(path: str | Path) -> Recording:
    """Load a whole recording into memory."""
    it = iter_recording(path)
    header = next(it, None)
    if not isinstance(header, dict):
        raise ScenarioError(f"{path}: empty recording")
    rec = Recording(header)
    for item in it:
        if isinstance(item, FleetSnapshot):
            rec.snapshots.append(item)
        elif isinstance(item, FleetEvent):
            rec.events.append(item)
    return rec
