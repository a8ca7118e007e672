"""kube.args: add / replace / remove --speculative-config in every spelling vLLM accepts."""

from __future__ import annotations

import json

import pytest

from alphagate.kube import args
from alphagate.kube.args import ArgsError

CFG = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
CFG_JSON = json.dumps(CFG)
NEW = {"method": "eagle3", "model": "m-eagle", "num_speculative_tokens": 3}
BASE = ["--model", "/models/llama", "--port", "8000", "--max-num-seqs", "64"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (BASE, None),
        ([*BASE, "--speculative-config", CFG_JSON], CFG),
        ([*BASE, f"--speculative-config={CFG_JSON}"], CFG),
        (["-sc", CFG_JSON, *BASE], CFG),
        ([*BASE[:2], f"-sc={CFG_JSON}", *BASE[2:]], CFG),
        ([*BASE, "--speculative_config", CFG_JSON], CFG),
        (
            [
                *BASE,
                "--speculative-config.method",
                "ngram",
                "--speculative-config.num_speculative_tokens=4",
            ],
            {"method": "ngram", "num_speculative_tokens": 4},
        ),
        (
            [*BASE, "--spec-method", "ngram", "--spec-tokens", "4"],
            {"method": "ngram", "num_speculative_tokens": 4},
        ),
    ],
)
def test_read_every_spelling(argv: list[str], expected: dict[str, object] | None) -> None:
    assert args.read(argv) == expected
    assert args.has_speculation(argv) is (expected is not None)


@pytest.mark.parametrize(
    "argv",
    [
        [*BASE, "--speculative-config", CFG_JSON],
        [*BASE, f"--speculative-config={CFG_JSON}"],
        ["-sc", CFG_JSON, *BASE],
        [*BASE[:2], f"-sc={CFG_JSON}", *BASE[2:]],
        [*BASE, "--speculative_config", CFG_JSON],
        [*BASE, "--spec-method", "ngram", "--spec-tokens", "4"],
        [
            *BASE,
            "--speculative-config.method",
            "ngram",
            "--speculative-config.num_speculative_tokens",
            "4",
        ],
    ],
)
def test_remove_leaves_every_other_arg(argv: list[str]) -> None:
    out = args.edit(argv, None)
    assert out == BASE
    assert args.read(out) is None


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            [*BASE, "--speculative-config", CFG_JSON],
            [*BASE, "--speculative-config", args.render(NEW)],
        ),
        (
            [*BASE, f"--speculative-config={CFG_JSON}"],
            [*BASE, f"--speculative-config={args.render(NEW)}"],
        ),
        (["-sc", CFG_JSON, *BASE], ["-sc", args.render(NEW), *BASE]),
        (
            [*BASE[:2], f"-sc={CFG_JSON}", *BASE[2:]],
            [*BASE[:2], f"-sc={args.render(NEW)}", *BASE[2:]],
        ),
        # shorthands become the JSON flag at the first one's position (vLLM rejects a mix)
        (
            ["--spec-method", "ngram", *BASE, "--spec-tokens", "4"],
            ["--speculative-config", args.render(NEW), *BASE],
        ),
    ],
)
def test_replace_keeps_position_and_spelling(argv: list[str], expected: list[str]) -> None:
    out = args.edit(argv, NEW)
    assert out == expected
    assert args.read(out) == NEW


def test_add_appends_long_form_and_nothing_else_moves() -> None:
    out = args.edit(BASE, CFG)
    assert out[: len(BASE)] == BASE
    assert out[len(BASE) :] == ["--speculative-config", args.render(CFG)]
    assert json.loads(out[-1]) == CFG


@pytest.mark.parametrize(
    "argv",
    [
        BASE,
        [*BASE, "--speculative-config", CFG_JSON],
        [*BASE, f"-sc={CFG_JSON}"],
        [*BASE, "--speculative-config", json.dumps(CFG, indent=2)],  # other formatting, same config
    ],
)
def test_idempotent_when_nothing_changes(argv: list[str]) -> None:
    wanted = args.read(argv)
    assert args.edit(argv, wanted) == argv
    once = args.edit(argv, NEW)
    assert args.edit(once, NEW) == once
    off = args.edit(once, None)
    assert args.edit(off, None) == off


def test_removes_duplicates_in_mixed_spellings() -> None:
    argv = [*BASE, "-sc", CFG_JSON, f"--speculative-config={CFG_JSON}"]
    assert args.edit(argv, None) == BASE
    assert args.edit(argv, NEW) == [*BASE, "-sc", args.render(NEW)]


def test_values_that_look_like_flags_elsewhere_are_untouched() -> None:
    argv = ["--served-model-name", "-sc-model", "--chat-template", "x.jinja"]
    assert args.edit(argv, None) == argv
    assert args.read(argv) is None


def test_broken_json_is_a_clear_error() -> None:
    with pytest.raises(ArgsError, match=r"argument 1 \(--speculative-config\) is not valid JSON"):
        args.read(["--port", "--speculative-config", "{method: ngram"])


def test_flag_without_value_is_an_error() -> None:
    with pytest.raises(ArgsError, match="has no value"):
        args.edit([*BASE, "-sc"], None)


def test_flag_buried_in_a_shell_string_is_refused() -> None:
    argv = ["-c", f"vllm serve m --speculative-config '{CFG_JSON}'"]
    with pytest.raises(ArgsError, match="inside a larger string"):
        args.edit(argv, None)


def test_render_is_canonical() -> None:
    assert args.render({"b": 1, "a": 2}) == '{"a":2,"b":1}'
