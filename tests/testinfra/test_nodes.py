"""Every node: its textfile directory and its node-exporter serving the health metric."""

from __future__ import annotations

import re

testinfra_hosts = ["ansible://tas_nodes"]


def test_textfile_directory_holds_the_health_metric(host, var):
    textfile = host.file(f"{var('tas_textfile_dir')}/text.prom")
    assert textfile.exists and textfile.is_file
    assert re.search(r"^node_health_metric -?[0-9.]+$", textfile.content_string, re.MULTILINE)


def test_node_exporter_listens_and_serves_the_textfile_metric(host, var):
    address = var("tas_node_exporter_listen_address")
    assert host.socket(f"tcp://{address}").is_listening
    metrics = host.run(f"curl -sf http://{address}/metrics")
    assert metrics.rc == 0
    assert re.search(r"^node_health_metric -?[0-9.]+$", metrics.stdout, re.MULTILINE)
    assert "node_textfile_scrape_error 0" in metrics.stdout
