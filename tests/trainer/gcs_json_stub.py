"""A loopback HTTP server that answers the few Cloud Storage JSON API calls the attempts record makes, with the
service's generation rules, so the real google-cloud-storage client (its request building, its upload and
download paths and its mapping of HTTP statuses to exceptions) runs against it instead of a fake bucket object.

Rules played (https://cloud.google.com/storage/docs/request-preconditions,
https://cloud.google.com/storage/docs/json_api/v1/objects): every write of an object makes a new, larger
generation; `ifGenerationMatch=G` on a read or a write fails with 412 unless the live generation is G, and G=0
means "no live object"; a missing object, or a generation that is not the live one (a bucket without
versioning), is 404. Only what GcsStore sends is served: object metadata
(GET /storage/v1/b/B/o/NAME), media download (GET /download/storage/v1/b/B/o/NAME?alt=media) and the multipart
upload (POST /upload/storage/v1/b/B/o?uploadType=multipart&name=...). Anything else is 501, so a client change
that sends a request the stub does not know fails the test instead of passing unseen.
"""
from __future__ import annotations

import email.parser
import email.policy
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass
class StoredObject:
    data: bytes
    generation: int


@dataclass
class Objects:
    """The bucket's live objects and the requests served (method, path, query) in order."""
    live: dict[tuple[str, str], StoredObject] = field(default_factory=dict)
    next_generation: int = 1000          # generations are opaque numbers: never the count of writes
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Another writer's turn: called (under the lock) with each request's path before it is answered, until it
    # returns True.
    meddle: Callable[["Objects", str], bool] | None = None

    def write(self, bucket: str, name: str, data: bytes) -> None:
        self.next_generation += 7
        self.live[(bucket, name)] = StoredObject(data, self.next_generation)

    def resource(self, bucket: str, name: str) -> dict:
        stored = self.live[(bucket, name)]
        return {"kind": "storage#object", "bucket": bucket, "name": name, "id": f"{bucket}/{name}/{stored.generation}",
                "generation": str(stored.generation), "metageneration": "1", "size": str(len(stored.data)),
                "contentType": "application/json"}


def _precondition_failed(objects: Objects, bucket: str, name: str, query: dict[str, str]) -> bool:
    if "ifGenerationMatch" not in query:
        return False
    live = objects.live.get((bucket, name))
    return int(query["ifGenerationMatch"]) != (live.generation if live else 0)


def handler_for(objects: Objects) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):     # noqa: A002 - the base class's parameter name
            pass

        def _answer(self, status: int, body: bytes = b"", content_type: str = "application/json",
                    headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            for header, value in (headers or {}).items():
                self.send_header(header, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, reason: str) -> None:
            body = {"error": {"code": status, "message": reason, "errors": [{"reason": reason}]}}
            self._answer(status, json.dumps(body).encode())

        def _parsed(self) -> tuple[list[str], dict[str, str]]:
            url = urlsplit(self.path)
            query = {key: values[-1] for key, values in parse_qs(url.query).items()}
            with objects.lock:
                objects.requests.append((self.command, url.path, query))
                if objects.meddle is not None and objects.meddle(objects, url.path):
                    objects.meddle = None
            return [unquote(part) for part in url.path.split("/")], query

        def do_GET(self) -> None:                 # noqa: N802 - http.server's naming
            parts, query = self._parsed()
            download = parts[1:4] == ["download", "storage", "v1"]
            rest = parts[4:] if download else parts[3:]
            if parts[1:3] != ["storage", "v1"] and not download or len(rest) < 4 or rest[0] != "b" or rest[2] != "o":
                return self._error(501, "notImplemented")
            bucket, name = rest[1], "/".join(rest[3:])
            with objects.lock:
                live = objects.live.get((bucket, name))
                # A bucket without versioning keeps only the live generation: any other asked for is not found.
                if live is None or query.get("generation", str(live.generation)) != str(live.generation):
                    return self._error(404, "notFound")
                if _precondition_failed(objects, bucket, name, query):
                    return self._error(412, "conditionNotMet")
                if download != (query.get("alt") == "media"):
                    return self._error(501, "notImplemented")
                if download:
                    # The service names the generation served in a download's headers; the client copies them
                    # into the blob's fields (google/cloud/storage/blob.py _extract_headers_from_download).
                    stored = objects.live[(bucket, name)]
                    return self._answer(200, stored.data, "application/octet-stream",
                                        {"X-Goog-Generation": str(stored.generation), "X-Goog-Metageneration": "1"})
                return self._answer(200, json.dumps(objects.resource(bucket, name)).encode())

        def do_POST(self) -> None:                # noqa: N802
            parts, query = self._parsed()
            if parts[1:5] != ["upload", "storage", "v1", "b"] or parts[6:] != ["o"] \
                    or query.get("uploadType") != "multipart":
                return self._error(501, "notImplemented")
            bucket = parts[5]
            body = self.rfile.read(int(self.headers["Content-Length"]))
            message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode() + body)
            metadata_part, media_part = list(message.iter_parts())
            name = query.get("name") or json.loads(metadata_part.get_content())["name"]
            with objects.lock:
                if _precondition_failed(objects, bucket, name, query):
                    return self._error(412, "conditionNotMet")
                objects.write(bucket, name, media_part.get_payload(decode=True))
                return self._answer(200, json.dumps(objects.resource(bucket, name)).encode())

    return Handler


class GcsJsonStub:
    """`with GcsJsonStub() as stub:` serves on a free loopback port; `stub.endpoint` is the client's api_endpoint."""

    def __init__(self) -> None:
        self.objects = Objects()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(self.objects))
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "GcsJsonStub":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def client(self):
        """The real client, anonymous, talking to this server."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(project="stub", credentials=AnonymousCredentials(),
                              client_options={"api_endpoint": self.endpoint})
