"""intel.tas.image_from, image_tagged, image_pull_secrets: the collection's images from the user's registry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.intel.tas.plugins.filter.image import image_from, image_pull_secrets, image_tagged

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(("image", "registry", "expected"), [
    pytest.param("quay.io/prometheus/node-exporter:v1.8.2", "registry.example.com:5000",
                 "registry.example.com:5000/prometheus/node-exporter:v1.8.2",
                 id="a registry in place of quay.io, the repository path and tag kept"),
    pytest.param("registry.k8s.io/descheduler/descheduler", "registry.example.com/mirror",
                 "registry.example.com/mirror/descheduler/descheduler",
                 id="a registry with a path, an image with no tag"),
    pytest.param("registry.k8s.io/pause:3.10.2", "registry.example.com", "registry.example.com/pause:3.10.2",
                 id="one component after the registry"),
    pytest.param("tas-extender:0.1.0", "registry.example.com:5000", "registry.example.com:5000/tas-extender:0.1.0",
                 id="an image with no registry part gets the registry in front"),
    pytest.param("prometheus/prometheus:v2.53.2", "registry.example.com", "registry.example.com/prometheus/prometheus:v2.53.2",
                 id="a first component without a dot or a port is a path, not a registry"),
    pytest.param("localhost/tas-extender:0.1.0", "registry.example.com", "registry.example.com/tas-extender:0.1.0",
                 id="localhost is a registry"),
    pytest.param("localhost:5000/a/b:1", "registry.example.com", "registry.example.com/a/b:1",
                 id="a registry with a port is replaced whole"),
    pytest.param("quay.io/prometheus/prometheus@" + DIGEST, "registry.example.com",
                 "registry.example.com/prometheus/prometheus@" + DIGEST, id="a digest comes through intact"),
    pytest.param("quay.io/prometheus/prometheus:v2.53.2@" + DIGEST, "registry.example.com",
                 "registry.example.com/prometheus/prometheus:v2.53.2@" + DIGEST,
                 id="a tag and a digest come through intact"),
    pytest.param("tas-extender@" + DIGEST, "registry.example.com:5000", "registry.example.com:5000/tas-extender@" + DIGEST,
                 id="a digest on an image with no registry part"),
    pytest.param("quay.io/prometheus/node-exporter:v1.8.2", "", "quay.io/prometheus/node-exporter:v1.8.2",
                 id="no registry: the image as it is"),
    pytest.param("quay.io/prometheus/prometheus@" + DIGEST, "", "quay.io/prometheus/prometheus@" + DIGEST,
                 id="no registry: a digest as it is"),
])
def test_the_image_comes_from_the_registry_with_its_path_tag_and_digest(image, registry, expected):
    assert image_from(image, registry) == expected


@pytest.mark.parametrize(("image", "tag", "expected"), [
    pytest.param("registry.k8s.io/kube-scheduler", "v1.36.3", "registry.k8s.io/kube-scheduler:v1.36.3",
                 id="an image with no tag gets the tag"),
    pytest.param("registry.example.com:5000/kube-scheduler", "v1.36.3", "registry.example.com:5000/kube-scheduler:v1.36.3",
                 id="a registry's port is not a tag"),
    pytest.param("registry.k8s.io/kube-scheduler:v1.35.0", "v1.36.3", "registry.k8s.io/kube-scheduler:v1.35.0",
                 id="the image's own tag wins"),
    pytest.param("registry.k8s.io/kube-scheduler@" + DIGEST, "v1.36.3", "registry.k8s.io/kube-scheduler@" + DIGEST,
                 id="a digest is kept and gets no tag"),
    pytest.param("registry.k8s.io/kube-scheduler", "", "registry.k8s.io/kube-scheduler", id="no tag: as it is"),
])
def test_a_tag_is_added_only_to_an_image_with_neither_tag_nor_digest(image, tag, expected):
    assert image_tagged(image, tag) == expected


@pytest.mark.parametrize(("names", "made", "username", "expected"), [
    pytest.param([], "tas-registry", "", [], id="nothing given: no pull Secret"),
    pytest.param(["mine"], "tas-registry", "", [{"name": "mine"}], id="the user's Secrets alone"),
    pytest.param([], "tas-registry", "robot", [{"name": "tas-registry"}],
                 id="with credentials: the Secret the collection makes"),
    pytest.param(["mine", "tas-registry"], "tas-registry", "robot", [{"name": "mine"}, {"name": "tas-registry"}],
                 id="each Secret once, in the order given"),
])
def test_the_pods_pull_with_the_secrets_named_and_the_one_made(names, made, username, expected):
    assert image_pull_secrets(names, made, username) == expected


@pytest.mark.parametrize("call", [
    pytest.param(lambda: image_from("", "registry.example.com"), id="image_from of an empty name"),
    pytest.param(lambda: image_from(None, "registry.example.com"), id="image_from of nothing"),
    pytest.param(lambda: image_tagged(["a"], "v1"), id="image_tagged of a list"),
    pytest.param(lambda: image_pull_secrets("mine", "tas-registry", ""), id="image_pull_secrets of a string"),
    pytest.param(lambda: image_pull_secrets([""], "tas-registry", ""), id="image_pull_secrets of an empty name"),
])
def test_anything_but_names_is_refused(call):
    with pytest.raises(AnsibleFilterError):
        call()
