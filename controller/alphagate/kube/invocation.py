"""Does this container run vLLM, with its arguments where alphagate edits them?

alphagate turns speculation on by adding `--speculative-config JSON` to the vLLM container's
arguments. That only works when the container's argv *is* vLLM's: a flag appended after
`sh -c "vllm serve ..."` becomes the shell's `$0`; one given to `env -S "vllm serve ..."` or to
a script goes wherever they send it; a Deployment that runs postgres gets a flag it refuses to
start with. Status would say On while vLLM runs without speculation, or a database would stop.
So a container is accepted only when its argv visibly runs vLLM:

- the program, after any of the launchers below (with the options each documents), is
  `vllm serve ...` or a Python interpreter running `-m vllm.entrypoints...`; or
- there is no `command` and the arguments are not a program of their own (a shell, a launcher,
  vllm, python): they go to the image's entrypoint, and the image's name says vLLM (a path
  component after the registry contains `vllm`: `vllm/vllm-openai`, `rocm/vllm`,
  `.../vllm-cpu`). An image of another name with vLLM inside needs `command: [vllm, serve]`.

KServe's Hugging Face runtime (`python -m huggingfaceserver`, image `kserve/huggingfaceserver`)
counts only on its vLLM backend (`--backend=vllm`): it builds its argument parser from vLLM's own
(`make_arg_parser`) when vLLM is importable and hands the parsed arguments to
`AsyncEngineArgs.from_cli_args`, so the flag reaches vLLM there; but it parses *known* arguments
only, and with `--backend=auto` (its default) it serves a model vLLM does not support with
transformers, so the flag would be dropped without a word (kserve/kserve,
python/huggingfaceserver: `__main__.py`, `vllm/utils.py`).

Launchers (each walked by its own option grammar; an option not listed is refused, since its
effect on the argv cannot be told): env (assignments; not `-S`/`--split-string`, which splits a
string into an argv), tini, dumb-init, catatonit, exec, nice, ionice, chrt, numactl, taskset,
stdbuf, timeout, setsid, nohup, gosu, su-exec. A shell anywhere in the chain is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final


@dataclass(frozen=True, slots=True)
class Launcher:
    flags: frozenset[str] = frozenset()  # options without a value
    valued: frozenset[str] = frozenset()  # options that take the next token (or `=value`)
    hiding: frozenset[str] = frozenset()  # options that make the rest not an argv
    positionals: int = 0  # operands before the program (a user, a mask, a duration)
    assignments: bool = False  # NAME=VALUE operands (env)
    numeric_flag: bool = False  # `-N` as an option (nice's old form)
    attached: frozenset[str] = field(default_factory=frozenset)  # `-n5`: short valued options


def _launcher(
    flags: str = "",
    valued: str = "",
    hiding: str = "",
    positionals: int = 0,
    *,
    assignments: bool = False,
    numeric_flag: bool = False,
) -> Launcher:
    v = frozenset(valued.split())
    return Launcher(
        flags=frozenset(flags.split()),
        valued=v,
        hiding=frozenset(hiding.split()),
        positionals=positionals,
        assignments=assignments,
        numeric_flag=numeric_flag,
        attached=frozenset(o for o in v if len(o) == 2 and o[0] == "-"),
    )


LAUNCHERS: Final[dict[str, Launcher]] = {
    "env": _launcher(
        "- -i --ignore-environment -0 --null -v --debug --default-signal --ignore-signal "
        "--block-signal --list-signal-handling",
        "-u --unset -C --chdir",
        "-S --split-string",
        assignments=True,
    ),
    "tini": _launcher("-s -v -vv -vvv -w -g -l", "-e -p"),
    "tini-static": _launcher("-s -v -vv -vvv -w -g -l", "-e -p"),
    "dumb-init": _launcher("-c --single-child -v --verbose", "-r --rewrite"),
    "catatonit": _launcher("-g -p -L"),
    "exec": _launcher("-c -l", "-a"),
    "nice": _launcher("", "-n --adjustment", numeric_flag=True),
    "ionice": _launcher("-t --ignore", "-c --class -n --classdata"),
    "chrt": _launcher(
        "-a --all-tasks -b --batch -d --deadline -f --fifo -i --idle -o --other -r --rr "
        "-R --reset-on-fork -v --verbose",
        "-T --sched-runtime -P --sched-period -D --sched-deadline",
        positionals=1,
    ),
    "numactl": _launcher(
        "-l --localalloc -a --all -b --balancing -s --show -H --hardware",
        "-i --interleave -N --cpunodebind -C --physcpubind -m --membind -p --preferred "
        "-P --preferred-many -w --weighted-interleave",
    ),
    "taskset": _launcher("-a --all-tasks -c --cpu-list", positionals=1),
    "stdbuf": _launcher("", "-i --input -o --output -e --error"),
    "timeout": _launcher(
        "--preserve-status --foreground -v --verbose", "-s --signal -k --kill-after", positionals=1
    ),
    "setsid": _launcher("-c --ctty -f --fork -w --wait"),
    "nohup": _launcher(),
    "gosu": _launcher(positionals=1),
    "su-exec": _launcher(positionals=1),
}
SHELLS: Final = frozenset(
    ("sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "fish", "csh", "tcsh", "busybox")
)
PYTHON_FLAGS: Final = frozenset(("-u", "-O", "-OO", "-B", "-E", "-s", "-S", "-I", "-P", "-b", "-q"))
PYTHON_VALUED: Final = frozenset(("-X", "-W"))
VLLM_MODULE: Final = "vllm.entrypoints."
HF_MODULE: Final = "huggingfaceserver"
HF_IMAGE: Final = "huggingfaceserver"  # kserve/huggingfaceserver and its mirrors


class InvocationError(ValueError):
    """What makes this argv not one alphagate can edit (the message says what and where)."""


def base(token: str) -> str:
    return token.rsplit("/", 1)[-1]


def _is_python(name: str) -> bool:
    rest = name.removeprefix("python")
    return rest != name and (rest == "" or all(c.isdigit() or c == "." for c in rest))


def _is_assignment(token: str) -> bool:
    name, eq, _ = token.partition("=")
    return bool(eq) and name.replace("_", "a").isalnum() and not name[:1].isdigit()


def _show(tokens: Sequence[str], start: int, stop: int) -> str:
    text = " ".join(tokens[start:stop])
    return text if len(text) <= 80 else text[:77] + "..."


def _options(tokens: Sequence[str], i: int, name: str, launcher: Launcher) -> int:
    """Index of the first token after `name`'s options and operands; raises InvocationError."""
    start = i - 1
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            i += 1
            break
        if launcher.assignments and _is_assignment(token):
            i += 1
            continue
        if not token.startswith("-") or (token == "-" and "-" not in launcher.flags):
            break
        option, eq, _ = token.partition("=")
        if option in launcher.hiding:
            raise InvocationError(
                f"`{_show(tokens, start, i + 2)}`: {name} {option} turns a string into the "
                "command line, so arguments alphagate adds would not reach vLLM"
            )
        if option in launcher.flags:
            i += 1
        elif option in launcher.valued:
            i += 1 if eq else 2
        elif token[:2] in launcher.attached and not token.startswith("--"):
            i += 1  # `-n5`
        elif launcher.numeric_flag and token[1:].isdigit():
            i += 1  # nice -5
        else:
            raise InvocationError(
                f"`{_show(tokens, start, i + 1)}`: alphagate does not know what {name}'s option "
                f"{option!r} does with the command line after it; start vLLM directly or "
                "with documented launcher options"
            )
    if launcher.assignments:
        while i < len(tokens) and _is_assignment(tokens[i]):
            i += 1
    i += launcher.positionals
    return i


def program(tokens: Sequence[str]) -> tuple[int, tuple[str, ...]]:
    """(index of the program the launchers start, the launchers' names)."""
    i = 0
    chain: list[str] = []
    while i < len(tokens):
        name = base(tokens[i])
        if name in SHELLS:
            raise InvocationError(
                f"`{_show(tokens, 0, i + 3)}` runs a shell: arguments alphagate adds would reach "
                "the shell, not vLLM; run vLLM directly (command: [vllm, serve], args: [MODEL, "
                "...])"
            )
        launcher = LAUNCHERS.get(name)
        if launcher is None:
            return i, tuple(chain)
        chain.append(name)
        i = _options(tokens, i + 1, name, launcher)
    raise InvocationError(f"`{_show(tokens, 0, len(tokens))}` starts no program")


def hf_backend(args: Sequence[str]) -> str:
    """The Hugging Face runtime's `--backend` (the last one given, as argparse takes it;
    "auto", its default, when none is)."""
    backend = "auto"
    for i, token in enumerate(args):
        if token.startswith("--backend="):
            backend = token.partition("=")[2]
        elif token == "--backend" and i + 1 < len(args):
            backend = args[i + 1]
    return backend


def check_hf(args: Sequence[str]) -> None:
    """Refuse KServe's Hugging Face runtime unless it runs the vLLM backend (module text)."""
    backend = hf_backend(args)
    if backend != "vllm":
        raise InvocationError(
            f"KServe's Hugging Face runtime with --backend={backend} may serve the model with "
            "transformers, which drops --speculative-config without a word (the runtime parses "
            "known arguments only); it hands the flag to vLLM on its vLLM backend: add "
            "--backend=vllm to the args"
        )


def _module(tokens: Sequence[str], at: int) -> str | None:
    """The module python (with its own options) runs with `-m`, else None."""
    i = at + 1
    while i < len(tokens):
        token = tokens[i]
        if token == "-m":
            return tokens[i + 1] if i + 1 < len(tokens) else None
        if token in PYTHON_FLAGS:
            i += 1
        elif token in PYTHON_VALUED:
            i += 2
        elif token[:2] in PYTHON_VALUED:
            i += 1  # -Xdev
        else:
            return None  # a script, `-c CODE`, or an option we do not know
    return None


def _runs_vllm(tokens: Sequence[str], at: int) -> bool:
    """`vllm serve`, python (with its own options) running a `vllm.entrypoints` module, or
    KServe's Hugging Face runtime on its vLLM backend (InvocationError if on another)."""
    name = base(tokens[at])
    if name == "vllm":
        return at + 1 < len(tokens) and tokens[at + 1] == "serve"
    if not _is_python(name):
        return False
    module = _module(tokens, at)
    if module == HF_MODULE:
        check_hf(tokens[at:])
        return True
    return module is not None and module.startswith(VLLM_MODULE)


def image_runs_vllm(image: str) -> bool:
    """The image's name (registry, tag and digest left out) has a `vllm` path component."""
    name = image.split("@", 1)[0]
    parts = name.split("/")
    last = parts[-1].split(":", 1)[0]
    parts[-1] = last
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]  # the registry host
    return any("vllm" in p.lower() for p in parts)


def _image_named(image: str, word: str) -> bool:
    """The image's own name (after its registry and path, before tag and digest) has `word`."""
    return word in image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0].lower()


def _is_program(token: str) -> bool:
    name = base(token)
    return name in SHELLS or name in LAUNCHERS or name == "vllm" or _is_python(name)


def check(command: Sequence[str], args: Sequence[str], image: str) -> None:
    if not command and (not args or not _is_program(args[0])):
        if image_runs_vllm(image):
            return
        if _image_named(image, HF_IMAGE):  # the runtime's entrypoint: python -m huggingfaceserver
            check_hf(args)
            return
        raise InvocationError(
            f"no command, and the image {image or '(none)'!r} is not a vLLM image: alphagate "
            "cannot tell that its entrypoint runs vLLM; set command: [vllm, serve] (or use a "
            "vLLM image)"
        )
    tokens = [*command, *args]
    at, _chain = program(tokens)
    if not _runs_vllm(tokens, at):
        where = "command" if at < len(command) else "args"
        raise InvocationError(
            f"{where} `{_show(tokens, 0, at + 3)}` does not run vLLM (`vllm serve` or `python -m "
            f"vllm.entrypoints...`, possibly behind a launcher): alphagate refuses to add "
            "--speculative-config to a program it cannot tell reads it"
        )


__all__ = [
    "LAUNCHERS",
    "SHELLS",
    "InvocationError",
    "check",
    "check_hf",
    "hf_backend",
    "image_runs_vllm",
    "program",
]
