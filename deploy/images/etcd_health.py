"""Container healthcheck of an etcd member: its /health endpoint must say the cluster answers (a majority is up).

Exit 0 healthy, 1 not; the one line printed lands in ``docker inspect`` (``.State.Health.Log``). Standard library
only: the etcd image has the base's python3 and no etcdctl.
"""

import json
import sys
import urllib.request

URL = "http://127.0.0.1:2379/health"

try:
    with urllib.request.urlopen(URL, timeout=3) as resp:
        body = json.loads(resp.read())
except (OSError, ValueError) as exc:
    print(f"unhealthy: {URL}: {exc}")
    sys.exit(1)
healthy = str(body.get("health")).lower() == "true"
print(("healthy: " if healthy else "unhealthy: ") + json.dumps(body))
sys.exit(0 if healthy else 1)
