"""The fake Graph API (tests/integrations/whatsapp/fake_graph.py) in a process of its own,
for tests whose workers send thousands of messages: a server thread inside the test process
would share its interpreter lock with the test's polling and slow every answer.

`python -m tests.campaigns.graph_server TOKEN PORT` serves the fake on 127.0.0.1:PORT, plus
`GET /_test/sends?after=N`: the sends recorded from the N-th on, as `[to, message id]` pairs
in arrival order, and `POST /_test/phone-numbers` (`{"id": …}`): a number the token may read.
"""

from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from tests.integrations.whatsapp.fake_graph import FakeGraph

SENDS_PATH = "/_test/sends"
PHONE_NUMBERS_PATH = "/_test/phone-numbers"


def recording_app(graph: FakeGraph) -> Starlette:
    async def sends(request: Request) -> Response:
        after = int(request.query_params.get("after", "0"))
        return JSONResponse([[message["to"], message["id"]] for message in graph.messages[after:]])

    async def add_phone_number(request: Request) -> Response:
        graph.add_phone_number(str((await request.json())["id"]))
        return Response(status_code=204)

    return Starlette(
        routes=[
            Route(SENDS_PATH, sends),
            Route(PHONE_NUMBERS_PATH, add_phone_number, methods=["POST"]),
            Mount("/", app=graph.app()),
        ]
    )


def main(token: str, port: int) -> None:
    graph = FakeGraph(token)
    graph.base_url = f"http://127.0.0.1:{port}"
    uvicorn.run(
        recording_app(graph),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
