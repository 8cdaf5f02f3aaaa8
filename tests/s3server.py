"""A real S3-compatible server on the loopback address (moto's), for tests of URI work locations.

Nothing is mocked in-process: pyarrow, boto3 and MLflow talk HTTP to it through the standard AWS
variables (`AWS_ENDPOINT_URL` and the keys), as they would to S3 or MinIO.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

BUCKET = "drydock-test"


@contextmanager
def s3_server(bucket: str = BUCKET) -> Iterator[dict[str, str]]:
    """Start the server, create `bucket`; yields the environment that points clients at it.
    Stopped on exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(endpoint, timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"moto's S3 server did not start on {endpoint}") from None
                time.sleep(0.2)
        req = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")  # CreateBucket (moto needs no signature)
        urllib.request.urlopen(req, timeout=5).close()
        yield env
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
