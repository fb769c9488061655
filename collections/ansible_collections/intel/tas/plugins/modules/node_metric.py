#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Telemetry-aware scheduling maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_metric
short_description: Write metrics into a node-exporter textfile collector directory
version_added: 0.1.0
description:
  - Sets metric values in a C(.prom) file of node-exporter's textfile collector directory,
    for example C(node_health_metric 2) for the health-metric demo.
  - The file is replaced atomically (a temporary file in the same directory, not named C(*.prom),
    then a rename), so node-exporter never reads half a file.
  - Lines of other metrics in the file are kept; only the named metrics change.
options:
  path:
    description: The textfile collector directory.
    type: path
    required: true
  file:
    description: Name of the file in O(path); must end in C(.prom).
    type: str
    default: text.prom
  metrics:
    description:
      - Metric name to value. Names must be valid Prometheus metric names; values finite numbers.
    type: dict
    required: true
  state:
    description: C(present) sets the metrics, C(absent) removes their lines.
    type: str
    choices: [present, absent]
    default: present
  overwrite:
    description: With C(false), metrics already in the file keep their value (initial values only).
    type: bool
    default: true
  mode:
    description:
      - File mode of the metrics file, octal (C(0644)) or symbolic (C(u=rw,go=r)).
      - node-exporter reads the file as another user than the one writing it, so it must stay readable.
    type: raw
    default: "0644"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.files
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
author:
  - Telemetry-aware scheduling maintainers (@tas-maintainers)
"""

EXAMPLES = r"""
- name: Report node-2 as unhealthy
  intel.tas.node_metric:
    path: /var/lib/node-exporter
    metrics:
      node_health_metric: 2

- name: Start at health 0 without resetting a value set earlier
  intel.tas.node_metric:
    path: /var/lib/node-exporter
    metrics:
      node_health_metric: 0
    overwrite: false
"""

RETURN = r"""
content:
  description: The file's content after the change.
  type: str
  returned: always
changed_metrics:
  description: Names of the metrics whose line changed.
  type: list
  elements: str
  returned: always
path:
  description: The metrics file.
  type: str
  returned: always
  sample: /var/lib/node-exporter/text.prom
"""

import math
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _format(value):
    number = float(value)
    return str(int(number)) if number == int(number) and abs(number) < 1e15 else repr(number)


def _metric_of(line):
    """The metric a sample or comment line belongs to, or None."""
    stripped = line.strip()
    if not stripped:
        return None
    if stripped.startswith("#"):
        parts = stripped.split()
        return parts[2] if len(parts) > 2 and parts[1] in ("HELP", "TYPE") else None
    return re.split(r"[{\s]", stripped, maxsplit=1)[0]


def render(existing, metrics, state, overwrite):
    """(new content, changed metric names) from the file's current content."""
    lines = existing.splitlines()
    present = set(_metric_of(line) for line in lines)
    changed = []
    kept = []
    for line in lines:
        name = _metric_of(line)
        if name in metrics and (state == "absent" or overwrite):
            continue
        kept.append(line)
    if state == "present":
        for name in sorted(metrics):
            if name in present and not overwrite:
                continue
            kept.append("%s %s" % (name, _format(metrics[name])))
    content = "\n".join(kept) + ("\n" if kept else "")
    old = dict((_metric_of(line), line) for line in lines if _metric_of(line))
    new = dict((_metric_of(line), line) for line in kept if _metric_of(line))
    changed = sorted(name for name in metrics if old.get(name) != new.get(name))
    return content, changed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            file=dict(type="str", default="text.prom"),
            metrics=dict(type="dict", required=True),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            overwrite=dict(type="bool", default=True),
            mode=dict(type="raw", default="0644"),
        ),
        add_file_common_args=True,
        supports_check_mode=True,
    )
    params = module.params
    if not params["file"].endswith(".prom") or "/" in params["file"]:
        module.fail_json(msg="file must be a plain file name ending in .prom, got %r" % params["file"])
    if not params["metrics"]:
        module.fail_json(msg="metrics must name at least one metric")
    metrics = {}
    for name, value in params["metrics"].items():
        if not METRIC_NAME.match(name):
            module.fail_json(msg="metric name %r is not a valid Prometheus metric name "
                                 "(letters, digits, _ and :, not starting with a digit)" % name)
        try:
            number = float(value)
        except (TypeError, ValueError):
            module.fail_json(msg="value of %s must be a number, got %r" % (name, value))
        if not math.isfinite(number):
            module.fail_json(msg="value of %s must be a finite number, got %r" % (name, value))
        metrics[name] = number

    if not os.path.isdir(params["path"]):
        module.fail_json(msg="textfile directory %s does not exist" % params["path"])
    target = os.path.join(params["path"], params["file"])
    existing = ""
    if os.path.exists(target):
        with open(target) as handle:
            existing = handle.read()
    content, changed_metrics = render(existing, metrics, params["state"], params["overwrite"])
    changed = content != existing
    content_diff = dict(before=existing, after=content, before_header=target, after_header=target)
    file_args = module.load_file_common_arguments(params, path=target)
    if changed and not module.check_mode:
        # The temporary file sits in the same directory (so the rename is atomic) under a name
        # node-exporter does not read (it reads *.prom only). Its attributes are set first, so a
        # wrong mode, owner or group fails before anything replaces the live file.
        handle, temp = tempfile.mkstemp(dir=params["path"], prefix=".node_metric.", suffix=".tmp")
        module.add_cleanup_file(temp)
        with os.fdopen(handle, "w") as out:
            out.write(content)
        module.set_fs_attributes_if_different(dict(file_args, path=temp), False)
        module.atomic_move(temp, target, unsafe_writes=params["unsafe_writes"])
    attributes_diff = {}
    if os.path.exists(target):
        changed = module.set_fs_attributes_if_different(file_args, changed, diff=attributes_diff)
    result = dict(changed=changed, content=content, changed_metrics=changed_metrics, path=target)
    if module._diff:
        result["diff"] = [content_diff, attributes_diff]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
