import httpx

from tests.support.server import LiveServer


def test_healthz_answers_on_a_real_server(live_server: LiveServer) -> None:
    response = httpx.get(f"{live_server.url}/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_reports_both_services(live_server: LiveServer) -> None:
    body = httpx.get(f"{live_server.url}/readyz").json()
    assert body["status"] == "ok"
    assert body["memory"]["ready"] is True
    assert body["kanban"]["ready"] is True
