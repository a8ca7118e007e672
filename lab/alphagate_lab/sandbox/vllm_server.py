"""Start, probe and stop one real vLLM CPU server, as a pod of the local sandbox would run it.

The vLLM environment (venv + tiny model) is built outside the repository by
`tools/vllm/setup.sh` under `ALPHAGATE_VLLM_HOME` (default `~/.cache/alphagate/vllm`).
`VllmServer.args` is exactly what a Deployment's container args carry, so a local
"kubelet" can map a patched Deployment to a restarted process with `VllmServer.from_args`.
Only 127.0.0.1 is ever bound. Each server logs to its own temp file, named in every error.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from alphagate.errors import SandboxError

HOST = "127.0.0.1"
API_MODULE = "vllm.entrypoints.launchers.api_server.entry"  # what `vllm serve` runs
SETUP_HINT = "run tools/vllm/setup.sh (a few minutes, ~3.5 GB outside the repository)"

# Small enough for the tiny model on 2 cores; `--max-num-seqs` bounds the batch.
DEFAULT_EXTRA_ARGS: tuple[str, ...] = (
    "--max-model-len",
    "512",
    "--max-num-seqs",
    "8",
    "--dtype",
    "bfloat16",
)

# Flags the sandbox owns: a Deployment's values for these are replaced, not passed through.
_OWNED_FLAGS = ("--host", "--port", "--model", "--served-model-name", "--speculative-config")


def vllm_home() -> Path:
    """Where setup.sh put the venv and the model (ALPHAGATE_VLLM_HOME or the user cache)."""
    env = os.environ.get("ALPHAGATE_VLLM_HOME")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "alphagate" / "vllm"


def vllm_python(home: Path | None = None) -> Path:
    return (home or vllm_home()) / "venv" / "bin" / "python"


def vllm_model_dir(home: Path | None = None) -> Path:
    return (home or vllm_home()) / "model"


def vllm_unavailable_reason(home: Path | None = None) -> str | None:
    """None when setup.sh has completed in `home`; otherwise what is missing and the fix."""
    h = home or vllm_home()
    if not (h / ".stamp").is_file():
        return f"the vLLM environment is not set up in {h} (no .stamp); {SETUP_HINT}"
    if not os.access(vllm_python(h), os.X_OK):
        return f"{vllm_python(h)} is missing; {SETUP_HINT}"
    if not (vllm_model_dir(h) / "config.json").is_file():
        return f"the tiny model is missing in {vllm_model_dir(h)}; {SETUP_HINT}"
    return None


def vllm_available(home: Path | None = None) -> bool:
    return vllm_unavailable_reason(home) is None


def free_port() -> int:
    """A port free on 127.0.0.1 right now, *below* the kernel's ephemeral range.

    vLLM binds its port only after ~30-50 s of imports; a port from bind(0) is back in the
    ephemeral pool meanwhile and another process may take it first. See `pick_port`.
    """
    return pick_port()


def _any_free_port() -> int:
    """A port free on 127.0.0.1 right now (bind port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """Where the kernel starts handing out ports for bind(0) (32768 when unreadable)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def pick_port(*, low: int = 20000, attempts: int = 64) -> int:
    """A free 127.0.0.1 port *below* the ephemeral range.

    vLLM binds its port only after ~30-50 s of imports. A port from bind(0) is back in the
    kernel's ephemeral pool meanwhile, and on a busy machine another process's bind(0) or
    outgoing connection can take it first (seen here: the server then dies with EADDRINUSE
    while the other process answers /health). Ports below the range are never handed out
    that way. Falls back to bind(0) when the range leaves no room.
    """
    high = _ephemeral_low()
    rng = random.SystemRandom()
    if high - low >= 1000:
        for _ in range(attempts):
            port = rng.randrange(low, high)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((HOST, port))
                except OSError:
                    continue
            return port
    return _any_free_port()


def _port_in_use(port: int) -> bool:
    """Bind the way vLLM does (SO_REUSEADDR), so TIME_WAIT after a restart is not 'in use'."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return True
    return False


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    """Value of `--flag VALUE` or `--flag=VALUE`; the last occurrence wins, as in argparse."""
    value: str | None = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
    return value


def _strip_flags(args: Sequence[str], flags: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in flags:
            skip = True
            continue
        if any(arg.startswith(f + "=") for f in flags):
            continue
        out.append(arg)
    return out


class VllmServer:
    """One vLLM OpenAI-compatible server process on 127.0.0.1:`port`.

    `speculative_config=None` starts it without `--speculative-config` (speculation off:
    vLLM then exports no `vllm:spec_decode_*` series).
    """

    def __init__(
        self,
        port: int,
        *,
        served_model_name: str,
        speculative_config: Mapping[str, Any] | None = None,
        extra_args: Sequence[str] = DEFAULT_EXTRA_ARGS,
        home: Path | None = None,
        model: Path | None = None,
        env: Mapping[str, str] | None = None,
        log_dir: Path | None = None,
    ) -> None:
        if not 0 < port < 65536:
            raise SandboxError(f"vLLM server: port {port} is out of range 1-65535")
        for flag in _OWNED_FLAGS:
            if _flag_value(extra_args, flag) is not None:
                raise SandboxError(
                    f"vLLM server: extra_args must not set {flag}; use the constructor argument"
                )
        self.port = port
        self.served_model_name = served_model_name
        self.speculative_config = dict(speculative_config) if speculative_config else None
        self.extra_args = tuple(extra_args)
        self.home = home or vllm_home()
        self.model = model or vllm_model_dir(self.home)
        self._env_overrides = dict(env or {})
        self.log_dir = log_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._started_at: float | None = None

    @classmethod
    def from_args(
        cls,
        port: int,
        args: Sequence[str],
        *,
        home: Path | None = None,
        default_served_model_name: str = "model",
        env: Mapping[str, str] | None = None,
        log_dir: Path | None = None,
    ) -> VllmServer:
        """Map a Deployment's vLLM container args onto a local server.

        `--host`, `--port` and `--model` are the sandbox's own (127.0.0.1, `port`, the
        tiny model); `--served-model-name` and `--speculative-config` are kept; every other
        argument passes through.
        """
        spec_raw = _flag_value(args, "--speculative-config")
        spec: dict[str, Any] | None = None
        if spec_raw is not None:
            try:
                parsed = json.loads(spec_raw)
            except json.JSONDecodeError as exc:
                raise SandboxError(
                    f"container args: --speculative-config is not JSON ({exc}): {spec_raw!r}"
                ) from exc
            if not isinstance(parsed, dict):
                raise SandboxError(
                    f"container args: --speculative-config must be a JSON object: {spec_raw!r}"
                )
            spec = parsed
        name = _flag_value(args, "--served-model-name") or default_served_model_name
        rest = _strip_flags(args, _OWNED_FLAGS)
        # vLLM may be given the model positionally (`vllm serve MODEL`); drop a leading path.
        if rest and not rest[0].startswith("-"):
            rest = rest[1:]
        extra = list(DEFAULT_EXTRA_ARGS)
        for i in range(0, len(DEFAULT_EXTRA_ARGS), 2):
            if _flag_value(rest, DEFAULT_EXTRA_ARGS[i]) is not None:
                extra = _strip_flags(extra, [DEFAULT_EXTRA_ARGS[i]])
        return cls(
            port,
            served_model_name=name,
            speculative_config=spec,
            extra_args=[*extra, *rest],
            home=home,
            env=env,
            log_dir=log_dir,
        )

    # --- what would run -------------------------------------------------------------

    @property
    def args(self) -> list[str]:
        """The server's arguments after the module name: what container args would carry."""
        out = [
            "--model",
            str(self.model),
            "--served-model-name",
            self.served_model_name,
            "--host",
            HOST,
            "--port",
            str(self.port),
            *self.extra_args,
        ]
        if self.speculative_config is not None:
            out += [
                "--speculative-config",
                json.dumps(self.speculative_config, sort_keys=True, separators=(",", ":")),
            ]
        return out

    @property
    def argv(self) -> list[str]:
        """The exact command line started."""
        return [str(vllm_python(self.home)), "-m", API_MODULE, *self.args]

    @property
    def env(self) -> dict[str, str]:
        """Hermetic, offline environment; the compile cache stays in the vLLM home."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(
            {
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "VLLM_CACHE_ROOT": str(self.home / "cache"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self._env_overrides)
        return env

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    @property
    def log_path(self) -> Path | None:
        """The server's combined stdout/stderr; kept after stop() for post-mortems."""
        return self._log_path

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        text = self._log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the server in its own process group; returns at once (see wait_ready)."""
        if self.running():
            raise SandboxError(f"vLLM server on port {self.port} is already running")
        reason = vllm_unavailable_reason(self.home)
        if reason:
            raise SandboxError(reason)
        if _port_in_use(self.port):
            raise SandboxError(f"vLLM server: port {HOST}:{self.port} is already in use")
        fd, name = tempfile.mkstemp(
            prefix=f"alphagate-vllm-{self.port}-",
            suffix=".log",
            dir=str(self.log_dir) if self.log_dir else None,
        )
        self._log_path = Path(name)
        with os.fdopen(fd, "wb") as log:
            log.write(("$ " + " ".join(self.argv) + "\n").encode())
            log.flush()
            try:
                self._proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=str(self.home),
                    start_new_session=True,
                )
            except OSError as exc:
                raise SandboxError(
                    f"vLLM server: cannot start {self.argv[0]}: {exc} (log {self._log_path})"
                ) from exc
        self._started_at = time.monotonic()

    def wait_ready(self, timeout_s: float = 180.0) -> float:
        """Poll /health until 200; returns seconds since start(). Raises with the log tail."""
        if self._proc is None or self._started_at is None:
            raise SandboxError("vLLM server: wait_ready() before start()")
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise SandboxError(
                        f"vLLM server on port {self.port} exited with code {code} before it was"
                        f" ready; log {self._log_path}:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.url}/health").status_code == 200:
                        return time.monotonic() - self._started_at
                if time.monotonic() >= deadline:
                    raise SandboxError(
                        f"vLLM server on port {self.port} not ready after {timeout_s:.0f} s;"
                        f" log {self._log_path}:\n{self.log_tail()}"
                    )
                time.sleep(0.5)

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after `timeout_s`; returns the exit code."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            self._signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # Engine-core children share the group; make sure none outlives the server.
        self._signal_group(proc.pid, signal.SIGKILL)
        return proc.returncode

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        spec = "off" if self.speculative_config is None else json.dumps(self.speculative_config)
        return f"VllmServer(port={self.port}, model={self.served_model_name!r}, spec={spec})"
