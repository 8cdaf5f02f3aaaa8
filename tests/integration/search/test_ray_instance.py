"""The local Ray instance drydock starts answers its own processes' State API queries, whatever
/tmp/ray/ray_current_cluster says. Ray Train's placement-group cleaner asks the State API whether
a trial's controller lives; asked of another instance, it removed live trials' placement groups."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.ray

SCRIPT = textwrap.dedent("""
    import ray
    from pipeline.search.ray_instance import init_ray

    init_ray(None, use_gpu=False)

    @ray.remote(num_cpus=0)
    class Probe:
        def ping(self):
            return True

    @ray.remote(num_cpus=0)
    def state_api_view(actor_id):
        from ray.dashboard.utils import get_address_for_submission_client
        from ray.train.v2._internal.state.util import is_actor_alive
        return get_address_for_submission_client(None), is_actor_alive(actor_id, timeout=10)

    probe = Probe.remote()
    ray.get(probe.ping.remote())
    address, alive = ray.get(state_api_view.remote(probe._actor_id.hex()))
    print("DASHBOARD", ray.get_runtime_context().gcs_address, ray._private.worker.get_dashboard_url())
    print("RESOLVED", address, alive)
    ray.shutdown()
""")


def test_ray_processes_query_their_own_instance_not_the_last_one_recorded():
    # Another instance recorded as "current" (as `ray start` or ray.cluster_utils.Cluster leave it),
    # in a Ray temp root of its own so the machine's /tmp/ray is left alone. Nothing listens there.
    root = Path(tempfile.mkdtemp(prefix="ddi", dir="/tmp"))  # short: Ray's sockets live under it
    (root / "ray").mkdir()
    (root / "ray" / "ray_current_cluster").write_text("127.0.0.1:9")
    env = {**os.environ, "RAY_TMPDIR": str(root), "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_API_SERVER_ADDRESS", None)
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    finally:
        subprocess.run(["pkill", "-9", "-f", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("DASHBOARD", "RESOLVED")))
    assert done.returncode == 0 and "RESOLVED" in lines, done.stdout[-2000:] + done.stderr[-3000:]
    dashboard = lines["DASHBOARD"].split()[1]
    resolved, alive = lines["RESOLVED"].split()
    assert resolved == f"http://{dashboard}" and alive == "True"
