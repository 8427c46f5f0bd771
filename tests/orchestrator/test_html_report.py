"""`revise report R --html FILE`: one self-contained page, rendered in headless Chromium.

The run has a failed revision (a provider error at one branch), a candidate the gate
stopped, a repair that succeeded and an attempt a crash left unresolved. The page is
checked as a person sees it (Chromium's rendered DOM) and for what it fetches (Chromium's
net log: nothing but the file itself).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from broker.identity import Identity
from broker.records import RunStatus
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import open_services
from orchestrator.html_report import render_html
from orchestrator.inspect import report_view
from sandbox.runner import ProcessRunner
from tests.conftest import _missing_service
from tests.rows import left_unresolved

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "fixtures" / "scripts"
ARGS = {"shots": ["a", "b", "c", "d"]}
LOST = Identity("orchestrate/#0", (), 7)
GEN = "orchestrate/#0>orchestrate.gen/#0"  # the call inside the helper gen()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A run with every kind of row the report shows, in an embedded store."""
    from broker.envelope import Envelope

    settings = Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS)
    services = open_services(settings, runner=ProcessRunner())
    try:
        pipeline = services.pipeline()
        for name in ("fanout_v1", "fanout_edited", "fanout_repaired"):
            pipeline.run("R", (SCRIPTS / f"{name}.py").read_text(), ARGS, Envelope())
        left_unresolved(services.store, "R", LOST, capability="image.generate",
                        digest="d" * 64, revision=3)
        services.store.set_run_status("R", RunStatus.BLOCKED, f"blocked: unresolved attempt at "
                                      f"{LOST}")
    finally:
        services.close()
    return settings.home


def _page(home: Path, tmp_path: Path) -> Path:
    page = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "workers.cli", "report", "R", "--html",
                           str(page)], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "REVISE_HOME": str(home),
                               "REVISE_SANDBOX": "process"}, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return page


def test_the_page_is_self_contained_and_escapes_what_it_shows(home: Path,
                                                              tmp_path: Path) -> None:
    text = _page(home, tmp_path).read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    # the only images are the committed ones, inline: nothing else can fetch
    inline = r'<img src="data:image/png;base64,[A-Za-z0-9+/=]+" alt="[^"<>]*">'
    assert len(re.findall(inline, text)) == 4
    rest = re.sub(inline, "", text)
    for fetching in ("<script", "<link", "<img", "<iframe", "src=", "href=", "url(",
                     "@import", "http://", "https://"):
        assert fetching not in rest.lower(), fetching
    settings = Settings(home=home)
    services = open_services(settings)
    try:
        view = report_view(services.store, "R")
    finally:
        services.close()
    view["run"]["detail"] = "<script>alert(1)</script>"
    assert "<script>" not in render_html(view)
    assert "&lt;script&gt;" in render_html(view)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return name
    _missing_service("chromium is missing (tests/run.sh installs it with apt: chromium "
                     "chromium-driver)")


def _visible_text(dom: str) -> str:
    body = re.sub(r"<style>.*?</style>", "", dom, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", body)
    for entity, char in (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"), ("&#x27;", "'"),
                         ("&quot;", '"'), ("&nbsp;", " ")):
        text = text.replace(entity, char)
    return re.sub(r"\s+", " ", text)


def _render(page: Path, workdir: Path) -> tuple[str, str]:
    """Chromium's DOM of ``page`` after rendering, and its net log."""
    workdir.mkdir()
    netlog = workdir / "netlog.json"
    done = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update",
         f"--user-data-dir={workdir / 'profile'}", f"--log-net-log={netlog}",
         "--virtual-time-budget=2000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, netlog.read_text(errors="replace")


def _fetches(netlog: str) -> dict[str, int]:
    """URL -> traffic annotation of every network request in a Chromium net log."""
    found = {}
    for event in re.finditer(r'\{[^{}]*"traffic_annotation":(\d+),"url":"([^"]+)"', netlog):
        found[event.group(2)] = int(event.group(1))
    return found


def test_chromium_renders_what_an_operator_needs(home: Path, tmp_path: Path) -> None:
    dom, netlog = _render(_page(home, tmp_path), tmp_path / "page")
    seen = _visible_text(dom)

    assert "Revisions side by side" in seen
    for revision in (1, 2, 3):
        assert f"revision {revision}" in seen
    for outcome in ("executed", "failed", "replayed"):
        assert outcome in seen, outcome
    for identity in (f"{GEN}@0:0", f"{GEN}@3:0", str(LOST)):
        assert identity in seen, identity
    assert "Run R: blocked" in seen and "unresolved" in seen
    # the committed images themselves, embedded (four committed shots, one picture each)
    assert "Artifacts" in seen and "revise artifact get sha256:" in seen
    assert len(re.findall(r'<img src="data:image/png;base64,[A-Za-z0-9+/=]+"', dom)) == 4
    # the gate's counterexample with the candidate's and the committed source lines
    assert "call_changed" in seen
    assert '{"prompt": shot.strip(), "size": size}' in seen
    assert '{"prompt": shot, "size": size}' in seen
    # the unresolved attempt and the exact commands that decide it
    assert f"revise reconcile R '{LOST}' --result known.json" in seen
    assert f"revise reconcile R '{LOST}' --abandon" in seen
    # the committed call is shown from the revision that committed it
    assert "revision 1, line 7" in seen
    # spend against a full rerun, and the certificate check
    assert "spent" in seen and "a full rerun" in seen and "saved" in seen
    assert "verified" in seen and "CapabilityError" in seen

    # Nothing fetched by the page. The browser's own background traffic (update and time
    # checks) is told apart by its traffic annotation, learned from a control page whose
    # one image the detector must see.
    control = tmp_path / "control.html"
    control.write_text('<html><body>control<img src="http://127.0.0.1:9/x.png"></body></html>')
    _, control_log = _render(control, tmp_path / "control")
    loads = _fetches(control_log)
    assert "http://127.0.0.1:9/x.png" in loads
    page_annotation = loads["http://127.0.0.1:9/x.png"]
    fetched = {u for u, a in _fetches(netlog).items() if a == page_annotation}
    assert not fetched, fetched


def test_report_json_carries_the_same_view(home: Path, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "workers.cli", "report", "R", "--json"],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "REVISE_HOME": str(home)}, timeout=120)
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    outcomes = {row["identity"]: row["cells"] for row in view["matrix"]}
    assert outcomes[f"{GEN}@3:0"]["1"]["outcome"] == "failed"
    assert outcomes[f"{GEN}@3:0"]["3"]["outcome"] == "executed"
    assert outcomes[f"{GEN}@0:0"]["3"]["outcome"] == "replayed"
    assert outcomes[str(LOST)]["3"]["outcome"] == "unresolved"
    assert view["rerun"]["cost"] > view["spend"]["cost"]
    assert view["attempts_open"][0]["commands"][1].startswith(
        f"revise reconcile R '{LOST}' --abandon")


STORIES = {"diverged": ["payload_v1", "payload_v2"], "orphaned": ["shrink_v1", "shrink_v2"],
           "denied": ["loop3", "loop6"]}


def test_every_outcome_gets_its_row_and_badge(tmp_path: Path) -> None:
    from broker.envelope import Envelope

    settings = Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS)
    services = open_services(settings, runner=ProcessRunner())
    try:
        pipeline = services.pipeline()
        for outcome, names in STORIES.items():
            for name in names:
                pipeline.run(outcome, (SCRIPTS / f"{name}.py").read_text(), {}, Envelope())
            view = report_view(services.store, outcome)
            last = max(r["revision"] for r in view["revisions"])
            seen = {row["cells"][last]["outcome"] for row in view["matrix"]
                    if last in row["cells"]}
            assert outcome in seen, (outcome, seen)
            assert f'<span class="o o-{outcome}">{outcome}</span>' in render_html(view)
    finally:
        services.close()


def test_refused_candidates_and_relocations_are_shown(home: Path) -> None:
    """A candidate `revise repair` refused never became a revision: the page lists it
    (and never says the gate accepted everything), and each relocated site is shown."""
    settings = Settings(home=home, sandbox=SandboxKind.PROCESS)
    services = open_services(settings, runner=ProcessRunner())
    try:
        services.store.add_event("R", "repair_refused", "repair candidate 1 refused by "
                                 "checker", data={"attempt": 1, "stage": "checker",
                                                  "violations": [{"rule": "R03"}]})
        services.store.add_event("R", "repair_refused", "repair candidate 2 refused by gate",
                                 data={"attempt": 2, "stage": "gate", "counterexamples": [
                                     {"kind": "removed", "site": GEN}]})
        view = report_view(services.store, "R")
    finally:
        services.close()
    assert [(c["attempt"], c["stage"]) for c in view["refused_candidates"]] == [
        (1, "checker"), (2, "gate")]
    view["revisions"][-1]["relocations"] = [{"from": GEN, "to": "orchestrate/#1",
                                             "committed_line": 4, "line": 6}]
    page = render_html(view)
    assert "Refused repair candidates" in page and "R03" in page
    assert f"removed {GEN.replace('>', '&gt;')}" in page
    assert "accepted every revision" not in page
    assert "Relocated call sites" in page and "orchestrate/#1" in page
