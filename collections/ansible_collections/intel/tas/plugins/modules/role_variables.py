#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Telemetry-aware scheduling maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: role_variables
short_description: Fail on a variable that looks like the role's own but is not one of them
version_added: 0.3.0
description:
  - Runs inside a role of this collection. Every variable whose name starts with the role's name
    and an underscore (C(extender_) for the extender role) must be an option of the role's
    C(meta/argument_specs.yml); otherwise the task fails and names each unknown variable with the
    closest known one (C(extender_replica) -> C(extender_replicas)).
  - Argument specs check the type of the variables a role knows; a misspelt one is simply never
    read, and the role runs with the default instead. This closes that gap.
  - Variables of another role whose name extends this one's (C(prometheus_adapter_) for the
    prometheus role) are left to that role.
  - So is a variable that another installed role declares in its argument specs or defaults (a
    role of another collection in the collections path, or a role in the roles path, whose name
    starts the variable's). Beside C(prometheus.prometheus), whose roles node_exporter and
    prometheus share this collection's role names, C(node_exporter_version) is that collection's.
    The result's C(other_roles) names the roles each such variable was left to.
  - Takes no options.
options: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: all
author:
  - Telemetry-aware scheduling maintainers (@tas-maintainers)
"""

EXAMPLES = r"""
- name: Check that every extender_* variable is one the role knows
  intel.tas.role_variables:
"""

RETURN = r"""
unknown:
  description: The unknown variables (the task fails when there is one).
  returned: always
  type: list
  elements: str
  sample: [extender_replica]
other_roles:
  description: Variables named like the role's own that other installed roles declare, each with those roles.
  returned: always
  type: dict
  sample: {node_exporter_version: [prometheus.prometheus.node_exporter]}
"""
