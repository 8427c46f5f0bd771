import json
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker import png
from broker.artifacts import ArtifactRef, FileArtifactStore, MemoryArtifactStore
from broker.catalog import lookup
from broker.errors import CapabilityError
from broker.identity import payload_digest, request_key
from broker.providers import (
    SUPPORTED_SIZES,
    CallContext,
    DryRunProvider,
    LocalProvider,
    LoggedProvider,
    Provider,
    ProviderLog,
    ProviderResult,
    build_provider,
)
from broker.settings import Settings

IMAGE = lookup("image.generate")


def ctx(identity: str = "orchestrate/#0@:0", run_id: str = "run-1") -> CallContext:
    return CallContext(run_id, identity, request_key("token", "image.generate", identity))


@pytest.fixture
def provider() -> LocalProvider:
    return LocalProvider(MemoryArtifactStore())


# ---- idempotency key -------------------------------------------------------------------------

def test_request_key_names_the_request_and_the_run_token():
    key = request_key("t", "image.generate", "d1")
    assert key == request_key("t", "image.generate", "d1")  # the same request: same key
    assert key != request_key("t", "image.generate", "d2")  # another payload never
    assert key != request_key("t", "text.generate", "d1")
    assert key != request_key("t2", "image.generate", "d1")  # another run (or deployment)
    assert key.startswith("revise-") and len(key) == len("revise-") + 32


# ---- determinism -----------------------------------------------------------------------------

def test_image_generate_is_deterministic_to_the_byte(tmp_path):
    payload = {"prompt": "a red fox in snow", "size": "512x512"}
    first_store, second_store = FileArtifactStore(tmp_path / "a"), FileArtifactStore(tmp_path / "b")
    first = LocalProvider(first_store).execute(IMAGE, payload, ctx())
    second = LocalProvider(second_store).execute(IMAGE, dict(reversed(payload.items())),
                                                 ctx("other@:0"))
    assert first == second
    ref = ArtifactRef.from_json(first.result["artifact"])
    assert first_store.get(ref) == second_store.get(ref)
    assert first_store.get(ref).startswith(png.PNG_SIGNATURE)
    assert png.decode_size(first_store.get(ref)) == (32, 32)  # preview: 1/16 of each side
    assert first.result["width"] == 512 and first.result["height"] == 512
    assert first.result["artifact"]["uri"] == f"artifact://{ref.id}"
    assert first.usage == {"images": 1}
    assert first.cost == IMAGE.unit_price


def test_different_prompts_give_different_images(provider):
    a = provider.execute(IMAGE, {"prompt": "a"}, ctx())
    b = provider.execute(IMAGE, {"prompt": "b"}, ctx())
    assert a.result["artifact"]["id"] != b.result["artifact"]["id"]
    explicit = provider.execute(IMAGE, {"prompt": "a", "seed": 7}, ctx())
    assert explicit.result["seed"] == 7


@pytest.mark.parametrize("size", SUPPORTED_SIZES)
def test_every_supported_size_renders(provider, size):
    out = provider.execute(IMAGE, {"prompt": "p", "size": size}, ctx())
    width, height = (int(s) for s in size.split("x"))
    data = provider.artifacts.get(out.result["artifact"])
    assert png.decode_size(data) == (width // 16, height // 16)


def test_storyboard_plan(provider):
    cap = lookup("storyboard.plan")
    out = provider.execute(cap, {"brief": "a lighthouse at night", "shots": 5}, ctx())
    shots = out.result["shots"]
    assert len(shots) == 5 and all("lighthouse" in shot for shot in shots)
    assert out == provider.execute(cap, {"brief": "a lighthouse at night", "shots": 5}, ctx())
    assert set(out.usage) == {"prompt_tokens", "completion_tokens"}
    assert out.cost == cap.unit_price


def test_review_visual_is_deterministic_and_mostly_passes(provider):
    cap = lookup("review.visual")
    verdicts = [provider.execute(cap, {"image": f"img-{i}"}, ctx()).result for i in range(60)]
    assert all(v["verdict"] in ("pass", "fail") and 0 <= v["score"] <= 1 for v in verdicts)
    passes = sum(v["verdict"] == "pass" for v in verdicts)
    assert 35 <= passes < 60
    again = [provider.execute(cap, {"image": f"img-{i}"}, ctx()).result for i in range(60)]
    assert again == verdicts


def test_text_generate(provider):
    cap = lookup("text.generate")
    out = provider.execute(cap, {"prompt": "say hi", "max_tokens": 5}, ctx())
    assert isinstance(out.result["text"], str) and len(out.result["text"].split()) <= 5
    assert out == provider.execute(cap, {"prompt": "say hi", "max_tokens": 5}, ctx())
    assert out.usage["completion_tokens"] == len(out.result["text"].split())


# ---- validation like a real API --------------------------------------------------------------

@pytest.mark.parametrize("prompt", ["", "   \n\t"])
def test_empty_prompt_is_a_400(provider, prompt):
    with pytest.raises(CapabilityError) as caught:
        provider.execute(IMAGE, {"prompt": prompt}, ctx("s@:3"))
    err = caught.value
    assert (err.status, err.provider_code, err.retryable) == (400, "invalid_parameter", False)
    assert err.field == "prompt" and "'prompt'" in err.message
    assert err.capability == "image.generate" and err.identity == "s@:3"


def test_unsupported_size_is_a_400_naming_sizes(provider):
    with pytest.raises(CapabilityError) as caught:
        provider.execute(IMAGE, {"prompt": "p", "size": "999x999"}, ctx())
    err = caught.value
    assert (err.status, err.provider_code, err.field) == (400, "invalid_parameter", "size")
    assert "999x999" in err.message and "1024x1024" in err.message


@pytest.mark.parametrize(("name", "payload"), [
    ("image.generate", {"prompt": "p", "model": "dall-e-9"}),
    ("text.generate", {"prompt": "p", "model": "gpt-99"}),
    ("storyboard.plan", {"brief": "b", "model": "local-image-1"}),
])
def test_unknown_model_is_a_404(provider, name, payload):
    with pytest.raises(CapabilityError) as caught:
        provider.execute(lookup(name), payload, ctx())
    assert (caught.value.status, caught.value.provider_code) == (404, "model_not_found")
    assert payload["model"] in caught.value.message


def test_structurally_bad_payload_is_a_400(provider):
    with pytest.raises(CapabilityError) as caught:
        provider.execute(IMAGE, {"prompt": "p", "colour": "red"}, ctx())
    assert caught.value.status == 400 and caught.value.field == "colour"


def test_catalog_only_capability_is_refused(provider):
    with pytest.raises(CapabilityError) as caught:
        provider.execute(lookup("video.generate"), {"prompt": "p"}, ctx())
    assert caught.value.provider_code == "unsupported_capability"


def test_error_survives_pickling(provider):
    import pickle

    with pytest.raises(CapabilityError) as caught:
        provider.execute(IMAGE, {"prompt": ""}, ctx())
    clone = pickle.loads(pickle.dumps(caught.value))
    assert (clone.status, clone.provider_code, clone.identity) == (400, "invalid_parameter",
                                                                   caught.value.identity)


# ---- latency ---------------------------------------------------------------------------------

def test_constant_latency_sleeps():
    provider = LocalProvider(MemoryArtifactStore(), latency=0.05)
    start = time.monotonic()
    provider.execute(lookup("text.generate"), {"prompt": "p"}, ctx())
    assert time.monotonic() - start >= 0.05


def test_latency_function_shuffles_completion_order():
    delays = {"first": 0.3, "second": 0.0}
    seen = []
    provider = LocalProvider(MemoryArtifactStore(),
                             latency=lambda name, payload: (seen.append(name),
                                                            delays[payload["prompt"]])[1])
    done = []
    cap = lookup("text.generate")

    def call(prompt):
        provider.execute(cap, {"prompt": prompt}, ctx(prompt + "@:0"))
        done.append(prompt)

    with ThreadPoolExecutor(2) as pool:
        pool.submit(call, "first")
        time.sleep(0.02)
        pool.submit(call, "second")
    assert done == ["second", "first"]
    assert seen == ["text.generate", "text.generate"]


# ---- dry run ---------------------------------------------------------------------------------

def test_dry_run_provider_is_synthetic_and_free():
    store = MemoryArtifactStore()
    provider = DryRunProvider(store)
    video = provider.execute(lookup("video.generate"), {"prompt": "p"}, ctx())
    assert video.result["dry_run"] is True and video.cost == 0
    assert video == provider.execute(lookup("video.generate"), {"prompt": "p"}, ctx())
    edit = provider.execute(lookup("image.edit"), {"image": "x", "instruction": "crop"}, ctx())
    assert store.exists(edit.result["artifact"]["id"])


# ---- provider log ----------------------------------------------------------------------------

def test_logged_provider_writes_ok_and_rejected_calls(tmp_path):
    log = ProviderLog(tmp_path / "provider-log.jsonl")
    provider = LoggedProvider(LocalProvider(MemoryArtifactStore()), log)
    assert isinstance(provider, Provider)
    ok_payload = {"prompt": "fox"}
    result = provider.execute(IMAGE, ok_payload, ctx("a@:0"))
    with pytest.raises(CapabilityError) as caught:
        provider.execute(IMAGE, {"prompt": "fox", "size": "999x999"}, ctx("b@:0"))
    assert caught.value.provider_code == "invalid_parameter"  # re-raised unchanged
    ok, rejected = log.read()
    assert ok == {"ts": ok["ts"], "run_id": "run-1", "identity": "a@:0",
                  "capability": "image.generate", "digest": payload_digest(ok_payload),
                  "outcome": "ok", "status": None, "error_code": None,
                  "idempotency_key": ctx("a@:0").idempotency_key, "provider": "local",
                  "idempotency_covered": False, "result": result.result,
                  "phase": "answered", "dispatch": ok["dispatch"]}
    sent = log.lines()[0]
    assert sent == {"ts": sent["ts"], "run_id": "run-1", "identity": "a@:0",
                    "capability": "image.generate", "digest": payload_digest(ok_payload),
                    "idempotency_key": ctx("a@:0").idempotency_key, "provider": "local",
                    "idempotency_covered": False, "phase": "sent", "dispatch": ok["dispatch"]}
    assert sent["ts"] <= ok["ts"] and len(ok["dispatch"]) == 32
    assert rejected["dispatch"] != ok["dispatch"] and len(log.lines()) == 4
    assert result.result["prompt"] == "fox"
    assert rejected["outcome"] == "error" and rejected["status"] == 400
    assert rejected["error_code"] == "invalid_parameter" and rejected["identity"] == "b@:0"


def test_log_lines_are_valid_under_thread_concurrency(tmp_path):
    log = ProviderLog(tmp_path / "log.jsonl")
    big = "x" * 5000  # longer than PIPE_BUF: still one line per write

    def write(i):
        log.append({"i": i, "pad": big})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(write, range(400)))
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    assert len(lines) == 400
    assert sorted(json.loads(line)["i"] for line in lines) == list(range(400))


def _append_many(path, worker):
    log = ProviderLog(path)
    for i in range(50):
        log.append({"worker": worker, "i": i, "pad": "y" * 3000})


def test_log_lines_are_valid_across_processes(tmp_path):
    path = tmp_path / "log.jsonl"
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_append_many, args=(path, w)) for w in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    entries = ProviderLog(path).read()
    assert len(entries) == 200
    assert {(e["worker"], e["i"]) for e in entries} == {(w, i) for w in range(4)
                                                        for i in range(50)}


def test_log_read_tolerates_a_torn_last_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"a": 1}\n{"b": ')
    assert ProviderLog(path).read() == [{"a": 1}]
    assert ProviderLog(tmp_path / "missing.jsonl").read() == []


def test_logged_provider_from_threads_logs_every_call(tmp_path):
    log = ProviderLog(tmp_path / "log.jsonl")
    provider = LoggedProvider(LocalProvider(MemoryArtifactStore()), log)
    cap = lookup("text.generate")
    barrier = threading.Barrier(8)

    def call(i):
        barrier.wait()
        prompt = "" if i % 4 == 0 else f"p{i}"
        try:
            provider.execute(cap, {"prompt": prompt}, ctx(f"s@:{i}"))
        except CapabilityError:
            pass

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(call, range(8)))
    entries = log.read()
    assert sorted(e["identity"] for e in entries) == sorted(f"s@:{i}" for i in range(8))
    assert sum(e["outcome"] == "error" for e in entries) == 2


# ---- factory ---------------------------------------------------------------------------------

def test_build_provider_routes_and_logs(tmp_path):
    settings = Settings(home=tmp_path)
    store = FileArtifactStore(settings.artifacts_dir)
    provider = build_provider(settings, store)
    image = provider.execute(IMAGE, {"prompt": "fox"}, ctx("a@:0"))
    video = provider.execute(lookup("video.generate"), {"prompt": "p"}, ctx("b@:0"))
    assert store.exists(image.result["artifact"]["id"])
    assert video.result["dry_run"] is True
    entries = ProviderLog(settings.provider_log_path).read()
    assert [(e["identity"], e["provider"]) for e in entries] == [("a@:0", "local"),
                                                                ("b@:0", "dry-run")]


def test_build_provider_passes_latency(tmp_path):
    provider = build_provider(Settings(home=tmp_path), MemoryArtifactStore(), latency=0.05)
    start = time.monotonic()
    provider.execute(lookup("text.generate"), {"prompt": "p"}, ctx())
    assert time.monotonic() - start >= 0.05


def test_logged_provider_logs_unexpected_errors_and_reraises(tmp_path):
    class Broken:
        name = "broken"

        def execute(self, capability, payload, call):
            raise RuntimeError("boom")

    log = ProviderLog(tmp_path / "log.jsonl")
    with pytest.raises(RuntimeError, match="boom"):
        LoggedProvider(Broken(), log).execute(IMAGE, {"prompt": "p"}, ctx())
    (entry,) = log.read()
    assert (entry["outcome"], entry["error_code"], entry["provider"]) == ("error", "RuntimeError",
                                                                          "broken")
    sent, answered = log.lines()
    assert (sent["phase"], answered["phase"]) == ("sent", "answered")
    assert sent["dispatch"] == answered["dispatch"] == entry["dispatch"]


class _Inspecting:
    """A provider that reads the log from disk (a fresh reader) when it is called."""

    name = "inspecting"

    def __init__(self, path) -> None:
        self.path = path
        self.seen: list[dict] = []

    def execute(self, capability, payload, call):
        self.seen = ProviderLog(self.path).read()
        return ProviderResult({"text": "done"})


def test_the_intent_line_is_on_disk_before_the_provider_runs(tmp_path):
    path = tmp_path / "log.jsonl"
    inner = _Inspecting(path)
    call = ctx("a@:0")
    LoggedProvider(inner, ProviderLog(path)).execute(IMAGE, {"prompt": "p"}, call)
    (pending,) = inner.seen
    assert (pending["outcome"], pending["phase"], pending["identity"]) == ("sent", "sent", "a@:0")
    assert pending["idempotency_key"] == call.idempotency_key
    assert pending["digest"] == payload_digest({"prompt": "p"})
    (done,) = ProviderLog(path).read()
    assert (done["outcome"], done["dispatch"]) == ("ok", pending["dispatch"])


def test_an_unwritable_log_stops_the_call_before_the_provider(tmp_path):
    (tmp_path / "log.jsonl").mkdir()  # a directory where the log should be: open() fails
    inner = _Inspecting(tmp_path / "log.jsonl")
    with pytest.raises(OSError):
        LoggedProvider(inner, ProviderLog(tmp_path / "log.jsonl")).execute(
            IMAGE, {"prompt": "p"}, ctx())
    assert inner.seen == []  # never called: no request leaves without its intent line


def _killed_mid_call(path) -> None:
    class Dying:
        name = "dying"

        def execute(self, capability, payload, call):
            os.kill(os.getpid(), signal.SIGKILL)

    LoggedProvider(Dying(), ProviderLog(path)).execute(IMAGE, {"prompt": "p"}, ctx("k@:0"))


def test_a_dispatch_killed_mid_call_reads_as_sent(tmp_path):
    path = tmp_path / "log.jsonl"
    log = ProviderLog(path)
    LoggedProvider(LocalProvider(MemoryArtifactStore()), log).execute(
        IMAGE, {"prompt": "before"}, ctx("a@:0"))
    proc = multiprocessing.get_context("fork").Process(target=_killed_mid_call, args=(path,))
    proc.start()
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    LoggedProvider(LocalProvider(MemoryArtifactStore()), log).execute(
        IMAGE, {"prompt": "after"}, ctx("b@:0"))
    first, killed, after = log.read()
    assert [e["identity"] for e in (first, killed, after)] == ["a@:0", "k@:0", "b@:0"]
    assert (first["outcome"], after["outcome"]) == ("ok", "ok")
    assert killed["outcome"] == "sent" and killed["provider"] == "dying"
    assert (killed["status"], killed["error_code"]) == (None, None)
    assert killed["idempotency_key"] == ctx("k@:0").idempotency_key
    assert len(log.lines()) == 5


def test_a_base_exception_mid_call_leaves_only_the_intent_line(tmp_path):
    class Interrupted:
        name = "interrupted"

        def execute(self, capability, payload, call):
            raise KeyboardInterrupt

    log = ProviderLog(tmp_path / "log.jsonl")
    with pytest.raises(KeyboardInterrupt):
        LoggedProvider(Interrupted(), log).execute(IMAGE, {"prompt": "p"}, ctx())
    (entry,) = log.read()
    assert entry["outcome"] == "sent"


def test_log_read_folds_a_torn_outcome_line_into_a_sent_dispatch(tmp_path):
    path = tmp_path / "log.jsonl"
    sent = {"phase": "sent", "dispatch": "d1", "identity": "a@:0", "ts": "t0"}
    path.write_text(json.dumps(sent) + '\n{"phase": "answered", "dispatch": "d1", "outc')
    assert ProviderLog(path).read() == [{**sent, "outcome": "sent", "status": None,
                                         "error_code": None}]


def test_log_read_keeps_one_entry_per_dispatch_in_the_order_they_ended(tmp_path):
    path = tmp_path / "log.jsonl"
    old = {"identity": "old@:0", "outcome": "ok", "ts": "t0"}  # before intent lines
    lines = [old,
             {"phase": "sent", "dispatch": "slow", "identity": "s@:0"},
             {"phase": "sent", "dispatch": "fast", "identity": "f@:0"},
             {"phase": "sent", "dispatch": "lost", "identity": "l@:0"},
             {"phase": "answered", "dispatch": "fast", "identity": "f@:0", "outcome": "ok"},
             {"phase": "answered", "dispatch": "slow", "identity": "s@:0",
              "outcome": "error"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    entries = ProviderLog(path).read()
    assert [(e["identity"], e["outcome"]) for e in entries] == [
        ("old@:0", "ok"), ("l@:0", "sent"), ("f@:0", "ok"), ("s@:0", "error")]
    assert entries[0] == old and len(ProviderLog(path).lines()) == 6


def test_an_old_format_log_reads_as_before(tmp_path):
    path = tmp_path / "log.jsonl"
    lines = [{"identity": f"a@:{i}", "outcome": "ok" if i % 2 else "error", "ts": f"t{i}"}
             for i in range(4)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert ProviderLog(path).read() == lines == ProviderLog(path).lines()
