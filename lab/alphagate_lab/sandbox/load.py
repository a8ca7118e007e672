"""Bounded load for a real vLLM server: completions at a fixed concurrency, two prompt mixes.

The mix is how the sandbox moves *natural* n-gram acceptance the way traffic does in
production. With the tiny random model of tools/vllm (measured, n-gram K=4, 24 requests):
`repetitive` = repetitive prompts decoded greedily: the output loops, alpha ~0.98;
`varied` = varied prompts sampled at temperature 0.05: drafts are still proposed (~1 draft
token per generated token) but mostly rejected, alpha ~0.13. Sampling hotter (>= 0.3) makes
n-gram propose almost nothing, which gives *no* alpha rather than a low one. Blending the two
mixes sets any alpha in between (weighted by draft tokens).

Every run stops by itself: after `requests` completions, after `duration_s`, or at the hard
cap `max_duration_s`, whichever comes first.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

import httpx

from alphagate.errors import SandboxError

FAILURE_BACKOFF_SECONDS: Final = 0.2

COMPLETIONS_PATH = "/v1/completions"  # served by vllm.entrypoints.openai.api_server


class Mix(StrEnum):
    """Which prompts a load run sends."""

    REPETITIVE = "repetitive"
    VARIED = "varied"


# Greedy loops (high n-gram alpha); a near-greedy sample keeps drafts coming but rejects them.
DEFAULT_TEMPERATURE: dict[Mix, float] = {Mix.REPETITIVE: 0.0, Mix.VARIED: 0.05}

_REPETITIVE = (
    "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat sat on",
    "for i in range(10): print(i)\nfor i in range(10): print(i)\nfor i in range(10):",
    "red green blue red green blue red green blue red green blue red green",
    "def f(x): return x\ndef f(x): return x\ndef f(x): return x\ndef f(x):",
)

_WORDS = (  # noqa: SIM905 (a word list reads better as text)
    "import class return yield lambda async await socket thread buffer parse token "
    "window kernel cache batch vector matrix origin signal stream bucket quantile "
    "canary latency river mountain violet copper ledger harbor orbit prism quartz"
).split()


def prompt_for(mix: Mix, index: int, seed: int = 0) -> str:
    """The index-th prompt of a mix; deterministic for a given seed."""
    if mix is Mix.REPETITIVE:
        return _REPETITIVE[index % len(_REPETITIVE)]
    rng = random.Random(seed * 1_000_003 + index)
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 24)))


@dataclass
class LoadResult:
    """What a run did. `completion_tokens` is what the server reported in `usage`."""

    mix: Mix
    sent: int = 0
    ok: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    elapsed_s: float = 0.0
    errors: list[str] = field(default_factory=list)  # the first few, for messages

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0


def run_load(
    base_url: str,
    *,
    model: str,
    mix: Mix | str = Mix.REPETITIVE,
    concurrency: int = 4,
    requests: int | None = None,
    duration_s: float | None = None,
    max_tokens: int = 64,
    temperature: float | None = None,
    seed: int = 0,
    request_timeout_s: float = 60.0,
    max_duration_s: float = 600.0,
    stop_event: threading.Event | None = None,
) -> LoadResult:
    """Send completions until `requests` were sent or `duration_s` passed; never unbounded.

    `temperature` defaults to the mix's own (DEFAULT_TEMPERATURE). Failures are counted,
    not raised, so a restarting server shows up as `failed`.
    """
    mix = Mix(mix)
    if requests is None and duration_s is None:
        raise SandboxError("run_load: give requests=N or duration_s=T (a load run is bounded)")
    if concurrency < 1:
        raise SandboxError(f"run_load: concurrency must be >= 1, got {concurrency}")
    if requests is not None and requests < 0:
        raise SandboxError(f"run_load: requests must be >= 0, got {requests}")
    temp = DEFAULT_TEMPERATURE[mix] if temperature is None else temperature
    limit_s = min(duration_s if duration_s is not None else max_duration_s, max_duration_s)
    result = LoadResult(mix=mix)
    lock = threading.Lock()
    stop = stop_event or threading.Event()
    started = time.monotonic()
    deadline = started + limit_s
    url = base_url.rstrip("/") + COMPLETIONS_PATH

    def next_index() -> int | None:
        with lock:
            if stop.is_set() or time.monotonic() >= deadline:
                return None
            if requests is not None and result.sent >= requests:
                return None
            result.sent += 1
            return result.sent - 1

    def worker(client: httpx.Client) -> None:
        while (i := next_index()) is not None:
            body = {
                "model": model,
                "prompt": prompt_for(mix, i, seed),
                "max_tokens": max_tokens,
                "temperature": temp,
                "seed": seed * 1_000_003 + i,
                "ignore_eos": True,
            }
            try:
                resp = client.post(url, json=body)
                resp.raise_for_status()
                usage = resp.json().get("usage") or {}
            except (httpx.HTTPError, ValueError) as exc:
                with lock:
                    result.failed += 1
                    if len(result.errors) < 5:
                        result.errors.append(f"{type(exc).__name__}: {exc}")
                # a stopping or restarting server fails at once: back off instead of spinning
                time.sleep(FAILURE_BACKOFF_SECONDS)
                continue
            with lock:
                result.ok += 1
                result.prompt_tokens += int(usage.get("prompt_tokens", 0))
                result.completion_tokens += int(usage.get("completion_tokens", 0))

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with (
        httpx.Client(timeout=request_timeout_s, limits=limits) as client,
        ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="alphagate-load") as pool,
    ):
        futures = [pool.submit(worker, client) for _ in range(concurrency)]
        for f in futures:
            f.result()
    result.elapsed_s = time.monotonic() - started
    return result
