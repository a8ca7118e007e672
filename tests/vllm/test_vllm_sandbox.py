"""VllmServer and the load generator without vLLM: argument mapping, lifecycle, bounds.

A stand-in "python" in a temporary vLLM home runs a stdlib HTTP server speaking the few
endpoints used (/health, /v1/completions, /metrics), so process-group handling, readiness
polling, logs and the load loop are exercised on real processes in a second or two.
The real server is covered by test_vllm_real.py.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from alphagate.errors import SandboxError
from alphagate_lab.sandbox.load import DEFAULT_TEMPERATURE, Mix, prompt_for, run_load
from alphagate_lab.sandbox.vllm_server import (
    DEFAULT_EXTRA_ARGS,
    VllmServer,
    free_port,
    vllm_available,
    vllm_home,
    vllm_unavailable_reason,
)

SPEC = {"method": "ngram", "num_speculative_tokens": 4}

FAKE_SERVER = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    mode = os.environ.get("FAKE_MODE", "ok")
    print("fake vllm", " ".join(args), flush=True)
    if mode == "crash":
        print("boom: cannot load model", flush=True)
        sys.exit(3)
    # A child in the same process group, like vLLM's engine core.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["FAKE_CHILD_PID_FILE"], "w") as f:
        f.write(str(child.pid))
    started = time.monotonic()
    requests = 0

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code, body, ctype="application/json"):
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                ready = time.monotonic() - started > 0.3
                self._send(200 if ready else 503, "")
            elif self.path == "/metrics":
                self._send(200, f"vllm:request_success_total {requests}\\n", "text/plain")
            else:
                self._send(404, "{}")

        def do_POST(self):
            global requests
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if mode == "fail" or body.get("model") != "tiny":
                self._send(500, '{"error": "nope"}')
                return
            requests += 1
            n = body["max_tokens"]
            self._send(200, json.dumps({"usage": {"prompt_tokens": 3, "completion_tokens": n},
                                        "echo": body}))

    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


@pytest.fixture
def fake_home(tmp_path: Path) -> Path:
    """A vLLM home that setup.sh would have produced, with a stand-in interpreter."""
    home = tmp_path / "vllm-home"
    (home / "venv" / "bin").mkdir(parents=True)
    (home / "model").mkdir()
    (home / "model" / "config.json").write_text("{}")
    (home / ".stamp").write_text("test\n")
    script = tmp_path / "fake_vllm.py"
    script.write_text(FAKE_SERVER)
    python = home / "venv" / "bin" / "python"
    # Drop the `-m MODULE` the real command line carries; keep the server's args.
    python.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{script}" "$@"\n')
    python.chmod(0o755)
    return home


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of nobody we wait for still "exists"; check its state.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_vllm_sandbox_argv_binds_loopback_and_carries_spec_config() -> None:
    on = VllmServer(8123, served_model_name="chat", speculative_config=SPEC, home=Path("/h"))
    assert on.argv[:3] == [
        "/h/venv/bin/python",
        "-m",
        "vllm.entrypoints.launchers.api_server.entry",
    ]
    assert on.argv[3:] == on.args
    args = on.args
    assert args[args.index("--host") + 1] == "127.0.0.1"
    assert args[args.index("--port") + 1] == "8123"
    assert args[args.index("--model") + 1] == "/h/model"
    assert json.loads(args[args.index("--speculative-config") + 1]) == SPEC
    off = VllmServer(8123, served_model_name="chat", home=Path("/h"))
    assert "--speculative-config" not in off.argv
    assert off.args[-len(DEFAULT_EXTRA_ARGS) :] == list(DEFAULT_EXTRA_ARGS)
    env = on.env
    assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_CACHE_ROOT"] == "/h/cache"


def test_vllm_sandbox_from_args_maps_deployment_container_args() -> None:
    container_args = [
        "--model=/models/llama",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--served-model-name",
        "chat",
        "--max-num-seqs",
        "16",
        "--speculative-config",
        json.dumps(SPEC),
    ]
    s = VllmServer.from_args(9001, container_args, home=Path("/h"))
    assert s.served_model_name == "chat"
    assert s.speculative_config == SPEC
    args = s.args
    assert args.count("--max-num-seqs") == 1 and args[args.index("--max-num-seqs") + 1] == "16"
    assert args[args.index("--host") + 1] == "127.0.0.1"
    assert args[args.index("--port") + 1] == "9001"
    assert "/models/llama" not in " ".join(args)
    # Turning speculation off is removing the flag: the mapped server has none.
    off = VllmServer.from_args(9001, container_args[:-2], home=Path("/h"))
    assert off.speculative_config is None and "--speculative-config" not in off.args


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--speculative-config", "{not json"], "--speculative-config is not JSON"),
        (["--speculative-config", "[1, 2]"], "must be a JSON object"),
    ],
)
def test_vllm_sandbox_from_args_rejects_bad_spec_config(args: list[str], needle: str) -> None:
    with pytest.raises(SandboxError, match=needle):
        VllmServer.from_args(9001, args, home=Path("/h"))


def test_vllm_sandbox_refuses_owned_flags_in_extra_args() -> None:
    with pytest.raises(SandboxError, match="must not set --port"):
        VllmServer(9001, served_model_name="m", extra_args=["--port", "1"])
    with pytest.raises(SandboxError, match="out of range"):
        VllmServer(0, served_model_name="m")


def test_vllm_sandbox_home_and_availability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_home: Path
) -> None:
    monkeypatch.setenv("ALPHAGATE_VLLM_HOME", str(tmp_path / "nowhere"))
    assert vllm_home() == tmp_path / "nowhere"
    reason = vllm_unavailable_reason()
    assert reason is not None and "setup.sh" in reason and "nowhere" in reason
    assert not vllm_available()
    with pytest.raises(SandboxError, match=r"setup\.sh"):
        VllmServer(free_port(), served_model_name="m").start()
    assert vllm_available(fake_home)
    (fake_home / "model" / "config.json").unlink()
    assert "tiny model is missing" in (vllm_unavailable_reason(fake_home) or "")


def test_vllm_sandbox_lifecycle_kills_the_process_group(fake_home: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    server = VllmServer(
        free_port(),
        served_model_name="tiny",
        speculative_config=SPEC,
        home=fake_home,
        log_dir=tmp_path,
        env={"FAKE_CHILD_PID_FILE": str(pid_file)},
    )
    with pytest.raises(SandboxError, match="before start"):
        server.wait_ready(1)
    server.start()
    try:
        assert server.wait_ready(30) >= 0
        assert server.running()
        assert server.log_path is not None
        assert "fake vllm" in server.log_path.read_text()
        with pytest.raises(SandboxError, match="already running"):
            server.start()
        child = int(pid_file.read_text())
        assert _alive(child)
    finally:
        server.stop(timeout_s=5)
    assert not server.running()
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "a child of the server outlived stop()"
    assert server.stop() is not None  # idempotent


def test_vllm_sandbox_early_exit_names_the_log(fake_home: Path, tmp_path: Path) -> None:
    server = VllmServer(
        free_port(),
        served_model_name="tiny",
        home=fake_home,
        log_dir=tmp_path,
        env={"FAKE_MODE": "crash", "FAKE_CHILD_PID_FILE": str(tmp_path / "x")},
    )
    server.start()
    try:
        with pytest.raises(SandboxError, match=r"(?s)exited with code 3 .*boom: cannot load model"):
            server.wait_ready(30)
    finally:
        server.stop()


def test_vllm_sandbox_port_in_use_is_a_clear_error(fake_home: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(SandboxError, match=f"127.0.0.1:{port} is already in use"):
            VllmServer(port, served_model_name="tiny", home=fake_home).start()


def test_vllm_sandbox_load_is_bounded_and_counts(fake_home: Path, tmp_path: Path) -> None:
    server = VllmServer(
        free_port(),
        served_model_name="tiny",
        home=fake_home,
        log_dir=tmp_path,
        env={"FAKE_CHILD_PID_FILE": str(tmp_path / "c")},
    )
    server.start()
    try:
        server.wait_ready(30)
        res = run_load(
            server.url, model="tiny", mix="varied", concurrency=3, requests=10, max_tokens=7
        )
        assert (res.sent, res.ok, res.failed) == (10, 10, 0)
        assert res.completion_tokens == 70 and res.prompt_tokens == 30
        bad = run_load(server.url, model="other", concurrency=2, requests=4)
        assert (bad.ok, bad.failed) == (0, 4) and "500" in bad.errors[0]
        timed = run_load(server.url, model="tiny", concurrency=2, duration_s=0.5)
        assert timed.ok > 0 and timed.elapsed_s < 5
    finally:
        server.stop()
    down = run_load(server.url, model="tiny", concurrency=2, requests=3, request_timeout_s=2)
    assert down.failed == 3 and down.ok == 0


def test_vllm_sandbox_load_arguments_and_prompts() -> None:
    with pytest.raises(SandboxError, match="bounded"):
        run_load("http://127.0.0.1:1", model="m")
    with pytest.raises(SandboxError, match="concurrency"):
        run_load("http://127.0.0.1:1", model="m", requests=1, concurrency=0)
    assert prompt_for(Mix.VARIED, 5, seed=1) == prompt_for(Mix.VARIED, 5, seed=1)
    assert prompt_for(Mix.VARIED, 5) != prompt_for(Mix.VARIED, 6)
    assert DEFAULT_TEMPERATURE[Mix.REPETITIVE] == 0.0 < DEFAULT_TEMPERATURE[Mix.VARIED]
