"""The Ray a `drydock.sweep` or `drydock.retrain` call starts ends with the call (a notebook
kernel kept its processes and memory for as long as it lived), also when the call raises; a Ray
the caller started is left running, and `keep_ray=True` keeps the call's own. A stopped
instance's dashboard address leaves the environment with it. Real Ray, in a
process of its own (tests/integration/api/test_example.py checks the same through `drydock.sweep`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.ray

SCRIPT = textwrap.dedent("""
    import os
    import ray
    from drydock.api import ray_of_this_call
    from pipeline.search.ray_instance import init_ray

    try:
        with ray_of_this_call(keep=False):
            init_ray(None, use_gpu=False)
            print("STARTED", ray.is_initialized())
            raise KeyboardInterrupt  # the call stopped mid-sweep
    except KeyboardInterrupt:
        pass
    print("AFTER_CALL", ray.is_initialized(), os.environ.get("RAY_API_SERVER_ADDRESS"))
    with ray_of_this_call(keep=True):
        init_ray(None, use_gpu=False)
    print("KEPT", ray.is_initialized(), os.environ.get("RAY_API_SERVER_ADDRESS", "").startswith("http://127.0.0.1:"))
    with ray_of_this_call(keep=False):  # running before this call: the caller's, left alone
        pass
    print("CALLERS", ray.is_initialized())
    ray.shutdown()
""")


def test_the_ray_a_call_started_ends_with_it_and_the_callers_own_is_left_running():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines()
                 if line.startswith(("STARTED", "AFTER_CALL", "KEPT", "CALLERS")))
    # after the call, its dashboard's address is gone from the environment too (a later ray.init
    # of the caller's would ask it); the kept instance's stays
    assert lines == {"STARTED": "True", "AFTER_CALL": "False None", "KEPT": "True True", "CALLERS": "True"}, (
        done.stdout + done.stderr[-3000:])
