"""`pip install -e .` stays fast (issue 29, item 9): the base install is what running
scripts and the deployment's roles need; the Procfile's runner, S3 and the test tools are
extras, and a missing extra is one error naming it."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

from broker.errors import ConfigError
from broker.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
TEST_TOOLS = {"pytest", "pytest-timeout", "pytest-xdist", "hypothesis", "hypothesmith", "ruff",
              "mypy", "moto"}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_base_install_leaves_out_extras_and_test_tools() -> None:
    base = _names(PROJECT["dependencies"])
    assert not base & (TEST_TOOLS | {"boto3", "honcho"}), base
    extras = PROJECT["optional-dependencies"]
    assert _names(extras["s3"]) == {"boto3"} and _names(extras["deploy"]) == {"honcho"}
    assert "revise[s3,deploy]" in extras["dev"] and TEST_TOOLS <= _names(extras["dev"])
    assert "'.[deploy]'" in (ROOT / "README.md").read_text()


def test_s3_without_its_extra_is_one_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.artifacts_s3 import client_from_settings

    monkeypatch.setitem(sys.modules, "boto3", None)  # as if it were not installed
    with pytest.raises(ConfigError, match=r"pip install 'revise\[s3\]'"):
        client_from_settings(Settings(artifact_store="s3", s3_bucket="b"))


def test_the_set_up_names_every_setting_compose_reads() -> None:
    compose = (ROOT / "compose.yaml").read_text()
    readme = (ROOT / "README.md").read_text()
    set_up = readme[readme.index("## Set up"):readme.index("## A short tour")]
    row = next(line for line in set_up.splitlines() if "`compose.yaml`" in line)
    read = set(re.findall(r"\$\{(REVISE_[A-Z0-9_]+)", compose))
    named = set(re.findall(r"`(REVISE_[A-Z0-9_]+)", row))
    assert read and {v for v in read - named if not v.startswith("REVISE_S3_")} == set()
    assert "REVISE_S3_*" in row
