"""After the managed install's removal (molecule realnode, inventory/real-managed): the cluster's
own kube-schedulers are the pods and containers that ran before that install, never restarted,
as a managed cluster's control plane would be left. The scenario recorded them before the
install ($TAS_OWN_SCHEDULERS)."""

from __future__ import annotations

from support import real_control_planes, recorded_own_schedulers, running_own_schedulers


def test_the_clusters_own_schedulers_never_restarted(api_client):
    recorded = recorded_own_schedulers()
    assert sorted(recorded) == sorted(real_control_planes())
    assert running_own_schedulers(api_client) == recorded
