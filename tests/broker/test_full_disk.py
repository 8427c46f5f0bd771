"""The commit spool never refuses a paid result (issue 25, item 1): a full spool disk
falls back to the next directory with room, then to memory, and the drain commits it."""

from __future__ import annotations

from pathlib import Path

from broker.identity import Identity
from broker.records import SlotRecord
from broker.spool import CommitSpool, InMemory

from ..disks import full_disk


def _slot(n: int) -> SlotRecord:
    return SlotRecord(run_id="r", identity=Identity("orchestrate/#0", (), n),
                      capability="image.generate", digest=f"d{n}", fingerprint="f",
                      result={"n": n, "pad": "x" * 2000}, revision=1)


def test_a_full_spool_disk_falls_back_to_a_directory_with_room(tmp_path: Path) -> None:
    with full_disk(tmp_path / "full") as full:
        spool = CommitSpool(full / "spool", fallbacks=(tmp_path / "elsewhere",))
        kept = spool.keep(_slot(0), 7)
        assert isinstance(kept, Path) and kept.parent == tmp_path / "elsewhere"
        assert spool.degraded and "No space left on device" in spool.degraded
        assert not list((full / "spool").glob("*.partial"))  # nothing half-written
        committed: list[tuple[SlotRecord, int | None]] = []
        assert spool.drain(lambda slot, attempt: committed.append((slot, attempt))) == 1
        assert committed == [(_slot(0), 7)] and spool.pending() == []


def test_with_no_disk_at_all_the_result_waits_in_memory_for_the_drain(tmp_path: Path
                                                                       ) -> None:
    with full_disk(tmp_path / "a") as first, full_disk(tmp_path / "b") as second:
        spool = CommitSpool(first / "spool", fallbacks=(second / "spool",))
        kept = spool.keep(_slot(1), None)
        assert isinstance(kept, InMemory) and "memory" in str(kept)
        assert spool.pending() == [kept]

        def refuse(slot: SlotRecord, attempt: int | None) -> None:
            raise ConnectionError("the store is still away")

        assert spool.drain(refuse) == 0 and spool.pending() == [kept]  # never dropped
        committed: list[SlotRecord] = []
        assert spool.drain(lambda slot, attempt: committed.append(slot)) == 1
        assert committed == [_slot(1)] and spool.pending() == []


def test_a_full_disk_under_the_provider_log_never_turns_an_answer_into_a_failure(
        tmp_path: Path) -> None:
    from broker.artifacts import MemoryArtifactStore
    from broker.catalog import lookup
    from broker.providers import CallContext, LocalProvider, LoggedProvider, ProviderLog

    with full_disk(tmp_path / "home", size_kib=64) as home:
        log = ProviderLog(home / "provider-log.jsonl")
        provider = LoggedProvider(LocalProvider(MemoryArtifactStore()), log)
        answer = provider.execute(lookup("image.generate"), {"prompt": "fox"},
                                  CallContext("r", "a@:0", "revise-k"))
        assert answer.result["prompt"] == "fox"  # paid, and handed back
        assert provider.degraded and "No space left on device" in provider.degraded
        assert log.read() == []  # nothing half-written: no line rather than a torn one
        (home / "filler").unlink()  # room again: the log takes lines and says so
        provider.execute(lookup("image.generate"), {"prompt": "owl"},
                         CallContext("r", "b@:0", "revise-k2"))
        assert provider.degraded is None
        assert [e["identity"] for e in log.read()] == ["b@:0"]


def test_a_torn_line_anywhere_is_skipped_by_readers(tmp_path: Path) -> None:
    from broker.providers import ProviderLog

    path = tmp_path / "provider-log.jsonl"
    path.write_text('{"identity": "a@:0", "outcome": "ok"}\n{"identity": "b@:0", "outc\n'
                    '{"identity": "c@:0", "outcome": "ok"}\n{"identi')
    assert [e["identity"] for e in ProviderLog(path).read()] == ["a@:0", "c@:0"]
