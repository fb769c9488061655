"""Exit 1 when the KWOK cluster runs the stack site.yml provisions: the integration tests need
the bare cluster, and `make integration` then brings it down and up again."""

from __future__ import annotations

import os
import pathlib
import sys

from kubernetes import config

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from support import DEFAULT_CLUSTER_DIR, provisioned_extender  # noqa: E402 - after the path


def main() -> int:
    api = config.new_client_from_config(config_file=os.environ.get("KUBECONFIG") or str(DEFAULT_CLUSTER_DIR / "kubeconfig"))
    try:
        holder = provisioned_extender(api)
    finally:
        api.close()
    if holder:
        print(f"the KWOK cluster runs the extender site.yml provisioned ({holder})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
