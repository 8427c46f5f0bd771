"""The README's settings are the real ones: every REVISE_ name it mentions is a field of
``broker.settings.Settings`` or ``workers.config.WorkerSettings``, and the artifact, S3
and repair settings are all documented."""

from __future__ import annotations

import re
from pathlib import Path

from broker.settings import Settings
from workers.config import WorkerSettings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
KNOWN = ({f"REVISE_{name.upper()}" for name in Settings.model_fields}
         | {f"REVISE_CELERY_{name.upper()}" for name in WorkerSettings.model_fields})


def test_every_revise_name_in_the_readme_is_a_setting() -> None:
    mentioned = set(re.findall(r"REVISE_[A-Z0-9_]*[A-Z0-9]\b", README))
    assert mentioned - KNOWN == set()


def test_the_shared_storage_and_repair_settings_are_documented() -> None:
    ours = [name for name in Settings.model_fields
            if name.startswith(("artifact_", "s3_", "repair_"))]
    assert len(ours) == 9
    missing = [n.upper() for n in ours
               if not re.search(rf"(\b|REVISE_){n.upper()}\b", README)]
    assert missing == []
