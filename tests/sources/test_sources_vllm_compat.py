"""The vLLM compatibility table, one test per release row: that release's page (built from the
table with the real prometheus_client) read by the real parser, the scrape source and
`alphagate inspect`; the layout each names, and for a release alphagate cannot judge the one
line that says which release it needs."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from vllm_pages import ACCEPTED, DRAFT_TOKENS, DRAFTS, MODEL, PER_POSITION, page

from alphagate import vllm, vllm_compat
from alphagate.cli import app
from alphagate.config import LatencyMetric
from alphagate.core.model import Role
from alphagate.errors import SourceErrorKind
from alphagate.sources.discovery import StaticDiscovery, Target
from alphagate.sources.layout import page_layout
from alphagate.sources.page import Counter
from alphagate.sources.pageread import parse_page
from alphagate.sources.scrape import ScrapeSource
from specs import SOURCE_SPEC, spec_from

ROWS = vllm_compat.releases()
runner = CliRunner()


def _by_version(row: vllm_compat.Release) -> str:
    return row.version


def judged(row: vllm_compat.Release) -> bool:
    """The row shows the per-token histogram the default latency guard reads."""
    return row.shows(vllm.TPOT)


def test_the_table_covers_every_minor_release_from_0_13_to_0_33() -> None:
    minors = {tuple(int(p) for p in r.version.split(".")[:2]) for r in ROWS}
    assert {(0, m) for m in range(13, 34)} <= minors
    assert [r.key for r in ROWS] == sorted(r.key for r in ROWS)


@pytest.mark.parametrize("row", ROWS, ids=_by_version)
def test_release_page_reads_alike(row: vllm_compat.Release, tmp_path: Path) -> None:
    body = page(row)
    parsed = parse_page(body, where=row.version, strict=True)
    (series,) = parsed.series.values()
    assert series.speculating
    assert series.counters[Counter.DRAFTS] == DRAFTS
    assert series.counters[Counter.DRAFT_TOKENS] == DRAFT_TOKENS
    assert series.counters[Counter.ACCEPTED] == ACCEPTED
    assert tuple(series.per_position[i] for i in range(len(PER_POSITION))) == PER_POSITION

    layout = page_layout(parsed, body.decode())
    assert row.version in layout.versions
    assert layout.custom_buckets == ()
    problem = layout.problem(LatencyMetric.PER_TOKEN)
    if judged(row):
        assert problem is None
    else:
        since = vllm_compat.first_with(vllm.TPOT)
        assert since is not None and problem is not None
        assert f"upgrade vLLM to {since.version} or newer" in problem
        assert vllm.TPOT in problem and layout.name in problem

    path = tmp_path / f"vllm-{row.version}.txt"
    path.write_bytes(body)
    result = runner.invoke(app, ["inspect", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    (model,) = out["models"]
    assert model["model_name"] == MODEL
    assert model["all_engines"]["alpha"] == pytest.approx(ACCEPTED / DRAFT_TOKENS)
    assert out["layout"]["name"] == layout.name and row.version in out["layout"]["releases"]
    assert ("perToken" in out["layout"]["problems"]) is not judged(row)
    assert out["draft_length"][MODEL]["configured_k"] == len(PER_POSITION)
    assert ("tpot" in model["all_engines"]) is judged(row)

    text = runner.invoke(app, ["inspect", str(path)]).output
    assert f"page layout              {layout.name}" in text
    assert ("cannot judge:" in text) is not judged(row)


def test_layouts_name_the_version_ranges_read() -> None:
    """The families alone tell three eras apart; the range is read from the table."""
    named = {
        r.version: page_layout(parse_page(page(r), where="p"), page(r).decode()).name for r in ROWS
    }
    assert named["0.9.2"] == named["0.10.1.1"] == "vLLM 0.9.2-0.10.1.1"
    assert named["0.10.2"] == "vLLM 0.10.2"
    assert named["0.11.0"] == "vLLM 0.11.0-0.14.1"  # the old name still shown
    newest = ROWS[-1].version
    assert {named[r.version] for r in ROWS if r.key >= (0, 12)} == {"vLLM 0.12.0+"}
    assert newest in page_layout(parse_page(page(ROWS[-1]), where="p")).versions


def test_hidden_old_family_shown_narrows_the_range() -> None:
    row = vllm_compat.release("0.13.0")
    assert row.families[vllm_compat.OLD_TPOT].registered is vllm_compat.Registered.HIDDEN
    body = page(row, hidden=True)  # --show-hidden-metrics-for-version=0.11
    layout = page_layout(parse_page(body, where="p"), body.decode())
    assert layout.name == "vLLM 0.11.0-0.14.1"


def test_custom_buckets_are_named() -> None:
    row = vllm_compat.release("0.32.0")
    assert row.custom_histogram_buckets
    fine = (0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1)
    body = page(row, itl_buckets=fine)
    layout = page_layout(parse_page(body, where="p"), body.decode())
    assert layout.custom_buckets == (vllm.ITL, vllm.TPOT)
    assert "custom buckets" in layout.name


def test_per_step_guard_judges_0_10_2_but_not_0_10_1() -> None:
    for version, per_step_ok in (("0.10.2", True), ("0.10.1.1", False)):
        body = page(vllm_compat.release(version))
        layout = page_layout(parse_page(body, where="p"), body.decode())
        assert (layout.problem(LatencyMetric.PER_STEP_SCALED) is None) is per_step_ok
        assert layout.problem(None) is None  # guard off: nothing it cannot judge


@pytest.fixture
def pod() -> Iterator[dict[str, Any]]:
    """One pod serving the page in `state["body"]`."""
    state: dict[str, Any] = {"body": b""}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = state["body"]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.mark.parametrize("version", ["0.10.1.1", "0.10.2", "0.13.0", "0.33.0"])
def test_scrape_pool_error_names_the_release_needed(version: str, pod: dict[str, Any]) -> None:
    row = vllm_compat.release(version)
    pod["body"] = page(row)
    spec = spec_from(SOURCE_SPEC, source={"kind": "podScrape"})  # the default perToken guard
    targets = {("chat", role): [Target(url=pod["url"], pod=role.value)] for role in Role}
    source = ScrapeSource(StaticDiscovery(targets), since_start=True)
    try:
        obs = source.observe(spec, start=0.0, end=1.0, interval_seconds=1.0)
    finally:
        source.close()
    for pool in obs.pools:
        if judged(row):
            assert pool.error is None, pool.error
            assert pool.tpot is not None
        else:
            assert pool.error_kind is SourceErrorKind.EMPTY
            assert "upgrade vLLM to 0.11.0 or newer" in (pool.error or "")


ROOT = Path(__file__).resolve().parents[2]


def test_docs_table_is_rendered_from_the_data() -> None:
    import importlib.util

    tool = ROOT / "tools" / "vllm_compat_extract.py"
    loaded = importlib.util.spec_from_file_location("vllm_compat_extract", tool)
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    data = json.loads((ROOT / "controller/alphagate/data/vllm-compat.json").read_text())
    doc = (ROOT / "docs" / "vllm-compat.md").read_text()
    assert module.markdown(data) in doc


@pytest.mark.parametrize("row", ROWS, ids=_by_version)
def test_what_every_row_shares(row: vllm_compat.Release) -> None:
    """Spec-decode names, labels and HELP, and the latency buckets, as alphagate/vllm.py has
    them: the parser's constants hold for every release read."""
    for name in (vllm.SPEC_DRAFTS, vllm.SPEC_DRAFT_TOKENS, vllm.SPEC_ACCEPTED, vllm.SPEC_PER_POS):
        fam = row.families[vllm.base(name)]
        assert fam.registered is vllm_compat.Registered.SPECULATIVE
        assert fam.help == vllm.HELP[name]
        extra = ("position",) if name == vllm.SPEC_PER_POS else ()
        assert fam.labels == tuple(sorted((vllm.ENGINE, vllm.MODEL_NAME, *extra)))
    for name in (vllm.ITL, vllm.TPOT, vllm_compat.OLD_TPOT):
        fam = row.families.get(name)
        if fam is not None:
            assert fam.buckets == vllm.ITL_BUCKETS
            assert fam.labels == (vllm.ENGINE, vllm.MODEL_NAME)
    assert row.shows(vllm.base(vllm.GENERATION_TOKENS)) and row.shows(vllm.RUNNING)
