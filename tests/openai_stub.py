"""A local HTTP server that speaks the OpenAI chat-completions protocol, for tests only.

Hosted LLMs cannot be reached from here, so litellm's real HTTP path is exercised against this server.
`responder(prompt) -> (status, text, delay_s[, headers])` scripts each reply (status `MALFORMED` sends
`text` as the raw body, e.g. broken JSON; `headers`, e.g. Retry-After, are added to the reply); every
request is recorded with its arrival time (`time.monotonic()`).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MALFORMED = -1  # a 200 reply whose body is the text as is, not the protocol's JSON


class GoldAnswers:
    """A QA set's first gold answer per question, to script replies: `question(prompt)` is the question a
    prompt asks, `answer[question]` its gold answer."""

    def __init__(self, qa):
        self.answer = dict(zip(qa["question"], [a[0] for a in qa["answers"]], strict=True))

    def question(self, prompt: str) -> str:
        return next(q for q in self.answer if q in prompt)


class TurnsWrong:
    """A responder that answers each question's gold answer until `right` is set False (a provider's silent
    model update), then "no idea"."""

    def __init__(self, qa):
        self.gold, self.right = GoldAnswers(qa), True

    def __call__(self, prompt: str):
        question = self.gold.question(prompt)
        return 200, (self.gold.answer[question] if self.right else "no idea"), 0.0


class OpenAIStub:
    def __init__(self, responder: Callable[..., tuple[int, str, float]], by_model: bool = False):
        self.responder = responder  # responder(prompt), or responder(prompt, model) when by_model
        self.requests: list[dict] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append(
                    {
                        "path": self.path,
                        "body": body,
                        "auth": self.headers.get("Authorization"),
                        "t": time.monotonic(),
                    }
                )
                prompt = body["messages"][-1]["content"]
                args = (prompt, body["model"]) if by_model else (prompt,)
                status, text, delay, *more = stub.responder(*args)
                extra_headers = more[0] if more else {}
                time.sleep(delay)
                if status == MALFORMED:
                    status, payload = 200, None
                elif status != 200:
                    payload = {"error": {"message": text, "type": "server_error", "code": status}}
                else:
                    payload = {
                        "id": f"chatcmpl-{len(stub.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": len(prompt.split()),
                            "completion_tokens": len(text.split()),
                            "total_tokens": len(prompt.split()) + len(text.split()),
                        },
                    }
                data = text.encode() if payload is None else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in extra_headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> OpenAIStub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
