"""A provider adapter's HTTP clients (``broker.providers.clients``): one per request in
flight, kept for the next request, on a real server on 127.0.0.1."""

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx

from broker.providers.clients import ClientPool
from tests.fakes import FAKE_API_KEY, IMAGES, FakeOpenAIServer, slow


def _post(pool: ClientPool, url: str) -> int:
    with pool.client() as client:
        return client.post(url, json={"model": "local-image-1", "prompt": "p", "size": "1024x1024"},
                           headers={"authorization": f"Bearer {FAKE_API_KEY}"}).status_code


def test_each_request_in_flight_has_a_client_and_later_requests_reuse_them() -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        url = f"{server.base_url}/images/generations"
        pool = ClientPool(lambda: httpx.Client(timeout=10))
        try:
            server.queue(IMAGES, *[slow(0.5)] * 6)
            with ThreadPoolExecutor(6) as threads:
                assert list(threads.map(lambda _: _post(pool, url), range(6))) == [200] * 6
            assert pool.made == 6  # six at once: six clients, none shared
            for _ in range(3):
                assert _post(pool, url) == 200
            assert pool.made == 6  # one after another: an idle client serves each
        finally:
            pool.close()
        assert pool.made == 0


def test_an_injected_client_serves_every_request_and_stays_open() -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server, httpx.Client() as shared:
        pool = ClientPool(lambda: httpx.Client(), shared=shared)
        assert _post(pool, f"{server.base_url}/images/generations") == 200
        pool.close()
        assert pool.made == 0 and not shared.is_closed


def test_httpx_transport_is_imported_with_the_pool_not_on_the_first_request() -> None:
    """A fresh interpreter: importing the module loads no transport (the processes that
    never call a provider do not pay for it); making a pool does, before any request."""
    probe = ("import sys\n"
             "import httpx\n"
             "from broker.providers.clients import ClientPool\n"
             "before = 'httpcore' in sys.modules\n"
             "ClientPool(httpx.Client)\n"
             "print(before, 'httpcore' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.split() == ["False", "True"]
